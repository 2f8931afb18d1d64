# SPDX-License-Identifier: Apache-2.0
# The cpu backend's FF path (backends/cpu/ff_*.c): its model pieces
# against the double-precision loops of tests/ff_ref.c and the whole call
# against their composition. The backend's files are compiled into the test
# with a fake core services table (its cache); the router is the static
# library the backend links. -ffp-contract=off as in the backend.
check_PROGRAMS += tests/test_cpu_ff
TESTS += tests/test_cpu_ff
tests_test_cpu_ff_SOURCES = tests/test_cpu_ff.c tests/ff_ref.c tests/ff_ref.h \
	backends/cpu/ff_prepare.c backends/cpu/ff_model.c backends/cpu/ff_infer.c \
	backends/cpu/tile_simd.c backends/cpu/cpu.c
tests_test_cpu_ff_CPPFLAGS = $(APX_TEST_CPPFLAGS) -I$(top_srcdir)/backends/cpu
tests_test_cpu_ff_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS) -O2 -ffp-contract=off
tests_test_cpu_ff_LDADD = common/libapx_ffroute.la $(APX_TEST_LIBS) -lpthread
tests_test_cpu_ff_LDFLAGS = $(OPENMP_CFLAGS)

# ms per frame of apx_ff_infer on the cpu backend (a timing tool, not a
# test): tests/bench_cpu_ff [C H W tile_l0 dtype iterations threads].
check_PROGRAMS += tests/bench_cpu_ff
tests_bench_cpu_ff_SOURCES = tests/bench_cpu_ff.c
tests_bench_cpu_ff_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_bench_cpu_ff_LDADD = $(APX_TEST_LIBS)
