# SPDX-License-Identifier: Apache-2.0
# apexx-cpu-bench: times every op of the cpu backend through the public API
# at the seed and a mid profile (bench/cpu_bench.c). Not installed, not part
# of make check: `make bench-cpu` builds and runs it against the build tree,
# `make bench-cpu BENCH_OUT=FILE` also writes its table to FILE. OpenMP
# threads sleep rather than spin between calls unless OMP_WAIT_POLICY says
# otherwise: on a shared machine spinning workers steal the cores the next
# call needs (calls of a few us then take a scheduler tick).
noinst_PROGRAMS += bench/apexx-cpu-bench
bench_apexx_cpu_bench_SOURCES = bench/cpu_bench.c
bench_apexx_cpu_bench_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS)
bench_apexx_cpu_bench_LDFLAGS = $(AM_LDFLAGS) $(OPENMP_CFLAGS)
bench_apexx_cpu_bench_LDADD = libapexx/libapexx.la

bench-cpu: bench/apexx-cpu-bench$(EXEEXT) $(pkglib_LTLIBRARIES)
	$(AM_V_at)out='$(BENCH_OUT)'; \
	APEXX_CONFIG='$(abs_top_srcdir)/conf/apexx.ini' \
	APEXX_BACKEND_DIR='$(abs_top_builddir)/backends/.libs' \
	OMP_WAIT_POLICY="$${OMP_WAIT_POLICY:-passive}" \
	./bench/apexx-cpu-bench$(EXEEXT) $${out:+-o "$$out"}
.PHONY: bench-cpu
