#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# libapexx's layers (docs/architecture.md, Layers): no circle in its
# include graph (read from the sources) or its call graph (nm on the built
# objects of libapexx.so), by tools/libapexx-graph.py.
set -u
s=${APEXX_SRCDIR:?run under make check}
b=${APEXX_BUILDDIR:?run under make check}
py=${APEXX_TEST_PYTHON:-}
command -v "$py" >/dev/null 2>&1 || py=python3
command -v "$py" >/dev/null 2>&1 || { echo "SKIP: no python3 to run tools/libapexx-graph.py"; exit 77; }
command -v nm >/dev/null 2>&1 || { echo "SKIP: no nm (binutils) to read the objects' symbols"; exit 77; }
ls "$b"/libapexx/.libs/libapexx_la-*.o >/dev/null 2>&1 || {
  echo "SKIP: no libapexx objects under [$b/libapexx/.libs] (a static-only build?)"
  exit 77
}
out=$("$py" "$s/tools/libapexx-graph.py" "$b" 2>&1)
rc=$?
echo "$out"
case $rc in
  0) exit 0 ;;
  1) echo "FAIL: a circle in libapexx's layers, or the graphs could not be read (above)"; exit 1 ;;
  *) echo "FAIL: tools/libapexx-graph.py exit $rc"; exit 1 ;;
esac
