#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs the apexx Python tests (python/tests/test_*.py) and prints one line
per test, then 'N passed, N failed, N skipped'. Exit 0 pass, 1 fail, 77
skipped (no NumPy, or the package cannot be imported). `make check` runs it
with PYTHONPATH at the build tree's package; `-k WORD` selects tests;
`--without torch,cupy` makes those modules unimportable for the run, as on a
machine without them (every test that needs one must then skip, saying so)."""
import importlib.abc
import os
import sys
import time
import traceback
import unittest

HERE = os.environ.get("APEXX_PY_TESTS") or os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


class _Without(importlib.abc.MetaPathFinder):
    """Refuses the named top-level modules (and their submodules) as if absent."""

    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named '{fullname}' (--without)", name=fullname)
        return None


def main(argv):
    if "--without" in argv:
        names = [n for n in argv[argv.index("--without") + 1].split(",") if n]
        for n in names:
            if n in sys.modules:
                print(f"run_tests.py: --without {n}: already imported", file=sys.stderr)
                return 1
        sys.meta_path.insert(0, _Without(names))
        print(f"without: {', '.join(names)} (imports refused for this run)")
    try:
        import numpy  # noqa: F401
    except ImportError:
        print(f"SKIP: NumPy is not installed for {sys.executable} (Debian: python3-numpy)")
        return 77
    try:
        import apexx
    except ImportError as e:
        print(f"SKIP: cannot import apexx ({e}); build it (./configure finds a Python with headers)")
        return 77
    pattern = argv[argv.index("-k") + 1] if "-k" in argv else None
    print(f"apexx {apexx.version()} from {os.path.dirname(apexx.__file__)}; "
          f"Python {sys.version.split()[0]} ({sys.executable}), NumPy {numpy.__version__}")
    loader = unittest.TestLoader()
    if pattern:
        loader.testNamePatterns = [f"*{pattern}*"]
    suite = unittest.TestSuite()
    names = sorted(f[:-3] for f in os.listdir(HERE) if f.startswith("test_") and f.endswith(".py"))
    broken = 0
    for name in names:
        # a module that cannot even be imported is a failure of its own, and
        # the other modules still run
        try:
            suite.addTests(loader.loadTestsFromName(name))
        except Exception:  # noqa: BLE001 (any error at import is the module's failure)
            broken += 1
            print(f"FAIL {name} (import)\n{traceback.format_exc()}", flush=True)

    class Result(unittest.TestResult):
        def __init__(self):
            super().__init__()
            self.passed = 0

        def startTest(self, test):
            super().startTest(test)
            self.t0 = time.monotonic()

        def addSuccess(self, test):
            self.passed += 1
            print(f"PASS {test.id()} ({time.monotonic() - self.t0:.2f} s)", flush=True)

        def addFailure(self, test, err):
            super().addFailure(test, err)
            print(f"FAIL {test.id()}\n{self._exc_info_to_string(err, test)}", flush=True)

        def addError(self, test, err):
            super().addError(test, err)
            print(f"FAIL {test.id()} (error)\n{self._exc_info_to_string(err, test)}", flush=True)

        def addSubTest(self, test, subtest, err):
            # a failed subTest counts as its test's failure: print it as one
            super().addSubTest(test, subtest, err)
            if err is not None:
                print(f"FAIL {subtest.id()}\n{self._exc_info_to_string(err, test)}", flush=True)

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            print(f"SKIP {test.id()}: {reason}", flush=True)

    result = Result()
    suite.run(result)
    failed = len(result.failures) + len(result.errors) + broken
    print(f"{result.passed} passed, {failed} failed, {len(result.skipped)} skipped")
    if failed:
        return 1
    return 0 if result.passed else 77


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
