#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# apexx-info: the ops each backend provides (text and JSON), APEXX_BACKEND
# in the dispatch table (an unknown forced backend is an error), and --ops:
# every op of the header's APX_OP_MAP with its descriptor's arguments, read
# from the library (so an op added to the map and the op table shows up
# with no edit to apexx-info or to this test).
set -u
b=${APEXX_BUILDDIR:?run under make check}
src=${APEXX_SRCDIR:?run under make check}
info="$b/tools/apexx-info"
[ -x "$info" ] || { echo "FAIL: $info not built"; exit 1; }
dir=$(mktemp -d /tmp/apexx-info-test.XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
ini="$dir/apexx.ini"
printf '[apexx]\nbackend_dir = %s\norder = cpu\n[backend cpu]\nlibrary = apexx-cpu.so\nthreads = 1\n' \
  "$b/backends/.libs" >"$ini"
chmod 600 "$ini"
unset APEXX_BACKEND APEXX_CONFIG APEXX_BACKEND_DIR
fail=0
check() { # check NAME COMMAND...: the command must succeed
  name=$1; shift
  if "$@"; then echo "ok: $name"; else echo "FAIL: $name"; fail=1; fi
}
# the op names of APX_OP_MAP (include/apexx/apexx.h), in id order
map_ops=$(sed -n '/^#define APX_OP_MAP(X)/,/^$/s/^ *X([A-Z0-9_]*, *\([a-z0-9_]*\)).*/\1/p' \
  "$src/include/apexx/apexx.h")
check "APX_OP_MAP read from the header" test -n "$map_ops"
text=$("$info" --config "$ini") || { echo "FAIL: apexx-info exited $?"; exit 1; }
ops=$(printf '%s\n' "$text" | sed -n 's/^ *ops: //p' | tr -d ' ' | tr ',' '\n')
check "text lists the cpu backend's ops: every op of APX_OP_MAP" test "$ops" = "$map_ops"
dispatch_ops=$(printf '%s\n' "$text" | sed -n '/^dispatch order/,$s/^  \([a-z0-9_]*\) .*/\1/p')
check "the dispatch table has every op of APX_OP_MAP" test "$dispatch_ops" = "$map_ops"
opstext=$("$info" --ops) || { echo "FAIL: apexx-info --ops exited $?"; exit 1; }
check "--ops lists every op of APX_OP_MAP" \
  test "$(printf '%s\n' "$opstext" | sed -n 's/^\([a-z0-9_]*\): .*/\1/p')" = "$map_ops"
check "--ops gives tilepack's arguments and output layout" \
  sh -c 'printf "%s\n" "$1" | grep -q "^    out  *output  \[B,K,C,t,t\]; dtype of features$"' _ "$opstext"
opsjson=$("$info" --ops --json) || { echo "FAIL: apexx-info --ops --json exited $?"; exit 1; }
check "--ops --json names every op of APX_OP_MAP" test "$(printf '%s\n' "$opsjson" |
  sed -n 's/^\t\t"name":[[:space:]]*"\([a-z0-9_]*\)",$/\1/p')" = "$map_ops"
"$info" --ops --keys >/dev/null 2>&1
check "--ops with --keys is refused" test "$?" -eq 1
json=$("$info" --config "$ini" --json) || { echo "FAIL: apexx-info --json exited $?"; exit 1; }
check "json has ops" sh -c 'printf "%s" "$1" | grep -q "\"ops\":[[:space:]]*\[\"tilepack\""' _ "$json"
check "json forced_backend null" sh -c 'printf "%s" "$1" | grep -q "\"forced_backend\":[[:space:]]*null"' _ "$json"
forced=$(APEXX_BACKEND=cpu "$info" --config "$ini" --json) || { echo "FAIL: forced run exited $?"; exit 1; }
check "json forced_backend cpu" sh -c 'printf "%s" "$1" | grep -q "\"forced_backend\":[[:space:]]*\"cpu\""' _ "$forced"
forced_text=$(APEXX_BACKEND=cpu "$info" --config "$ini")
check "text says APEXX_BACKEND" sh -c 'printf "%s" "$1" | grep -q "APEXX_BACKEND = cpu: every call goes to cpu alone"' _ "$forced_text"
err=$(APEXX_BACKEND=nosuch "$info" --config "$ini" 2>&1 >/dev/null)
rc=$?
check "unknown forced backend exits 1" test "$rc" -eq 1
check "and names it" sh -c 'printf "%s" "$1" | grep -q "APEXX_BACKEND = \[nosuch\]"' _ "$err"
# --keys: each line says the value and where it comes from, or that nothing
# sets it and why (was "(unset) (unset)")
keys=$(APEXX_LOG=info "$info" --config "$ini" --keys 2>/dev/null) || { echo "FAIL: --keys exited $?"; exit 1; }
check "--keys: a key from the file names its line" sh -c 'printf "%s\n" "$1" | grep -qxF "[apexx] order list = cpu (from $2:3)"' _ "$keys" "$ini"
check "--keys: a key at its default says so" sh -c 'printf "%s\n" "$1" | grep -qx "\[apexx\] validate enum = device (from the default)"' _ "$keys"
check "--keys: an unset key says why" sh -c 'printf "%s\n" "$1" | grep -qx "\[apexx\] trusted_owner_uids list: unset (no default; no file sets it)"' _ "$keys"
check "--keys: a variable set names the environment" sh -c 'printf "%s\n" "$1" | grep -qx "\[apexx\] \$APEXX_LOG environment = info (from the environment)"' _ "$keys"
check "--keys: an unset variable says so" sh -c 'printf "%s\n" "$1" | grep -qx "\[apexx\] \$APEXX_BACKEND environment: unset (not in the environment)"' _ "$keys"
check "--keys: no line says (unset)" sh -c '! printf "%s\n" "$1" | grep -q "(unset)"' _ "$keys"
check "--keys: every key line has a value and source or says unset" sh -c 'printf "%s\n" "$1" |
  grep "^\[" | grep -qvE "^\[[a-z ]+\] [^ ]+ [a-z]+( = .* \(from .+\)|: unset \(.+\))\$" && exit 1 || exit 0' _ "$keys"
bd=$(APEXX_BACKEND_DIR="$b/backends/.libs" "$info" --config "$ini" --keys 2>/dev/null | grep "^\[apexx\] backend_dir ")
check "--keys: a key from its variable names it" test "$bd" = "[apexx] backend_dir path = $b/backends/.libs (from \$APEXX_BACKEND_DIR)"
# --config without a value; -h
for arg in --config --config=; do
  err=$("$info" $arg 2>&1 >/dev/null)
  rc=$?
  check "$arg without a value exits 1" test "$rc" -eq 1
  check "$arg without a value: says it needs a path" sh -c 'printf "%s\n" "$1" | grep -qx "apexx-info: --config needs a value (a path)"' _ "$err"
done
check "-h prints --help's text" test "$("$info" -h)" = "$("$info" --help)"
check "--help lists -h" sh -c '"$1" --help | grep -q -- "-h, --help"' _ "$info"
exit $fail
