# SPDX-License-Identifier: Apache-2.0
# The trt backend: its plugins' pure parts (test_trt_units: attributes,
# serialisation, shape and type rules, creator list; no TensorRT needed)
# and its probe's reasons (test_trt_probe, with stand-in libnvinfer
# modules for a library without getInferLibVersion, TensorRT 8.6.1 and
# TensorRT 10.13.0), and (test_trt_bench) the plugin library and the
# engine runner without a TensorRT runtime.
check_PROGRAMS += tests/test_trt_units tests/test_trt_probe
TESTS += tests/test_trt_units tests/test_trt_probe
tests_test_trt_units_SOURCES = tests/test_trt_units.c
tests_test_trt_units_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_trt_units_LDADD = backends/trt/libtrtunits.la $(APX_TEST_LIBS)
tests_test_trt_probe_SOURCES = tests/test_trt_probe.c
tests_test_trt_probe_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_trt_probe_LDADD = $(APX_TEST_LIBS) $(DL_LIBS)
# which headers the trt backend was built against (empty: probe only)
if BUILD_TRT_PLUGINS
tests_test_trt_probe_CPPFLAGS += -DAPEXX_TEST_TRT_HEADERS='"$(TRT_HEADERS_VERSION)"'
else
tests_test_trt_probe_CPPFLAGS += -DAPEXX_TEST_TRT_HEADERS='""'
endif

check_LTLIBRARIES += tests/fixture-nvinfer-nover.la tests/fixture-nvinfer-old.la \
	tests/fixture-nvinfer-10.la
tests_fixture_nvinfer_nover_la_SOURCES = tests/fixtures/trt_nvinfer_fixture.c
tests_fixture_nvinfer_nover_la_LDFLAGS = $(FIXTURE_LDFLAGS)
tests_fixture_nvinfer_old_la_SOURCES = tests/fixtures/trt_nvinfer_fixture.c
tests_fixture_nvinfer_old_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_TRT_VERSION=80601
tests_fixture_nvinfer_old_la_LDFLAGS = $(FIXTURE_LDFLAGS)
tests_fixture_nvinfer_10_la_SOURCES = tests/fixtures/trt_nvinfer_fixture.c
tests_fixture_nvinfer_10_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_TRT_VERSION=101300
tests_fixture_nvinfer_10_la_LDFLAGS = $(FIXTURE_LDFLAGS)

# the plugin library's exports and the engine runner's skip paths, directly
# and through apexx-bench's tensorrt.engine row
check_PROGRAMS += tests/test_trt_bench
TESTS += tests/test_trt_bench
tests_test_trt_bench_SOURCES = tests/test_trt_bench.c $(BENCH_TEST_SOURCES)
tests_test_trt_bench_CPPFLAGS = $(BENCH_TEST_CPPFLAGS)
tests_test_trt_bench_LDADD = $(BENCH_TEST_LDADD) $(DL_LIBS)

# the plugin classes, driven as TensorRT drives them, without its runtime
# or a GPU (where the plugin library is built)
if BUILD_TRT_PLUGINS
check_PROGRAMS += tests/test_trt_plugins
TESTS += tests/test_trt_plugins
tests_test_trt_plugins_SOURCES = tests/test_trt_plugins.cpp tests/trt_test_util.h
tests_test_trt_plugins_CPPFLAGS = $(AM_CPPFLAGS) $(CHECK_CFLAGS) $(TRT_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_trt_plugins_CXXFLAGS = $(AM_CXXFLAGS) -std=c++17
tests_test_trt_plugins_LDADD = backends/trt/libapexx_trt_plugins.la $(CHECK_LIBS)
# the plugins' enqueue on a GPU (exit 77 without one)
check_PROGRAMS += tests/test_trt_plugins_gpu
TESTS += tests/test_trt_plugins_gpu
tests_test_trt_plugins_gpu_SOURCES = tests/test_trt_plugins_gpu.cpp tests/trt_test_util.h
tests_test_trt_plugins_gpu_CPPFLAGS = $(AM_CPPFLAGS) $(CHECK_CFLAGS) $(TRT_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_trt_plugins_gpu_CXXFLAGS = $(AM_CXXFLAGS) -std=c++17
tests_test_trt_plugins_gpu_LDADD = backends/trt/libapexx_trt_plugins.la $(CUDA_LIBS) $(CHECK_LIBS)
endif

# the creator list and field rules for python/tests/test_onnx_export.py
# (loaded with ctypes from $APEXX_TEST_MODULES)
check_LTLIBRARIES += tests/trt-units-ctypes.la
tests_trt_units_ctypes_la_SOURCES = tests/fixtures/trt_units_ctypes.c
tests_trt_units_ctypes_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden
tests_trt_units_ctypes_la_LIBADD = backends/trt/libtrtunits.la
tests_trt_units_ctypes_la_LDFLAGS = $(FIXTURE_LDFLAGS)
