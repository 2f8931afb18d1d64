#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The Python package as pip installs it (python/setup.py): `make install
# DESTDIR=STAGE`, a fresh venv of the configured Python made with
# --system-site-packages (its setuptools, Debian's wheel and numpy), then
# `pip install --no-build-isolation` of a copy of python/ offline, with
# pkg-config pointed at the staged apexx.pc. The installed distribution
# must carry its metadata (name, the project's version, Apache-2.0, a
# dist-info pip lists), be imported from the venv (not from a package
# installed on this machine), load the staged libapexx and run an op
# whose result is checked; pip uninstall removes it. Refusals: no apexx.pc
# found, a tree whose version differs from the library's, a venv without
# wheel. Skips (77) without venv/pip, without wheel, in a sanitizer build
# and without a shared libapexx.
set -u
b=${APEXX_BUILDDIR:?run under make check}
s=${APEXX_SRCDIR:?run under make check}
py=${APEXX_TEST_PYTHON:-}
version=${APEXX_TEST_VERSION:?}
prefix=${APEXX_TEST_PREFIX:?}
libdir=${APEXX_TEST_LIBDIR:?}
if [ -z "$py" ] || [ ! -f "$b/python/_apexx.la" ]; then
	echo "SKIP: no Python package in this build (configure's summary says why: no Python with headers, no dlpack/dlpack.h, or --disable-python)"
	exit 77
fi
if [ -n "${APEXX_TEST_SANITIZE_FLAGS:-}" ]; then
	echo "SKIP: a sanitizer build: the extension pip compiles is not instrumented while libapexx is (the plain build checks pip)"
	exit 77
fi
fail=0
ok() { printf 'ok: %s\n' "$1"; }
bad() { printf 'FAIL: %s\n' "$1"; fail=1; }
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT

if ! "$py" -m venv --system-site-packages "$t/venv" >"$t/venv.log" 2>&1; then
	echo "SKIP: $py -m venv failed (Debian: python3-venv): $(tail -n 3 "$t/venv.log")"
	exit 77
fi
vpy=$t/venv/bin/python
if ! "$vpy" -m pip --version >/dev/null 2>&1; then
	echo "SKIP: the venv has no pip (Debian: python3-venv brings it)"
	exit 77
fi
if ! "$vpy" -c 'import setuptools, wheel' 2>/dev/null; then
	echo "SKIP: the venv lacks setuptools or wheel (Debian: python3-setuptools, python3-wheel)"
	exit 77
fi
"$vpy" -m pip --version
# offline: nothing comes from an index, and no configuration of this
# machine's pip points elsewhere
PIP_NO_INDEX=1 PIP_FIND_LINKS= PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
PYTHONNOUSERSITE=1
export PIP_NO_INDEX PIP_FIND_LINKS PIP_CONFIG_FILE PIP_DISABLE_PIP_VERSION_CHECK PYTHONNOUSERSITE

stage=$t/stage
if ! ${APEXX_TEST_MAKE:-make} -C "$b" install DESTDIR="$stage" >"$t/install.log" 2>&1; then
	bad "make install DESTDIR=$stage failed: $(tail -n 5 "$t/install.log")"
	exit 1
fi
if [ ! -e "$stage$libdir/libapexx.so" ]; then
	echo "SKIP: no shared libapexx in [$stage$libdir] (--disable-shared): the extension links the shared library"
	exit 77
fi
# the package's sources as the tarball has them (the source tree may be
# read-only: pip builds in the directory it is given)
mkdir -p "$t/src/python/apexx"
cp "$s/configure.ac" "$t/src/" &&
	cp "$s/python/setup.py" "$s/python/pyproject.toml" "$t/src/python/" &&
	cp "$s"/python/apexx/*.py "$s"/python/apexx/*.pyi "$s"/python/apexx/*.c \
		"$s"/python/apexx/*.h "$s/python/apexx/py.typed" "$t/src/python/apexx/" || exit 1

# pip_install LOG [env assignments]: pip install --no-build-isolation of
# the copy, with pkg-config at the staged tree unless the caller says
pip_install() {
	log=$1
	shift
	env PKG_CONFIG_PATH="$stage$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$stage" "$@" \
		"$vpy" -m pip install --no-build-isolation "$t/src/python" >"$t/$log" 2>&1
}
# refused LOG MESSAGE WHY: the install failed with MESSAGE and left no apexx
refused() {
	if grep -q "$2" "$t/$1"; then
		ok "refused $3: $(grep -m 1 -o "apexx setup.py: .*" "$t/$1" | cut -c 1-150)"
	else
		bad "$3: no [$2] in pip's output: $(tail -n 12 "$t/$1")"
	fi
	"$vpy" -m pip show apexx >/dev/null 2>&1 && bad "$3: apexx is installed after the refusal"
}

if pip_install nopc.log PKG_CONFIG_LIBDIR="$t/nowhere" PKG_CONFIG_PATH=; then
	bad "pip install succeeded with no apexx.pc to find"
else
	refused nopc.log "pkg-config finds no apexx.pc" "without an apexx.pc"
fi
sed "s/^AC_INIT(\[apexx\], \[[^]]*\]/AC_INIT([apexx], [$version.99]/" "$s/configure.ac" >"$t/src/configure.ac"
if pip_install skew.log; then
	bad "pip install succeeded for a tree of another version than the library's"
else
	refused skew.log "this tree is apexx $version.99 (configure.ac) but pkg-config finds libapexx $version" \
		"a tree of another version"
fi
cp "$s/configure.ac" "$t/src/"

if ! pip_install install.log; then
	bad "pip install --no-build-isolation failed: $(tail -n 20 "$t/install.log")"
	exit 1
fi
ok "pip install --no-build-isolation $t/src/python (offline, against the staged apexx.pc)"
"$vpy" -m pip show -f apexx >"$t/show.log" 2>&1 || bad "pip show apexx failed: $(cat "$t/show.log")"
field() { sed -n "s/^$1: //p" "$t/show.log"; }
[ "$(field Name)" = apexx ] && ok "pip show: Name: apexx" || bad "pip show: Name [$(field Name)]"
[ "$(field Version)" = "$version" ] && ok "pip show: Version: $version (the project's)" ||
	bad "pip show: Version [$(field Version)], expected $version"
[ "$(field License)" = Apache-2.0 ] && ok "pip show: License: Apache-2.0" ||
	bad "pip show: License [$(field License)]"
site=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
[ "$(field Location)" = "$site" ] && ok "installed in the venv ($site)" ||
	bad "pip show: Location [$(field Location)], expected $site"
for f in "apexx-$version.dist-info/METADATA" apexx/__init__.py apexx/torch.py apexx/onnx.py \
	apexx/__init__.pyi apexx/_apexx.pyi apexx/torch.pyi apexx/py.typed; do
	grep -qx "  $f" "$t/show.log" && [ -f "$site/$f" ] || bad "$f is not installed (pip show -f: $(grep -c '^  ' "$t/show.log") files)"
done
grep -q "^  apexx/_apexx\..*so$" "$t/show.log" && ok "the extension apexx/_apexx*.so, the stubs and py.typed are installed" ||
	bad "no apexx/_apexx*.so in pip show -f"
grep -q '\.[ch]$' "$t/show.log" && bad "C sources installed: $(grep '\.[ch]$' "$t/show.log")"
grep -qx 'Classifier: License :: OSI Approved :: Apache Software License' \
	"$site/apexx-$version.dist-info/METADATA" && ok "METADATA: the license classifier" ||
	bad "METADATA has no license classifier"
"$vpy" -m pip list 2>/dev/null | grep -q "^apexx  *$version\$" && ok "pip list: apexx $version" ||
	bad "pip list does not list apexx $version"
ext=$(ls "$site"/apexx/_apexx*.so 2>/dev/null | head -n 1)
run_path=$(readelf -d "$ext" 2>/dev/null | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]/\2/p')
case $libdir in
/lib | /usr/lib | /lib64 | /usr/lib64 | /lib/*-linux-* | /usr/lib/*-linux-*) want= ;;
*) want=$libdir ;;
esac
[ "$run_path" = "$want" ] && ok "the extension's run path: [$run_path] (the installed libdir, not the stage)" ||
	bad "the extension's run path is [$run_path], expected [$want]"

# from the venv, in another directory: the staged library and backends
cfg=$(find "$stage" -name apexx.ini | head -n 1)
if ! out=$(cd "$t" && env LD_LIBRARY_PATH="$stage$libdir" APEXX_BACKEND_DIR="$stage${APEXX_TEST_PKGLIBDIR:?}" \
	APEXX_CONFIG="$cfg" PYTHONPATH= "$vpy" - "$site" "$stage" <<'EOF' 2>&1
import sys
import numpy as np
import apexx
site, stage = sys.argv[1], sys.argv[2]
assert apexx.__file__.startswith(site + "/"), f"apexx imported from {apexx.__file__}, not {site}"
maps = [line.split()[-1] for line in open("/proc/self/maps") if "libapexx.so" in line]
assert maps and all(m.startswith(stage + "/") for m in maps), f"libapexx loaded from {maps}"
features = np.arange(2 * 3 * 16 * 16, dtype=np.float32).reshape(2, 3, 16, 16)
idx = np.array([[0, 3], [2, 1]], dtype=np.int32)
packed = apexx.tilepack(features, idx, tile=8)
want = np.stack([np.stack([features[b, :, (k // 2) * 8:(k // 2) * 8 + 8, (k % 2) * 8:(k % 2) * 8 + 8]
                           for k in idx[b]]) for b in range(2)])
assert packed.shape == (2, 2, 3, 8, 8) and np.array_equal(packed, want), "tilepack differs"
print(f"apexx {apexx.__version__} from {apexx.__file__}, libapexx {apexx.version()} from {maps[0]}")
print("tilepack", packed.shape, "on", apexx.explain("tilepack", features, idx, tile=8)["backend"])
EOF
); then
	bad "import apexx and tilepack from the venv failed: $out"
else
	printf '%s\n' "$out" | sed 's/^/  /'
	ok "import apexx from the venv, the staged libapexx, tilepack equals the NumPy slices"
fi

if "$vpy" -m pip uninstall -y apexx >"$t/uninstall.log" 2>&1 && [ ! -e "$site/apexx" ] &&
	[ ! -e "$site/apexx-$version.dist-info" ]; then
	ok "pip uninstall -y apexx removes the package and its dist-info"
else
	bad "pip uninstall: $(tail -n 3 "$t/uninstall.log"); left: $(ls "$site" | grep apexx)"
fi

# a venv without wheel: refused with what to do
if "$py" -m venv "$t/bare" >/dev/null 2>&1 && ! "$t/bare/bin/python" -c 'import wheel' 2>/dev/null; then
	vpy=$t/bare/bin/python
	if pip_install bare.log; then
		bad "pip install --no-build-isolation succeeded in a venv without wheel"
	else
		refused bare.log "needs the wheel package" "a venv without wheel"
	fi
fi
exit $fail
