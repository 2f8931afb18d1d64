#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The README's quick start as tools/fresh-machine-check reads it: two
# commands in "## Quick start", the first installing packages with apt-get;
# .ci/run installs that same list (read through the tool, so the two cannot
# drift) and runs the fresh-root check; README's with a broken quick start
# section are refused with a message. The fresh-root run itself needs root
# and the network: .ci/run runs it, not make check.
set -u
s=${APEXX_SRCDIR:?run under make check}
tool=$s/tools/fresh-machine-check
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

n=$("$tool" --print-commands | wc -l)
[ "$("$tool" --print-commands | tail -n 1)" = "make check" ] &&
	ok "the second command is [make check]" || bad "the second command is not [make check]"
[ "$n" -ge 2 ] && ok "two commands ($n lines)" || bad "[$n] lines of commands"
pk=$("$tool" --print-packages) || bad "--print-packages failed"
echo "packages: $(echo $pk)"
for p in $pk; do
	echo "$p" | grep -Eq '^[a-z0-9][a-z0-9+.-]+$' || bad "[$p] is not a Debian package name"
done
# what ./configure cannot build without (the rest is optional and skips)
for p in build-essential libtool libinih-dev libcjson-dev check; do
	echo " $(echo $pk) " | grep -q " $p " || bad "the quick start does not install [$p]"
done

if [ -f "$s/.ci/run" ]; then
	grep -q '^quickstart_packages=$(tools/fresh-machine-check --print-packages)$' "$s/.ci/run" &&
		grep -q 'apt-get install .*$quickstart_packages' "$s/.ci/run" &&
		ok ".ci/run installs the README's package list" ||
		bad ".ci/run does not install the list from tools/fresh-machine-check --print-packages"
	grep -Eq '^[^#]*tools/fresh-machine-check( |$)' "$s/.ci/run" &&
		ok ".ci/run runs the fresh-root check" || bad ".ci/run does not run tools/fresh-machine-check"
else
	echo "note: no .ci/run in $s (not checked)"
fi

t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
refuse() { # name, README text, expected message part
	printf "$2" >"$t/README.md"
	if out=$("$tool" --print-commands --readme "$t/README.md" 2>&1); then
		bad "$1: accepted"
	else
		case $out in *"$3"*) ok "$1: $out" ;; *) bad "$1: message [$out]" ;; esac
	fi
}
refuse "one block" '## Quick start\n```sh\nmake\n```\n## Next\n```sh\nmake check\n```\n' 'holds [1]'
refuse "unterminated" '## Quick start\n```sh\nmake\n```\n```sh\nmake check\n' 'unterminated'
refuse "no section" '# apexx\n```sh\nmake\n```\n```sh\nmake check\n```\n' 'holds [0]'
refuse "empty block" '## Quick start\n```sh\n```\n```sh\nmake check\n```\n' 'two non-empty'
printf '## Quick start\n```sh\nmake\n```\n```sh\nmake check\n```\n' >"$t/README.md"
"$tool" --print-packages --readme "$t/README.md" >/dev/null 2>&1 &&
	bad "no apt-get install: accepted" || ok "no apt-get install: refused"
exit $fail
