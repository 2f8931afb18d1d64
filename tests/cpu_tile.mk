# SPDX-License-Identifier: Apache-2.0
# Check suites of the cpu backend's tile ops (tilepack, tileunpack,
# fused_pack_op_unpack, fusiongate), compared with the plain reference loops
# of tests/ref_tile.c through the public API.
# -ffp-contract=off: the reference must round every fp32 operation
# (docs/ops.md, Rounding and parity), as the backend does.
check_PROGRAMS += tests/test_cpu_tilepack tests/test_cpu_tileunpack \
	tests/test_cpu_fused tests/test_cpu_fusiongate tests/test_cpu_fusiongate_backward
TESTS += tests/test_cpu_tilepack tests/test_cpu_tileunpack \
	tests/test_cpu_fused tests/test_cpu_fusiongate tests/test_cpu_fusiongate_backward

tests_test_cpu_tilepack_SOURCES = tests/test_cpu_tilepack.c \
	tests/ref_tile.c tests/ref_tile.h
tests_test_cpu_tilepack_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cpu_tilepack_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
tests_test_cpu_tilepack_LDADD = $(APX_TEST_LIBS)

tests_test_cpu_tileunpack_SOURCES = tests/test_cpu_tileunpack.c \
	tests/ref_tile.c tests/ref_tile.h
tests_test_cpu_tileunpack_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cpu_tileunpack_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
tests_test_cpu_tileunpack_LDADD = $(APX_TEST_LIBS)

tests_test_cpu_fused_SOURCES = tests/test_cpu_fused.c \
	tests/ref_tile.c tests/ref_tile.h
tests_test_cpu_fused_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cpu_fused_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
tests_test_cpu_fused_LDADD = $(APX_TEST_LIBS)

tests_test_cpu_fusiongate_SOURCES = tests/test_cpu_fusiongate.c \
	tests/ref_tile.c tests/ref_tile.h
tests_test_cpu_fusiongate_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cpu_fusiongate_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
tests_test_cpu_fusiongate_LDADD = $(APX_TEST_LIBS)

# the backward ops against the double loops of tests/ref_backward.c
tests_test_cpu_fusiongate_backward_SOURCES = tests/test_cpu_fusiongate_backward.c \
	tests/ref_backward.c tests/ref_backward.h tests/ref_tile.c tests/ref_tile.h
tests_test_cpu_fusiongate_backward_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cpu_fusiongate_backward_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
tests_test_cpu_fusiongate_backward_LDADD = $(APX_TEST_LIBS)

# the backward ops (tilepack, tileunpack, fused_pack_op_unpack,
# index_select) against float64 loops of their math, deterministic on 1
# and 2 threads
check_PROGRAMS += tests/test_cpu_tile_backward
TESTS += tests/test_cpu_tile_backward
tests_test_cpu_tile_backward_SOURCES = tests/test_cpu_tile_backward.c
tests_test_cpu_tile_backward_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cpu_tile_backward_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
tests_test_cpu_tile_backward_LDADD = $(APX_TEST_LIBS)
