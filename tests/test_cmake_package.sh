#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The CMake package (cmake/local.mk) as a CMake user meets it: `make install
# DESTDIR=STAGE`, then tests/cmake-consumer (find_package(apexx CONFIG
# REQUIRED), apexx::apexx) configured with CMAKE_PREFIX_PATH at the staged
# prefix, built and run: it must find the staged package (not one
# installed on this machine), compile against its header, link and load
# its libapexx. The version file: 0.M meets requests for 0.M and 0.M.0,
# not 0.(M+1) or 1.0; a range holding the version is met. A copy of the
# staged tree moved elsewhere still works (paths relative to the package
# file). Skips (77) without cmake.
set -u
b=${APEXX_BUILDDIR:?run under make check}
s=${APEXX_SRCDIR:?run under make check}
cmake=${CMAKE:-cmake}
if ! command -v "$cmake" >/dev/null 2>&1; then
	echo "SKIP: no cmake on PATH (Debian: cmake): the CMake package is not checked"
	exit 77
fi
"$cmake" --version | head -n 1
fail=0
ok() { printf 'ok: %s\n' "$1"; }
bad() { printf 'FAIL: %s\n' "$1"; fail=1; }
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
version=${APEXX_TEST_VERSION:?}
prefix=${APEXX_TEST_PREFIX:?}
libdir=${APEXX_TEST_LIBDIR:?}

stage=$t/stage
if ! ${APEXX_TEST_MAKE:-make} -C "$b" install DESTDIR="$stage" >"$t/install.log" 2>&1; then
	bad "make install DESTDIR=$stage failed: $(tail -n 5 "$t/install.log")"
	exit 1
fi
pkg=$stage$libdir/cmake/apexx
for f in apexx-config.cmake apexx-config-version.cmake; do
	if [ ! -s "$pkg/$f" ]; then
		bad "$f is not installed in [$pkg]"
	elif left=$(grep -n '@[A-Za-z_][A-Za-z0-9_]*@' "$pkg/$f"); then
		bad "$f: unsubstituted: $left"
	else
		ok "$f installed in \$(libdir)/cmake/apexx"
	fi
done
[ $fail -eq 0 ] || exit 1

# configure NAME REQUEST TOP [cmake arguments]: the consumer in $t/NAME
configure() {
	name=$1 request=$2 top=$3
	shift 3
	"$cmake" -S "$s/tests/cmake-consumer" -B "$t/$name" -DCMAKE_PREFIX_PATH="$top" \
		-DAPEXX_REQUEST="$request" -DCMAKE_C_COMPILER="${APEXX_TEST_CC:-cc}" \
		-DCMAKE_C_FLAGS="${APEXX_TEST_SANITIZE_FLAGS:-}" \
		-DCMAKE_EXE_LINKER_FLAGS="${APEXX_TEST_SANITIZE_FLAGS:-}" "$@" >"$t/$name.log" 2>&1
}
# build_and_run NAME TOP: builds the configured consumer, runs it and checks
# that it found and loaded the package under TOP
build_and_run() {
	name=$1 top=$2
	found=$(sed -n "s/^-- apexx \(.*\) from \(.*\); backends in \(.*\); license \(.*\)$/\1|\2|\3|\4/p" "$t/$name.log")
	[ "$found" = "$version|$top${libdir#"$prefix"}/cmake/apexx|$top${APEXX_TEST_PKGLIBDIR#"$prefix"}|Apache-2.0" ] &&
		ok "$name: found apexx $version in $top" ||
		bad "$name: found [$found], expected apexx $version from $top${libdir#"$prefix"}/cmake/apexx"
	if ! "$cmake" --build "$t/$name" --verbose >"$t/$name.build.log" 2>&1; then
		bad "$name: the consumer does not build: $(tail -n 8 "$t/$name.build.log")"
		return
	fi
	grep -q -- "-I$top/include\|-isystem $top/include" "$t/$name.build.log" &&
		ok "$name: compiled with $top's include directory" ||
		bad "$name: the compile line has no -I/-isystem $top/include: $(grep -m 1 consumer.c "$t/$name.build.log")"
	if ! out=$("$t/$name/consumer" 2>&1); then
		bad "$name: the consumer failed: $out"
		return
	fi
	printf '%s\n' "$out" | sed 's/^/  /'
	[ "$(printf '%s\n' "$out" | sed -n 's/^version //p')" = "$version" ] &&
		ok "$name: libapexx $version" || bad "$name: the consumer reports another version"
	[ "$(printf '%s\n' "$out" | sed -n 's/^status //p')" = "APX_OK" ] &&
		ok "$name: apx_status_name(APX_OK) = APX_OK" || bad "$name: apx_status_name(APX_OK) is not APX_OK"
	lib=$(printf '%s\n' "$out" | sed -n 's/^library //p')
	case $(readlink -f "$lib") in
	"$(readlink -f "$top")"/*) ok "$name: loaded $lib" ;;
	*) bad "$name: loaded [$lib], not a libapexx under $top" ;;
	esac
}

top=$stage$prefix
if configure staged "${version%.*}" "$top"; then
	ok "find_package(apexx ${version%.*}) configures"
	build_and_run staged "$top"
else
	bad "find_package(apexx) against the staged install failed: $(tail -n 12 "$t/staged.log")"
fi

# what the version file accepts (0.x: the same minor)
major=${version%%.*} rest=${version#*.}
minor=${rest%%.*}
accept() { # request, expected (yes|no), why
	if configure "v$1" "$1" "$top" -DAPEXX_FIND_ONLY=ON; then got=yes; else got=no; fi
	[ "$got" = "$2" ] && ok "find_package(apexx $1): $2 ($3)" ||
		bad "find_package(apexx $1): [$got], expected $2 ($3): $(grep -m 3 -i 'version\|error' "$t/v$1.log")"
}
if [ "$major" = 0 ]; then
	accept "0.$minor" yes "the same 0.x series"
	accept "0.$minor.0" yes "the same 0.x series, an older patch"
	accept "0.$((minor + 1))" no "a newer 0.x may change the ABI"
	[ "$minor" -gt 0 ] && accept "0.$((minor - 1))" no "an older 0.x may differ"
	accept "1.0" no "another major"
	accept "0.$minor...<0.$((minor + 2))" yes "a range holding $version"
	accept "0.$((minor + 1))...<1.0" no "a range above $version"
else
	accept "$major.0" yes "the same major"
	accept "$((major + 1)).0" no "another major"
fi
if [ "$major" = 0 ]; then
	refused=$t/v0.$((minor + 1)).log
	grep -q "version: $version" "$refused" &&
		ok "the refusal names the version found ($(grep -m 1 -o "[^ ]*apexx-config.cmake, version: $version" "$refused"))" ||
		bad "the refusal does not name $version: $(tail -n 8 "$refused")"
fi

# relocated: the staged tree moved; the package finds itself
moved=$t/moved
mkdir -p "$moved" && cp -a "$stage$prefix/." "$moved/" || { bad "cannot copy the staged tree"; exit 1; }
rm -rf "$stage"
if configure moved "" "$moved"; then
	ok "find_package(apexx) with no version in a moved tree configures"
	build_and_run moved "$moved"
else
	bad "find_package(apexx) in the moved tree failed: $(tail -n 12 "$t/moved.log")"
fi

# a package file naming a library that is gone: a clear refusal
rm -f "$moved${libdir#"$prefix"}"/libapexx.so*
if configure gone "" "$moved" -DAPEXX_FIND_ONLY=ON; then
	bad "find_package(apexx) succeeded without libapexx"
elif tr -s ' \n' '  ' <"$t/gone.log" | grep -q "names $moved${libdir#"$prefix"}/libapexx[^ ]*, which does not exist (reinstall apexx)"; then
	ok "a missing libapexx: $(tr -s ' \n' '  ' <"$t/gone.log" | grep -o 'names [^ ]*libapexx[^ ]*, which does not exist')"
else
	bad "a missing libapexx: no clear message: $(tail -n 12 "$t/gone.log")"
fi
exit $fail
