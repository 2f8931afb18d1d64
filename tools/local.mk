# SPDX-License-Identifier: Apache-2.0
bin_PROGRAMS += tools/apexx-info
tools_apexx_info_SOURCES = tools/apexx-info.c
tools_apexx_info_CPPFLAGS = $(AM_CPPFLAGS) $(CJSON_CFLAGS)
tools_apexx_info_LDADD = libapexx/libapexx.la $(CJSON_LIBS)

# FF weights exporter (docs/ff_weights.md): installed as
# $(pkgdatadir)/export_ff_weights.py, shipped in the tarball
dist_pkgdata_SCRIPTS = tools/export_ff_weights.py

# tools/cuda-devcode.py: the device code of two builds of the cuda backend
# compared without a GPU (a refactor of backends/cuda that claims no change)
EXTRA_DIST += tools/cuda-devcode.py

# tools/libapexx-graph.py: libapexx's include and call graphs with their
# circles (docs/architecture.md, Layers)
EXTRA_DIST += tools/libapexx-graph.py
