#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One GPU run of the cuda backend, from the configured and built tree (the
# tarball that ../shared/gpu/prepare packs, built by `bash .gpu/remote-build`):
#
#   bash .gpu/remote-build bash bench/gpu/run-all.sh
#
# It runs the GPU suites (tests/test_cuda_*, test_graph_cuda) with their
# output, compute-sanitizer (memcheck, racecheck, initcheck) on it, the
# bandwidth table (apexx-bench --profile large and seed on the cuda backend,
# validate=device and validate=off: time per call, GB/s, % of the same run's
# device copy; seed rows by graph replay), apexx-bench at the default
# profile beside the cpu backend, the torch peers
# (bench/peers/torch_peers.py) and one table per profile of both
# (bench/gpu/table.py). Into $OUT (default /tmp/out) it writes two
# files beside remote-build's summary.txt and logs.tar.gz:
#   gpu-report.txt      the card, every step's verdict, the tables
#   gpu-results.tar.gz  every log, JSON and Markdown report
# Each step has a time limit. With remote-build's configure, build and
# make check (~3 min) the sanitizers no longer fit one 600 s device call
# beside the rest: run "tests nopdl memcheck", "racecheck initcheck" and
# "bw peers" as three calls (runs 29 to 31). Since run 43 racecheck alone
# takes ~350 s: give "racecheck initcheck" a build without make check
# (configure && make && make check TESTS=, then this script), ~560 s.
# RUN_STEPS picks steps (default all): tests memcheck racecheck initcheck bw
# bench peers ff python determinism (and nopdl, the suites with APEXX_CUDA_PDL=0, and the
# experiments ncu, ncudiag, ncudeep and ncustall: not in the default). Exit
# status: 0 when every step run passed or was skipped with a reason.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# sources beside this script; binaries in the build tree: the current
# directory (remote-build runs commands there), or $APEXX_BUILD_DIR
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
root=${APEXX_BUILD_DIR:-$PWD}
cd "$root" || exit 1
[ -f Makefile ] || { echo "run-all.sh: $root is not a configured build tree" >&2; exit 1; }
work=$(mktemp -d /tmp/apexx-gpu-run.XXXXXX)
report="$OUT/gpu-report.txt"
: >"$report"
status=0
say() { echo "$*" | tee -a "$report"; }
RUN_STEPS=${RUN_STEPS:-tests determinism memcheck racecheck initcheck bw bench peers ff python}
want() { case " $RUN_STEPS " in *" $1 "*) return 0 ;; esac; return 1; }

export APEXX_CONFIG="$srcdir/conf/apexx.ini"
export APEXX_BACKEND_DIR="$root/backends/.libs"
export PATH=/usr/local/cuda/bin:$PATH
off_ini="$work/validate-off.ini"
sed 's/^validate *=.*/validate = off/' "$APEXX_CONFIG" >"$off_ini"
chmod 600 "$off_ini"

# step NAME LIMIT_S CMD...: run with a time limit, log to $work/NAME.log,
# record the verdict (77 = skipped).
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$work/$name.log" 2>&1
  local rc=$?
  local verdict=PASS
  if [ $rc -eq 77 ]; then
    verdict="SKIP ($(grep -m1 '^SKIP' "$work/$name.log"))"
  elif [ $rc -eq 124 ]; then
    verdict="FAIL (timed out after ${limit}s)"
    status=1
  elif [ $rc -ne 0 ]; then
    verdict="FAIL (exit $rc)"
    status=1
  fi
  say "$(printf '%-28s %-8s %4ds' "$name" "${verdict%% *}" $((SECONDS - t0))) ${verdict#* }"
  return $rc
}

say "apexx GPU run, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1 || true)"
say "$(nvcc --version 2>&1 | grep -m1 release)"
say ""

# the GPU suites of the ops (tests/cuda.mk; test_cuda_ff is the ff step's)
# CUDA_SUITES overrides the list (e.g. a sanitizer step on the suites a change touched)
cuda_suites=${CUDA_SUITES:-"tests/test_cuda_tile tests/test_cuda_fusiongate tests/test_cuda_tilessm \
tests/test_cuda_index tests/test_cuda_validate tests/test_cuda_memory tests/test_graph_cuda"}
# $run_suites PREFIX...: every suite, each through PREFIX (a script, so that
# step's timeout can run it); fails when one fails
run_suites="bash $work/run_suites.sh"
cat >"$work/run_suites.sh" <<EOF_SUITES
rc=0 ran=0
for t in $cuda_suites; do
  echo "== \$t"
  "\$@" "./\$t"
  r=\$?
  [ \$r -eq 77 ] && continue
  ran=1
  [ \$r -ne 0 ] && rc=1
done
[ \$ran -eq 0 ] && exit 77
exit \$rc
EOF_SUITES

# 1. the GPU suites, with their own output (make check already ran them)
if want tests; then
  step test_cuda 300 $run_suites env
  grep -E '^== |^[0-9]+%' "$work/test_cuda.log" | sed 's/^/    /' | tee -a "$report"
fi
# (RUN_STEPS "nopdl") the suites again with plain launches only
if want nopdl; then
  step test_cuda-nopdl 300 $run_suites env APEXX_CUDA_PDL=0
  grep -E '^[0-9]+%' "$work/test_cuda-nopdl.log" | sed 's/^/    /' | tee -a "$report"
fi
# determinism: every out-of-place case's device call 100 more times, the
# same bits each time (tests/cuda_case.c, APEXX_TEST_CUDA_REPEATS)
if want determinism; then
  step determinism 400 $run_suites env APEXX_TEST_CUDA_REPEATS=100
  grep -E '^== |^[0-9]+%|differs bitwise' "$work/determinism.log" | sed 's/^/    /' \
    | tee -a "$report"
fi

# 2. compute-sanitizer on the suite (libtool's wrapper runs the real binary)
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck initcheck; do
    want "$tool" || continue
    extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check no)
    # racecheck took 232 s of the suite in run 30 (H100), 346 s in run 43
    step "sanitizer-$tool" 500 $run_suites ./libtool --mode=execute compute-sanitizer \
      --tool "$tool" --error-exitcode 1 "${extra[@]}"
    grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^FAIL|^[0-9]+%' "$work/sanitizer-$tool.log" \
      | tail -3 | sed 's/^/    /' | tee -a "$report"
  done
else
  say "compute-sanitizer        SKIP     not on PATH"
fi

# 3. the bandwidth table: apexx-bench's presets on the cuda backend, each
# with validate=device and validate=off; the large profile without the cpu
# parity reference (minutes of host work; the suites check parity), the
# seed profile with it and its device rows by graph replay
# (the large profile's forward and backward rows in steps of their own:
# rows.sh)
bench=./bench/apexx-bench
. "$srcdir/bench/gpu/rows.sh"
bw() { # NAME PROFILE CONFIG OPS [flags...]
  local name=$1 profile=$2 config=$3 ops=$4
  shift 4
  step "bw-$name" 240 env APEXX_CONFIG="$config" $bench --profile "$profile" --backends cuda \
    --ops "$ops" --warmup 3 --iters 20 --repetitions 1 --quiet \
    --output-json "$work/bw-$name.json" --output-md "$work/bw-$name.md" "$@"
}
if ! want bw; then
  :
elif [ -x $bench ]; then
  all=reference,tile_ops,tilessm,indexing
  bw large large "$APEXX_CONFIG" "$bw_forward" --parity off
  bw large-off large "$off_ini" "$bw_forward" --parity off
  bw large-backward large "$APEXX_CONFIG" "$bw_backward" --parity off
  bw seed seed "$APEXX_CONFIG" "$all" --iters 50
  bw seed-off seed "$off_ini" "$all" --iters 50
else
  say "bw                       SKIP     bench/apexx-bench not built"
fi

# apexx-bench as a profiler's target: ONE calls of the entries in ONLY (a
# comma list of --ops names) at PROFILE, events only, no parity
# (ncu --launch-count picks the launches)
bench_one() { # PROFILE ONLY
  echo $bench --profile "$1" --backends cuda --ops "$2" --warmup 1 --iters 1 --repetitions 1 \
    --parity off --graph-replay off --quiet --output-json /dev/null
}
# the experiments' short op names -> apexx-bench entries
entry_of() {
  case $1 in
  override) echo tileunpack_override ;;
  blend) echo tileunpack_blend ;;
  fused) echo fused_pack_op_unpack ;;
  *) echo "$1" ;;
  esac
}

# 3c. (RUN_STEPS "ncu" only) per-kernel durations at the seed profile:
# which kernels of a call cost the time (graph timing gives only the sum)
if want ncu && command -v ncu >/dev/null; then
  step ncu-seed 180 ./libtool --mode=execute ncu --launch-count 60 \
    --kernel-name 'regex:ssm_block|unpack_small|fused_' --section SpeedOfLight \
    --print-summary per-kernel $(bench_one seed tile_ops,tilessm)
  grep -E '^  [a-z_]|Duration|DRAM Throughput' "$work/ncu-seed.log" | head -300 \
    | tee "$work/ncu-seed-summary.txt" | sed 's/^/    /' | tee -a "$report"
fi

# 3d. (RUN_STEPS "ncudiag" only) every kernel's duration for one op at a
# time: seed profile in both validate modes, and the large profile's tile
# ops, to see what a call's check and setup kernels cost
if want ncudiag && command -v ncu >/dev/null; then
  : >"$work/ncudiag-summary.txt"
  ncu_one() { # NAME ONLY PROFILE COUNT KERNEL-REGEX [env...]
    local name=$1 only=$2 profile=$3 count=$4 kernels=${5:-.} metrics=gpu__time_duration.sum
    shift 5
    # the large tile kernels: DRAM bytes and utilisation too (over-fetch or
    # an idle bus?)
    [ "$profile" = large ] && metrics=$metrics,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
    step "ncudiag-$name" 150 env "$@" ./libtool --mode=execute ncu \
      --launch-count "$count" --kernel-name "regex:$kernels" --metrics "$metrics" \
      --print-summary per-kernel $(bench_one "$profile" "$only")
    { echo "== $name ($profile, $only $*)"
      grep -E '^  [a-zA-Z_]|gpu__time_duration|dram__' "$work/ncudiag-$name.log" \
        | sed -E 's/\(([^()]|\([^()]*\))*\) \(/(...) (/'; } >>"$work/ncudiag-summary.txt"
  }
  # NCUDIAG_OPS: the ops (default all of these); NCUDIAG_LARGE=0: no large
  for op in ${NCUDIAG_OPS:-override blend fused tilessm gather index_select scatter_add}; do
    ncu_one "seed-dev-$op" "$(entry_of "$op")" seed 40 . APEXX_CONFIG="$APEXX_CONFIG"
    ncu_one "seed-off-$op" "$(entry_of "$op")" seed 40 . APEXX_CONFIG="$off_ini"
  done
  if [ "${NCUDIAG_LARGE:-1}" != 0 ]; then
    ncu_one large-dev-tiles tile_ops large 40 \
      'tilepack_kernel|unpack_cells|fused_copy|check|unique_map' APEXX_CONFIG="$APEXX_CONFIG"
    ncu_one large-off-tiles fused_pack_op_unpack large 12 . APEXX_CONFIG="$off_ini"
  fi
  sed 's/^/    /' "$work/ncudiag-summary.txt" | tee -a "$report" >/dev/null
  cp "$work/ncudiag-summary.txt" "$OUT/ncudiag-summary.txt"
fi

# 3e. (RUN_STEPS "ncudeep" only) why a kernel is slow: occupancy, stall
# reasons and memory traffic of one launch each of the seed profile's
# small tileunpack (table form), fused and scatter_add (direct) kernels
# and the large profile's override kernel
if want ncudeep && command -v ncu >/dev/null; then
  deep() { # NAME ONLY PROFILE KERNEL-REGEX
    step "ncudeep-$1" 150 env APEXX_CONFIG="$off_ini" ./libtool \
      --mode=execute ncu --launch-count 1 --kernel-name "regex:$4" --section SpeedOfLight \
      --section Occupancy --section LaunchStats --section WarpStateStats \
      --section MemoryWorkloadAnalysis --section SchedulerStats \
      $(bench_one "$3" "$(entry_of "$2")")
  }
  # NCUDEEP: the profiles to take (default all of these)
  for d in ${NCUDEEP:-override blend fused scatter large-override}; do
    case $d in
    override) deep seed-override override seed unpack_table ;;
    blend) deep seed-blend blend seed unpack_table ;;
    fused) deep seed-fused fused seed fused_small ;;
    scatter) deep seed-scatter scatter_add seed scatter_direct ;;
    large-override) deep large-override override large unpack_cells ;;
    esac
  done
  for f in "$work"/ncudeep-*.log; do cp "$f" "$OUT/"; done
fi

# 3f. (RUN_STEPS "ncustall" only) where a small kernel's time goes: the
# card's own clocks and warm caches (ncudeep flushes and locks them), the
# sixth launch of NCUSTALL_KERNEL (a regex, default the direct scatter
# kernel) in NCUSTALL_ONLY's seed rows (default scatter_add), every stall
# reason per issued instruction, validate=device then validate=off
if want ncustall && command -v ncu >/dev/null; then
  stall() { # NAME CONFIG
    step "ncustall-$1" 150 env APEXX_CONFIG="$2" \
      ./libtool --mode=execute ncu --cache-control none --clock-control none --launch-skip 5 \
      --launch-count 1 --kernel-name "regex:${NCUSTALL_KERNEL:-scatter_direct}" \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,\
smsp__inst_executed.sum,smsp__inst_executed.max,sm__cycles_elapsed.max" \
      $bench --profile seed --backends cuda --ops "$(entry_of "${NCUSTALL_ONLY:-scatter_add}")" \
      --warmup 5 --iters 1 --repetitions 1 --parity off --graph-replay off --quiet \
      --output-json /dev/null
  }
  stall device "$APEXX_CONFIG"
  stall off "$off_ini"
  for f in "$work"/ncustall-*.log; do cp "$f" "$OUT/"; done
fi

# 3g. the end-to-end FF path: its GPU suite, under memcheck, the frame
# timing (bench/gpu/ff_time, eager and graph replay) and apexx-bench's
# end_to_end_infer rows at the seed profile (cuda beside cpu; batches 1, 8
# and 32: the cpu backend's B=32 rows take the longest, hence 480 s)
if want ff; then
  step test_cuda_ff 540 env CK_FORK=no ./tests/test_cuda_ff
  tail -3 "$work/test_cuda_ff.log" | sed 's/^/    /' | tee -a "$report"
  if command -v compute-sanitizer >/dev/null; then
    step sanitizer-memcheck-ff 400 env CK_FORK=no ./libtool --mode=execute compute-sanitizer \
      --tool memcheck --error-exitcode 1 --leak-check no ./tests/test_cuda_ff
    grep -E 'ERROR SUMMARY|^[0-9]+%' "$work/sanitizer-memcheck-ff.log" | tail -2 \
      | sed 's/^/    /' | tee -a "$report"
  fi
  step ff_time 120 ./bench/gpu/ff_time 200
  sed 's/^/    /' "$work/ff_time.log" | tee -a "$report"
  step bench-ff-seed 480 ./bench/apexx-bench --backends cuda,cpu --ops end_to_end_infer \
    --output-json "$work/bench-ff-seed.json" --output-md "$work/bench-ff-seed.md"
  grep -E '^\| ff_' "$work/bench-ff-seed.md" | tee -a "$report"
  cp "$work/bench-ff-seed.md" "$OUT/bench-ff-seed.md"
fi

# 3h. the Python package on torch CUDA tensors (python/tests/gpu_run.sh
# builds the extension for the Python that has torch into /tmp/apexx-py),
# then the FF path in plain PyTorch beside apexx on the same inputs
# (bench/peers/torch_ff.py: parity and frame times, f16; with the ff step),
# the backward ops beside torch autograd (bench/peers/torch_backward.py) and
# the host time per call (bench/python_percall.py)
if want python; then
  step python 400 env OUT="$work" bash "$srcdir/python/tests/gpu_run.sh"
  sed 's/^/    /' "$work/python/summary.txt" | tee -a "$report"
  pyt=$(sed -n 's/^== python: \([^ ]*\) .*/\1/p' "$work/python/summary.txt" | head -1)
  # (with the ff step) the FF path in plain PyTorch beside apexx's
  if want ff; then
    step torch_ff 300 env PYTHONPATH=/tmp/apexx-py PYTHONUNBUFFERED=1 "${pyt:-python3}" \
      "$srcdir/bench/peers/torch_ff.py" --device cuda --dtype f16 --iters 100 \
      --json "$work/torch_ff.json"
    sed 's/^/    /' "$work/torch_ff.log" | tee -a "$report"
  fi
  # host time per call from Python beside torch.index_select and
  # torch.gather on the card (issue 27)
  step python_percall 120 env PYTHONPATH=/tmp/apexx-py PYTHONUNBUFFERED=1 "${pyt:-python3}" \
    "$srcdir/bench/python_percall.py" --device cuda --ff 500 --json "$work/python_percall.json"
  grep '^|' "$work/python_percall.log" | tee -a "$report"
  # the backward ops beside torch autograd of the same math (issue 27)
  for prof in large seed; do
    step "torch_backward_$prof" 300 env PYTHONPATH=/tmp/apexx-py PYTHONUNBUFFERED=1 \
      "${pyt:-python3}" "$srcdir/bench/peers/torch_backward.py" --device cuda --profile "$prof" \
      --iters 10 --json "$work/torch_backward_$prof.json"
    grep '^|' "$work/torch_backward_$prof.log" | tee -a "$report"
  done
fi

# 4. apexx-bench at the default profile, cuda beside cpu, with parity
if ! want bench; then
  :
elif [ -x bench/apexx-bench ]; then
  step bench-default 200 ./bench/apexx-bench --backends cuda,cpu \
    --output-json "$work/bench-default.json" --output-md "$work/bench-default.md"
  cp "$work/bench-default.md" "$OUT/bench-default.md"
else
  say "apexx-bench              SKIP     bench/apexx-bench not built"
fi

# 5. the torch peers (python3 there is the one with PyTorch)
if want peers; then
  step torch_peers 180 env PYTHONUNBUFFERED=1 python3 "$srcdir/bench/peers/torch_peers.py" --iters 20 \
    --json "$work/torch_peers.json"
  grep '^|' "$work/torch_peers.log" | tee -a "$report"
fi

# 6. one table per profile: apexx beside the torch peers
if ls "$work"/bw-*.json >/dev/null 2>&1; then
  args=()
  for p in large seed; do
    [ -f "$work/bw-$p-backward.json" ] && args+=(--bw "$work/bw-$p-backward.json")
    [ -f "$work/bw-$p.json" ] && args+=(--bw "$work/bw-$p.json")
    [ -f "$work/bw-$p-off.json" ] && args+=(--bw-off "$work/bw-$p-off.json")
  done
  [ -f "$work/torch_peers.json" ] && args+=(--peers "$work/torch_peers.json")
  say ""
  python3 "$srcdir/bench/gpu/table.py" "${args[@]}" >"$work/table.md" 2>&1
  tee -a "$report" <"$work/table.md"
  cp "$work/table.md" "$OUT/table.md"
fi

say ""
say "overall: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
tar -czf "$OUT/gpu-results.tar.gz" -C "$work" . 2>/dev/null
exit $status
