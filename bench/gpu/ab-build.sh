#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two builds of apexx on one GPU machine in one call, timed side by side:
# A (a base revision) and B (the tree to judge), each from a `make dist`
# tarball. On the CPU machine, in the project's root:
#
#   ../shared/gpu/prepare                         # .gpu/: B's tarball, the debs
#   bash bench/gpu/ab-build.sh --pack-base REV [B_REV]
#                                     # .gpu/base.tar.gz: A, REV's; B_REV: B is
#                                     # B_REV's tarball instead of prepare's
#
# then on the GPU machine (the device tool, carry [".gpu"]), from the
# checkout's root:
#
#   bash bench/gpu/ab-build.sh
#
# It configures and builds A and B side by side (CUDA for the card
# present), runs B's `make check` (the GPU suites included), then the cuda
# bench table of both builds, alternating:
#  - seed profile (graph replay), run-all.sh's bw rows and the FF frame
#    (end_to_end_infer): apexx-bench ab A B, AB_SEED_ROUNDS rounds (default
#    6, the fewest that give a verdict), 3 passes a process;
#  - with AB_SLOW_OP=OP (an op or a row of one: gather, tilessm_forward,
#    ...): B against itself at the seed profile, one cuda op slowed in the
#    second B by AB_SLOW_FACTOR (0.2): bench/slowdown.c's device mode puts a
#    spin kernel of that fraction of the op's device time after each call,
#    on the call's stream, so graph replays carry it (the first B has the
#    same library with factor 0: the spin's own launch on both sides); the
#    step passes when the op's rows regressed and no other row did;
#  - large profile, run-all.sh's bw rows (a process spends ~40 s making its
#    inputs, too long for ab's rounds here): A B A B ..., AB_LARGE_ROUNDS
#    rounds (default 2) of one apexx-bench process a side, tabled side by
#    side by bench/gpu/ab_table.py.
# validate = device (conf/apexx.ini) throughout. Into $OUT (default /tmp/out):
#   ab-report.txt     the card, the revisions, each step's verdict and time,
#                     B's make check summary, the tables
#   ab-results.tar.gz every log and report
# AB_CHECK=0 (no make check), AB_JOBS (make -j of each build, default half
# the cores), AB_LARGE_ITERS (20), AB_SEED_ITERS (50), AB_SEED_PARITY (off:
# the rounds only time, without the cpu reference of every row; B's make
# check and run-all.sh's bw step check parity), AB_SEED_OPS (apexx-bench
# --ops of the seed rounds: every op's section and end_to_end_infer),
# AB_SEED_LIMIT_S (the seed step's limit, 240), AB_SEED_ROUNDS (6; 0: no
# ab rounds) and AB_SEED_MAX_ROUNDS (12: ab's --until-settled),
# AB_SEED_SIDE_ROUNDS (0) and AB_SEED_SIDE_OPS (end_to_end_infer): seed
# rounds of one process a side, as the large profile's, AB_SLOW_OP (none),
# AB_SLOW_FACTOR (0.2), APEXX_CONFIGURE_FLAGS
# (both configures). Steps stop being started past AB_DEADLINE_S (default
# 560) seconds, so that one device call of 600 s ends with its report.
# Exit status: 0 when both built, B's make check passed and no row
# regressed or failed (an inconclusive verdict is reported, not a failure).
set -uo pipefail

if [ "${1:-}" = --pack-base ]; then
  # CPU machine: REV's `make dist` tarball as .gpu/base.tar.gz (A), and with
  # B_REV B_REV's as .gpu/src.tar.gz (B; else prepare's, this checkout's):
  # throwaway worktrees, configured without CUDA (make dist ships the .cu
  # files anyway)
  root=$(git rev-parse --show-toplevel) || exit 1
  [ -f "$root/.gpu/src.tar.gz" ] || {
    echo "ab-build.sh: no .gpu/src.tar.gz: run ../shared/gpu/prepare first (it empties .gpu/)" >&2
    exit 1
  }
  pack() { # REV TARBALL: prints the commit
    local sha wt
    sha=$(git -C "$root" rev-parse --verify -q "$1^{commit}") || {
      echo "ab-build.sh: [$1] is not a commit" >&2
      return 1
    }
    wt=$(mktemp -d /tmp/apexx-ab-pack.XXXXXX) && rmdir "$wt" &&
      git -C "$root" worktree add -q --detach "$wt" "$sha" || return 1
    (cd "$wt" && autoreconf -fi >/dev/null 2>&1 && ./configure --disable-cuda >/dev/null &&
      make dist >/dev/null) || {
      echo "ab-build.sh: make dist of $sha failed (in $wt)" >&2
      return 1
    }
    mv "$wt"/apexx-*.tar.gz "$2" && git -C "$root" worktree remove --force "$wt" &&
      git -C "$root" log -1 --format='%h %s' "$sha" | cut -c1-72
  }
  a=$(pack "${2:?usage: ab-build.sh --pack-base REV [B_REV]}" "$root/.gpu/base.tar.gz") || exit 1
  if [ -n "${3:-}" ]; then
    b=$(pack "$3" "$root/.gpu/src.tar.gz") || exit 1
  else
    # B: this checkout, as prepare packed it
    dirty=$(git -C "$root" status --porcelain --untracked-files=no | head -1)
    b="$(git -C "$root" log -1 --format='%h %s' HEAD | cut -c1-72)${dirty:+ (and uncommitted changes)}"
  fi
  printf 'A %s\nB %s\n' "$a" "$b" | tee "$root/.gpu/ab-revs.txt"
  exit 0
fi

OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
for f in .gpu/src.tar.gz .gpu/base.tar.gz; do
  [ -f "$f" ] || { echo "ab-build.sh: $f missing: run the preparation (see the header)" >&2; exit 1; }
done
work=/tmp/apexx-ab
rm -rf "$work" && mkdir -p "$work/logs"
report="$OUT/ab-report.txt"
: >"$report"
status=0
deadline=${AB_DEADLINE_S:-560}
say() { echo "$*" | tee -a "$report"; }
# step NAME LIMIT_S CMD...: run with a time limit (and not at all past the
# deadline), log to logs/NAME.log, record the verdict; apexx-bench ab's 3
# (inconclusive) is reported as such; with STEP_EXPECT=N set, exit N is
# the expected outcome (the seeded slowdown's 2), judged by the caller
step() {
  local name=$1 limit=$2
  shift 2
  if [ $SECONDS -ge "$deadline" ]; then
    say "$(printf '%-24s %-5s %4ds' "$name" SKIP 0) past the deadline (${deadline}s)"
    return 77
  fi
  local t0=$SECONDS
  timeout "$limit" "$@" >"$work/logs/$name.log" 2>&1
  local rc=$?
  local verdict=PASS
  if [ $rc -ne 0 ] && [ $rc -eq "${STEP_EXPECT:-0}" ]; then
    verdict="PASS (exit $rc, as expected)"
  elif [ $rc -eq 77 ]; then
    verdict="SKIP ($(grep -m1 '^SKIP' "$work/logs/$name.log"))"
  elif [ $rc -eq 3 ] && [ "${name#ab-}" != "$name" ]; then
    verdict="INCONCLUSIVE (a row could not be settled)"
  elif [ $rc -eq 124 ]; then
    verdict="FAIL (timed out after ${limit}s)"
    status=1
  elif [ $rc -ne 0 ]; then
    verdict="FAIL (exit $rc)"
    status=1
  fi
  say "$(printf '%-24s %-5s %4ds' "$name" "${verdict%% *}" $((SECONDS - t0))) ${verdict#* }"
  return $rc
}

# the build dependencies the GPU machine lacks, as remote-build unpacks them
deps=$work/deps
mkdir -p "$deps"
for f in .gpu/debs/*.deb; do dpkg -x "$f" "$deps"; done
export PKG_CONFIG_SYSROOT_DIR=$deps
export PKG_CONFIG_PATH=$deps/usr/lib/x86_64-linux-gnu/pkgconfig:$deps/usr/share/pkgconfig
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=/usr/local/cuda/bin:$PATH

say "apexx A/B run, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
say "$(nvcc --version 2>&1 | grep -m1 release)"
[ -f .gpu/ab-revs.txt ] && tee -a "$report" <.gpu/ab-revs.txt
say ""

# both builds at once, half the cores each
jobs=${AB_JOBS:-$(($(nproc) / 2 > 0 ? $(nproc) / 2 : 1))}
cat >"$work/build.sh" <<'EOF_BUILD'
# build.sh DIR TARBALL JOBS [TARGET...]: unpack, configure, make (and the
# targets named, e.g. the seeded slowdown's library)
dir=$1 tarball=$2 jobs=$3
shift 3
mkdir -p "$dir" && tar -xzf "$tarball" -C "$dir" --strip-components=1 && cd "$dir" &&
  ./configure ${APEXX_CONFIGURE_FLAGS:-} >configure.log 2>&1 && make -j"$jobs" >build.log 2>&1 &&
  { [ $# -eq 0 ] || make -j"$jobs" "$@" >>build.log 2>&1; }
EOF_BUILD
slow_op=${AB_SLOW_OP:-none}
b_targets=()
[ "$slow_op" != none ] && b_targets=(bench/apexx-slowdown.la)
bash "$work/build.sh" "$work/A" .gpu/base.tar.gz "$jobs" &
a_pid=$!
step build-B 420 bash "$work/build.sh" "$work/B" .gpu/src.tar.gz "$jobs" "${b_targets[@]}"
b_rc=$?
t0=$SECONDS
wait $a_pid
a_rc=$?
say "$(printf '%-24s %-5s %4ds' build-A "$([ $a_rc -eq 0 ] && echo PASS || echo FAIL)" \
  $((SECONDS - t0))) (beside build-B; this: its wait after B)"
for side in A B; do
  for l in configure build; do
    [ -f "$work/$side/$l.log" ] && cp "$work/$side/$l.log" "$work/logs/$side-$l.log"
  done
done
if [ $a_rc -ne 0 ] || [ $b_rc -ne 0 ]; then
  tail -30 "$work"/logs/*-configure.log "$work"/logs/*-build.log 2>/dev/null | tee -a "$report"
  tar -czf "$OUT/ab-results.tar.gz" -C "$work" logs 2>/dev/null
  exit 1
fi
for side in A B; do
  say "$side: $(grep -m1 'backend cuda' "$work/$side/configure.log" | sed 's/^ *//')"
done

# B's make check, GPU suites included
if [ "${AB_CHECK:-1}" != 0 ]; then
  step make-check-B 480 make -C "$work/B" -j"$(nproc)" check
  grep -E '^(# |FAIL|ERROR|XPASS)' "$work/logs/make-check-B.log" | tail -12 | sed 's/^/    /' |
    tee -a "$report"
fi

export APEXX_CONFIG=$work/B/conf/apexx.ini
ops=reference,tile_ops,tilessm,indexing
# seed: apexx-bench ab (B's), the verdict per row from the paired rounds
# (AB_SEED_ROUNDS=0: none)
[ "${AB_SEED_ROUNDS:-6}" != 0 ] && step ab-seed "${AB_SEED_LIMIT_S:-240}" "$work/B/bench/apexx-bench" ab "$work/A" "$work/B" \
  --rounds "${AB_SEED_ROUNDS:-6}" --until-settled "${AB_SEED_MAX_ROUNDS:-12}" --passes 3 \
  --output-json "$work/ab-seed.json" --output-md "$work/ab-seed.md" -- \
  --profile seed --backends cuda --ops "${AB_SEED_OPS:-$ops,end_to_end_infer}" --warmup 3 \
  --iters "${AB_SEED_ITERS:-50}" --parity "${AB_SEED_PARITY:-off}"
ab_rc=$?
[ $ab_rc -eq 2 ] && status=1
# the seeded slowdown: B against B, one op slower in the second
if [ "$slow_op" != none ]; then
  slow_lib=$work/B/bench/.libs/apexx-slowdown.so
  factor=${AB_SLOW_FACTOR:-0.2}
  # at least 5 warm-up calls: the library times the 3rd to 5th (slowdown.c)
  STEP_EXPECT=2 step "ab-seeded-$slow_op" 240 "$work/B/bench/apexx-bench" ab "$work/B" "$work/B" \
    --rounds "${AB_SEED_ROUNDS:-6}" --until-settled "${AB_SEED_MAX_ROUNDS:-12}" --passes 3 \
    --a-env "LD_PRELOAD=$slow_lib" --a-env APEXX_SLOWDOWN_DEVICE=cuda \
    --a-env APEXX_SLOWDOWN_FACTOR=0 --a-env "APEXX_SLOWDOWN_OPS=$slow_op" \
    --b-env "LD_PRELOAD=$slow_lib" --b-env APEXX_SLOWDOWN_DEVICE=cuda \
    --b-env "APEXX_SLOWDOWN_FACTOR=$factor" --b-env "APEXX_SLOWDOWN_OPS=$slow_op" \
    --output-json "$work/ab-seeded.json" --output-md "$work/ab-seeded.md" -- \
    --profile seed --backends cuda --ops "$ops,end_to_end_infer" --warmup 5 \
    --iters "${AB_SEED_ITERS:-50}" --parity "${AB_SEED_PARITY:-off}"
  # the rows of the op (apexx-bench's entries), or the row named
  case $slow_op in
  tileunpack) own="tileunpack_override tileunpack_blend" ;;
  tilessm_scan) own="tilessm_forward tilessm_bidirectional" ;;
  ff_infer) own="ff_infer ff_infer_graph ff_infer_b8 ff_infer_graph_b8 ff_infer_b32 ff_infer_graph_b32" ;;
  *) own=$slow_op ;;
  esac
  flagged=$(grep '| \*\*regressed\*\* |' "$work/ab-seeded.md" 2>/dev/null |
    sed 's/^| [a-z_]*\.\([^ ]*\) \/ [a-z]* |.*/\1/' | tr '\n' ' ')
  hit=no others=
  for r in $flagged; do
    case " $own " in *" $r "*) hit=yes ;; *) others="$others $r" ;; esac
  done
  say "seeded: cuda $slow_op x(1 + $factor) in B: its row regressed: $hit; other rows regressed:${others:- none}"
  grep -E "^\| [a-z_]*\.($(echo "$own" | tr ' ' '|')) / cuda \|" "$work/ab-seeded.md" 2>/dev/null |
    sed 's/^/    /' | tee -a "$report"
  { [ "$hit" = yes ] && [ -z "$others" ]; } || status=1
fi
# large: one process a side a round, A first; the forward rows (rows.sh),
# or AB_LARGE_OPS
. "$srcdir/bench/gpu/rows.sh"
for r in $(seq 1 "${AB_LARGE_ROUNDS:-2}"); do
  for side in A B; do
    step "bw-large-$side-$r" 200 env APEXX_BACKEND_DIR="$work/$side/backends/.libs" \
      "$work/$side/bench/apexx-bench" --profile large --backends cuda \
      --ops "${AB_LARGE_OPS:-$bw_forward}" \
      --warmup 3 --iters "${AB_LARGE_ITERS:-20}" --repetitions 1 --parity off --quiet \
      --output-json "$work/bw-large-$side-$r.json"
  done
done

# seed, one process a side a round, A first (AB_SEED_SIDE_ROUNDS, default
# none): rows whose ab rounds take too long for a call (the frame's
# batches: ~50 s a round), tabled beside the large profile's
for r in $(seq 1 "${AB_SEED_SIDE_ROUNDS:-0}"); do
  for side in A B; do
    step "bw-seed-$side-$r" 120 env APEXX_BACKEND_DIR="$work/$side/backends/.libs" \
      "$work/$side/bench/apexx-bench" --profile seed --backends cuda \
      --ops "${AB_SEED_SIDE_OPS:-end_to_end_infer}" \
      --warmup 3 --iters "${AB_SEED_ITERS:-50}" --repetitions 1 --parity off --quiet \
      --output-json "$work/bw-seed-$side-$r.json"
  done
done

say ""
say "### seed profile: apexx-bench ab A B (B/A per row, the paired rounds)"
say ""
[ -f "$work/ab-seed.md" ] && tee -a "$report" <"$work/ab-seed.md"
say ""
if [ -f "$work/ab-seeded.md" ]; then
  say "### seed profile: apexx-bench ab B B, cuda $slow_op slowed in the second B"
  say ""
  tee -a "$report" <"$work/ab-seeded.md"
  say ""
fi
python3 "$srcdir/bench/gpu/ab_table.py" "$work" >"$work/ab-large.md" 2>&1 || status=1
tee -a "$report" <"$work/ab-large.md"
say ""
say "overall: $([ $status -eq 0 ] && echo PASS || echo FAIL) (${SECONDS}s)"
(cd "$work" && tar -czf "$OUT/ab-results.tar.gz" logs ./*.json ./*.md 2>/dev/null)
exit $status
