# SPDX-License-Identifier: Apache-2.0
lib_LTLIBRARIES += libapexx/libapexx.la
libapexx_libapexx_la_SOURCES = \
	libapexx/internal.h \
	libapexx/error.c \
	libapexx/log.c \
	libapexx/config.c \
	libapexx/loader.c \
	libapexx/trust.c \
	libapexx/elf_image.h \
	libapexx/elf_image.c \
	libapexx/elf_check.c \
	libapexx/elf_dynamic.c \
	libapexx/elf_symbols.c \
	libapexx/elf_relocations.c \
	libapexx/elf_init_fini.c \
	libapexx/elf_sections.c \
	libapexx/context.c \
	libapexx/intern.c \
	libapexx/dispatch.c \
	libapexx/validate.c \
	libapexx/validate.h \
	libapexx/validate_checks.c \
	libapexx/op_table.c \
	libapexx/op_table.h \
	libapexx/op/tilepack.c \
	libapexx/op/tileunpack.c \
	libapexx/op/fused_pack_op_unpack.c \
	libapexx/op/fusiongate_alpha.c \
	libapexx/op/fusiongate_fuse.c \
	libapexx/op/tilessm_scan.c \
	libapexx/op/gather.c \
	libapexx/op/index_select.c \
	libapexx/op/scatter_add.c \
	libapexx/op/gather_backward.c \
	libapexx/op/ff_infer.c \
	libapexx/op/fusiongate_fuse_backward.c \
	libapexx/op/fusiongate_alpha_backward.c \
	libapexx/op/tilessm_scan_backward.c \
	libapexx/op/tilepack_backward.c \
	libapexx/op/tileunpack_backward.c \
	libapexx/op/fused_pack_op_unpack_backward.c \
	libapexx/op/index_select_backward.c \
	libapexx/ops.c \
	libapexx/memory.c \
	libapexx/tile_order.c \
	libapexx/cache.c \
	libapexx/ff/ff_internal.h \
	libapexx/ff/weights.c \
	libapexx/ff/load.c \
	libapexx/ff/json_scan.c \
	libapexx/ff/save.c \
	libapexx/keys.c \
	libapexx/graph.c
libapexx_libapexx_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/libapexx $(INIH_CFLAGS) $(CJSON_CFLAGS) \
	-DAPEXX_BACKEND_DIR='"$(pkglibdir)"' \
	-DAPEXX_SYSCONF_INI='"$(sysconfdir)/apexx/apexx.ini"'
libapexx_libapexx_la_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS) -fvisibility=hidden -pthread
libapexx_libapexx_la_LIBADD = $(INIH_LIBS) $(CJSON_LIBS) $(DL_LIBS) $(M_LIBS)
libapexx_libapexx_la_LDFLAGS = $(AM_LDFLAGS) -version-info $(APEXX_LT_VERSION) \
	-export-symbols-regex '^apx_' -no-undefined -pthread $(OPENMP_CFLAGS)
