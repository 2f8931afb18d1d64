# SPDX-License-Identifier: Apache-2.0
"""The type stubs under a type checker (mypy --strict, Debian: python3-mypy;
skipped without it): the package's stubs check clean, and a program using
apexx on NumPy arrays gets NumPy arrays back, FFStats from
ff_infer(stats=True), and an error on exactly the lines marked "# E" (a
str for a tensor, a str for an int, an unknown validate mode, weights=None,
a float stream). torch.Tensor in, torch.Tensor out is checked by hand
(mypy reads all of torch: a minute; docs/python.md, Signatures and types)."""
import os
import re
import tempfile
import unittest

import apexx
from apexx_test import TestCase

USAGE = '''\
import numpy as np
import numpy.typing as npt
import apexx

ctx = apexx.Context()
f: npt.NDArray[np.float32] = np.zeros((1, 1, 8, 8), np.float32)
i = np.zeros((1, 1), np.int32)
packed = ctx.tilepack(f, i, tile=8)
reveal_type(packed)
out, state = ctx.tilessm_scan(f, f, f, f, f)
reveal_type(state)
h, d, a = ctx.ff_infer(f, f, weights=ctx.ff_weights_seeded(8))
h2, d2, a2, st = ctx.ff_infer(f, f, weights=ctx.ff_weights_seeded(8), stats=True)
reveal_type(st["selected_l0"])
reveal_type(apexx.gather(f, 0, i))
reveal_type(ctx.explain("tilepack", f, i)["backend"])
reveal_type(apexx.backends())
ctx.tilepack("features", i)  # E
ctx.tilepack(f, i, tile="8")  # E
ctx.tilepack(f, i, validate="lazy")  # E
ctx.ff_infer(f, f, weights=None)  # E
ctx.sync(stream=3.5)  # E
'''
NDARRAY_F32 = "numpy.ndarray[Any, numpy.dtype[numpy.floating[numpy._typing._32Bit]]]"
REVEALED = {9: NDARRAY_F32, 11: NDARRAY_F32, 14: "builtins.list[builtins.int]",
            15: NDARRAY_F32, 16: "Any", 17: "builtins.list[builtins.dict[builtins.str, builtins.str]]"}


class StubTypes(TestCase):
    @classmethod
    def setUpClass(cls):
        if "san" in os.environ.get("LD_PRELOAD", ""):
            raise unittest.SkipTest("a sanitizer build (its runtime preloaded): mypy is not the "
                                    "code under test, the plain build runs it")
        try:
            from mypy import api
        except ImportError:
            raise unittest.SkipTest("no mypy for this Python (Debian: python3-mypy): the stubs "
                                    "are not type-checked")
        cls.api = api
        cls.tmp = tempfile.TemporaryDirectory()
        cls.env = {"MYPYPATH": os.path.dirname(os.path.dirname(apexx.__file__))}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def mypy(self, *args):
        saved = os.environ.get("MYPYPATH")
        os.environ.update(self.env)
        try:
            out, err, status = self.api.run(["--strict", "--no-error-summary", "--cache-dir",
                                             os.path.join(self.tmp.name, "cache"), *args])
        finally:
            if saved is None:
                os.environ.pop("MYPYPATH", None)
            else:
                os.environ["MYPYPATH"] = saved
        return out + err, status

    def test_stubs_check_clean(self):
        # apexx.torch's stub imports torch, which mypy would read whole
        out, status = self.mypy("-m", "apexx", "-m", "apexx._apexx")
        self.assertEqual(status, 0, out)

    def test_usage_types(self):
        path = os.path.join(self.tmp.name, "usage.py")
        with open(path, "w") as f:
            f.write(USAGE)
        out, _ = self.mypy(path)
        marked = {n for n, line in enumerate(USAGE.splitlines(), 1) if line.endswith("# E")}
        errors = {int(m[1]) for m in re.finditer(r"usage\.py:(\d+): error:", out)}
        self.assertEqual(errors, marked, out)
        revealed = {int(m[1]): m[2] for m in
                    re.finditer(r'usage\.py:(\d+): note: Revealed type is "(.*)"', out)}
        self.assertEqual(revealed, REVEALED, out)
