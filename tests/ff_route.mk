# SPDX-License-Identifier: Apache-2.0
# Suites of apx_ff_infer's host steps: the routing (apx_ff_route_host,
# common/apx_ff_route.c: the static library the cpu backend links, linked
# here the same way) and the argument validation
# (libapexx/op/ff_infer.c, through the public API).
check_PROGRAMS += tests/test_ff_route tests/test_validate_ff
TESTS += tests/test_ff_route tests/test_validate_ff

tests_test_ff_route_SOURCES = tests/test_ff_route.c
tests_test_ff_route_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_ff_route_LDADD = common/libapx_ffroute.la $(APX_TEST_LIBS)

tests_test_validate_ff_SOURCES = tests/test_validate_ff.c $(VALIDATE_COMMON)
tests_test_validate_ff_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_validate_ff_LDADD = $(APX_TEST_LIBS)
