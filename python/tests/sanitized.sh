#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs a Python test (the rest of the command line) in a build with
# sanitizers: CPython is not instrumented, so the runtime the extension was
# linked against must be the first library loaded. The build's compiler ($1)
# names it (-print-file-name: gcc's libasan.so, clang's
# libclang_rt.asan-ARCH.so); it is preloaded, with gcc's libubsan.so where
# the flags ($2) hold UBSan (clang's ASan runtime carries UBSan's handlers;
# the modules do not name libubsan, so a backend dlopened by Python would
# miss its symbols). LeakSanitizer is off for the interpreter (CPython frees
# little at exit by design): the library's own leak checks are the Check
# suites'. When the runtime cannot be found the test is skipped (exit 77)
# with that reason, and so is a ThreadSanitizer build. Without sanitizer
# flags the command runs as it is.
# docs/reliability.md, Issue 30, item 22.
cc=$1 flags=$2
shift 2
case " $flags " in
  *-fsanitize=*address*) kind=asan ;;
  *-fsanitize=thread*)
    # an uninstrumented interpreter's threads are invisible to TSan: its
    # reports would be about apexx's calls seen half; the Check suites
    # (test_concurrency, test_ff_lifetime) are the thread checks
    echo "SKIP: this build uses ThreadSanitizer ($flags); CPython is not" \
      "instrumented, so the Python suite is not run under it"
    exit 77 ;;
  *) exec "$@" ;;
esac
runtime=
arch=$(uname -m)
for name in "lib$kind.so" "libclang_rt.$kind-$arch.so" "libclang_rt.$kind.so"; do
  path=$($cc -print-file-name="$name" 2>/dev/null)
  case $path in
    /*) if test -f "$path"; then runtime=$path; break; fi ;;
  esac
done
if test -z "$runtime"; then
  echo "SKIP: this build uses $kind (configure's $flags) and CPython is not" \
    "instrumented: the $kind runtime must be preloaded, but '$cc -print-file-name'" \
    "found none to preload"
  exit 77
fi
case " $flags " in
  *-fsanitize=*undefined*)
    ubsan=$($cc -print-file-name=libubsan.so 2>/dev/null)
    case $ubsan in /*) test -f "$ubsan" && runtime="$runtime $ubsan" ;; esac ;;
esac
LD_PRELOAD="$runtime${LD_PRELOAD:+ $LD_PRELOAD}"
export LD_PRELOAD
if test "$kind" = asan; then
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  export ASAN_OPTIONS
fi
echo "# preloaded $runtime (this build uses $kind; CPython is not instrumented)"
exec "$@"
