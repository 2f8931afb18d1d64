# SPDX-License-Identifier: Apache-2.0
# Suites of apx_ff_infer's host steps in the core: the routing
# (libapexx/ff_route.c) and the argument validation (libapexx/op/ff_infer.c).
# apx__ff_route is internal to libapexx (hidden visibility), so
# test_ff_route compiles the core sources it needs into the test itself;
# test_validate_ff goes through the public API.
check_PROGRAMS += tests/test_ff_route tests/test_validate_ff
TESTS += tests/test_ff_route tests/test_validate_ff

tests_test_ff_route_SOURCES = tests/test_ff_route.c libapexx/ff_route.c \
	libapexx/tile_order.c libapexx/validate_checks.c libapexx/error.c
tests_test_ff_route_CPPFLAGS = $(APX_TEST_CPPFLAGS) -I$(top_srcdir)/libapexx
tests_test_ff_route_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS)
tests_test_ff_route_LDADD = $(APX_TEST_LIBS)
tests_test_ff_route_LDFLAGS = $(OPENMP_CFLAGS)

tests_test_validate_ff_SOURCES = tests/test_validate_ff.c $(VALIDATE_COMMON)
tests_test_validate_ff_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_validate_ff_LDADD = $(APX_TEST_LIBS)
