# SPDX-License-Identifier: Apache-2.0
# trt backend: apexx-trt.so, which never links TensorRT (its probe dlopens
# libnvinfer), and, where configure found TensorRT's headers (10 or newer)
# and builds the cuda backend, libapexx_trt_plugins.so: the TilePack,
# TileUnpackFusion and TileSSMScan plugins and the engine runner, compiled
# against those headers and linked with the cuda backend's objects (the
# kernels are the cuda backend's, not a copy). The plugins' pure parts
# (trt_units.c: attributes, serialisation, shape rules, creator list) are a
# convenience library that make check tests without TensorRT.
trt_plugin_sources = \
	backends/trt/plugins/plugin.h \
	backends/trt/plugins/plugin.cpp \
	backends/trt/plugins/runtime.cpp \
	backends/trt/plugins/tilepack.cpp \
	backends/trt/plugins/tileunpack_fusion.cpp \
	backends/trt/plugins/tilessm_scan.cpp \
	backends/trt/plugins/engine_runner.cpp \
	backends/trt/nvinfer_open.h
EXTRA_DIST += backends/trt/backend.cpp backends/trt/nvinfer_open.h $(trt_plugin_sources) \
	backends/trt/apexx-trt-plugins.map

noinst_LTLIBRARIES += backends/trt/libtrtunits.la
backends_trt_libtrtunits_la_SOURCES = backends/trt/trt_units.c backends/trt/trt_units.h
backends_trt_libtrtunits_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden
backends_trt_libtrtunits_la_LIBADD = $(M_LIBS)

if BUILD_TRT
pkglib_LTLIBRARIES += backends/apexx-trt.la
backends_apexx_trt_la_SOURCES = backends/trt/backend.cpp backends/trt/nvinfer_open.h
backends_apexx_trt_la_CXXFLAGS = $(AM_CXXFLAGS) -fvisibility=hidden -fno-exceptions -fno-rtti
backends_apexx_trt_la_LIBADD = $(DL_LIBS)
backends_apexx_trt_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shared \
	-export-symbols-regex '^apx_backend_entry$$' -no-undefined
# one definition for both conditions: a per-target CPPFLAGS set in one
# branch only would drop AM_CPPFLAGS (the include path) in the other
backends_apexx_trt_la_CPPFLAGS = $(AM_CPPFLAGS) $(trt_backend_defines)
if BUILD_TRT_PLUGINS
trt_backend_defines = \
	-DAPEXX_TRT_PLUGIN_DEFAULT='"$(libdir)/libapexx_trt_plugins.so"' \
	-DAPEXX_TRT_HEADERS_VERSION='"$(TRT_HEADERS_VERSION)"'
else
trt_backend_defines =
endif
endif

if BUILD_TRT_PLUGINS
lib_LTLIBRARIES += backends/trt/libapexx_trt_plugins.la
backends_trt_libapexx_trt_plugins_la_SOURCES = $(trt_plugin_sources)
backends_trt_libapexx_trt_plugins_la_CPPFLAGS = $(AM_CPPFLAGS) $(TRT_CPPFLAGS) $(CUDA_CPPFLAGS)
backends_trt_libapexx_trt_plugins_la_CXXFLAGS = $(AM_CXXFLAGS) -std=c++17 -fvisibility=hidden
# the cuda backend's objects (its kernels and op functions), shared, not copied
backends_trt_libapexx_trt_plugins_la_LIBADD = backends/trt/libtrtunits.la \
	$(cuda_backend_sources:.cu=.lo) backends/cuda/libcudaarch.la $(CUDA_LIBS) $(DL_LIBS)
# a version script keeps the TensorRT entry points and apexx_trt_* global
# and everything the cuda objects and the static cudart bring in local
backends_trt_libapexx_trt_plugins_la_LDFLAGS = $(AM_LDFLAGS) -avoid-version -shared \
	-no-undefined -Wl,--version-script=$(top_srcdir)/backends/trt/apexx-trt-plugins.map
EXTRA_backends_trt_libapexx_trt_plugins_la_DEPENDENCIES = \
	$(top_srcdir)/backends/trt/apexx-trt-plugins.map
endif
