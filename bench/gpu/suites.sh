#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A few test suites on the GPU machine, without the whole `make check`:
# after ../shared/gpu/prepare on the CPU machine (.gpu/: the tarball and the
# debs), from the checkout's root on the GPU machine (the device tool,
# carry [".gpu"]):
#
#   bash bench/gpu/suites.sh tests/test_cuda_ff:modes tests/test_cuda_tile
#
# Each argument is a suite of tests/, optionally :CASE (Check's
# CK_RUN_CASE, one test case of the suite). It builds the tarball in
# SUITES_BUILD (default /tmp/apexx-suites; with SUITES_BUILD set to an
# existing build tree, e.g. ab-build.sh's /tmp/apexx-ab/B, it builds nothing
# but the suites' programs there), then runs each suite under make check's
# environment (tests/local.mk's AM_TESTS_ENVIRONMENT) with a limit of
# SUITES_LIMIT_S seconds (default 300), its output streamed into
# suite-NAME[-CASE].log, packed into $OUT/suites-logs.tar.gz after each
# suite (the device tool brings back at most 8 files): a suite stopped by
# its limit leaves what it printed; keep the limits inside the call's.
# Into $OUT/suites.txt: a line a suite
# (PASS, FAIL, SKIP (77) or TIMEOUT, seconds; a suite that exits 0 having
# run no check, as a misspelt CASE makes Check do, is a FAIL). APEXX_CONFIGURE_FLAGS
# passes flags to configure. Exit status: 0 when no suite failed or timed
# out.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
[ $# -gt 0 ] || { echo "usage: suites.sh tests/test_x[:CASE]..." >&2; exit 2; }
srcroot=$(pwd)
deps=/tmp/apexx-deps
if [ -d .gpu/debs ]; then
  rm -rf "$deps" && mkdir -p "$deps"
  for f in .gpu/debs/*.deb; do dpkg -x "$f" "$deps"; done
fi
export PKG_CONFIG_SYSROOT_DIR=$deps
export PKG_CONFIG_PATH=$deps/usr/lib/x86_64-linux-gnu/pkgconfig:$deps/usr/share/pkgconfig
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:/tmp/apexx-ab/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=/usr/local/cuda/bin:$PATH
report=$OUT/suites.txt
logs=/tmp/apexx-suites-logs
rm -rf "$logs" && mkdir -p "$logs"
pack() { tar -czf "$OUT/suites-logs.tar.gz" -C "$logs" . 2>/dev/null; }
say() { echo "$*" | tee -a "$report"; }
build=${SUITES_BUILD:-/tmp/apexx-suites}
say "suites.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
if [ ! -f "$build/Makefile" ]; then
  [ -f "$srcroot/.gpu/src.tar.gz" ] || { say "no $build/Makefile and no .gpu/src.tar.gz"; exit 1; }
  rm -rf "$build" && mkdir -p "$build" &&
    tar -xzf "$srcroot/.gpu/src.tar.gz" -C "$build" --strip-components=1 || exit 1
  t0=$SECONDS
  if ! (cd "$build" && ./configure ${APEXX_CONFIGURE_FLAGS:-} >"$logs/configure.log" 2>&1 &&
    make -j"$(nproc)" >"$logs/build.log" 2>&1); then
    say "build FAIL: $(tail -5 "$logs/build.log" "$logs/configure.log" 2>/dev/null)"
    pack
    exit 1
  fi
  say "build ok $((SECONDS - t0))s"
fi
abs=$(cd "$build" && pwd)
export APEXX_CONFIG=$abs/conf/apexx.ini APEXX_BACKEND_DIR=$abs/backends/.libs
export APEXX_TEST_FIXTURES=$abs/tests/fixtures APEXX_TEST_MODULES=$abs/tests/.libs
export APEXX_BUILDDIR=$abs APEXX_SRCDIR=$abs
status=0
for arg in "$@"; do
  suite=${arg%%:*} case_=
  [ "$suite" != "$arg" ] && case_=${arg#*:}
  name=$(basename "$suite")${case_:+-$case_}
  log=$logs/suite-$name.log
  if ! make -C "$build" "$suite" >"$log" 2>&1; then
    say "$(printf '%-36s BUILD-FAIL' "$name")"
    status=1
    pack
    continue
  fi
  t0=$SECONDS
  (cd "$build" && env ${case_:+CK_RUN_CASE=$case_} CK_VERBOSITY=verbose timeout "${SUITES_LIMIT_S:-300}" \
    stdbuf -oL -eL "./$suite") >>"$log" 2>&1
  rc=$?
  pack
  case $rc in
  0) if grep -Eq '^[0-9]+%: Checks: [1-9]' "$log"; then v=PASS; else v="FAIL (no check ran)" status=1; fi ;;
  77) v="SKIP (77)" ;;
  124) v=TIMEOUT status=1 ;;
  *) v="FAIL (exit $rc)" status=1 ;;
  esac
  say "$(printf '%-36s %-10s %4ds' "$name" "$v" $((SECONDS - t0))) $(grep -E '^[0-9]+%: Checks' "$log" | tail -1)"
done
exit $status
