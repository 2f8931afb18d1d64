# SPDX-License-Identifier: Apache-2.0
# Core suites: config, loader (against deliberately broken backends) and
# dispatch. The fixtures are check-only libtool modules built from one
# source, each with one defect (tests/fixtures/backend_fixture.c).
FIXTURE_LDFLAGS = -module -avoid-version -shared -rpath /nowhere -no-undefined
FIXTURE_SRC = tests/fixtures/backend_fixture.c
EXTRA_DIST += tests/fixtures/not-a-library.so

check_LTLIBRARIES += tests/fixture-nosym.la tests/fixture-abi.la \
	tests/fixture-small.la tests/fixture-name.la tests/fixture-probe.la \
	tests/fixture-init.la tests/fixture-alpha.la tests/fixture-beta.la
tests_fixture_nosym_la_SOURCES = $(FIXTURE_SRC)
tests_fixture_nosym_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_NO_ENTRY -DFIXTURE_NAME='"nosym"'
tests_fixture_nosym_la_LDFLAGS = $(FIXTURE_LDFLAGS)
tests_fixture_abi_la_SOURCES = $(FIXTURE_SRC)
tests_fixture_abi_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_ABI=99 -DFIXTURE_NAME='"abi"'
tests_fixture_abi_la_LDFLAGS = $(FIXTURE_LDFLAGS)
tests_fixture_small_la_SOURCES = $(FIXTURE_SRC)
tests_fixture_small_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_SMALL_TABLE -DFIXTURE_NAME='"small"'
tests_fixture_small_la_LDFLAGS = $(FIXTURE_LDFLAGS)
tests_fixture_name_la_SOURCES = $(FIXTURE_SRC)
tests_fixture_name_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_NAME='"impostor"'
tests_fixture_name_la_LDFLAGS = $(FIXTURE_LDFLAGS)
tests_fixture_probe_la_SOURCES = $(FIXTURE_SRC)
tests_fixture_probe_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_PROBE_FAILS -DFIXTURE_NAME='"probe"'
tests_fixture_probe_la_LDFLAGS = $(FIXTURE_LDFLAGS)
tests_fixture_init_la_SOURCES = $(FIXTURE_SRC)
tests_fixture_init_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_INIT_FAILS -DFIXTURE_NAME='"init"'
tests_fixture_init_la_LDFLAGS = $(FIXTURE_LDFLAGS)
tests_fixture_alpha_la_SOURCES = $(FIXTURE_SRC)
tests_fixture_alpha_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_NAME='"alpha"' \
	-DFIXTURE_MARKER=111.0f -DFIXTURE_NO_F16
tests_fixture_alpha_la_LDFLAGS = $(FIXTURE_LDFLAGS)
tests_fixture_beta_la_SOURCES = $(FIXTURE_SRC)
tests_fixture_beta_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_NAME='"beta"' \
	-DFIXTURE_MARKER=222.0f -DFIXTURE_NO_UNPACK -DFIXTURE_FUSE_BACKWARD
tests_fixture_beta_la_LDFLAGS = $(FIXTURE_LDFLAGS)

# The op table's versions (include/apexx/backend.h, Versioning): a module
# built against ABI 1 (refused, with the reason), one without an op table,
# one whose op table ends before tileunpack (an older backend.h's) and one
# with a slot past this core's ops (a newer backend.h's).
check_LTLIBRARIES += tests/fixture-v1.la tests/fixture-noops.la tests/fixture-olderops.la \
	tests/fixture-newerops.la
tests_fixture_v1_la_SOURCES = tests/fixtures/backend_fixture_v1.c
tests_fixture_v1_la_LDFLAGS = $(FIXTURE_LDFLAGS)
tests_fixture_noops_la_SOURCES = $(FIXTURE_SRC)
tests_fixture_noops_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_NAME='"noops"' -DFIXTURE_NO_OPS
tests_fixture_noops_la_LDFLAGS = $(FIXTURE_LDFLAGS)
tests_fixture_olderops_la_SOURCES = $(FIXTURE_SRC)
tests_fixture_olderops_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_NAME='"olderops"' \
	-DFIXTURE_MARKER=444.0f -DFIXTURE_OPS_SIZE='offsetof(apx_backend_ops, tileunpack)'
tests_fixture_olderops_la_LDFLAGS = $(FIXTURE_LDFLAGS)
tests_fixture_newerops_la_SOURCES = $(FIXTURE_SRC)
tests_fixture_newerops_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_NAME='"newerops"' \
	-DFIXTURE_MARKER=555.0f -DFIXTURE_NEWER_OPS
tests_fixture_newerops_la_LDFLAGS = $(FIXTURE_LDFLAGS)
# A module built against ABI 2's services table (the FF services in its
# middle, retired since: their slots stay, NULL): its typed keys still read
# right.
check_LTLIBRARIES += tests/fixture-abi2svc.la
tests_fixture_abi2svc_la_SOURCES = $(FIXTURE_SRC)
tests_fixture_abi2svc_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_NAME='"abi2svc"' -DFIXTURE_KEYS \
	-DFIXTURE_ABI2_SERVICES
tests_fixture_abi2svc_la_LDFLAGS = $(FIXTURE_LDFLAGS)

CORE_TEST_CPPFLAGS = $(APX_TEST_CPPFLAGS) -I$(top_srcdir)/libapexx \
	-DAPEXX_SYSCONF_INI='"$(sysconfdir)/apexx/apexx.ini"'
noinst_HEADERS += tests/coretest.h
check_PROGRAMS += tests/test_config tests/test_loader tests/test_dispatch
TESTS += tests/test_config tests/test_loader tests/test_dispatch
tests_test_config_SOURCES = tests/test_config.c
tests_test_config_CPPFLAGS = $(CORE_TEST_CPPFLAGS)
tests_test_config_LDADD = $(APX_TEST_LIBS)
tests_test_loader_SOURCES = tests/test_loader.c
tests_test_loader_CPPFLAGS = $(CORE_TEST_CPPFLAGS)
tests_test_loader_LDADD = $(APX_TEST_LIBS)
tests_test_dispatch_SOURCES = tests/test_dispatch.c
tests_test_dispatch_CPPFLAGS = $(CORE_TEST_CPPFLAGS)
tests_test_dispatch_LDADD = $(APX_TEST_LIBS)

# Keys a backend declares: typed values reach it, bad values are file:line
# errors, undeclared keys warn, environment variables override
# (tests/fixtures/backend_fixture.c FIXTURE_KEYS).
check_LTLIBRARIES += tests/fixture-keyed.la
tests_fixture_keyed_la_SOURCES = $(FIXTURE_SRC)
tests_fixture_keyed_la_CPPFLAGS = $(AM_CPPFLAGS) -DFIXTURE_KEYS -DFIXTURE_NAME='"keyed"'
tests_fixture_keyed_la_LDFLAGS = $(FIXTURE_LDFLAGS)
check_PROGRAMS += tests/test_backend_keys
TESTS += tests/test_backend_keys
tests_test_backend_keys_SOURCES = tests/test_backend_keys.c
tests_test_backend_keys_CPPFLAGS = $(CORE_TEST_CPPFLAGS)
tests_test_backend_keys_LDADD = $(APX_TEST_LIBS)

# exported symbols, sonames, no libcuda link
TESTS += tests/test_symbols.sh
EXTRA_DIST += tests/test_symbols.sh

# apexx-info: the ops each backend provides and APEXX_BACKEND in its table
TESTS += tests/test_apexx_info.sh
EXTRA_DIST += tests/test_apexx_info.sh

# the man pages: no unexpanded $(docdir) and the like, the flags of --help,
# the report schema that apexx-bench writes
TESTS += tests/test_man_pages.sh
EXTRA_DIST += tests/test_man_pages.sh

# the CMake package: a consumer built against a staged install (skips
# without cmake)
TESTS += tests/test_cmake_package.sh
EXTRA_DIST += tests/test_cmake_package.sh tests/cmake-consumer/CMakeLists.txt \
	tests/cmake-consumer/consumer.c

# the Python package as pip installs it into a venv, against a staged
# install (skips without python3-venv or wheel)
TESTS += tests/test_python_pip.sh
EXTRA_DIST += tests/test_python_pip.sh

# libapexx's include and call graphs without a circle
TESTS += tests/test_layers.sh
EXTRA_DIST += tests/test_layers.sh

# every tracked source file carries its SPDX line (skips in a tarball)
TESTS += tests/test_spdx.sh
EXTRA_DIST += tests/test_spdx.sh

# the README's quick start as tools/fresh-machine-check reads it, and
# .ci/run installing the same packages
TESTS += tests/test_quickstart.sh
EXTRA_DIST += tests/test_quickstart.sh tools/fresh-machine-check

# libapexx dlopen'ed with RTLD_LOCAL: every backend still loads and runs.
# The program links no apexx library (only libdl).
check_PROGRAMS += tests/test_rtld_local
TESTS += tests/test_rtld_local
tests_test_rtld_local_SOURCES = tests/test_rtld_local.c
tests_test_rtld_local_LDADD = $(DL_LIBS)

# every message and log line one printable line of UTF-8 (issue 30 item 16)
check_PROGRAMS += tests/test_messages
TESTS += tests/test_messages
tests_test_messages_SOURCES = tests/test_messages.c
tests_test_messages_CPPFLAGS = $(CORE_TEST_CPPFLAGS)
tests_test_messages_LDADD = $(APX_TEST_LIBS)

# config paths (FIFO, directory, /dev/null), whole lines, linear parse time
check_PROGRAMS += tests/test_config_files
TESTS += tests/test_config_files
tests_test_config_files_SOURCES = tests/test_config_files.c
tests_test_config_files_CPPFLAGS = $(CORE_TEST_CPPFLAGS)
tests_test_config_files_LDADD = $(APX_TEST_LIBS)
