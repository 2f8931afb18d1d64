# SPDX-License-Identifier: Apache-2.0
# Graph capture (docs/graph.md): the core's rules against a recording host
# fixture (test_graph), and capture and replay on the cuda backend
# (test_graph_cuda: public API only, so it builds without CUDA and skips,
# exit 77, where the cuda backend cannot run).
check_LTLIBRARIES += tests/fixture-graph.la
tests_fixture_graph_la_SOURCES = $(FIXTURE_SRC)
tests_fixture_graph_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_GRAPH -DFIXTURE_NAME='"rec"' \
	-DFIXTURE_MARKER=7.0f
tests_fixture_graph_la_LDFLAGS = $(FIXTURE_LDFLAGS)
check_PROGRAMS += tests/test_graph tests/test_graph_cuda
TESTS += tests/test_graph tests/test_graph_cuda
tests_test_graph_SOURCES = tests/test_graph.c
tests_test_graph_CPPFLAGS = $(CORE_TEST_CPPFLAGS)
tests_test_graph_LDADD = $(APX_TEST_LIBS) -lpthread
tests_test_graph_cuda_SOURCES = tests/test_graph_cuda.c
tests_test_graph_cuda_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_graph_cuda_LDADD = $(APX_CUDA_TEST_LIBS)
