#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The man pages (docs/local.mk makes them from docs/*.in):
# - installed (make install-man into a staging directory), no unexpanded
#   make or configure variable ($(NAME), ${NAME}, @NAME@); the configured
#   paths in the pages that name them;
# - every long flag that apexx-bench --help (and its ab and history --help)
#   and apexx-info --help print is documented in the program's page (in
#   its SYNOPSIS or as an option's tag, and described below the SYNOPSIS),
#   and every flag a page names is one that --help prints; apexx.ini(5)
#   names only apexx-info's flags; the short flags (-h, -o) likewise, and
#   -h prints --help's text for apexx-bench, its compare, ab and history,
#   apexx-info and export_ff_weights.py;
# - the report schema the pages and docs/report.md state is the one
#   apexx-bench writes.
set -u
b=${APEXX_BUILDDIR:?run under make check}
s=${APEXX_SRCDIR:?run under make check}
fail=0
ok() { printf 'ok: %s\n' "$1"; }
bad() { printf 'FAIL: %s\n' "$1"; fail=1; }
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT

# the pages as `make install-man` installs them
pages="apexx-bench.1 apexx-info.1 apexx.ini.5 apexx.7"
stage=$t/stage
if ${APEXX_TEST_MAKE:-make} -C "$b" install-man DESTDIR="$stage" >"$t/install.log" 2>&1; then
	for p in $pages; do
		f=$stage${APEXX_TEST_MANDIR:?}/man${p##*.}/$p
		[ -s "$f" ] || { bad "$p: not installed as [$f]"; continue; }
		# $(pkg-config ...) in apexx(7)'s synopsis is shell, written \$(pkg\-config
		left=$(grep -nE '\$\([A-Za-z_][A-Za-z0-9_]*\)|\$\{[A-Za-z_][A-Za-z0-9_]*\}|@[A-Za-z_][A-Za-z0-9_]*@' "$f")
		[ -z "$left" ] && ok "installed $p: no unexpanded variable" || bad "installed $p: unexpanded: $left"
	done
else
	bad "make install-man DESTDIR=$stage failed: $(tail -n 3 "$t/install.log")"
fi

# the configured paths, as the pages write them (roff's \- for '-')
roff() { printf '%s' "$1" | sed 's/-/\\-/g'; }
has_path() { # page, description, path
	if grep -qF "$(roff "$3")" "$b/docs/$1"; then ok "$1 names $2 [$3]"; else bad "$1 does not name $2 [$3]"; fi
}
if [ -n "${APEXX_TEST_SYSCONFDIR:-}" ]; then
	has_path apexx.ini.5 "the installed configuration" "$APEXX_TEST_SYSCONFDIR/apexx/apexx.ini"
	has_path apexx.ini.5 "the backend directory" "$APEXX_TEST_PKGLIBDIR"
	has_path apexx-info.1 "the installed configuration" "$APEXX_TEST_SYSCONFDIR/apexx/apexx.ini"
	has_path apexx.7 "the documentation" "$APEXX_TEST_DOCDIR/ops.md"
	has_path apexx-bench.1 "the report format" "$APEXX_TEST_DOCDIR/report.md"
else
	bad "APEXX_TEST_SYSCONFDIR, APEXX_TEST_PKGLIBDIR, APEXX_TEST_DOCDIR are not set (tests/local.mk)"
fi

# flags: --help's long flags against the page's
long_flags() { grep -o -- '--[a-z0-9][a-z0-9-]*' | sort -u; }
page_text() { sed 's/\\-/-/g; s/\\f[BIRP]//g' "$1"; }
documented() { # the SYNOPSIS and every .TP tag line
	awk '/^\.SH/ { syn = ($2 == "SYNOPSIS"); next } syn { print } /^\.TP/ { if (getline > 0) print }' "$1" |
		sed 's/\\-/-/g; s/\\f[BIRP]//g' | long_flags
}
compare_flags() { # name, help flags file, page
	documented "$3" >"$t/doc"
	page_text "$3" | long_flags >"$t/named"
	n=$(wc -l <"$2")
	[ "$n" -ge "$4" ] && ok "$1: --help lists $n long flags" ||
		bad "$1: --help lists [$n] long flags, expected at least $4 (help text not read?)"
	missing=$(comm -23 "$2" "$t/doc" | tr '\n' ' ')
	[ -z "$missing" ] && ok "$1: every --help flag is in $(basename "$3")'s SYNOPSIS or an option's tag" ||
		bad "$1: --help lists flags $(basename "$3") does not document: [$missing]"
	awk '/^\.SH/ { syn = ($2 == "SYNOPSIS") } !syn' "$3" | sed 's/\\-/-/g; s/\\f[BIRP]//g' |
		long_flags >"$t/body"
	missing=$(comm -23 "$2" "$t/body" | tr '\n' ' ')
	[ -z "$missing" ] && ok "$1: every --help flag is described below the SYNOPSIS" ||
		bad "$1: --help lists flags only the SYNOPSIS of $(basename "$3") names: [$missing]"
	extra=$(comm -13 "$2" "$t/named" | tr '\n' ' ')
	[ -z "$extra" ] && ok "$1: every flag $(basename "$3") names is in --help" ||
		bad "$1: $(basename "$3") names flags --help does not list: [$extra]"
}
bench=$b/bench/apexx-bench
info=$b/tools/apexx-info
# short flags (-h, -o) the same way: --help's against the page's
short_flags() { grep -oE -- '(^|[][ ,|(])-[a-zA-Z]([] ,|)]|$)' | grep -oE -- '-[a-zA-Z]' | sort -u | tr '\n' ' '; }
compare_short() { # name, help file, page
	in_help=$(short_flags <"$2")
	in_page=$(page_text "$3" | short_flags)
	case " $in_help " in *" -h "*) ok "$1: --help lists -h" ;; *) bad "$1: --help does not list -h" ;; esac
	[ "$in_help" = "$in_page" ] && ok "$1: the short flags of --help and $(basename "$3") agree [$in_help]" ||
		bad "$1: short flags: --help [$in_help], $(basename "$3") [$in_page]"
}
# -h is --help for every program and subcommand (same text, exit 0)
same_as_help() { # label, command...
	label=$1
	shift
	if h=$("$@" -h 2>&1) && help=$("$@" --help 2>&1) && [ "$h" = "$help" ]; then
		ok "$label -h prints --help's text"
	else
		bad "$label -h: [$(printf '%s' "$h" | head -n 2)] is not --help's text"
	fi
}
same_as_help apexx-bench "$bench"
for sub in compare ab history; do same_as_help "apexx-bench $sub" "$bench" "$sub"; done
same_as_help apexx-info "$info"
exporter=$s/tools/export_ff_weights.py
if [ -n "${APEXX_TEST_PYTHON:-}" ]; then
	out=$("$APEXX_TEST_PYTHON" "$exporter" -h 2>&1) && printf '%s' "$out" | grep -q -- '--prefix' &&
		ok "export_ff_weights.py -h prints its usage" || bad "export_ff_weights.py -h: [$(printf '%s' "$out" | head -n 2)]"
fi

if { "$bench" --help && "$bench" ab --help && "$bench" history --help; } >"$t/bench-help" 2>&1; then
	compare_short apexx-bench "$t/bench-help" "$b/docs/apexx-bench.1"
	long_flags <"$t/bench-help" >"$t/bench-flags"
	compare_flags apexx-bench "$t/bench-flags" "$b/docs/apexx-bench.1" 40
else
	bad "apexx-bench --help (or ab/history --help) failed: $(tail -n 2 "$t/bench-help")"
fi
if "$info" --help >"$t/info-help" 2>&1; then
	long_flags <"$t/info-help" >"$t/info-flags"
	compare_short apexx-info "$t/info-help" "$b/docs/apexx-info.1"
	compare_flags apexx-info "$t/info-flags" "$b/docs/apexx-info.1" 5
	extra=$(page_text "$b/docs/apexx.ini.5" | long_flags | comm -13 "$t/info-flags" - | tr '\n' ' ')
	[ -z "$extra" ] && ok "apexx.ini.5 names only flags apexx-info --help lists" ||
		bad "apexx.ini.5 names flags apexx-info --help does not list: [$extra]"
else
	bad "apexx-info --help failed: $(tail -n 2 "$t/info-help")"
fi

# the report schema: what apexx-bench writes against what the docs say
if "$bench" --backends cpu --ops reference --iters 1 --warmup 0 --repetitions 1 \
	--parity off --quiet --output-json "$t/report.json" >"$t/bench.out" 2>&1; then
	minor=$(tr -d ' \t\n' <"$t/report.json" | sed -n 's/.*"schema_version":{"major":1,"minor":\([0-9]*\)}.*/\1/p')
	if [ -z "$minor" ]; then
		bad "no schema_version {major 1, minor N} in the report"
	else
		ok "apexx-bench writes schema 1.$minor"
		for f in "$s/docs/report.md" "$b/docs/apexx-bench.1"; do
			# the examples' schema_version, REPORT's {major 1, minor N}, and
			# the pages' opening "JSON (schema 1.N," / "JSON file, schema 1.N,"
			said=$(grep -oE '"minor": [0-9]+|\{major 1, minor [0-9]+\}|JSON (file, |\()schema 1\.[0-9]+,' "$f" |
				sed 's/,$//; s/}$//' | grep -oE '[0-9]+$' | sort -u | tr '\n' ' ')
			case $f in *report.md) what="the report's, the baseline's and the A/B's" ;; *) what="REPORT's and the baseline's" ;; esac
			[ "$said" = "$minor " ] && ok "$(basename "$f"): $what schema is 1.$minor" ||
				bad "$(basename "$f") states minor [$said] for what is written as 1.$minor"
		done
	fi
else
	bad "apexx-bench's reference run failed: $(tail -n 3 "$t/bench.out")"
fi
exit $fail
