# SPDX-License-Identifier: Apache-2.0
"""Shared helpers of the apexx Python tests: one context on the build
tree's configuration ($APEXX_CONFIG, set by make check), a seeded NumPy
generator drawn afresh per test, tolerances of docs/ops.md, Rounding and parity."""
import os
import unittest

import numpy as np

import apexx

_CTX = None


def ctx():
    global _CTX
    if _CTX is None:
        _CTX = apexx.Context()
    return _CTX


def libapexx_in_build(build):
    """The build tree's libapexx shared object by its soname (libtool's dlname in
    libapexx.la: libapexx.so.<current - age>)."""
    with open(os.path.join(build, "libapexx", "libapexx.la")) as la:
        for line in la:
            if line.startswith("dlname="):
                return os.path.join(build, "libapexx", ".libs", line.split("=", 1)[1].strip("'\"\n"))
    raise RuntimeError(f"{build}/libapexx/libapexx.la names no dlname")


def rng(test):
    """A generator seeded from the test's name and $APEXX_TEST_SEED (new
    data per run when the variable changes)."""
    seed = int(os.environ.get("APEXX_TEST_SEED", "12345"))
    return np.random.default_rng([seed, sum(map(ord, test.id()))])


TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float16): 2e-3}


def assert_close(test, got, want, mag, dtype, extra_ulps=0, msg=""):
    """|got - want| <= atol + rtol*mag (docs/ops.md, Rounding and parity), want in
    float64 on the storage-rounded inputs; extra_ulps adds storage ulps of
    want (transcendentals)."""
    tol = TOL[np.dtype(dtype)]
    got = np.asarray(got, dtype=np.float64)
    bound = tol + tol * np.abs(mag)
    if extra_ulps:
        bound = bound + extra_ulps * np.abs(np.spacing(np.asarray(want, dtype=dtype))).astype(np.float64)
    err = np.abs(got - want)
    bad = ~(err <= bound)
    if bad.any():
        i = np.argwhere(bad)[0]
        test.fail(f"{msg} {bad.sum()} of {bad.size} values off; first at {tuple(i)}: "
                  f"got {got[tuple(i)]!r}, want {want[tuple(i)]!r}, bound {bound[tuple(i)] if np.ndim(bound) else bound!r}")


class TestCase(unittest.TestCase):
    def setUp(self):
        self.ctx = ctx()
        self.rng = rng(self)

    def assertRaisesApexx(self, cls, *words):
        """Context manager: raises cls whose message holds every word."""
        test = self

        class _Check:
            def __enter__(self):
                return self

            def __exit__(self, et, ev, tb):
                if et is None:
                    test.fail(f"{cls.__name__} not raised")
                if not issubclass(et, cls):
                    return False
                for w in words:
                    test.assertIn(w, str(ev), f"message {str(ev)!r} lacks {w!r}")
                self.exception = ev
                return True
        return _Check()
