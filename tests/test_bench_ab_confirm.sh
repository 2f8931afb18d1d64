#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/bench-ab.sh's confirmation (docs/report.md, A/B): a row regressed
# in a first A/B run is judged by its verdict in a second one: regressed
# there too fails (exit 2), inconclusive there is unsettled (exit 3 under
# STRICT=1, else a loud pass), unchanged there is dismissed (exit 0). A stub
# apexx-bench writes each run's table, so the script's logic is tested
# without timing anything.
set -u
s=${APEXX_SRCDIR:?run under make check}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/apexx-abconfirm.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/build/bench" "$tmp/base"
# the stub: run N's table from $tmp/run-N.md, its exit status from run-N.rc
cat >"$tmp/build/bench/apexx-bench" <<'STUB'
#!/bin/sh
dir=$(dirname "$0")/../..
n=$(($(cat "$dir/count" 2>/dev/null || echo 0) + 1))
echo $n >"$dir/count"
md=
while [ $# -gt 0 ]; do
  case $1 in --output-md) md=$2; shift ;; --) break ;; esac
  shift
done
cp "$dir/run-$n.md" "$md"
exit "$(cat "$dir/run-$n.rc")"
STUB
chmod +x "$tmp/build/bench/apexx-bench"
fail=0
row() { # NAME VERDICT
  case $2 in regressed) v='**regressed**' ;; *) v=$2 ;; esac
  echo "| tile_ops.$1 / cpu | 10 us | 12 us | 1.2 | [1.1, 1.3] | $v |  |"
}
table() { # VERDICT-OF-TILEPACK VERDICT-OF-GATHER
  echo '| row | A | B | B/A | 99% interval | verdict | note |'
  echo '| --- | ---: | ---: | ---: | --- | --- | --- |'
  row tilepack "$1"
  row gather "$2"
}
# case NAME FIRST-TILEPACK SECOND-TILEPACK SECOND-RC STRICT EXPECTED-RC TEXT
case_() {
  rm -f "$tmp/count"
  table regressed unchanged >"$tmp/run-1.md"
  echo 2 >"$tmp/run-1.rc"
  table "$2" unchanged >"$tmp/run-2.md"
  echo "$3" >"$tmp/run-2.rc"
  out=$(cd "$tmp/build" && BASE_DIR="$tmp/base" BUILDDIR="$tmp/build" SRCDIR="$s" \
    STRICT=$4 OUT="$tmp/build/ab" sh "$s/bench/bench-ab.sh" 2>&1)
  rc=$?
  if [ "$rc" -eq "$5" ] && echo "$out" | grep -q "$6"; then
    echo "ok: $1 (exit $rc)"
  else
    echo "FAIL: $1: exit $rc (expected $5), output:"
    echo "$out" | grep '^bench-ab:'
    fail=1
  fi
}
case_ "regressed twice: confirmed" regressed 2 0 2 "confirmed: regressed in both runs: tile_ops.tilepack/cpu"
case_ "then inconclusive: unsettled, passes loudly" inconclusive 3 0 0 "unsettled: regressed in the first run, inconclusive in the second: tile_ops.tilepack/cpu (B/A 1.2 \[1.1, 1.3\])"
case_ "then inconclusive, STRICT=1: exit 3" inconclusive 3 1 3 "INCONCLUSIVE"
case_ "then unchanged: dismissed" unchanged 0 0 0 "not confirmed: .*tile_ops.tilepack/cpu (unchanged)"
exit $fail
