#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The regression check on a GPU machine in one device call (docs/report.md,
# A/B): builds BASE and HEAD from two `make dist` tarballs the way
# ../shared/gpu/remote-build builds one (the Debian packages of inih, cJSON
# and Check unpacked into a private prefix; no make check), then runs
# apexx-bench ab of BASE (A) against HEAD (B) on the cuda backend at the
# seed profile (and the large one when time is left), and HEAD against
# itself with a seeded slowdown of one cuda op (bench/slowdown.c's device
# mode: a spin kernel of AB_SLOW_FACTOR times the op's device time after
# each call, on the call's stream, so graph replays carry it too).
# Packed by bench/gpu/ab-prepare.sh [BASE] on the Debian machine; run from
# the checkout's root with .gpu/ carried:
#   bash .gpu/ab.sh
# Variables (defaults):
#   OUT (/tmp/out)          where the results go: ab-report.txt (the card,
#                           each step's time and verdict, the tables) and
#                           ab-results.tar.gz (the JSON and Markdown of each
#                           A/B, the build logs)
#   AB_PROFILES (seed large)  the A/B of BASE against HEAD per profile
#   AB_SLOW_OP (gather)     the op or row slowed in the seeded A/B (none: skip)
#   AB_SLOW_FACTOR (0.2)
#   AB_ROUNDS (10), AB_MAX_ROUNDS (20), AB_PASSES (3)   the seed A/Bs
#   AB_LARGE_ROUNDS (6), AB_LARGE_PASSES (1), AB_LARGE_OPS
#                           (reference,tile_ops,tilessm,indexing)
#   AB_BACKEND (cuda)       the backend timed; cpu checks this script on a
#                           machine without a GPU (the seeded slowdown then
#                           in host mode)
#   AB_SEED_OPS (reference,tile_ops,tilessm,indexing,end_to_end_infer)
#   AB_BUDGET_S (570)       the whole call's time; an A/B that would not
#                           fit is skipped with the reason (the large one
#                           first: run it alone with AB_PROFILES=large, the
#                           builds are reused while the machine is warm)
#   APEXX_CONFIGURE_FLAGS   more configure flags for both builds
# Exit status: 0 when every A/B ran (or was skipped for time) and the
# seeded slowdown was caught with no other row regressed; 1 otherwise.
set -uo pipefail
t_start=$SECONDS
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
work=${AB_WORK:-/tmp/apexx-ab}
budget=${AB_BUDGET_S:-570}
report=$OUT/ab-report.txt
: >"$report"
status=0
say() { echo "$*" | tee -a "$report"; }
left() { echo $((budget - (SECONDS - t_start))); }
mkdir -p "$work/results"

# the build dependencies, as remote-build unpacks them
deps=$work/deps
if [ ! -d "$deps/usr" ]; then
  mkdir -p "$deps"
  for f in "$here"/debs/*.deb; do dpkg -x "$f" "$deps"; done
fi
export PKG_CONFIG_SYSROOT_DIR=$deps
export PKG_CONFIG_PATH=$deps/usr/lib/x86_64-linux-gnu/pkgconfig:$deps/usr/share/pkgconfig
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=/usr/local/cuda/bin:$PATH

say "apexx GPU A/B, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "card: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
say "BASE: $(cat "$here/base.txt" 2>/dev/null || echo unknown); HEAD: $(head -1 "$here/head.txt" 2>/dev/null || echo unknown)$(sed -n 2p "$here/head.txt" 2>/dev/null | sed 's/^/ /')"

# build NAME TARBALL: configure and make in $work/NAME (no make check), the
# seeded-slowdown library too; reused when the tarball is the same
build() {
  local name=$1 tarball=$2 dir=$work/$1 sum
  sum=$(cksum <"$tarball")
  if [ -f "$dir/built" ] && [ "$(cat "$dir/built")" = "$sum" ]; then
    echo "reused"
    return 0
  fi
  rm -rf "$dir" && mkdir -p "$dir/src"
  tar -xzf "$tarball" -C "$dir/src" --strip-components=1 || return 1
  (
    cd "$dir/src" &&
      ./configure --disable-python ${APEXX_CONFIGURE_FLAGS:-} >"$dir/configure.log" 2>&1 &&
      make -j"$jobs" >"$dir/build.log" 2>&1 &&
      make -j"$jobs" bench/apexx-slowdown.la >>"$dir/build.log" 2>&1
  ) || { tail -30 "$dir/build.log" "$dir/configure.log" 2>/dev/null; return 1; }
  grep -q 'backend cuda: *yes' "$dir/configure.log" ||
    echo "note: $name built without the cuda backend: $(grep 'backend cuda:' "$dir/configure.log")"
  echo "$sum" >"$dir/built"
  echo "built"
}
jobs=$(($(nproc) / 2 > 1 ? $(nproc) / 2 : 1))
t0=$SECONDS
build base "$here/base.tar.gz" >"$work/results/build-base.txt" 2>&1 &
pid_base=$!
build head "$here/src.tar.gz" >"$work/results/build-head.txt" 2>&1 &
pid_head=$!
wait $pid_base
rc_base=$?
wait $pid_head
rc_head=$?
say "builds: BASE $(tail -1 "$work/results/build-base.txt"), HEAD $(tail -1 "$work/results/build-head.txt") in $((SECONDS - t0)) s (make -j$jobs each, side by side)"
cp "$work"/base/*.log "$work/results/" 2>/dev/null
for f in "$work"/head/*.log; do cp "$f" "$work/results/head-$(basename "$f")" 2>/dev/null; done
if [ $rc_base -ne 0 ] || [ $rc_head -ne 0 ]; then
  cat "$work/results/build-base.txt" "$work/results/build-head.txt" | tee -a "$report"
  tar -czf "$OUT/ab-results.tar.gz" -C "$work/results" . 2>/dev/null
  exit 1
fi
base=$work/base/src
head=$work/head/src
bench=$head/bench/apexx-bench
export APEXX_CONFIG=$head/conf/apexx.ini
slow_lib=$head/bench/.libs/apexx-slowdown.so

# run_ab NAME A B FLAGS-OF-AB... -- RUN-FLAGS...: one A/B within the time
# left; its table and verdict line into the report
run_ab() {
  local name=$1 a=$2 b=$3
  shift 3
  local t=$SECONDS limit
  limit=$(left)
  timeout "$limit" "$bench" ab "$a" "$b" --output-json "$work/results/ab-$name.json" \
    --output-md "$work/results/ab-$name.md" "$@" >"$work/results/ab-$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 124 ]; then
    say "ab $name: did not finish in the $limit s left"
    status=1
    return $rc
  fi
  say ""
  say "== ab $name: exit $rc, $((SECONDS - t)) s"
  grep -E '^ab (status|note)' "$work/results/ab-$name.log" | tee -a "$report"
  [ -f "$work/results/ab-$name.md" ] && tee -a "$report" <"$work/results/ab-$name.md" >/dev/null
  [ $rc -eq 1 ] && { tail -5 "$work/results/ab-$name.log" | tee -a "$report"; status=1; }
  return $rc
}

backend=${AB_BACKEND:-cuda}
seed_flags=(--profile seed --backends "$backend" --parity off --warmup 5 --iters 50
  --ops "${AB_SEED_OPS:-reference,tile_ops,tilessm,indexing,end_to_end_infer}")
device_mode=()
[ "$backend" = cuda ] && device_mode=(cuda)
ab_flags=(--rounds "${AB_ROUNDS:-10}" --until-settled "${AB_MAX_ROUNDS:-20}"
  --passes "${AB_PASSES:-3}")
profiles=" ${AB_PROFILES:-seed large} "

# 1. BASE against HEAD at the seed profile
if [[ $profiles == *" seed "* ]]; then
  run_ab seed "$base" "$head" "${ab_flags[@]}" -- "${seed_flags[@]}"
fi

# 2. HEAD against itself, one op slowed in B (and the empty spin in A)
slow_op=${AB_SLOW_OP:-gather}
if [ "$slow_op" != none ] && [ "$(left)" -gt 60 ]; then
  factor=${AB_SLOW_FACTOR:-0.2}
  run_ab "seeded-$slow_op" "$head" "$head" "${ab_flags[@]}" \
    --a-env "LD_PRELOAD=$slow_lib" --a-env "APEXX_SLOWDOWN_DEVICE=${device_mode[*]}" \
    --a-env APEXX_SLOWDOWN_FACTOR=0 --a-env "APEXX_SLOWDOWN_OPS=$slow_op" \
    --b-env "LD_PRELOAD=$slow_lib" --b-env "APEXX_SLOWDOWN_DEVICE=${device_mode[*]}" \
    --b-env "APEXX_SLOWDOWN_FACTOR=$factor" --b-env "APEXX_SLOWDOWN_OPS=$slow_op" \
    -- "${seed_flags[@]}"
  md=$work/results/ab-seeded-$slow_op.md
  # the rows of the op (apexx-bench's entries), or the row named
  case $slow_op in
  tileunpack) own="tileunpack_override tileunpack_blend" ;;
  tilessm_scan) own="tilessm_forward tilessm_bidirectional" ;;
  ff_infer) own="ff_infer ff_infer_graph" ;;
  *) own=$slow_op ;;
  esac
  flagged=$(grep '| \*\*regressed\*\* |' "$md" 2>/dev/null | sed 's/^| [a-z_]*\.\([^ ]*\) \/ [a-z]* |.*/\1/' | tr '\n' ' ')
  hit=no others=
  for r in $flagged; do
    case " $own " in *" $r "*) hit=yes ;; *) others="$others $r" ;; esac
  done
  say "seeded: ${factor} slowdown of $backend $slow_op: its row regressed: $hit; other rows regressed:${others:- none}"
  { [ "$hit" = yes ] && [ -z "$others" ]; } || status=1
elif [ "$slow_op" != none ]; then
  say "seeded: skipped, $(left) s left"
  status=1
fi

# 3. BASE against HEAD at the large profile, when it fits: one process of
# HEAD first gives the time a process takes
if [[ $profiles == *" large "* ]]; then
  large_flags=(--profile large --backends "$backend" --parity off --warmup 4 --iters 20
    --ops "${AB_LARGE_OPS:-reference,tile_ops,tilessm,indexing}")
  rounds=${AB_LARGE_ROUNDS:-6}
  t=$SECONDS
  APEXX_BACKEND_DIR=$head/backends/.libs timeout "$(left)" "$bench" "${large_flags[@]}" \
    --repetitions 1 --quiet --output-json /dev/null >"$work/results/large-probe.log" 2>&1
  per=$((SECONDS - t))
  need=$(((2 * rounds + 2) * per * ${AB_LARGE_PASSES:-1}))
  if [ "$need" -lt "$(left)" ]; then
    run_ab large "$base" "$head" --rounds "$rounds" --passes "${AB_LARGE_PASSES:-1}" \
      -- "${large_flags[@]}"
  else
    say ""
    say "== ab large: skipped: a process takes ${per} s, $rounds rounds need ~${need} s, $(left) s left (run AB_PROFILES=large AB_SLOW_OP=none in a call of its own)"
  fi
fi

say ""
say "total: $((SECONDS - t_start)) s"
tar -czf "$OUT/ab-results.tar.gz" -C "$work/results" . 2>/dev/null
exit $status
