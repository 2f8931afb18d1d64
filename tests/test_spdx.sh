#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Every source file of the repository carries its SPDX line (apexx is
# Apache-2.0, LICENSE): C, C++, CUDA, Python, shell, make and autoconf
# files, scripts, the configuration files and the man page sources. The
# list is git's (a build tree's generated files are not sources), so in a
# release tarball the check skips.
set -u
s=${APEXX_SRCDIR:?run under make check}
command -v git >/dev/null 2>&1 && git -C "$s" rev-parse --git-dir >/dev/null 2>&1 || {
  echo "SKIP: [$s] is not a git checkout (a release tarball?): no file list to check"
  exit 77
}
missing=$(git -C "$s" ls-files | grep -E '\.(c|h|cu|cuh|cpp|py|pyi|sh|mk|ini|[1-8]\.in)$|(^|/)(Makefile\.am|configure\.ac)$|^\.ci/run$|^tools/[^/.]*$' |
  grep -Ev '^tests/fuzz/(corpus|crashes)/' | while read -r f; do
  [ -f "$s/$f" ] || continue
  grep -q 'SPDX-License-Identifier: Apache-2.0' "$s/$f" || echo "$f"
done)
if [ -n "$missing" ]; then
  echo "FAIL: $(echo "$missing" | wc -l) files without 'SPDX-License-Identifier: Apache-2.0':"
  echo "$missing"
  exit 1
fi
echo "ok: every source file carries its SPDX line ($(git -C "$s" ls-files | wc -l) files tracked)"
