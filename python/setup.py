# SPDX-License-Identifier: Apache-2.0
"""The apexx Python package for pip: apexx/*.py, the type stubs and the
CPython extension apexx._apexx, built against the libapexx that pkg-config
finds (an installed one: `make install` first, or PKG_CONFIG_PATH at the
directory of its apexx.pc). Offline with the interpreter's own setuptools
and wheel::

    python3 -m venv --system-site-packages VENV
    VENV/bin/pip install --no-build-isolation ./python

The distribution's version is the installed libapexx's (its apexx.pc);
beside this tree's configure.ac a different version is refused, since the
binding's sources and the library's header must come from one release.
docs/python.md, Installing with pip. `make install` installs the same
package without pip (python/local.mk).
"""

import os
import re
import shlex
import subprocess
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_CONFIG = os.environ.get("PKG_CONFIG", "pkg-config")
# the dynamic linker's own directories: no run path is written for these
SYSTEM_LIBDIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")


def fail(message):
    sys.exit(f"apexx setup.py: {message}")


def pkg_config(*args):
    """pkg-config's answer about apexx, refusing a missing pkg-config or
    apexx.pc with what to do."""
    try:
        r = subprocess.run([PKG_CONFIG, *args, "apexx"], capture_output=True, text=True)
    except OSError as e:
        fail(f"cannot run [{PKG_CONFIG}] ({e.strerror}); it finds the installed libapexx "
             "(Debian: pkg-config)")
    if r.returncode != 0:
        fail("pkg-config finds no apexx.pc (" + (r.stderr.strip() or "no message") + "): "
             "install libapexx first (make install), or set PKG_CONFIG_PATH to the directory "
             "that holds its apexx.pc (PREFIX/lib/pkgconfig)")
    return r.stdout.strip()


def tree_version():
    """AC_INIT's version when this directory sits in an apexx source tree."""
    try:
        with open(os.path.join(HERE, os.pardir, "configure.ac"), encoding="utf-8") as f:
            m = re.search(r"AC_INIT\(\[apexx\],\s*\[([^\]]+)\]", f.read())
    except OSError:
        return None
    return m.group(1) if m else None


def is_system_libdir(path):
    path = os.path.normpath(path)
    return path in SYSTEM_LIBDIRS or os.path.dirname(path) in SYSTEM_LIBDIRS and \
        re.fullmatch(r"[a-z0-9_]+-linux-[a-z0-9_]+", os.path.basename(path)) is not None


# setuptools before 70.1 takes bdist_wheel (pip's build and its metadata)
# from the wheel package, which a venv made without --system-site-packages
# lacks
if {"bdist_wheel", "dist_info"} & set(sys.argv[1:]):
    try:
        import wheel  # noqa: F401
    except ImportError:
        fail(f"setuptools {__import__('setuptools').__version__} needs the wheel package to "
             "build a wheel and this environment has none: make the venv with "
             "--system-site-packages (Debian: python3-wheel), or install wheel into it")

version = pkg_config("--modversion")
if tree_version() not in (None, version):
    fail(f"this tree is apexx {tree_version()} (configure.ac) but pkg-config finds libapexx "
         f"{version} ({pkg_config('--variable=pcfiledir')}): install this tree's libapexx "
         "(make install) or point PKG_CONFIG_PATH at it")

flags = {opt: shlex.split(pkg_config(opt)) for opt in (
    "--cflags-only-I", "--cflags-only-other", "--libs-only-L", "--libs-only-l",
    "--libs-only-other")}
# The run path is the library's installed directory: pkg-config prefixes
# PKG_CONFIG_SYSROOT_DIR (a staged DESTDIR tree) to it, the installed
# package will not find the library there.
libdir = pkg_config("--variable=libdir")
sysroot = os.environ.get("PKG_CONFIG_SYSROOT_DIR", "").rstrip("/")
if sysroot and libdir.startswith(sysroot + "/"):
    libdir = libdir[len(sysroot):]
run_path = [] if is_system_libdir(libdir) else [libdir]

sources = ["_apexx.c", "errors.c", "call.c", "tensors.c", "ops.c", "context.c", "ff.c"]
extension = Extension(
    "apexx._apexx",
    sources=[os.path.join("apexx", f) for f in sources],
    depends=[os.path.join("apexx", "binding.h")],
    include_dirs=[f[2:] for f in flags["--cflags-only-I"]],
    library_dirs=[f[2:] for f in flags["--libs-only-L"]],
    libraries=[f[2:] for f in flags["--libs-only-l"]],
    runtime_library_dirs=run_path,
    # as python/local.mk builds it: only PyInit__apexx is exported
    extra_compile_args=flags["--cflags-only-other"] + [
        "-fvisibility=hidden", "-Wall", "-Wno-missing-field-initializers"],
    extra_link_args=flags["--libs-only-other"],
)

with open(os.path.join(HERE, "apexx", "__init__.py"), encoding="utf-8") as f:
    summary = re.search(r'"""(.*?)\n', f.read()).group(1)

setup(
    name="apexx",
    version=version,
    description=summary,
    long_description="The Python binding of libapexx " + version + " (docs/python.md).",
    long_description_content_type="text/plain",
    license="Apache-2.0",
    classifiers=[
        "License :: OSI Approved :: Apache Software License",
        "Programming Language :: C",
        "Programming Language :: Python :: 3",
        "Operating System :: POSIX :: Linux",
        "Typing :: Typed",
    ],
    python_requires=">=3.8",
    packages=["apexx"],
    package_data={"apexx": ["*.pyi", "py.typed"]},
    exclude_package_data={"apexx": ["*.c", "*.h"]},
    include_package_data=False,
    ext_modules=[extension],
    extras_require={"numpy": ["numpy"], "torch": ["torch"]},
    zip_safe=False,
)
