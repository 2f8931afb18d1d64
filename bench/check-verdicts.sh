#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Measure the regression check's verdicts on this machine (make bench-ab,
# apexx-bench ab: docs/report.md, A/B), from a configured build tree of a
# git checkout (the current directory):
#   sh SRCDIR/bench/check-verdicts.sh [--unchanged N] [--seeded] [--loaded N]
#        [--rows LIST] [--log FILE] [--keep DIR] [MAKE-VARIABLES...]
# --unchanged N  N runs of `make bench-ab BASE=HEAD` on unchanged code (this
#                build against HEAD's cached install: the same code): each
#                should pass with no row regressed (inconclusive is counted)
# --seeded       for each row of the cpu suite (22, or --rows LIST), `make
#                bench-check-seeded BENCH_SLOWDOWN_OPS=ROW`: a real 20%
#                slowdown of that row's calls alone (bench/slowdown.c); each
#                should fail with that row regressed and no other
# --loaded N     N unchanged runs while `make -j2` builds a copy of the
#                project (from `make dist`) in a loop in the background:
#                no false regression (inconclusive is allowed)
# Without a series flag: --unchanged 20 --seeded --loaded 20. MAKE-VARIABLES
# (BENCH_AB_ROUNDS=..., BENCH_AB_MAX_ROUNDS=...) go to every make call.
# One line per run (exit status, verdict counts, seconds), then a summary
# to quote: the machine, the commit, per series the count of each verdict
# and the time a run takes. Each run's tables and JSON (bench-ab.*, and
# bench-ab-confirm.* of a confirmation) are kept in --keep DIR (default
# check-verdicts-DATE/). Exit 0 when every run gave the expected verdict, 1
# otherwise.
set -u
unchanged=0 seeded=0 loaded=0 any=0 log= keep=
rows_all="tilepack tileunpack_override tileunpack_blend fused_pack_op_unpack fusiongate_alpha fusiongate_fuse tilessm_forward tilessm_bidirectional gather index_select scatter_add gather_backward ff_infer tilepack_backward tileunpack_backward_override tileunpack_backward_blend fused_pack_op_unpack_backward fusiongate_alpha_backward fusiongate_fuse_backward tilessm_scan_backward_forward tilessm_scan_backward_bidirectional index_select_backward"
rows=$rows_all
while [ $# -gt 0 ]; do
  case $1 in
    --unchanged) unchanged=$2; any=1; shift 2 ;;
    --seeded) seeded=1; any=1; shift ;;
    --loaded) loaded=$2; any=1; shift 2 ;;
    --rows) rows=$(echo "$2" | tr ',' ' '); shift 2 ;;
    --log) log=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --help | -h) sed -n '2,27p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
if [ $any = 0 ]; then unchanged=20 seeded=1 loaded=20; fi
[ -f Makefile ] && [ -x config.status ] ||
  { echo "check-verdicts.sh: run it in a configured build tree" >&2; exit 1; }
srcdir=$(sed -n 's/^abs_top_srcdir = //p' Makefile)
stamp=$(date +%Y%m%d-%H%M%S)
log=${log:-check-verdicts-$stamp.log}
keep=${keep:-check-verdicts-$stamp}
mkdir -p "$keep" || exit 1
: >"$log"
# keep_run NAME: this run's outputs into the keep directory
keep_run() {
  for f in bench-ab.json bench-ab.md bench-ab-confirm.json bench-ab-confirm.md; do
    [ -f "$f" ] && cp "$f" "$keep/$1-$f"
  done
  cp check-verdicts-run.txt "$keep/$1-output.txt"
}
out() { echo "$*" | tee -a "$log"; }

machine="$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, $(uname -sr)"
commit=$(git -C "$srcdir" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$srcdir" status --porcelain --untracked-files=no 2>/dev/null | head -1)
out "check-verdicts: machine: $machine; host $(hostname)"
out "check-verdicts: commit $commit${dirty:+ (with uncommitted changes: BASE=HEAD is then not the same code)}; load $(cut -d' ' -f1-3 /proc/loadavg)"
out "check-verdicts: make variables: ${*:-none}"

# the counts of a make bench-ab's first A/B run (a second one only
# confirms a regression): "regressed improved unchanged inconclusive
# missing failed rounds elapsed"
counts() {
  sed -n 's/^ab status=[a-z]* rows=[0-9]* regressed=\([0-9]*\) improved=\([0-9]*\) unchanged=\([0-9]*\) inconclusive=\([0-9]*\) missing=\([0-9]*\) failed=\([0-9]*\) rounds=\([0-9]*\) elapsed_s=\([0-9.]*\)$/\1 \2 \3 \4 \5 \6 \7 \8/p' "$1" | head -1
}

# run_series NAME N: N unchanged runs; totals into the series line
run_series() {
  name=$1 n=$2
  shift 2
  pass=0 t_reg=0 t_imp=0 t_unc=0 t_inc=0 t_mis=0 t_fail=0 t_secs=0 runs_inc=0 rounds_sum=0
  first_fp=0
  i=1
  while [ "$i" -le "$n" ]; do
    t0=$(date +%s)
    make -s bench-ab BASE=HEAD "$@" >check-verdicts-run.txt 2>&1
    rc=$?
    secs=$(($(date +%s) - t0))
    keep_run "$name-$i"
    reg=? imp=? unc=? inc=? mis=? fail=? rounds=? elapsed=
    read -r reg imp unc inc mis fail rounds elapsed <<EOF
$(counts check-verdicts-run.txt)
EOF
    [ -n "$elapsed" ] || reg=?
    confirm=$(sed -n 's/^bench-ab: \(confirmed\|not confirmed\):.*/ (a second A\/B: \1)/p' check-verdicts-run.txt)
    out "$name run $i: exit $rc, regressed $reg$confirm, improved $imp, unchanged $unc, inconclusive $inc, missing $mis, failed $fail; $rounds rounds, $secs s (load $(cut -d' ' -f1 /proc/loadavg))"
    [ "$rc" -eq 0 ] && pass=$((pass + 1))
    [ "$reg" != "?" ] && [ "$reg" -gt 0 ] && first_fp=$((first_fp + 1))
    if [ "$reg" != "?" ]; then
      t_reg=$((t_reg + reg)) t_imp=$((t_imp + imp)) t_unc=$((t_unc + unc))
      t_inc=$((t_inc + inc)) t_mis=$((t_mis + mis)) t_fail=$((t_fail + fail))
      rounds_sum=$((rounds_sum + rounds))
      [ "$inc" -gt 0 ] && runs_inc=$((runs_inc + 1))
    else
      tail -20 check-verdicts-run.txt >>"$log"
    fi
    t_secs=$((t_secs + secs))
    i=$((i + 1))
  done
  summary="$summary
$name: $pass of $n runs passed (make bench-ab exit 0; $first_fp with a row regressed in the first A/B run, before confirmation); row verdicts of the first runs: regressed $t_reg, improved $t_imp, unchanged $t_unc, inconclusive $t_inc (in $runs_inc runs), missing $t_mis, failed $t_fail; a run $((t_secs / (n > 0 ? n : 1))) s and $((rounds_sum / (n > 0 ? n : 1))) rounds on average"
  [ "$pass" -eq "$n" ]
}

ok=0
summary=
# BASE=HEAD's install, built once before the timed runs
if [ "$unchanged" -gt 0 ] || [ "$loaded" -gt 0 ]; then
  out "check-verdicts: building HEAD's install for BASE (cached)"
  make -s bench-ab BASE=HEAD BENCH_AB_ROUNDS=1 BENCH_AB_MAX_ROUNDS=1 "$@" >check-verdicts-run.txt 2>&1
  rc=$?
  case $rc in 0 | 2 | 3) ;; *) out "check-verdicts: make bench-ab BASE=HEAD failed (exit $rc)"; tail -20 check-verdicts-run.txt; exit 1 ;; esac
fi
if [ "$unchanged" -gt 0 ]; then
  run_series unchanged "$unchanged" "$@" || ok=1
fi

if [ "$seeded" = 1 ]; then
  caught=0 clean=0 n_rows=0 t_secs=0
  for row in $rows; do
    n_rows=$((n_rows + 1))
    t0=$(date +%s)
    make -s bench-check-seeded BENCH_SLOWDOWN_OPS="$row" "$@" >check-verdicts-run.txt 2>&1
    rc=$?
    secs=$(($(date +%s) - t0))
    t_secs=$((t_secs + secs))
    keep_run "seeded-$row"
    # caught: the target reported the regression (exit 0), and the rows it
    # confirmed (regressed in both A/B runs) are the op's
    flagged=$(sed -n 's/^bench-ab: confirmed: regressed in both runs: *//p' check-verdicts-run.txt |
      tr ' ' '\n' | sed 's|/[a-z]*$||' | tr '\n' ' ')
    [ "$rc" -eq 0 ] || flagged=
    why=$(grep '^bench-ab: \(unsettled\|not confirmed\)' check-verdicts-run.txt | head -1)
    hit=no others=
    for r in $flagged; do
      case $r in
        *."$row") hit=yes ;;
        *) others="$others $r" ;;
      esac
    done
    out "seeded 20% slowdown of $row: exit $rc, its row regressed (confirmed): $hit; other rows regressed:${others:- none}; $secs s${why:+; $why}"
    [ "$hit" = yes ] && caught=$((caught + 1))
    [ -z "$others" ] && clean=$((clean + 1))
  done
  summary="$summary
seeded: $caught of $n_rows rows caught, $clean of $n_rows runs with no other row regressed; a run $((t_secs / n_rows)) s on average"
  [ "$caught" -eq "$n_rows" ] && [ "$clean" -eq "$n_rows" ] || ok=1
fi

if [ "$loaded" -gt 0 ]; then
  # the load: a copy of the project from its tarball, rebuilt with make -j2
  # in a loop until the series ends
  loaddir=$(mktemp -d "${TMPDIR:-/tmp}/apexx-load.XXXXXX")
  make -s dist >/dev/null 2>&1 || { out "check-verdicts: make dist failed (the load needs it)"; exit 1; }
  tar -xzf "$(ls -t apexx-*.tar.gz | head -1)" -C "$loaddir"
  (cd "$loaddir"/apexx-* && ./configure --disable-cuda --disable-python >/dev/null 2>&1) ||
    { out "check-verdicts: the load's configure failed"; exit 1; }
  # its own session: the whole build is stopped through its process group
  setsid sh -c 'cd "$1"/apexx-* || exit 1
    while :; do make -s -j2 >/dev/null 2>&1; make -s clean >/dev/null 2>&1; done' load "$loaddir" &
  loader=$!
  sleep 20 # the build under way
  out "check-verdicts: background load: make -j2 of a copy in $loaddir (pid $loader), load $(cut -d' ' -f1-3 /proc/loadavg)"
  run_series loaded "$loaded" "$@" || ok=1
  kill -- "-$loader" 2>/dev/null
  wait "$loader" 2>/dev/null
  rm -rf "$loaddir"
fi

out "== check-verdicts summary ($machine; commit $commit)$summary"
out "log: $log; each run's tables and JSON: $keep/"
exit $ok
