#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run on the Debian machine, in the project's root: packs what
# bench/gpu/ab.sh needs on a GPU machine into .gpu/ (ignored by git):
#   bench/gpu/ab-prepare.sh [BASE]      (default BASE: HEAD~1)
# - ../shared/gpu/prepare (or $GPU_PREPARE): .gpu/src.tar.gz, a `make dist`
#   tarball of this tree (HEAD, with any uncommitted change), the Debian
#   packages the GPU machine lacks, remote-build;
# - .gpu/base.tar.gz: `make dist` of BASE, from a throwaway git worktree;
# - .gpu/ab.sh: this tree's bench/gpu/ab.sh.
# Then the device call: carry [".gpu"], command `bash .gpu/ab.sh` (see
# ab.sh for its variables).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
rev=${1:-HEAD~1}
sha=$(git rev-parse --verify -q "$rev^{commit}") || {
  echo "ab-prepare: BASE [$rev] is not a commit of this clone" >&2
  exit 1
}
prepare=${GPU_PREPARE:-$root/../shared/gpu/prepare}
[ -x "$prepare" ] || { echo "ab-prepare: [$prepare] not found (set GPU_PREPARE)" >&2; exit 1; }
"$prepare"
work=$(mktemp -d "${TMPDIR:-/tmp}/apexx-ab-base.XXXXXX")
cleanup() {
  git worktree remove --force "$work/src" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
git worktree add --detach -f "$work/src" "$sha" >/dev/null 2>&1
(
  cd "$work/src"
  autoreconf -fi >/dev/null 2>&1
  ./configure --disable-cuda --disable-python >/dev/null
  make dist >/dev/null
) || { echo "ab-prepare: make dist of BASE $rev ($sha) failed" >&2; exit 1; }
mv "$work"/src/*.tar.gz .gpu/base.tar.gz
cp bench/gpu/ab.sh .gpu/ab.sh
echo "$rev $sha" >.gpu/base.txt
git rev-parse HEAD >.gpu/head.txt
git status --porcelain --untracked-files=no | head -1 | grep -q . && echo "(with uncommitted changes)" >>.gpu/head.txt
echo "ab-prepare: .gpu/src.tar.gz (HEAD $(cut -c1-12 .gpu/head.txt | head -1)), .gpu/base.tar.gz (BASE $rev, ${sha:0:12}), .gpu/ab.sh"
du -sh .gpu | sed 's/^/packed: /'
