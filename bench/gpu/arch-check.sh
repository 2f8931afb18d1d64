#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The cuda backend on archs other than the card's own, in one GPU call
# (docs/gpus.md, Tested on one card): four builds of the module from one
# `make dist` tarball, side by side:
#   default     configure's default list (SASS 7.5 ... 12.0, PTX of the
#               newest): the whole tree (apexx-info, the suites, apexx-bench)
#   compute_75  only compute_75 PTX: the driver JIT-compiles the T4's code
#   compute_80  only compute_80 PTX: the A100's code (cp.async, redux), no
#               sm_90 path (no clusters, no programmatic launches)
#   sm_100      only sm_100 SASS, no PTX: a module with no code for an H100
#               or H200
# (the last three: the module only; they run with the default build's
# programs, APEXX_BACKEND_DIR pointing at a folder with their module beside
# the default build's cpu module). Then, on the card:
#  1. cuobjdump --list-elf / --list-ptx of each module and its size;
#  2. apexx-info with each module: the sm_100 one must say cuda unavailable
#     with a reason naming the card's compute capability and sm_100; the
#     PTX ones must say ok and run compute_75 / compute_80 (JIT);
#  3. the GPU suites (tests/test_cuda_*, test_graph_cuda) with the
#     compute_75 and compute_80 modules (a skip is a failure here: the card
#     is present), and one suite with the sm_100 module (must skip, exit 77,
#     with the probe's reason);
#  4. apexx-bench --profile seed (graph replay, parity against the cpu
#     backend, the FF frame end_to_end_infer) and --profile large (no
#     parity) --backends cuda with the default, compute_80 and compute_75
#     modules in turn, and torch's peers of the same rows
#     (bench/peers/torch_peers.py), tabled side by side
#     (bench/gpu/arch_table.py).
# Into $OUT (default /tmp/out): arch-report.txt (the card, each step's
# verdict and time, the modules' archs and sizes, the probe lines, the
# suites' summaries, the tables) and arch-results.tar.gz (every log and
# report).
#
# On the CPU machine, in the project's root:
#   ../shared/gpu/prepare                  # .gpu/: the tarball, the debs
#   bash bench/gpu/arch-check.sh --dry-run # the same steps, nothing built
#                                          # but the four configures; the
#                                          # rest printed, not run
# then on the GPU machine (the device tool, carry [".gpu"]):
#   bash bench/gpu/arch-check.sh
#
# ARCH_JOBS (make -j of the default build, default the cores; the three
# module builds take a quarter each), ARCH_DEADLINE_S (560: steps are not
# started past it, so that one call of 600 s ends with its report),
# ARCH_SEED_ITERS (50), ARCH_LARGE_ITERS (20), ARCH_LARGE=0 (no large
# profile), ARCH_PEERS=0 (no torch peers). Exit status: 0 when every
# build, check and suite passed and no bench row failed or lost parity.
set -uo pipefail

dry=0
[ "${1:-}" = --dry-run ] && dry=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
for f in .gpu/src.tar.gz .gpu/debs; do
  [ -e "$f" ] || { echo "arch-check.sh: $f missing: run ../shared/gpu/prepare first" >&2; exit 1; }
done
work=${ARCH_WORK:-/tmp/apexx-arch}
rm -rf "$work" && mkdir -p "$work/logs" || exit 1
report="$OUT/arch-report.txt"
: >"$report"
status=0
deadline=${ARCH_DEADLINE_S:-560}
say() { echo "$*" | tee -a "$report"; }
# step NAME LIMIT_S CMD...: run with a time limit (not at all past the
# deadline; printed, not run, in a dry run), log to logs/NAME.log, record
# the verdict. STEP_EXPECT=N: exit N is the expected outcome.
step() {
  local name=$1 limit=$2
  shift 2
  if [ $dry = 1 ] && [ "${STEP_RUN_IN_DRY:-0}" != 1 ]; then
    say "$(printf '%-28s %-5s' "$name" DRY) $*"
    return "${STEP_EXPECT:-0}"
  fi
  if [ $SECONDS -ge "$deadline" ]; then
    say "$(printf '%-28s %-5s %4ds' "$name" SKIP 0) past the deadline (${deadline}s)"
    status=1
    return 125
  fi
  local t0=$SECONDS
  timeout "$limit" "$@" >"$work/logs/$name.log" 2>&1
  local rc=$?
  local verdict=PASS
  if [ $rc -eq "${STEP_EXPECT:-0}" ]; then
    [ $rc -ne 0 ] && verdict="PASS (exit $rc, as expected)"
  elif [ $rc -eq 124 ]; then
    verdict="FAIL (timed out after ${limit}s)"
  elif [ $rc -eq 77 ]; then
    verdict="FAIL (skipped: $(grep -m1 'SKIP' "$work/logs/$name.log" | cut -c1-160))"
  else
    verdict="FAIL (exit $rc)"
  fi
  [ "${verdict%% *}" = FAIL ] && status=1
  say "$(printf '%-28s %-5s %4ds' "$name" "${verdict%% *}" $((SECONDS - t0))) ${verdict#* }"
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

say "apexx arch check$([ $dry = 1 ] && echo ' (dry run)'), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "$(nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
say "$(nvcc --version 2>&1 | grep -m1 release)"
say "$(nproc) cores"
say ""

# ---- 1. the builds, side by side ------------------------------------------
# build NAME ARCHS TARGET...: unpack, configure --with-cuda-arch=ARCHS (the
# default list when ARCHS is "default"), make the targets (all: the whole
# tree and the suites)
cat >"$work/build.sh" <<'EOF_BUILD'
dir=$1 archs=$2 jobs=$3 only_configure=$4
shift 4
mkdir -p "$dir" && tar -xzf "$TARBALL" -C "$dir" --strip-components=1 && cd "$dir" || exit 1
flag=
[ "$archs" != default ] && flag="--with-cuda-arch=$archs"
./configure --enable-cuda=yes $flag >configure.log 2>&1 || { tail -20 configure.log; exit 1; }
sed -n '/^  backend cuda:/,/^  backend trt:/p' configure.log | sed '$d'
[ "$only_configure" = 1 ] && exit 0
# nvcc's --threads: one file's archs compiled in parallel
# "all" first, alone: make's all recurses, and a program named beside it
# would compile the same objects in a second make at the same time
if [ "$1" = all ]; then
  shift
  make -j"$jobs" NVCCFLAGS="--threads 4" all >build.log 2>&1 || { tail -40 build.log; exit 1; }
fi
[ $# -eq 0 ] || make -j"$jobs" NVCCFLAGS="--threads 4" "$@" >>build.log 2>&1 || { tail -40 build.log; exit 1; }
echo "    built in ${SECONDS}s (make -j$jobs, configure included)"
EOF_BUILD
export TARBALL=$root/.gpu/src.tar.gz
cores=$(nproc)
jobs=${ARCH_JOBS:-$cores}
mjobs=$((cores / 4 > 0 ? cores / 4 : 1))
suites=$(cd "$work" && tar -tzf "$TARBALL" | sed -n 's|^[^/]*/\(tests/test_cuda_[a-z_]*\)\.c$|\1|p; s|^[^/]*/\(tests/test_graph_cuda\)\.c$|\1|p' | sort)
[ -n "$suites" ] || { say "no GPU suites found in the tarball"; exit 1; }
variants="compute_75 compute_80 sm_100"
only_conf=$dry
pids=
for v in $variants; do
  bash "$work/build.sh" "$work/$v" "$v" "$mjobs" "$only_conf" backends/apexx-cuda.la \
    >"$work/logs/build-$v.log" 2>&1 &
  pids="$pids $!"
done
t0=$SECONDS
# the default build, and the suites' programs
STEP_RUN_IN_DRY=1 step build-default 480 bash "$work/build.sh" "$work/default" default "$jobs" \
  "$only_conf" all $suites
build_rc=$?
i=0
for p in $pids; do
  i=$((i + 1))
  v=$(echo $variants | cut -d' ' -f$i)
  wait "$p"
  rc=$?
  verdict=PASS
  [ $rc -ne 0 ] && verdict=FAIL && status=1 && build_rc=1
  say "$(printf '%-28s %-5s %4ds' "build-$v" $verdict $((SECONDS - t0))) (beside build-default; this: until its wait returned)"
done
say ""
for b in default $variants; do
  say "$b: $(cat "$work/logs/build-$b.log" 2>/dev/null | tr -s ' \n' '  ' | cut -c1-300)"
done
# configure's summary of each build: the arch lists the checks below expect
expect_conf() { # BUILD WHAT REGEX
  if grep -Eq "$3" "$work/logs/build-$1.log"; then say "configure $1: $2: ok"; else
    say "configure $1: $2: FAIL (no line matching [$3])"
    status=1
  fi
}
expect_conf default "SASS 7.5 ... 12.0" 'SASS: +sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_120$'
expect_conf default "PTX of the newest" 'PTX: +compute_120$'
expect_conf compute_75 "PTX only" 'SASS: +none$'
expect_conf compute_75 "compute_75" 'PTX: +compute_75$'
expect_conf compute_80 "compute_80" 'PTX: +compute_80$'
expect_conf sm_100 "sm_100 SASS" 'SASS: +sm_100$'
expect_conf sm_100 "no PTX" 'PTX: +none'
say ""
if [ $build_rc -ne 0 ]; then
  say "a build failed: its log's tail above; nothing run"
  (cd "$work" && tar -czf "$OUT/arch-results.tar.gz" logs ./*/configure.log ./*/build.log 2>/dev/null)
  exit 1
fi

# every module beside the default build's cpu and trt modules
for b in default $variants; do
  mkdir -p "$work/mods-$b"
  if [ $dry = 0 ]; then
    cp -p "$work/default/backends/.libs/"apexx-*.so "$work/mods-$b/" &&
      cp -p "$work/$b/backends/.libs/apexx-cuda.so" "$work/mods-$b/apexx-cuda.so" ||
      { say "mods-$b: the modules could not be put together"; status=1; }
  fi
done

# ---- 2. what each module carries ------------------------------------------
say "### the modules: size, cuobjdump --list-elf / --list-ptx"
for b in default $variants; do
  so=$work/mods-$b/apexx-cuda.so
  if [ $dry = 1 ]; then
    say "  $b: cuobjdump --list-elf --list-ptx $so (dry run)"
    continue
  fi
  say "  $b: $(stat -c %s "$so" 2>/dev/null) bytes"
  if command -v cuobjdump >/dev/null; then
    # one line an arch: the ELF and PTX names of every .cu carry it
    cuobjdump --list-elf "$so" 2>&1 | sed -n 's/.*\.\(sm_[0-9]*[af]*\)\..*/    ELF \1/p' | sort | uniq -c |
      tee -a "$report"
    cuobjdump --list-ptx "$so" 2>&1 | sed -n 's/.*\.\(sm_[0-9]*[af]*\)\..*/    PTX \1/p' | sort | uniq -c |
      tee -a "$report"
    cuobjdump --list-elf --list-ptx "$so" >"$work/logs/cuobjdump-$b.txt" 2>&1
  else
    say "    cuobjdump not on PATH"
  fi
done
say ""

info=$work/default/tools/apexx-info
bench=$work/default/bench/apexx-bench
export APEXX_CONFIG=$work/default/conf/apexx.ini
# the cuda backend in apexx-info --json with a module folder: "cuda STATE
# DEVICE: REASON"
cuda_line() { # BUILD
  APEXX_BACKEND_DIR="$work/mods-$1" "$info" --json 2>&1 | python3 -c '
import json, sys
try:
    b = [b for b in json.load(sys.stdin)["backends"] if b["name"] == "cuda"][0]
except (ValueError, KeyError, IndexError) as e:
    print("apexx-info --json unreadable:", e)
else:
    print("cuda", b["state"], b.get("device_name", ""), (": " + b["reason"]) if b.get("reason") else "")'
}
# ---- 3. the probe -----------------------------------------------------------
say "### the probe (apexx-info)"
probe() { # BUILD REGEX: apexx-info's cuda lines with the module must match
  local name=probe-$1
  if [ $dry = 1 ]; then
    say "$(printf '%-28s %-5s' "$name" DRY) APEXX_BACKEND_DIR=$work/mods-$1 $info: expect [$2]"
    return
  fi
  local line
  line=$(cuda_line "$1")
  echo "$line" >"$work/logs/$name.log"
  if echo "$line" | grep -Eq "$2"; then say "$(printf '%-28s %-5s' "$name" PASS) $line"; else
    say "$(printf '%-28s %-5s' "$name" FAIL) [$line] does not match [$2]"
    status=1
  fi
}
# the card's compute capability (9.0 on an H100 or H200: the checks below
# expect a card of cc 8.0 or later that is not of sm_100's major)
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
cc=${cc:-9.0}
cc_re=$(echo "$cc" | sed 's/\./\\./')
probe default "cuda +ok .*cc $cc_re, .*code sm_"
probe compute_75 'cuda +ok .*code compute_75 \(JIT\)'
probe compute_80 'cuda +ok .*code compute_80 \(JIT\)'
probe sm_100 "cuda +unavailable .*no code for this device.s cc $cc_re: it carries \\[sm_100\\]"
say ""

# ---- 4. the GPU suites with the PTX-only modules ----------------------------
suite_env() { # BUILD: the environment of tests/local.mk, the module folder of BUILD
  echo "APEXX_BACKEND_DIR=$work/mods-$1 APEXX_TEST_FIXTURES=$work/default/tests/fixtures" \
    "APEXX_TEST_MODULES=$work/default/tests/.libs APEXX_BUILDDIR=$work/default" \
    "APEXX_SRCDIR=$work/default CK_TIMEOUT_MULTIPLIER=4" \
    "CUDA_CACHE_PATH=$work/jit-$1 CUDA_CACHE_MAXSIZE=4294967296"
}
run_suites() { # BUILD: each suite, one after the other
  for s in $suites; do
    # shellcheck disable=SC2046 # one word an assignment
    step "$1-$(basename "$s")" 240 env -u APEXX_BACKEND -u APEXX_LOG $(suite_env "$1") "$work/default/$s"
  done
}
say "### the GPU suites"
(cd "$work/default" && run_suites compute_75) &
p75=$!
(cd "$work/default" && run_suites compute_80)
wait $p75 || true
# the status of the background loop: its FAIL lines
grep -q '^compute_75-[a-z_]* *FAIL' "$report" && status=1
grep -q '^compute_80-[a-z_]* *FAIL' "$report" && status=1
# the mismatched module: the suites skip with the probe's reason
# shellcheck disable=SC2046
STEP_EXPECT=77 step sm_100-test_cuda_tile 60 env -u APEXX_BACKEND $(suite_env sm_100) \
  "$work/default/tests/test_cuda_tile"
[ $dry = 0 ] && grep -m1 SKIP "$work/logs/sm_100-test_cuda_tile.log" | sed 's/^/    /' | tee -a "$report"
say ""

# ---- 5. the speed of each build, side by side -------------------------------
ops=reference,tile_ops,tilessm,indexing
builds_bench="default compute_80 compute_75"
for b in $builds_bench; do
  step "bench-seed-$b" 150 env APEXX_BACKEND_DIR="$work/mods-$b" CUDA_CACHE_PATH="$work/jit-$b" \
    CUDA_CACHE_MAXSIZE=4294967296 "$bench" --profile seed --backends cuda \
    --ops "$ops,end_to_end_infer" --warmup 3 --iters "${ARCH_SEED_ITERS:-50}" --repetitions 1 \
    --quiet --output-json "$work/bench-seed-$b.json"
done
if [ "${ARCH_LARGE:-1}" != 0 ]; then
  for b in $builds_bench; do
    step "bench-large-$b" 150 env APEXX_BACKEND_DIR="$work/mods-$b" CUDA_CACHE_PATH="$work/jit-$b" \
      CUDA_CACHE_MAXSIZE=4294967296 "$bench" --profile large --backends cuda --ops "$ops" \
      --warmup 3 --iters "${ARCH_LARGE_ITERS:-20}" --repetitions 1 --parity off --quiet \
      --output-json "$work/bench-large-$b.json"
  done
fi
# the torch peers of the same rows on the same card (python3 there has
# torch; ARCH_PEERS=0 leaves them out)
peers=()
if [ "${ARCH_PEERS:-1}" != 0 ]; then
  step torch_peers 150 env PYTHONUNBUFFERED=1 python3 "$root/bench/peers/torch_peers.py" \
    --iters "${ARCH_LARGE_ITERS:-20}" --json "$work/torch_peers.json" &&
    peers=(--peers "$work/torch_peers.json")
fi
say ""
if [ $dry = 0 ]; then
  for p in seed large; do
    ls "$work"/bench-$p-*.json >/dev/null 2>&1 || continue
    python3 "$root/bench/gpu/arch_table.py" "${peers[@]}" "$work" $p $builds_bench \
      >"$work/table-$p.md" 2>&1 || status=1
    tee -a "$report" <"$work/table-$p.md"
    say ""
  done
fi
say "overall: $([ $status -eq 0 ] && echo PASS || echo FAIL) (${SECONDS}s)"
(cd "$work" && tar -czf "$OUT/arch-results.tar.gz" logs ./*.json ./*.md ./*/configure.log \
  ./*/build.log 2>/dev/null)
exit $status
