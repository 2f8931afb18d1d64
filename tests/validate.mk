# SPDX-License-Identifier: Apache-2.0
# Check suites of libapexx/validate.c, the op table (libapexx/op_table.c,
# libapexx/op/) and libapexx/tile_order.c. The validation
# suites share test_validate_common.{c,h}: one valid case per op and the
# "rejected, named, nothing written" assertion.
VALIDATE_COMMON = tests/test_validate_common.c tests/test_validate_common.h

check_PROGRAMS += tests/test_validate_generic tests/test_validate_tile \
	tests/test_validate_gate_scan tests/test_validate_index tests/test_tile_order \
	tests/test_validate_backward
TESTS += tests/test_validate_generic tests/test_validate_tile \
	tests/test_validate_gate_scan tests/test_validate_index tests/test_tile_order \
	tests/test_validate_backward

tests_test_validate_generic_SOURCES = tests/test_validate_generic.c $(VALIDATE_COMMON)
tests_test_validate_generic_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_validate_generic_LDADD = $(APX_TEST_LIBS)

tests_test_validate_tile_SOURCES = tests/test_validate_tile.c $(VALIDATE_COMMON)
tests_test_validate_tile_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_validate_tile_LDADD = $(APX_TEST_LIBS)

tests_test_validate_gate_scan_SOURCES = tests/test_validate_gate_scan.c $(VALIDATE_COMMON)
tests_test_validate_gate_scan_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_validate_gate_scan_LDADD = $(APX_TEST_LIBS)

tests_test_validate_index_SOURCES = tests/test_validate_index.c $(VALIDATE_COMMON)
tests_test_validate_index_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_validate_index_LDADD = $(APX_TEST_LIBS)

tests_test_validate_backward_SOURCES = tests/test_validate_backward.c $(VALIDATE_COMMON)
tests_test_validate_backward_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_validate_backward_LDADD = $(APX_TEST_LIBS)

# the tile and index_select backward ops' own rules and those they share
# with their forward ops
check_PROGRAMS += tests/test_validate_tile_backward
TESTS += tests/test_validate_tile_backward
tests_test_validate_tile_backward_SOURCES = tests/test_validate_tile_backward.c \
	$(VALIDATE_COMMON)
tests_test_validate_tile_backward_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_validate_tile_backward_LDADD = $(APX_TEST_LIBS)

# the op table: every descriptor against the cases above (apx_op_describe)
check_PROGRAMS += tests/test_op_table
TESTS += tests/test_op_table
tests_test_op_table_SOURCES = tests/test_op_table.c $(VALIDATE_COMMON)
tests_test_op_table_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_op_table_LDADD = $(APX_TEST_LIBS)

tests_test_tile_order_SOURCES = tests/test_tile_order.c
tests_test_tile_order_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_tile_order_LDADD = $(APX_TEST_LIBS)
