# SPDX-License-Identifier: Apache-2.0
# Issue 16's regression suite (tests/test_reliability.c), the fixture that
# opens a plugin library through the core's open_library service, and the
# robustness suites of docs/reliability.md.
check_LTLIBRARIES += tests/fixture-plugin.la
tests_fixture_plugin_la_SOURCES = $(FIXTURE_SRC)
tests_fixture_plugin_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_PLUGIN -DFIXTURE_NAME='"plugin"'
tests_fixture_plugin_la_LDFLAGS = $(FIXTURE_LDFLAGS)
tests_fixture_plugin_la_LIBADD = $(DL_LIBS)

check_PROGRAMS += tests/test_reliability
TESTS += tests/test_reliability
tests_test_reliability_SOURCES = tests/test_reliability.c
tests_test_reliability_CPPFLAGS = $(CORE_TEST_CPPFLAGS)
tests_test_reliability_LDADD = $(APX_TEST_LIBS)

# ---- fuzz targets (tests/fuzz, docs/reliability.md) --------------------------
# make check replays the kept seed corpora and crash inputs through the same
# targets built without libFuzzer (tests/fuzz/replay.c).
FUZZ_NAMES = config ops ff_weights compare report
FUZZ_COMMON = tests/fuzz/fuzz_common.h tests/fuzz/replay.c
check_PROGRAMS += tests/fuzz/replay_config tests/fuzz/replay_ops tests/fuzz/replay_ff_weights \
	tests/fuzz/replay_compare tests/fuzz/replay_report
tests_fuzz_replay_config_SOURCES = tests/fuzz/fuzz_config.c $(FUZZ_COMMON)
tests_fuzz_replay_config_LDADD = libapexx/libapexx.la
tests_fuzz_replay_ops_SOURCES = tests/fuzz/fuzz_ops.c $(FUZZ_COMMON)
tests_fuzz_replay_ops_LDADD = libapexx/libapexx.la
tests_fuzz_replay_ff_weights_SOURCES = tests/fuzz/fuzz_ff_weights.c $(FUZZ_COMMON)
tests_fuzz_replay_ff_weights_LDADD = libapexx/libapexx.la
# apexx-bench compare: the bench's sources but its main()
FUZZ_BENCH_SRC = bench/flags.c bench/inputs.c bench/stats.c bench/verdict.c bench/runner.c \
	bench/entries.c bench/cases.c bench/measure.c bench/runner_trt.c \
	bench/report_json.c bench/files.c bench/report_md.c bench/text.c bench/json_index.c \
	bench/compare.c bench/compare_doc.c bench/compare_checks.c bench/compare_verdict.c \
	bench/compare_mismatch.c bench/compare_output.c bench/history.c
FUZZ_BENCH_HDR = bench/bench.h bench/compare.h bench/runner.h
tests_fuzz_replay_compare_SOURCES = tests/fuzz/fuzz_compare.c $(FUZZ_BENCH_SRC) $(FUZZ_BENCH_HDR) \
	$(FUZZ_COMMON)
tests_fuzz_replay_compare_CPPFLAGS = $(AM_CPPFLAGS) $(CJSON_CFLAGS)
tests_fuzz_replay_compare_LDADD = libapexx/libapexx.la $(CJSON_LIBS) $(M_LIBS)
# the report reader: compare's and history's, on generated (large) files
tests_fuzz_replay_report_SOURCES = tests/fuzz/fuzz_report.c $(FUZZ_BENCH_SRC) $(FUZZ_BENCH_HDR) \
	$(FUZZ_COMMON)
tests_fuzz_replay_report_CPPFLAGS = $(AM_CPPFLAGS) $(CJSON_CFLAGS)
tests_fuzz_replay_report_LDADD = libapexx/libapexx.la $(CJSON_LIBS) $(M_LIBS)
TESTS += tests/fuzz/replay.sh
EXTRA_DIST += tests/fuzz/replay.sh tests/fuzz/corpus tests/fuzz/crashes

# make fuzz [FUZZ_SECONDS=N]: each libFuzzer target for N seconds (clang and
# its fuzzer runtime: Debian libclang-rt-14-dev, or clang's own package),
# libapexx compiled into the target with ASan and UBSan; new inputs go to
# fuzz/corpus-NAME, a crash stops the run (its input is fuzz/crash-*).
FUZZ_CC = clang
FUZZ_SECONDS = 60
FUZZ_CFLAGS = -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
# libapexx's C files, compiled into each target for coverage
FUZZ_BUILD = srcs=; for f in $(libapexx_libapexx_la_SOURCES); do \
	  case $$f in *.c) srcs="$$srcs $(top_srcdir)/$$f";; esac; done; \
	$(MKDIR_P) fuzz && \
	$(FUZZ_CC) $(FUZZ_CFLAGS) -DHAVE_CONFIG_H -I$(top_builddir) \
	-I$(top_srcdir)/include -I$(top_srcdir)/common -I$(top_srcdir)/libapexx \
	$(INIH_CFLAGS) $(CJSON_CFLAGS) -DAPEXX_BACKEND_DIR='"$(pkglibdir)"' \
	-DAPEXX_SYSCONF_INI='"$(sysconfdir)/apexx/apexx.ini"' -o $@ \
	$(top_srcdir)/tests/fuzz/fuzz_$$name.c $$srcs $$extra \
	$(INIH_LIBS) $(CJSON_LIBS) $(DL_LIBS) $(M_LIBS) -pthread
fuzz/fuzz_config: $(top_srcdir)/tests/fuzz/fuzz_config.c libapexx/libapexx.la
	name=config; $(FUZZ_BUILD)
fuzz/fuzz_ops: $(top_srcdir)/tests/fuzz/fuzz_ops.c libapexx/libapexx.la
	name=ops; $(FUZZ_BUILD)
fuzz/fuzz_ff_weights: $(top_srcdir)/tests/fuzz/fuzz_ff_weights.c libapexx/libapexx.la
	name=ff_weights; $(FUZZ_BUILD)
fuzz/fuzz_compare: $(top_srcdir)/tests/fuzz/fuzz_compare.c libapexx/libapexx.la \
	bench/bench_git_sha.h $(FUZZ_BENCH_SRC:%=$(top_srcdir)/%) $(FUZZ_BENCH_HDR:%=$(top_srcdir)/%)
	name=compare; extra=; for f in $(FUZZ_BENCH_SRC); do extra="$$extra $(top_srcdir)/$$f"; done; \
	$(FUZZ_BUILD)
fuzz/fuzz_report: $(top_srcdir)/tests/fuzz/fuzz_report.c libapexx/libapexx.la \
	bench/bench_git_sha.h $(FUZZ_BENCH_SRC:%=$(top_srcdir)/%) $(FUZZ_BENCH_HDR:%=$(top_srcdir)/%)
	name=report; extra=; for f in $(FUZZ_BENCH_SRC); do extra="$$extra $(top_srcdir)/$$f"; done; \
	$(FUZZ_BUILD)
fuzz-build: fuzz/fuzz_config fuzz/fuzz_ops fuzz/fuzz_ff_weights fuzz/fuzz_compare fuzz/fuzz_report
# fuzz_report's text may grow past libFuzzer's default 4 KiB (its files
# grow further by repetition)
FUZZ_OPTS_report = -max_len=65536
fuzz: fuzz-build backends/apexx-cpu.la
	@for t in $(FUZZ_NAMES); do \
	  $(MKDIR_P) fuzz/corpus-$$t || exit 1; \
	  echo "== fuzz $$t ($(FUZZ_SECONDS) s)"; \
	  APEXX_BACKEND_DIR='$(abs_top_builddir)/backends/.libs' \
	  opts=; test $$t = report && opts='$(FUZZ_OPTS_report)'; \
	  ASAN_OPTIONS=detect_leaks=1 ./fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) $$opts \
	    -print_final_stats=1 -timeout=25 -artifact_prefix=fuzz/crash-$$t- -close_fd_mask=3 \
	    fuzz/corpus-$$t $(top_srcdir)/tests/fuzz/corpus/$$t 2>fuzz/$$t.log; \
	  rc=$$?; grep -E '^(stat::number_of_executed_units|stat::new_units_added|#[0-9]+ *DONE)' fuzz/$$t.log; \
	  if test $$rc -ne 0; then tail -60 fuzz/$$t.log; exit 1; fi; \
	done
mostlyclean-local: clean-fuzz
clean-fuzz:
	-rm -rf fuzz
.PHONY: fuzz fuzz-build clean-fuzz check-valgrind

# make check-valgrind: the Check suites under valgrind memcheck, each suite
# in one process (CK_FORK=no): any error or definitely lost block fails it.
VALGRIND = valgrind
VALGRIND_FLAGS = --quiet --error-exitcode=99 --leak-check=full \
	--errors-for-leak-kinds=definite --show-leak-kinds=definite \
	--suppressions=$(abs_top_srcdir)/tests/valgrind.supp
EXTRA_DIST += tests/valgrind.supp
check-valgrind:
	tests=; for t in $(TESTS); do case $$t in \
	  *.sh|*.py|tests/test_cuda_*) ;; *) tests="$$tests $$t";; esac; done; \
	CK_FORK=no $(MAKE) $(AM_MAKEFLAGS) check TESTS="$$tests" \
	  TEST_SUITE_LOG=test-suite-valgrind.log \
	  LOG_COMPILER='$(LIBTOOL) --mode=execute $(VALGRIND) $(VALGRIND_FLAGS)'

# Fault injection and concurrency suites (docs/reliability.md).
check_PROGRAMS += tests/test_faults
TESTS += tests/test_faults
tests_test_faults_SOURCES = tests/test_faults.c $(VALIDATE_COMMON) bench/report_json.c \
	bench/files.c bench/bench.h
tests_test_faults_CPPFLAGS = $(APX_TEST_CPPFLAGS) $(CJSON_CFLAGS) -I$(top_srcdir)
tests_test_faults_LDADD = $(APX_TEST_LIBS) $(CJSON_LIBS)

check_PROGRAMS += tests/test_concurrency
TESTS += tests/test_concurrency
tests_test_concurrency_SOURCES = tests/test_concurrency.c $(VALIDATE_COMMON)
tests_test_concurrency_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_concurrency_LDADD = $(APX_TEST_LIBS) -lpthread
