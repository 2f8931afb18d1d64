# SPDX-License-Identifier: Apache-2.0
# GPU suite of the cuda backend's FF path (tests/test_cuda_ff.c): apx_ff_infer
# on the device against the cpu backend, the device routing against the
# host's, graph replay, NaN utilities. Public API only, so it builds without
# CUDA too; where the cuda backend cannot run it prints "SKIP: <reason>" and
# exits 77. CUDA does not survive Check's fork: the suite never forks.
check_PROGRAMS += tests/test_cuda_ff
TESTS += tests/test_cuda_ff
tests_test_cuda_ff_SOURCES = tests/test_cuda_ff.c
tests_test_cuda_ff_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cuda_ff_LDADD = $(APX_TEST_LIBS) $(DL_LIBS)
