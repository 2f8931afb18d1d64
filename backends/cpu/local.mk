# SPDX-License-Identifier: Apache-2.0
pkglib_LTLIBRARIES += backends/apexx-cpu.la
backends_apexx_cpu_la_SOURCES = \
	backends/cpu/cpu.h \
	backends/cpu/cpu.c \
	backends/cpu/backend.c \
	backends/cpu/tile_simd.h \
	backends/cpu/tile_simd.c \
	backends/cpu/scan_index_simd.h \
	backends/cpu/tilepack.c \
	backends/cpu/tileunpack.c \
	backends/cpu/fused_pack_op_unpack.c \
	backends/cpu/fusiongate_alpha.c \
	backends/cpu/fusiongate_fuse.c \
	backends/cpu/tilessm_scan.c \
	backends/cpu/gather.c \
	backends/cpu/index_select.c \
	backends/cpu/scatter_add.c \
	backends/cpu/gather_backward.c \
	backends/cpu/fusiongate_fuse_backward.c \
	backends/cpu/fusiongate_alpha_backward.c \
	backends/cpu/tilessm_scan_backward.c \
	backends/cpu/tilepack_backward.c \
	backends/cpu/tileunpack_backward.c \
	backends/cpu/fused_pack_op_unpack_backward.c \
	backends/cpu/index_select_backward.c \
	backends/cpu/ff_cpu.h \
	backends/cpu/ff_simd.h \
	backends/cpu/ff_prepare.c \
	backends/cpu/ff_model.c \
	backends/cpu/ff_infer.c
# -ffp-contract=off: GCC would contract a*b+c into FMA, which breaks rounding
# model R (docs/ops.md, Rounding and parity).
backends_apexx_cpu_la_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS) -O3 -ffp-contract=off \
	-fvisibility=hidden
backends_apexx_cpu_la_LIBADD = common/libapx_ffroute.la $(M_LIBS)
backends_apexx_cpu_la_LDFLAGS = $(AM_LDFLAGS) $(OPENMP_CFLAGS) -module -avoid-version \
	-shared -export-symbols-regex '^apx_backend_entry$$' -no-undefined
