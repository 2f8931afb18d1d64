#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# After bench/gpu/ab-build.sh, in the same device call, with its two builds
# (A and B in /tmp/apexx-ab): what apexx-bench's A/B does not cover.
#  1. the backward ops beside torch autograd at the large profile
#     (bench/peers/torch_backward.py --only AB_EXTRA_ONLY), A's and B's
#     cuda modules in turn (AB_EXTRA_SIDES, default "A B") under B's
#     Python extension, so
#     each kernel's before and after sit beside torch's time in one run;
#  2. B's ff_infer rows at the seed profile with the FFModule's other
#     options (AB_EXTRA_FF: apexx-bench flags), parity against the cpu
#     backend.
#   bash bench/gpu/ab-build.sh; bash bench/gpu/ab-extra.sh
# Into $OUT: ab-extra.txt. Exit status: 0 when every step passed.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
work=${AB_WORK:-/tmp/apexx-ab}
report=$OUT/ab-extra.txt
: >"$report"
status=0
say() { echo "$*" | tee -a "$report"; }
for s in A B; do
  [ -d "$work/$s/backends/.libs" ] || { say "ab-extra.sh: no build $work/$s (run ab-build.sh first)"; exit 1; }
done
# the libraries ab-build.sh unpacked from .gpu/debs (inih, cJSON, Check):
# the builds' programs and the extension link them
export LD_LIBRARY_PATH=$work/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=/usr/local/cuda/bin:$PATH
export APEXX_CONFIG=$work/B/conf/apexx.ini
say "ab-extra, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>&1 | head -1)"
only=${AB_EXTRA_ONLY:-tilepack,tileunpack,index_select}
if (cd "$work/B" && OUT="$work/py" APEXX_SRCDIR="$work/B" APEXX_PY_BUILD_ONLY=1 \
  bash "$srcdir/python/tests/gpu_run.sh") >"$work/logs/extra-py.log" 2>&1; then
  pyt=$(sed -n 's/^== python: \([^ ]*\) .*/\1/p' "$work/py/python/summary.txt" | head -1)
  for s in ${AB_EXTRA_SIDES:-A B}; do
    say "### torch_backward large, the $s module ($only)"
    if ! timeout 150 env PYTHONPATH=/tmp/apexx-py PYTHONUNBUFFERED=1 \
      APEXX_BACKEND_DIR="$work/$s/backends/.libs" "${pyt:-python3}" \
      "$srcdir/bench/peers/torch_backward.py" --device cuda --profile large --iters 10 \
      --only "$only" >"$work/logs/extra-bwd-$s.log" 2>&1; then
      say "FAIL (exit $?): $(tail -3 "$work/logs/extra-bwd-$s.log")"
      status=1
    fi
    grep '^|' "$work/logs/extra-bwd-$s.log" | tee -a "$report"
  done
else
  say "FAIL: the Python extension did not build: $(tail -5 "$work/logs/extra-py.log")"
  status=1
fi
ff=${AB_EXTRA_FF:---ff-order multi_direction --ff-overlap blend --ff-blend-alpha 0.3 --ff-scan forward}
say "### B's ff_infer rows, seed profile, $ff"
# shellcheck disable=SC2086 # the flags split into words
if timeout 120 env APEXX_BACKEND_DIR="$work/B/backends/.libs" "$work/B/bench/apexx-bench" \
  --profile seed --backends cuda --ops ff_infer,ff_infer_graph,ff_infer_b8 $ff --warmup 3 \
  --iters 50 --repetitions 1 --quiet --output-md "$work/logs/extra-ff.md" \
  >"$work/logs/extra-ff.log" 2>&1; then :; else
  say "FAIL (exit $?): $(tail -3 "$work/logs/extra-ff.log")"
  status=1
fi
grep -E '^\| ff_' "$work/logs/extra-ff.md" 2>/dev/null | tee -a "$report"
say "overall: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
tar -czf "$OUT/ab-extra-logs.tar.gz" -C "$work" logs 2>/dev/null
exit $status
