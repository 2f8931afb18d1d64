# SPDX-License-Identifier: Apache-2.0
# Check suites of the cpu backend's TileSSM scan and indexing ops, compared
# bit for bit with the plain reference loops of tests/ref_scan_index.c.
# -ffp-contract=off: the reference must round every fp32 operation
# (docs/ops.md, Rounding and parity), as the backend does.
check_PROGRAMS += tests/test_cpu_tilessm tests/test_cpu_indexing
TESTS += tests/test_cpu_tilessm tests/test_cpu_indexing

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
