# apexx-cpu-bench: times every op of the cpu backend through the public API
# at the seed and a mid profile (bench/cpu_bench.c). Not installed, not part
# of make check: `make bench-cpu` builds and runs it against the build tree,
# `make bench-cpu BENCH_OUT=FILE` also writes its table to FILE.
noinst_PROGRAMS += bench/apexx-cpu-bench
bench_apexx_cpu_bench_SOURCES = bench/cpu_bench.c
bench_apexx_cpu_bench_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS)
bench_apexx_cpu_bench_LDFLAGS = $(AM_LDFLAGS) $(OPENMP_CFLAGS)
bench_apexx_cpu_bench_LDADD = core/libapexx.la

bench-cpu: bench/apexx-cpu-bench$(EXEEXT) $(pkglib_LTLIBRARIES)
	$(AM_V_at)out='$(BENCH_OUT)'; \
	APEXX_CONFIG='$(abs_top_srcdir)/conf/apexx.ini' \
	APEXX_BACKEND_DIR='$(abs_top_builddir)/backends/.libs' \
	./bench/apexx-cpu-bench$(EXEEXT) $${out:+-o "$$out"}
.PHONY: bench-cpu
