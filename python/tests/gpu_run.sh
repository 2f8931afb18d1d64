#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python GPU run: builds the apexx extension against the Python that has
# torch (whatever ./configure chose), runs the Python suite (the GPU tests
# use torch CUDA tensors on a non-default stream, CUDA graph capture,
# torch.compile, CuPy where installed), the overhead bench, and the C
# bench's tilepack rows for the side-by-side, writing everything under
# $OUT/python. Run it in a built tree (in-tree or VPATH: APEXX_SRCDIR names
# the source tree then), e.g. on the GPU machine:
#   bash .gpu/remote-build bash python/tests/gpu_run.sh
# Environment: PYTHON (default: the first of python3, /usr/bin/python3 that
# imports torch), OUT (default /tmp/out), APEXX_PY_BUILD_ONLY=1 (build the
# extension into /tmp/apexx-py and stop).
set -uo pipefail
OUT=${OUT:-/tmp/out}
res=$OUT/python
mkdir -p "$res"
top=$(pwd)
src=${APEXX_SRCDIR:-$top}
log() { echo "== $*" | tee -a "$res/summary.txt"; }
{ nvidia-smi -L 2>&1 || echo "no nvidia-smi"; } >"$res/summary.txt"

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import torch' >/dev/null 2>&1; then PY=$(command -v "$p"); break; fi
  done
fi
[ -n "$PY" ] || { log "no Python with torch found (set PYTHON=)"; PY=python3; }
log "python: $PY $("$PY" -c 'import sys;print(sys.version.split()[0])') torch $("$PY" -c 'import torch;print(torch.__version__, torch.version.cuda)' 2>&1 | tail -1) cupy $("$PY" -c 'import cupy;print(cupy.__version__)' 2>&1 | tail -1)"

inc=$("$PY" -c 'import sysconfig;print(sysconfig.get_paths()["include"])')
[ -f "$inc/Python.h" ] || { log "no Python.h under $inc"; exit 1; }
# DLPack's header: Debian's libdlpack-dev, else the copy torch ships
dl=
for d in /usr/include "${APEXX_DEPS:-/tmp/apexx-deps}/usr/include"; do
  [ -f "$d/dlpack/dlpack.h" ] && { dl=$d; break; }
done
if [ -z "$dl" ]; then
  tinc=$("$PY" -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"include"))' 2>/dev/null)
  for h in "$tinc/dlpack/dlpack.h" "$tinc/ATen/dlpack.h"; do
    if [ -f "$h" ]; then dl=/tmp/apexx-dlpack; mkdir -p "$dl/dlpack"; cp "$h" "$dl/dlpack/dlpack.h"; break; fi
  done
fi
[ -n "$dl" ] || { log "no dlpack/dlpack.h (libdlpack-dev or torch's copy)"; exit 1; }
log "dlpack header: $dl/dlpack/dlpack.h"

pkg=/tmp/apexx-py
rm -rf "$pkg" && mkdir -p "$pkg/apexx"
cp "$src"/python/apexx/*.py "$src"/python/apexx/*.pyi "$pkg/apexx/"
gcc -O2 -g -shared -fPIC -Wall -Wextra -Wno-missing-field-initializers -Werror \
  -I"$inc" -I"$src/include" -I"$dl" "$src"/python/apexx/*.c \
  -o "$pkg/apexx/_apexx.so" -L"$top/libapexx/.libs" -lapexx -Wl,-rpath,"$top/libapexx/.libs" \
  >"$res/build.log" 2>&1 || { cat "$res/build.log"; log "extension build failed"; exit 1; }

export PYTHONPATH=$pkg PYTHONDONTWRITEBYTECODE=1
export APEXX_CONFIG=$src/conf/apexx.ini APEXX_BACKEND_DIR=$top/backends/.libs
export APEXX_BUILDDIR=$top APEXX_SRCDIR=$src APEXX_PY_TESTS=$src/python/tests
unset APEXX_BACKEND APEXX_LOG

# APEXX_PY_BUILD_ONLY=1: the extension in /tmp/apexx-py, nothing run
[ "${APEXX_PY_BUILD_ONLY:-0}" = 1 ] && { log "built $pkg/apexx/_apexx.so"; exit 0; }
log "python tests"
"$PY" "$src/python/tests/run_tests.py" >"$res/tests.log" 2>&1; rc=$?
grep -E '^(FAIL|SKIP|  )|passed' "$res/tests.log" | tee -a "$res/summary.txt"
log "overhead bench"
"$PY" "$src/bench/python_overhead.py" --json "$res/overhead.json" 2>&1 | tee "$res/overhead.md" | tee -a "$res/summary.txt"
log "C bench, tilepack rows (the same card, same run)"
if [ -x "$top/bench/apexx-bench" ]; then
  "$top/bench/apexx-bench" --ops tilepack --output-json "$res/bench-tilepack.json" \
    --output-md "$res/bench-tilepack.md" >"$res/bench.log" 2>&1
  grep -i tilepack "$res/bench-tilepack.md" | tee -a "$res/summary.txt"
fi
exit $rc
