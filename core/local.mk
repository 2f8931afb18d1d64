lib_LTLIBRARIES += core/libapexx.la
core_libapexx_la_SOURCES = \
	core/internal.h \
	core/error.c \
	core/log.c \
	core/config.c \
	core/loader.c \
	core/context.c \
	core/dispatch.c \
	core/validate.c \
	core/validate.h \
	core/ops.c \
	core/memory.c \
	core/tile_order.c
core_libapexx_la_CPPFLAGS = $(AM_CPPFLAGS) $(INIH_CFLAGS) \
	-DAPEXX_BACKEND_DIR='"$(pkglibdir)"' \
	-DAPEXX_SYSCONF_INI='"$(sysconfdir)/apexx/apexx.ini"'
core_libapexx_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden -pthread
core_libapexx_la_LIBADD = $(INIH_LIBS) $(DL_LIBS) $(M_LIBS)
core_libapexx_la_LDFLAGS = $(AM_LDFLAGS) -version-info $(APEXX_LT_VERSION) \
	-export-symbols-regex '^apx_' -no-undefined -pthread
