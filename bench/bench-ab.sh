#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make bench-ab: this build (B) against BASE (A), both on this machine, by
# apexx-bench ab (docs/report.md, A/B; apexx-bench(1), REGRESSION WORKFLOW).
#   sh bench/bench-ab.sh            (make bench-ab sets the variables below)
# BASE       a git revision (default HEAD~1: the previous commit)
# BRANCH     when set, BASE is the merge-base of HEAD and this branch
# SRCDIR     the source tree (a git checkout), BUILDDIR this build tree
# CACHE      where BASE builds are kept, one install prefix per commit and
#            configure arguments (default BUILDDIR/bench-ab-cache): a
#            second run against the same BASE does not build again
# JOBS       make -j for BASE's build (default 2)
# CONFIG     the apexx configuration both sides run (bench/bench-check.ini)
# ROUNDS, MAX_ROUNDS, PASSES   apexx-bench ab --rounds, --until-settled, --passes
# AB_FLAGS   more apexx-bench ab flags (--b-env ..., --threshold ...)
# RUN_FLAGS  the suite's flags, given to both sides
# STRICT     1: an inconclusive verdict fails (exit 3); default: reported, passes
# CONFIRM    1 (default): a regressed row must regress again in a second,
#            independent A/B run (the rows regressed in both fail); 0: one run
# OUT        file prefix of the outputs (OUT.json, OUT.md; default bench-ab)
# BASE_DIR   skip the git steps: A is this build tree or install prefix
#
# Exit status: 0 pass (or inconclusive, said loudly, unless STRICT=1);
# 2 a row regressed, went missing or failed; 3 inconclusive under STRICT=1;
# 1 BASE could not be built or the A/B run could not run; 77 skipped with
# the reason (not a git checkout, BASE not in this clone: a shallow clone).
set -u
srcdir=${SRCDIR:-.}
builddir=${BUILDDIR:-.}
jobs=${JOBS:-2}
out=${OUT:-bench-ab}
say() { echo "bench-ab: $*"; }
skip() { say "SKIP: $*"; exit 77; }

if [ -n "${BASE_DIR:-}" ]; then
  base_prefix=$BASE_DIR
  base_name=$BASE_DIR
else
  command -v git >/dev/null 2>&1 || skip "git is not installed: BASE cannot be checked out"
  git -C "$srcdir" rev-parse --git-dir >/dev/null 2>&1 ||
    skip "[$srcdir] is not a git checkout (a release tarball?): no BASE to build"
  rev=${BASE:-HEAD~1}
  if [ -n "${BRANCH:-}" ]; then
    rev=$(git -C "$srcdir" merge-base HEAD "$BRANCH" 2>/dev/null) ||
      skip "no merge-base of HEAD and [$BRANCH] in this clone"
  fi
  if ! sha=$(git -C "$srcdir" rev-parse --verify -q "$rev^{commit}"); then
    if [ "$(git -C "$srcdir" rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then
      skip "BASE [$rev] is not in this shallow clone (git fetch --deepen=1, or clone with history)"
    fi
    say "BASE [$rev] is not a commit of [$srcdir]" >&2
    exit 1
  fi
  # the build's own configure arguments (the same backends), less where it
  # installs; BASE needs no Python module to be timed
  args=$(cd "$builddir" && ./config.status --config) || {
    say "cannot read [$builddir/config.status]: configure this tree first" >&2
    exit 1
  }
  key=$(printf '%s\n' "$args" | cksum | cut -d' ' -f1)
  cache=${CACHE:-$builddir/bench-ab-cache}
  mkdir -p "$cache" || exit 1
  cache=$(cd "$cache" && pwd)
  base_dir=$cache/$sha-$key
  base_prefix=$base_dir/prefix
  base_name="$rev ($sha)"
  exec 9>"$cache/$sha-$key.lock"
  flock -w 3600 9 || { say "cannot lock [$cache/$sha-$key.lock]" >&2; exit 1; }
  if [ -f "$base_dir/built" ] && [ -x "$base_prefix/bin/apexx-bench" ]; then
    say "BASE $base_name: cached in [$base_prefix]"
  else
    say "BASE $base_name: building into [$base_prefix] (once per commit; log: $base_dir/build.log)"
    rm -rf "$base_dir"
    mkdir -p "$base_dir" || exit 1
    t0=$(date +%s)
    work=$base_dir/src
    # a throwaway worktree of BASE: its bench records BASE's sha
    git -C "$srcdir" worktree add --detach -f "$work" "$sha" >"$base_dir/build.log" 2>&1 || {
      tail -20 "$base_dir/build.log" >&2
      exit 1
    }
    eval "set -- $args"
    keep=
    for a in "$@"; do
      case $a in
        --prefix=* | --exec-prefix=* | --bindir=* | --libdir=* | --includedir=* | \
          --datarootdir=* | --mandir=* | --sysconfdir=* | --enable-python* | --disable-python) ;;
        *) keep="$keep '$(printf '%s' "$a" | sed "s/'/'\\\\''/g")'" ;;
      esac
    done
    (
      cd "$work" && autoreconf -fi && eval "./configure --prefix='$base_prefix' --disable-python $keep" &&
        make -j"$jobs" && make install
    ) >>"$base_dir/build.log" 2>&1
    rc=$?
    git -C "$srcdir" worktree remove --force "$work" >/dev/null 2>&1 || {
      rm -rf "$work"
      git -C "$srcdir" worktree prune >/dev/null 2>&1
    }
    if [ $rc -ne 0 ]; then
      tail -30 "$base_dir/build.log" >&2
      say "BASE $base_name did not build (log: $base_dir/build.log)" >&2
      exit 1
    fi
    # the installed apexx-bench must load BASE's libapexx, not an installed one
    lib=$(ldd "$base_prefix/bin/apexx-bench" 2>/dev/null | sed -n 's/.*libapexx\.so[^ ]* => \([^ ]*\).*/\1/p')
    case $lib in
      "$base_prefix"/*) ;;
      *)
        say "BASE's apexx-bench loads [${lib:-no libapexx}], not its own under [$base_prefix]" >&2
        exit 1
        ;;
    esac
    touch "$base_dir/built"
    say "BASE built in $(($(date +%s) - t0)) s"
  fi
  exec 9>&-
fi

bench=$builddir/bench/apexx-bench
[ -x "$bench" ] || { say "[$bench] is not built" >&2; exit 1; }
# ab_run OUTPUT-PREFIX: one A/B run; its exit status
ab_run() {
  # shellcheck disable=SC2086 # AB_FLAGS and RUN_FLAGS are word lists
  APEXX_CONFIG=${CONFIG:-$srcdir/bench/bench-check.ini} \
    "$bench" ab "$base_prefix" "$builddir" --rounds "${ROUNDS:-10}" \
    --until-settled "${MAX_ROUNDS:-30}" --passes "${PASSES:-3}" ${AB_FLAGS:-} \
    --output-json "$1.json" --output-md "$1.md" -- ${RUN_FLAGS:-}
}
# the rows a table marks regressed, missing or failed
marked() { grep -E '\| \*\*(regressed|missing|failed)\*\* \|' "$1" 2>/dev/null | cut -d'|' -f2,7 | tr -d '* '; }
# a row's verdict and "B/A [interval]" in a table (ROW as marked() gives it)
verdict_of() { awk -F'|' -v r="$2" '{ n = $2; gsub(/[ *]/, "", n); v = $7; gsub(/[ *]/, "", v); if (n == r) { print v; exit } }' "$1" 2>/dev/null; }
ratio_of() { awk -F'|' -v r="$2" '{ n = $2; gsub(/[ *]/, "", n); if (n == r) { b = $5; i = $6; gsub(/^ +| +$/, "", b); gsub(/^ +| +$/, "", i); print "B/A " b " " i; exit } }' "$1" 2>/dev/null; }
rm -f "$out.json" "$out.md" "$out-confirm.json" "$out-confirm.md"
ab_run "$out"
rc=$?
[ -f "$out.md" ] && cat "$out.md"
if [ $rc -eq 2 ] && [ "${CONFIRM:-1}" = 1 ] && ! marked "$out.md" | grep -qE '(missing|failed)$'; then
  # a regression must reproduce: a second A/B, the rows regressed in both
  say "regressed: $(marked "$out.md" | cut -d'|' -f1 | tr '\n' ' '); confirming with a second A/B run ($out-confirm.md)"
  ab_run "$out-confirm"
  rc2=$?
  # each row regressed in the first run, by its verdict in the second:
  # regressed (confirmed), inconclusive (unsettled), else dismissed
  both= unsettled= dismissed=
  for row in $(marked "$out.md" | cut -d'|' -f1); do
    v=$(verdict_of "$out-confirm.md" "$row")
    case $v in
      regressed) both="$both $row" ;;
      inconclusive) unsettled="$unsettled $row ($(ratio_of "$out-confirm.md" "$row"))" ;;
      *) dismissed="$dismissed $row (${v:-absent})" ;;
    esac
  done
  if [ $rc2 -eq 1 ]; then
    rc=1
  elif [ -n "$both" ]; then
    say "confirmed: regressed in both runs:$both"
  elif [ -n "$unsettled" ]; then
    say "unsettled: regressed in the first run, inconclusive in the second:$unsettled; neither confirmed nor dismissed (a quieter machine, or more rounds: BENCH_AB_MAX_ROUNDS); the second run's table: $out-confirm.md"
    rc=3
  else
    say "not confirmed: the rows regressed in the first run were not in the second:$dismissed (the first run's regression was the machine's noise); the second run's table: $out-confirm.md"
    rc=$rc2
    [ $rc -eq 2 ] && rc=3 # rows regressed in the second run only: not confirmed either
  fi
fi
case $rc in
  0) say "pass: no row regressed against BASE $base_name" ;;
  2) say "FAIL: a row regressed against BASE $base_name (or went missing, or failed): $out.md" ;;
  3)
    say "INCONCLUSIVE against BASE $base_name: no regression was confirmed, and not every row could be shown unchanged (the machine's noise; see the table's notes)"
    [ "${STRICT:-0}" = 1 ] || rc=0
    ;;
  *) say "apexx-bench ab could not run (exit $rc)" ;;
esac
exit $rc
