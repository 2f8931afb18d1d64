# SPDX-License-Identifier: Apache-2.0
"""No leaks over 10,000 calls: reference counts of the inputs and outputs
return to their values and tracemalloc's traced memory does not grow, on
success and on error paths, NumPy and (where installed) torch tensors."""
import sys
import tracemalloc

import numpy as np

import apexx
from apexx_test import TestCase

N = 10000
SLACK = 64 * 1024  # bytes of traced growth allowed (interning, caches)


class Refcount(TestCase):
    def run_loop(self, fn, objs):
        fn()  # warm caches
        before = [sys.getrefcount(o) for o in objs]
        tracemalloc.start()
        fn()
        snap0 = tracemalloc.get_traced_memory()[0]
        for _ in range(N):
            fn()
        grown = tracemalloc.get_traced_memory()[0] - snap0
        tracemalloc.stop()
        self.assertEqual([sys.getrefcount(o) for o in objs], before)
        self.assertLess(grown, SLACK, f"traced memory grew by {grown} bytes over {N} calls")

    def test_numpy(self):
        f = np.zeros((1, 2, 8, 8), np.float32)
        idx = np.array([[0, 3]], np.int32)
        out = np.zeros((1, 2, 2, 4, 4), np.float32)
        self.run_loop(lambda: self.ctx.tilepack(f, idx, 4, out), [f, idx, out])
        self.run_loop(lambda: self.ctx.tilepack(f, idx, 4), [f, idx])
        tok = np.zeros((1, 3, 2), np.float32)
        v = np.full(2, 0.5, np.float32)
        self.run_loop(lambda: self.ctx.tilessm_scan(tok, v, v, v, v, direction="bidirectional"),
                      [tok, v])

    def test_error_paths(self):
        f = np.zeros((1, 2, 8, 8), np.float32)
        bad = np.array([[0, 99]], np.int32)
        f64 = f.astype(np.float64)

        def call():
            for args in ((f, bad, 4), (f64, bad, 4), (f[..., ::2], bad, 4)):
                try:
                    self.ctx.tilepack(*args)
                except apexx.InvalidArgument:
                    pass
            try:
                self.ctx.tilepack(f, bad, 4, nope=1)
            except TypeError:
                pass
        self.run_loop(call, [f, bad, f64])

    def test_torch(self):
        try:
            import torch
        except ImportError:
            self.skipTest("torch is not installed for this Python")
        f = torch.zeros((1, 2, 8, 8))
        idx = torch.tensor([[0, 3]])
        out = torch.zeros((1, 2, 2, 4, 4))
        self.run_loop(lambda: self.ctx.tilepack(f, idx, 4, out), [f, idx, out])
        self.run_loop(lambda: self.ctx.tilepack(f, idx, 4), [f, idx])
