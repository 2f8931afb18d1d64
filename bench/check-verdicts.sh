#!/bin/sh
# Measure make bench-check's verdicts on this machine, from a configured build
# tree (the current directory):
#   sh SRCDIR/bench/check-verdicts.sh [RUNS] [MAKE-VARIABLES...]
# 1. RUNS (default 20) runs of `make bench-check` on unchanged code: each
#    should pass (exit 0);
# 2. for every op the cpu backend provides, `make bench-check-seeded` with a
#    real 20% slowdown of that op alone (bench/slowdown.c): each should fail
#    with a regressed row of that op.
# One line per run, then the two counts. Exit 0 when every run gave the
# expected verdict, 1 otherwise. MAKE-VARIABLES (BENCH_BASELINE=...,
# BENCH_REPETITIONS=...) go to every make call.
runs=${1:-20}
[ $# -gt 0 ] && shift
[ -f Makefile ] || { echo "check-verdicts.sh: run it in a configured build tree" >&2; exit 1; }
ok_pass=0
for i in $(seq 1 "$runs"); do
  out=$(make -s bench-check "$@" 2>&1)
  rc=$?
  verdict=$(printf '%s\n' "$out" | sed -n 's/^- verdict: //p' | tail -n 1)
  echo "unchanged run $i: exit $rc, $verdict"
  [ "$rc" -eq 0 ] && ok_pass=$((ok_pass + 1))
done
ops="tilepack tileunpack fused_pack_op_unpack fusiongate_alpha fusiongate_fuse tilessm_scan gather index_select scatter_add gather_backward ff_infer"
# the bench rows of each op (apexx-bench's report keys)
rows_of() {
  case $1 in
    tileunpack) echo "tileunpack_override tileunpack_blend" ;;
    tilessm_scan) echo "tilessm_forward tilessm_bidirectional" ;;
    *) echo "$1" ;;
  esac
}
n_ops=0
caught=0
for op in $ops; do
  n_ops=$((n_ops + 1))
  out=$(make -s bench-check-seeded BENCH_SLOWDOWN_OPS="$op" "$@" 2>&1)
  rc=$?
  # the rows the last compare (the confirming one) marked regressed
  regressed=$(printf '%s\n' "$out" |
    awk '/^# apexx-bench compare/ { buf = "" } { buf = buf $0 "\n" } END { printf "%s", buf }' | grep '\*\*regressed\*\*' | awk -F'|' '{print $2}' |
    sed 's/^ *//; s/ *$//' | sort -u | tr '\n' ' ')
  hit=no
  for r in $(rows_of "$op"); do
    case " $regressed" in *".$r / "*) hit=yes ;; esac
  done
  echo "seeded 20% slowdown of $op: exit $rc, own row regressed: $hit; regressed: ${regressed:-none}"
  [ "$rc" -eq 0 ] && [ "$hit" = yes ] && caught=$((caught + 1))
done
echo "unchanged: $ok_pass of $runs passed"
echo "seeded: $caught of $n_ops ops caught"
[ "$ok_pass" -eq "$runs" ] && [ "$caught" -eq "$n_ops" ]
