# FF weights handles (libapexx/ff_weights.c): the safetensors reader and
# writer, the seeded generator, and the per-backend cache, seen through a
# check-only host backend (ffprobe) that reports what the services give it.
check_LTLIBRARIES += tests/fixture-ffprobe.la
tests_fixture_ffprobe_la_SOURCES = tests/fixtures/ff_weights_backend.c
tests_fixture_ffprobe_la_LDFLAGS = $(FIXTURE_LDFLAGS)

check_PROGRAMS += tests/test_ff_weights
TESTS += tests/test_ff_weights
tests_test_ff_weights_SOURCES = tests/test_ff_weights.c
tests_test_ff_weights_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_ff_weights_LDADD = $(APX_TEST_LIBS)
