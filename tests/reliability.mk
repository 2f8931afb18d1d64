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
