# SPDX-License-Identifier: Apache-2.0
# GPU suites of the cuda backend (tests/test_cuda_<group>.c), one per op
# group: every op against the cpu backend through the public API, each case
# through the one cpu-vs-cuda helper of tests/cuda_case.c. They use only the
# public API, so they build without CUDA too; where the cuda backend cannot
# run they print "SKIP: <reason>" and exit 77.
check_LTLIBRARIES += tests/libcudacase.la
tests_libcudacase_la_SOURCES = tests/cuda_case.c tests/cuda_case.h
tests_libcudacase_la_CPPFLAGS = $(APX_TEST_CPPFLAGS)
APX_CUDA_TEST_LIBS = tests/libcudacase.la $(APX_TEST_LIBS)

check_PROGRAMS += tests/test_cuda_tile tests/test_cuda_fusiongate tests/test_cuda_tilessm \
	tests/test_cuda_index tests/test_cuda_validate tests/test_cuda_memory \
	tests/test_cuda_backward
TESTS += tests/test_cuda_tile tests/test_cuda_fusiongate tests/test_cuda_tilessm \
	tests/test_cuda_index tests/test_cuda_validate tests/test_cuda_memory \
	tests/test_cuda_backward
tests_test_cuda_tile_SOURCES = tests/test_cuda_tile.c
tests_test_cuda_tile_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cuda_tile_LDADD = $(APX_CUDA_TEST_LIBS)
tests_test_cuda_fusiongate_SOURCES = tests/test_cuda_fusiongate.c
tests_test_cuda_fusiongate_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cuda_fusiongate_LDADD = $(APX_CUDA_TEST_LIBS)
tests_test_cuda_tilessm_SOURCES = tests/test_cuda_tilessm.c
tests_test_cuda_tilessm_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cuda_tilessm_LDADD = $(APX_CUDA_TEST_LIBS)
tests_test_cuda_index_SOURCES = tests/test_cuda_index.c
tests_test_cuda_index_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cuda_index_LDADD = $(APX_CUDA_TEST_LIBS)
tests_test_cuda_validate_SOURCES = tests/test_cuda_validate.c
tests_test_cuda_validate_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cuda_validate_LDADD = $(APX_CUDA_TEST_LIBS)
tests_test_cuda_memory_SOURCES = tests/test_cuda_memory.c
tests_test_cuda_memory_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cuda_memory_LDADD = $(APX_CUDA_TEST_LIBS)

# the backward ops the cuda backend runs (tilepack_backward,
# index_select_backward), bit for bit
# against the cpu backend
check_PROGRAMS += tests/test_cuda_tile_backward
TESTS += tests/test_cuda_tile_backward
tests_test_cuda_tile_backward_SOURCES = tests/test_cuda_tile_backward.c
tests_test_cuda_tile_backward_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cuda_tile_backward_LDADD = $(APX_CUDA_TEST_LIBS)

# the fusion gate's and the scan's backward ops against the double loops of
# tests/ref_backward.c (tests/test_cuda_backward.c says what it covers)
tests_test_cuda_backward_SOURCES = tests/test_cuda_backward.c tests/ref_backward.c \
	tests/ref_backward.h tests/ref_tile.c tests/ref_tile.h
tests_test_cuda_backward_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cuda_backward_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
tests_test_cuda_backward_LDADD = $(APX_CUDA_TEST_LIBS)

# which code of the module a device runs (backends/cuda/arch_match.c): no
# CUDA needed
check_PROGRAMS += tests/test_cuda_arch
TESTS += tests/test_cuda_arch
tests_test_cuda_arch_SOURCES = tests/test_cuda_arch.c
tests_test_cuda_arch_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cuda_arch_LDADD = backends/cuda/libcudaarch.la $(CHECK_LIBS)

# the FF frame's shared memory a block against the device's
# (backends/cuda/ff_smem.c): no CUDA needed
check_PROGRAMS += tests/test_cuda_ff_smem
TESTS += tests/test_cuda_ff_smem
tests_test_cuda_ff_smem_SOURCES = tests/test_cuda_ff_smem.c
tests_test_cuda_ff_smem_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cuda_ff_smem_LDADD = backends/cuda/libcudaarch.la $(CHECK_LIBS)
