# SPDX-License-Identifier: Apache-2.0
# Pieces the core, the backends, the bench and the tests share, none of
# them part of libapexx's API: the fp16/bf16 helpers and the seeded
# generator (headers), and the FF path's host router (apx_ff_route.h), a
# static library the cpu backend and the FF suites link.
noinst_HEADERS += common/apx_half.h common/apx_splitmix.h common/apx_ff_route.h

noinst_LTLIBRARIES += common/libapx_ffroute.la
common_libapx_ffroute_la_SOURCES = common/apx_ff_route.c
common_libapx_ffroute_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden
