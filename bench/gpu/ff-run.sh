#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One GPU run of the cuda backend's FF path, from the configured and built
# tree (bash .gpu/remote-build bash bench/gpu/ff-run.sh): the card, the FF
# suite (tests/test_cuda_ff, no fork; FF_TESTS=0 skips it) and the frame
# timing (bench/gpu/ff_time). Options:
#   FF_BASE=DIR  FF_ROUNDS rounds (default 2) alternating the backend in DIR
#                (a baseline build's backends/.libs), FF_MID's (another
#                backend dir, if set), this one, and this one with
#                APEXX_CUDA_PDL=0 (FF_PDL0=0 leaves it out);
#   FF_NCU=1     ncu's per-kernel durations of one frame (of the baseline
#                too with FF_BASE, unless FF_NCU_BASE=0);
#   FF_NCU_DETAIL=1  ncu's warp states and scheduler of the refine kernels;
#   FF_NSYS=1    nsys's kernel table of 50 frames (the baseline's too);
#   FF_SANITIZE=1  compute-sanitizer memcheck on tests/test_cuda_ff (its
#                summary and the suite's per-case worst errors);
#   FF_TEST_TIMEOUT, FF_TIME_TIMEOUT  seconds of the suite (500) and of each
#                ff_time run (60).
# Into $OUT/ff-report.txt (FF_REPORT: another name; default OUT=/tmp/out).
set -uo pipefail
export APEXX_CONFIG=${APEXX_CONFIG:-$PWD/conf/apexx.ini}
export APEXX_BACKEND_DIR=${APEXX_BACKEND_DIR:-$PWD/backends/.libs}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
rep="$OUT/${FF_REPORT:-ff-report.txt}"
{
  echo "== card"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  if [ "${FF_TESTS:-1}" = 1 ]; then
    echo "== tests/test_cuda_ff"
    t0=$(date +%s)
    CK_FORK=no timeout "${FF_TEST_TIMEOUT:-500}" ./tests/test_cuda_ff; echo "exit $? ($(( $(date +%s) - t0 )) s)"
  fi
  echo "== bench/gpu/ff_time"
  timeout "${FF_TIME_TIMEOUT:-60}" ./bench/gpu/ff_time ${FF_TIME_ITERS:-200}; echo "exit $?"
  if [ -n "${FF_BASE:-}" ]; then
    for r in $(seq 1 "${FF_ROUNDS:-2}"); do
      echo "== baseline ($FF_BASE), round $r"
      APEXX_BACKEND_DIR=$FF_BASE timeout "${FF_TIME_TIMEOUT:-60}" ./bench/gpu/ff_time ${FF_TIME_ITERS:-200} | grep -E '^(eager|graph)'
      if [ -n "${FF_MID:-}" ]; then
        echo "== FF_MID ($FF_MID), round $r"
        APEXX_BACKEND_DIR=$FF_MID timeout "${FF_TIME_TIMEOUT:-60}" ./bench/gpu/ff_time ${FF_TIME_ITERS:-200} | grep -E '^(eager|graph)'
      fi
      echo "== this build, round $r"
      timeout "${FF_TIME_TIMEOUT:-60}" ./bench/gpu/ff_time ${FF_TIME_ITERS:-200} | grep -E '^(eager|graph)'
      if [ "${FF_PDL0:-1}" = 1 ]; then
        echo "== this build, APEXX_CUDA_PDL=0, round $r"
        APEXX_CUDA_PDL=0 timeout "${FF_TIME_TIMEOUT:-60}" ./bench/gpu/ff_time ${FF_TIME_ITERS:-200} | grep -E '^(eager|graph)'
      fi
    done
  fi
  ncu_durations() {
    timeout 240 ncu --metrics gpu__time_duration.sum,launch__registers_per_thread \
      --launch-count ${FF_NCU_KERNELS:-7} -k regex:ff_ ./bench/gpu/ff_time 1 2>&1 |
      grep -E "ff_[a-z_]+kernel|gpu__time_duration|registers|==ERR" |
      sed -E 's/^ +//; s/\(int, int, int\)//; s/, Context.*//'
  }
  if [ -n "${FF_NCU:-}" ] && command -v ncu >/dev/null; then
    echo "== ncu: the first frame's kernels (bench/gpu/ff_time 1), duration each"
    ncu_durations
    if [ -n "${FF_BASE:-}" ] && [ "${FF_NCU_BASE:-1}" = 1 ]; then
      echo "== ncu, baseline ($FF_BASE)"
      APEXX_BACKEND_DIR=$FF_BASE ncu_durations
    fi
  fi
  if [ -n "${FF_NCU_DETAIL:-}" ] && command -v ncu >/dev/null; then
    echo "== ncu: warp states and scheduler of the refine kernels"
    timeout 240 ncu --section WarpStateStats --section SchedulerStats --section Occupancy \
      --metrics 'regex:smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active\.ratio' \
      --launch-count 2 -k regex:ff_fused ./bench/gpu/ff_time 1 2>&1 |
      grep -E "ff_fused|Warp Cycles|Eligible|Active Warps|Occupancy  |stalled" | cut -c1-160
  fi
  if [ -n "${FF_SANITIZE:-}" ]; then
    echo "== compute-sanitizer memcheck tests/test_cuda_ff"
    CK_FORK=no timeout ${FF_SANITIZE_TIMEOUT:-400} compute-sanitizer --tool memcheck \
      ./tests/test_cuda_ff 2>&1 | grep -E "ERROR SUMMARY|Checks|Invalid|exit|worst|Failure" | head -400
  fi
  nsys_kernels() {
    timeout 180 nsys profile -o /tmp/ff-nsys --force-overwrite true --stats=false \
      ./bench/gpu/ff_time 50 >/dev/null 2>&1
    timeout 120 nsys stats -q --report cuda_gpu_kern_sum --format column /tmp/ff-nsys.nsys-rep |
      cut -c1-200
  }
  if [ -n "${FF_NSYS:-}" ] && command -v nsys >/dev/null; then
    echo "== nsys: kernels of bench/gpu/ff_time 50 (eager and replayed frames, in the frame)"
    nsys_kernels
    if [ -n "${FF_BASE:-}" ]; then
      echo "== nsys, baseline ($FF_BASE)"
      APEXX_BACKEND_DIR=$FF_BASE nsys_kernels
    fi
  fi
} 2>&1 | tee "$rep"
