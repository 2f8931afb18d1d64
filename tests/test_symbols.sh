#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# libapexx exports only apx_ symbols; each backend exports only
# apx_backend_entry; the cuda backend needs no libcuda (it must dlopen on a
# machine without a driver, so that its probe says what is missing).
set -u
b=${APEXX_BUILDDIR:?run under make check}
command -v nm >/dev/null || { echo "SKIP: nm not found"; exit 77; }
fail=0
lib=$(ls "$b"/libapexx/.libs/libapexx.so.[0-9]* 2>/dev/null | head -n 1)
[ -n "$lib" ] || { echo "FAIL: no libapexx.so.N under $b/libapexx/.libs"; exit 1; }
extra=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^apx_' | grep -v '^$')
if [ -n "$extra" ]; then echo "FAIL: libapexx exports non-apx_ symbols:"; echo "$extra"; fail=1; fi
soname=$(readelf -d "$lib" | sed -n 's/.*SONAME.*\[\(.*\)\].*/\1/p')
case "$soname" in libapexx.so.[0-9]*) echo "ok: soname $soname";; *) echo "FAIL: soname [$soname]"; fail=1;; esac
for m in "$b"/backends/.libs/apexx-*.so; do
  [ -f "$m" ] || continue
  syms=$(nm -D --defined-only "$m" | awk '{print $3}' | grep -v '^$' | sort -u)
  if [ "$syms" != "apx_backend_entry" ]; then
    echo "FAIL: $m exports more than apx_backend_entry:"; echo "$syms" | head -20; fail=1
  else
    echo "ok: $(basename "$m") exports only apx_backend_entry"
  fi
  # an apx_ symbol the module does not define must come from a library it
  # links (NEEDED), or it fails to load under RTLD_LOCAL
  undef=$(nm -D --undefined-only "$m" | awk '{print $2}' | grep '^apx_' | sort -u)
  if [ -n "$undef" ] && ! readelf -d "$m" | grep -q 'NEEDED.*libapexx\.so'; then
    echo "FAIL: $m needs libapexx symbols it does not link:"; echo "$undef"; fail=1
  else
    echo "ok: $(basename "$m") needs no unlinked apx_ symbol"
  fi
  if readelf -d "$m" | grep -q 'NEEDED.*libcuda\.so'; then
    echo "FAIL: $m links libcuda"; fail=1
  fi
done
exit $fail
