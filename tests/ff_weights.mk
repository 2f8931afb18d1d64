# SPDX-License-Identifier: Apache-2.0
# FF weights handles (libapexx/ff/): the safetensors reader and writer, the
# seeded generator, and the prepared data backends keep (the cache service,
# libapexx/cache.c), seen through a check-only host backend (ffprobe) that
# reports what the cache gives it.
check_LTLIBRARIES += tests/fixture-ffprobe.la
tests_fixture_ffprobe_la_SOURCES = tests/fixtures/ff_weights_backend.c
tests_fixture_ffprobe_la_LDFLAGS = $(FIXTURE_LDFLAGS)

check_PROGRAMS += tests/test_ff_weights
TESTS += tests/test_ff_weights
tests_test_ff_weights_SOURCES = tests/test_ff_weights.c
tests_test_ff_weights_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_ff_weights_LDADD = $(APX_TEST_LIBS)

# Handles shared between threads and contexts (issue 30): refused when freed
# or of another context, frees waiting for calls, apx_close waiting for a
# load, error positions under concurrent loads; the test interposes pread.
check_PROGRAMS += tests/test_ff_lifetime
TESTS += tests/test_ff_lifetime
tests_test_ff_lifetime_SOURCES = tests/test_ff_lifetime.c
tests_test_ff_lifetime_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_ff_lifetime_LDADD = $(APX_TEST_LIBS) $(DL_LIBS) -lpthread

# tools/export_ff_weights.py --from (safetensors or a torch checkpoint) and
# --prefix (the FF module out of a whole model's weights)
TESTS += tests/test_export_ff_weights.sh
EXTRA_DIST += tests/test_export_ff_weights.sh
