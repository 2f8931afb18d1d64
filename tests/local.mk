# SPDX-License-Identifier: Apache-2.0
# Check suites. `make check` runs them from the build tree: the environment
# below points the core at the freshly built modules (backends/.libs) and
# the source tree's apexx.ini, so nothing needs installing first. The
# APEXX_TEST_* directories, make, compiler and Python are for the tests of
# what `make install` puts in place and of tools/export_ff_weights.py.
AM_TESTS_ENVIRONMENT = \
	APEXX_CONFIG='$(abs_top_srcdir)/conf/apexx.ini'; export APEXX_CONFIG; \
	APEXX_BACKEND_DIR='$(abs_top_builddir)/backends/.libs'; export APEXX_BACKEND_DIR; \
	APEXX_TEST_FIXTURES='$(abs_top_srcdir)/tests/fixtures'; export APEXX_TEST_FIXTURES; \
	APEXX_TEST_MODULES='$(abs_top_builddir)/tests/.libs'; export APEXX_TEST_MODULES; \
	APEXX_BUILDDIR='$(abs_top_builddir)'; export APEXX_BUILDDIR; \
	APEXX_SRCDIR='$(abs_top_srcdir)'; export APEXX_SRCDIR; \
	APEXX_TEST_PREFIX='$(prefix)' APEXX_TEST_LIBDIR='$(libdir)' APEXX_TEST_MANDIR='$(mandir)'; \
	APEXX_TEST_SYSCONFDIR='$(sysconfdir)' APEXX_TEST_PKGLIBDIR='$(pkglibdir)' APEXX_TEST_DOCDIR='$(docdir)'; \
	APEXX_TEST_VERSION='$(PACKAGE_VERSION)' APEXX_TEST_MAKE='$(MAKE)' APEXX_TEST_CC='$(CC)'; \
	APEXX_TEST_SANITIZE_FLAGS='$(SANITIZE_FLAGS)' APEXX_TEST_PYTHON='$(PYTHON)'; \
	export APEXX_TEST_PREFIX APEXX_TEST_LIBDIR APEXX_TEST_MANDIR APEXX_TEST_SYSCONFDIR; \
	export APEXX_TEST_PKGLIBDIR APEXX_TEST_DOCDIR APEXX_TEST_VERSION APEXX_TEST_MAKE; \
	export APEXX_TEST_CC APEXX_TEST_SANITIZE_FLAGS APEXX_TEST_PYTHON; \
	unset APEXX_BACKEND APEXX_LOG;

# Shared test helpers (seeded data, host tensors, poisoning).
check_LTLIBRARIES += tests/libtestutil.la
tests_libtestutil_la_SOURCES = tests/testutil.c tests/testutil.h
tests_libtestutil_la_CPPFLAGS = $(AM_CPPFLAGS) $(CHECK_CFLAGS)
tests_libtestutil_la_LIBADD = libapexx/libapexx.la $(M_LIBS)

# What every suite links.
APX_TEST_LIBS = tests/libtestutil.la libapexx/libapexx.la $(CHECK_LIBS) $(M_LIBS)
APX_TEST_CPPFLAGS = $(AM_CPPFLAGS) $(CHECK_CFLAGS)

include tests/core.mk
include tests/validate.mk
include tests/cpu_tile.mk
include tests/cpu_scan_index.mk
include tests/cuda.mk
include tests/bench.mk
include tests/ff_weights.mk
include tests/ff_route.mk
include tests/cpu_ff.mk
include tests/cuda_ff.mk
include tests/reliability.mk
include tests/graph.mk
include tests/trt.mk
