# SPDX-License-Identifier: Apache-2.0
# Check suites of the cpu backend's TileSSM scan and indexing ops, compared
# bit for bit with the plain reference loops of tests/ref_scan_index.c.
# -ffp-contract=off: the reference must round every fp32 operation
# (docs/ops.md, Rounding and parity), as the backend does.
check_PROGRAMS += tests/test_cpu_tilessm tests/test_cpu_indexing tests/test_cpu_tilessm_backward
TESTS += tests/test_cpu_tilessm tests/test_cpu_indexing tests/test_cpu_tilessm_backward

tests_test_cpu_tilessm_SOURCES = tests/test_cpu_tilessm.c \
	tests/ref_scan_index.c tests/ref_scan_index.h backends/cpu/cpu.c
tests_test_cpu_tilessm_CPPFLAGS = $(APX_TEST_CPPFLAGS) -I$(top_srcdir)/backends/cpu
tests_test_cpu_tilessm_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS) -ffp-contract=off
tests_test_cpu_tilessm_LDFLAGS = $(OPENMP_CFLAGS)
tests_test_cpu_tilessm_LDADD = $(APX_TEST_LIBS)

tests_test_cpu_indexing_SOURCES = tests/test_cpu_indexing.c \
	tests/ref_scan_index.c tests/ref_scan_index.h
tests_test_cpu_indexing_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cpu_indexing_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
tests_test_cpu_indexing_LDADD = $(APX_TEST_LIBS)

# the scan's backward against the double loops of tests/ref_backward.c
tests_test_cpu_tilessm_backward_SOURCES = tests/test_cpu_tilessm_backward.c \
	tests/ref_backward.c tests/ref_backward.h tests/ref_tile.c tests/ref_tile.h
tests_test_cpu_tilessm_backward_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cpu_tilessm_backward_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
tests_test_cpu_tilessm_backward_LDADD = $(APX_TEST_LIBS)
