#!/usr/bin/env python3
"""Runs the apexx Python tests (python/tests/test_*.py) and prints one line
per test, then 'N passed, N failed, N skipped'. Exit 0 pass, 1 fail, 77
skipped (no NumPy, or the package cannot be imported). `make check` runs it
with PYTHONPATH at the build tree's package; `-k WORD` selects tests."""
import os
import sys
import time
import unittest

HERE = os.environ.get("APEXX_PY_TESTS") or os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main(argv):
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
    for name in names:
        suite.addTests(loader.loadTestsFromName(name))

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

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            print(f"SKIP {test.id()}: {reason}", flush=True)

    result = Result()
    suite.run(result)
    failed = len(result.failures) + len(result.errors)
    print(f"{result.passed} passed, {failed} failed, {len(result.skipped)} skipped")
    if failed:
        return 1
    return 0 if result.passed else 77


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
