#!/bin/sh
# apexx-info: the ops each backend provides (text and JSON), and
# APEXX_BACKEND in the dispatch table; an unknown forced backend is an error.
set -u
b=${APEXX_BUILDDIR:?run under make check}
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
text=$("$info" --config "$ini") || { echo "FAIL: apexx-info exited $?"; exit 1; }
ops=$(printf '%s\n' "$text" | sed -n 's/^ *ops: //p')
check "text lists the cpu backend's ops" \
  test "$ops" = "tilepack, tileunpack, fused_pack_op_unpack, fusiongate_alpha, fusiongate_fuse, tilessm_scan, gather, index_select, scatter_add, gather_backward, ff_infer"
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
exit $fail
