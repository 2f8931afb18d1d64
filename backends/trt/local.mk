# The trt backend never links TensorRT: its probe dlopens libnvinfer.
EXTRA_DIST += backends/trt/backend.cpp
if BUILD_TRT
pkglib_LTLIBRARIES += backends/apexx-trt.la
backends_apexx_trt_la_SOURCES = backends/trt/backend.cpp
backends_apexx_trt_la_CXXFLAGS = $(AM_CXXFLAGS) -fvisibility=hidden -fno-exceptions -fno-rtti
backends_apexx_trt_la_LIBADD = $(DL_LIBS)
backends_apexx_trt_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shared \
	-export-symbols-regex '^apx_backend_entry$$' -no-undefined
endif
