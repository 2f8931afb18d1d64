#!/usr/bin/env bash
# One GPU run of the cuda backend's FF path, from the configured and built
# tree (bash .gpu/remote-build bash bench/gpu/ff-run.sh): the card, the FF
# suite (tests/test_cuda_ff, no fork) and the frame timing
# (bench/gpu/ff_time), into $OUT/ff-report.txt (default OUT=/tmp/out).
set -uo pipefail
export APEXX_CONFIG=${APEXX_CONFIG:-$PWD/conf/apexx.ini}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
rep="$OUT/ff-report.txt"
{
  echo "== card"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "== tests/test_cuda_ff"
  CK_FORK=no timeout 500 ./tests/test_cuda_ff; echo "exit $?"
  echo "== bench/gpu/ff_time"
  timeout 120 ./bench/gpu/ff_time ${FF_TIME_ITERS:-200}; echo "exit $?"
} 2>&1 | tee "$rep"
