lib_LTLIBRARIES += libapexx/libapexx.la
libapexx_libapexx_la_SOURCES = \
	libapexx/internal.h \
	libapexx/error.c \
	libapexx/log.c \
	libapexx/config.c \
	libapexx/loader.c \
	libapexx/trust.c \
	libapexx/elf_check.c \
	libapexx/context.c \
	libapexx/dispatch.c \
	libapexx/validate.c \
	libapexx/validate.h \
	libapexx/ops.c \
	libapexx/memory.c \
	libapexx/tile_order.c \
	libapexx/ff_internal.h \
	libapexx/ff_weights.c \
	libapexx/ff_route.c \
	libapexx/validate_ff.c \
	libapexx/keys.c \
	libapexx/graph.c
libapexx_libapexx_la_CPPFLAGS = $(AM_CPPFLAGS) $(INIH_CFLAGS) $(CJSON_CFLAGS) \
	-DAPEXX_BACKEND_DIR='"$(pkglibdir)"' \
	-DAPEXX_SYSCONF_INI='"$(sysconfdir)/apexx/apexx.ini"'
libapexx_libapexx_la_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS) -fvisibility=hidden -pthread
libapexx_libapexx_la_LIBADD = $(INIH_LIBS) $(CJSON_LIBS) $(DL_LIBS) $(M_LIBS)
libapexx_libapexx_la_LDFLAGS = $(AM_LDFLAGS) -version-info $(APEXX_LT_VERSION) \
	-export-symbols-regex '^apx_' -no-undefined -pthread $(OPENMP_CFLAGS)
