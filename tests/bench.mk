# SPDX-License-Identifier: Apache-2.0
# apexx-bench suites. The report, compare and flags suites run the built
# binary ($APEXX_BUILDDIR/bench/apexx-bench) with tiny profiles; the stats
# suite compiles the bench's statistics, parity and generator in.
BENCH_TEST_SOURCES = tests/test_bench_util.c tests/test_bench_util.h
BENCH_TEST_CPPFLAGS = $(APX_TEST_CPPFLAGS) $(CJSON_CFLAGS) -I$(top_srcdir)
BENCH_TEST_LDADD = $(APX_TEST_LIBS) $(CJSON_LIBS)

check_PROGRAMS += tests/test_bench_report tests/test_bench_compare \
	tests/test_bench_flags tests/test_bench_stats
TESTS += tests/test_bench_report tests/test_bench_compare \
	tests/test_bench_flags tests/test_bench_stats

tests_test_bench_report_SOURCES = tests/test_bench_report.c $(BENCH_TEST_SOURCES)
tests_test_bench_report_CPPFLAGS = $(BENCH_TEST_CPPFLAGS)
tests_test_bench_report_LDADD = $(BENCH_TEST_LDADD)

tests_test_bench_compare_SOURCES = tests/test_bench_compare.c $(BENCH_TEST_SOURCES)
tests_test_bench_compare_CPPFLAGS = $(BENCH_TEST_CPPFLAGS)
tests_test_bench_compare_LDADD = $(BENCH_TEST_LDADD)

tests_test_bench_flags_SOURCES = tests/test_bench_flags.c $(BENCH_TEST_SOURCES)
tests_test_bench_flags_CPPFLAGS = $(BENCH_TEST_CPPFLAGS)
tests_test_bench_flags_LDADD = $(BENCH_TEST_LDADD)

tests_test_bench_stats_SOURCES = tests/test_bench_stats.c bench/stats.c \
	bench/inputs.c bench/bench.h
tests_test_bench_stats_CPPFLAGS = $(BENCH_TEST_CPPFLAGS)
tests_test_bench_stats_LDADD = $(BENCH_TEST_LDADD)

# apexx-bench ab on fake builds (scripts writing known samples) and on
# this build tree against itself.
check_PROGRAMS += tests/test_bench_ab
TESTS += tests/test_bench_ab
tests_test_bench_ab_SOURCES = tests/test_bench_ab.c $(BENCH_TEST_SOURCES)
tests_test_bench_ab_CPPFLAGS = $(BENCH_TEST_CPPFLAGS)
tests_test_bench_ab_LDADD = $(BENCH_TEST_LDADD)

# make bench-ab's confirmation of a regressed row (bench/bench-ab.sh) with
# a stub apexx-bench writing each run's table.
TESTS += tests/test_bench_ab_confirm.sh
EXTRA_DIST += tests/test_bench_ab_confirm.sh

# The verdicts (bench/verdict.c) on synthetic paired and unpaired samples.
check_PROGRAMS += tests/test_bench_verdict
TESTS += tests/test_bench_verdict
tests_test_bench_verdict_SOURCES = tests/test_bench_verdict.c bench/verdict.c \
	bench/inputs.c bench/bench.h
tests_test_bench_verdict_CPPFLAGS = $(BENCH_TEST_CPPFLAGS)
tests_test_bench_verdict_LDADD = $(BENCH_TEST_LDADD) $(M_LIBS)

# Rows that must fail or skip, through the deliberately broken backends of
# tests/fixtures/backend_fixture.c (beta, alpha, probe of tests/core.mk) and
# one more built here: a backend named "cpu" whose tilepack writes nothing
# for f16, so the bench must refuse it as the parity reference.
check_LTLIBRARIES += tests/fixture-bench-cpu.la
tests_fixture_bench_cpu_la_SOURCES = tests/fixtures/backend_fixture.c
tests_fixture_bench_cpu_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_NAME='"cpu"' \
	-DFIXTURE_MARKER=7.0f
tests_fixture_bench_cpu_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere \
	-no-undefined

check_PROGRAMS += tests/test_bench_rows
TESTS += tests/test_bench_rows
tests_test_bench_rows_SOURCES = tests/test_bench_rows.c $(BENCH_TEST_SOURCES)
tests_test_bench_rows_CPPFLAGS = $(BENCH_TEST_CPPFLAGS)
tests_test_bench_rows_LDADD = $(BENCH_TEST_LDADD)

# Output paths (safe writes), the history store and chart, and ownership
# trust of configurations and backend libraries (libapexx/config.c).
check_PROGRAMS += tests/test_safe_write tests/test_bench_history \
	tests/test_config_trust
TESTS += tests/test_safe_write tests/test_bench_history tests/test_config_trust
tests_test_safe_write_SOURCES = tests/test_safe_write.c $(BENCH_TEST_SOURCES)
tests_test_safe_write_CPPFLAGS = $(BENCH_TEST_CPPFLAGS)
tests_test_safe_write_LDADD = $(BENCH_TEST_LDADD)
tests_test_bench_history_SOURCES = tests/test_bench_history.c $(BENCH_TEST_SOURCES)
tests_test_bench_history_CPPFLAGS = $(BENCH_TEST_CPPFLAGS)
tests_test_bench_history_LDADD = $(BENCH_TEST_LDADD)
# The files the bench reads: non-regular files refused without blocking, the
# size cap, compare's time linear in the rows (docs/report.md, Input limits).
check_PROGRAMS += tests/test_bench_inputs
TESTS += tests/test_bench_inputs
tests_test_bench_inputs_SOURCES = tests/test_bench_inputs.c $(BENCH_TEST_SOURCES)
tests_test_bench_inputs_CPPFLAGS = $(BENCH_TEST_CPPFLAGS)
tests_test_bench_inputs_LDADD = $(BENCH_TEST_LDADD)
tests_test_config_trust_SOURCES = tests/test_config_trust.c
tests_test_config_trust_CPPFLAGS = $(CORE_TEST_CPPFLAGS)
tests_test_config_trust_LDADD = $(APX_TEST_LIBS)

# --profile presets, the copy reference and pct_of_copy.
check_PROGRAMS += tests/test_bench_profile
TESTS += tests/test_bench_profile
tests_test_bench_profile_SOURCES = tests/test_bench_profile.c $(BENCH_TEST_SOURCES)
tests_test_bench_profile_CPPFLAGS = $(BENCH_TEST_CPPFLAGS)
tests_test_bench_profile_LDADD = $(BENCH_TEST_LDADD)
