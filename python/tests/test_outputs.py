# SPDX-License-Identifier: Apache-2.0
"""Outputs of a call, given or made by the binding (docs/python.md, Use):
ff_infer's heavy, detail and alpha (and tilepack's out) made when not
given are tensors of the first input's library, on its device, in the
shape and dtype of the op, each with its own memory, exactly what
apexx._alloc (the allocation hook) makes; the binding makes plain torch
tensors and NumPy arrays itself and everything else through the hook.
Given outputs (torch, NumPy, mixed) are written and returned as the same
objects; bad ones are refused naming the argument. The keyword table:
keywords by identity and by value, unknown and repeated ones refused.
CUDA torch and CuPy cases skip without a CUDA device or CuPy."""
import sys
import unittest

import numpy as np

import apexx
from apexx_test import TestCase

try:
    import torch
except ImportError:
    torch = None
NO_TORCH = "torch is not installed for this Python"

C, H = 8, 32


def _cuda_ok(ctx):
    return (torch is not None and torch.cuda.is_available() and
            any(b["name"] == "cuda" and b["state"] == "ok" for b in ctx.backends()))


if torch is not None:
    class _MyTensor(torch.Tensor):
        """A torch.Tensor subclass of another module: the hook's rule
        (_lib_of: its module) picks its outputs' library."""


class Outputs(TestCase):
    def setUp(self):
        super().setUp()
        self.w = self.ctx.ff_weights_seeded(C, 3)
        self.kw = dict(weights=self.w, kmax_l0=2, kmax_l1=4)
        self.dense = self.rng.standard_normal((1, C, H, H)).astype(np.float32)
        self.util = self.rng.standard_normal((1, (H // 16) ** 2)).astype(np.float32)

    def tearDown(self):
        self.w.close()

    def shapes(self, dense):
        return [tuple(dense.shape), tuple(dense.shape), (dense.shape[0], 1) + tuple(dense.shape[2:])]

    def check_made(self, outs, dense, want_type, dtype, device=None):
        """Each output: want_type exactly, dtype, shape, device, contiguous,
        its own memory (no output shares another's or an input's)."""
        self.assertEqual(len(outs), 3)
        ptrs = set()
        for name, o, shape in zip(("heavy", "detail", "alpha"), outs, self.shapes(dense)):
            self.assertIs(type(o), want_type, name)
            self.assertEqual(tuple(o.shape), shape, name)
            self.assertEqual(o.dtype, dtype, name)
            if want_type is np.ndarray:
                self.assertTrue(o.flags.c_contiguous and o.flags.writeable and o.flags.owndata, name)
                ptrs.add(o.__array_interface__["data"][0])
            else:
                self.assertEqual(o.device, device if device is not None else dense.device, name)
                self.assertTrue(o.is_contiguous(), name)
                self.assertEqual(o.stride(), torch.empty(shape).stride(), name)
                self.assertFalse(o.requires_grad, name)
                self.assertIsNone(o._base, name)
                self.assertEqual(o.storage_offset(), 0, name)
                ptrs.add(o.data_ptr())
        in_ptr = (dense.__array_interface__["data"][0] if isinstance(dense, np.ndarray)
                  else dense.data_ptr())
        self.assertEqual(len(ptrs | {in_ptr}), 4, "outputs share memory")

    def test_numpy_made(self):
        for dt in (np.float32, np.float16):
            dense, util = self.dense.astype(dt), self.util.astype(dt)
            made = self.ctx.ff_infer(dense, util, **self.kw)
            self.check_made(made, dense, np.ndarray, np.dtype(dt))
            given = [np.full(s, np.nan, dt) for s in self.shapes(dense)]
            back = self.ctx.ff_infer(dense, util, heavy=given[0], detail=given[1], alpha=given[2],
                                     **self.kw)
            for g, b, m in zip(given, back, made):
                self.assertIs(b, g)
                np.testing.assert_array_equal(m, g)

    @unittest.skipIf(torch is None, NO_TORCH)
    def test_torch_made(self):
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            dense = torch.from_numpy(self.dense).to(dt)
            util = torch.from_numpy(self.util).to(dt)
            made = self.ctx.ff_infer(dense, util, **self.kw)
            self.check_made(made, dense, torch.Tensor, dt)
            given = [torch.full(s, float("nan"), dtype=dt) for s in self.shapes(dense)]
            back = self.ctx.ff_infer(dense, util, heavy=given[0], detail=given[1], alpha=given[2],
                                     **self.kw)
            for g, b, m in zip(given, back, made):
                self.assertIs(b, g)
                self.assertTrue(torch.equal(m, g), dt)
            # made again: new tensors each call, never the previous call's
            again = self.ctx.ff_infer(dense, util, **self.kw)
            self.assertFalse({a.data_ptr() for a in again} & {m.data_ptr() for m in made})
            # the binding keeps no reference to what it made or read
            refs = sys.getrefcount(dense), sys.getrefcount(util), sys.getrefcount(self.w)
            h, d, a = self.ctx.ff_infer(dense, util, **self.kw)
            self.assertEqual((sys.getrefcount(h), sys.getrefcount(d), sys.getrefcount(a)),
                             (2, 2, 2))
            self.assertEqual((sys.getrefcount(dense), sys.getrefcount(util),
                              sys.getrefcount(self.w)), refs)

    @unittest.skipIf(torch is None, NO_TORCH)
    def test_torch_made_from_autograd_and_mixed(self):
        dense = torch.from_numpy(self.dense).requires_grad_()
        util = torch.from_numpy(self.util)
        made = self.ctx.ff_infer(dense, util, **self.kw)
        self.check_made(made, dense.detach(), torch.Tensor, torch.float32)
        # NumPy outputs of a torch call (host memory both): written, returned as given
        given = [np.zeros(s, np.float32) for s in self.shapes(dense)]
        back = self.ctx.ff_infer(dense, util, heavy=given[0], detail=given[1], alpha=given[2],
                                 **self.kw)
        for g, b, m in zip(given, back, made):
            self.assertIs(b, g)
            np.testing.assert_array_equal(g, m.numpy())
        # one output given, the others made like the first input
        heavy = torch.empty(self.shapes(dense)[0])
        h, d, a = self.ctx.ff_infer(dense, util, heavy=heavy, **self.kw)
        self.assertIs(h, heavy)
        self.assertIs(type(d), torch.Tensor)
        self.assertIs(type(a), torch.Tensor)

    @unittest.skipIf(torch is None, NO_TORCH)
    def test_hook_rule_for_other_types(self):
        """A torch subclass (nn.Parameter, one of another module) is made
        by the hook, as apexx._alloc says: its library and device."""
        for like in (torch.nn.Parameter(torch.from_numpy(self.dense), requires_grad=False),
                     torch.from_numpy(self.dense).as_subclass(_MyTensor)):
            made = self.ctx.ff_infer(like, torch.from_numpy(self.util), **self.kw)
            for o, shape in zip(made, self.shapes(like)):
                want = apexx._alloc(like, shape, "float32")
                self.assertIs(type(o), type(want), type(like).__name__)
                self.assertEqual(tuple(o.shape), shape)

    def hook_calls(self, *args, **kw):
        """ff_infer(*args, **kw) with a counting allocation hook: how many
        outputs went through apexx._alloc."""
        calls = []

        def counting(like, shape, dtype):
            calls.append(dtype)
            return apexx._alloc(like, shape, dtype)
        apexx._apexx._set_hooks(apexx._ERRORS, counting, apexx._current_stream,
                                apexx.default_context)
        try:
            self.ctx.ff_infer(*args, **kw)
        finally:
            apexx._apexx._set_hooks(apexx._ERRORS, apexx._alloc, apexx._current_stream,
                                    apexx.default_context)
        return len(calls)

    def test_which_maker(self):
        """Plain torch tensors and NumPy arrays: made by the binding; others
        (subclasses, NumPy's missing bfloat16) by the hook."""
        self.assertEqual(self.hook_calls(self.dense, self.util, **self.kw), 0)
        if torch is None:
            return
        dense, util = torch.from_numpy(self.dense), torch.from_numpy(self.util)
        self.assertEqual(self.hook_calls(dense, util, **self.kw), 0)
        self.assertEqual(self.hook_calls(dense.as_subclass(_MyTensor), util, **self.kw), 3)
        param = torch.nn.Parameter(dense, requires_grad=False)
        self.assertEqual(self.hook_calls(param, util, **self.kw), 3)

    @unittest.skipIf(torch is None, NO_TORCH)
    def test_made_for_other_ops(self):
        """tilepack's out made for torch and NumPy inputs (the same path)."""
        f = self.rng.standard_normal((1, 4, 16, 16)).astype(np.float32)
        idx = np.array([[3, 0, 2]], np.int64)
        want = self.ctx.tilepack(f, idx, 8)
        self.assertIs(type(want), np.ndarray)
        got = self.ctx.tilepack(torch.from_numpy(f), torch.from_numpy(idx), 8)
        self.assertIs(type(got), torch.Tensor)
        self.assertEqual(got.dtype, torch.float32)
        np.testing.assert_array_equal(got.numpy(), want)
        ids = np.array([5, 1, 0, 3], np.int64)
        got = self.ctx.tile_order(torch.from_numpy(ids), 2, 3)
        self.assertIs(type(got), torch.Tensor)
        self.assertEqual(got.dtype, torch.int64)
        np.testing.assert_array_equal(got.numpy(), self.ctx.tile_order(ids, 2, 3))

    def test_bad_outputs_named(self):
        dense, util = self.dense, self.util
        shapes = self.shapes(dense)
        ok = {n: np.zeros(s, np.float32) for n, s in zip(("heavy", "detail", "alpha"), shapes)}
        ro = np.zeros(shapes[1], np.float32)
        ro.flags.writeable = False
        strided = np.zeros((1, C, H, 2 * H), np.float32)[..., ::2]
        cases = [
            ("detail", ro, apexx.InvalidArgument, ["detail", "read-only"]),
            ("heavy", strided, apexx.InvalidArgument, ["heavy", "not contiguous"]),
            ("alpha", np.zeros(shapes[2], np.float16), apexx.InvalidArgument, ["alpha"]),
            ("heavy", np.zeros(shapes[2], np.float32), apexx.InvalidArgument, ["heavy"]),
            ("alpha", [0.0] * 4, TypeError, ["alpha"]),
        ]
        for name, bad, cls, words in cases:
            with self.subTest(name=name, bad=type(bad).__name__):
                with self.assertRaisesApexx(cls, "ff_infer", *words):
                    self.ctx.ff_infer(dense, util, **dict(ok, **{name: bad}), **self.kw)

    @unittest.skipIf(torch is None, NO_TORCH)
    def test_torch_inputs_read(self):
        """Plain host torch tensors are read from their attributes, others
        through DLPack: a size-1 dimension's stride is free, a strided or
        float64 input is refused naming it, an autograd leaf and a
        subclass read the same memory."""
        dense, util = torch.from_numpy(self.dense), torch.from_numpy(self.util)
        want = self.ctx.ff_infer(self.dense, self.util, **self.kw)
        odd = dense.as_strided(dense.shape, (12345,) + dense.stride()[1:])
        for d in (odd, dense.clone().requires_grad_(), dense.as_subclass(_MyTensor)):
            got = self.ctx.ff_infer(d, util, heavy=torch.empty(dense.shape),
                                    detail=torch.empty(dense.shape),
                                    alpha=torch.empty(self.shapes(dense)[2]), **self.kw)
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g.detach().numpy(), w)
        with self.assertRaisesApexx(apexx.InvalidArgument, "dense", "not contiguous"):
            self.ctx.ff_infer(dense.transpose(2, 3), util, **self.kw)
        with self.assertRaisesApexx(apexx.InvalidArgument, "utilities", "float64"):
            self.ctx.ff_infer(dense, util.double(), **self.kw)

    @unittest.skipIf(torch is None or not hasattr(torch, "_neg_view"), "torch has no _neg_view")
    def test_torch_negative_bit_refused(self):
        """A tensor with torch's negative bit (its memory unnegated) is
        refused as an input or an output, naming it and resolve_neg();
        resolved, it reads as the negated values."""
        dense, util = torch.from_numpy(self.dense), torch.from_numpy(self.util)
        neg = torch._neg_view(dense)
        self.assertTrue(neg.is_neg())
        with self.assertRaisesApexx(apexx.InvalidArgument, "ff_infer", "dense", "negative bit",
                                    "resolve_neg"):
            self.ctx.ff_infer(neg, util, **self.kw)
        got = self.ctx.ff_infer(neg.resolve_neg(), util, **self.kw)
        want = self.ctx.ff_infer(-self.dense, self.util, **self.kw)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w)
        outs = {n: torch.zeros(s) for n, s in zip(("heavy", "detail", "alpha"), self.shapes(dense))}
        outs["detail"] = torch._neg_view(outs["detail"])
        with self.assertRaisesApexx(apexx.InvalidArgument, "ff_infer", "detail", "negative bit"):
            self.ctx.ff_infer(dense, util, **outs, **self.kw)

    @unittest.skipIf(torch is None, NO_TORCH)
    def test_bad_torch_outputs_named(self):
        dense, util = torch.from_numpy(self.dense), torch.from_numpy(self.util)
        shapes = self.shapes(dense)
        ok = {n: torch.zeros(s) for n, s in zip(("heavy", "detail", "alpha"), shapes)}
        cases = [
            ("heavy", torch.zeros(1, C, H, 2 * H)[..., ::2], ["heavy", "not contiguous"]),
            ("detail", torch.zeros(shapes[1], dtype=torch.float64), ["detail", "float64"]),
            ("alpha", torch.zeros(shapes[0]), ["alpha"]),
        ]
        for name, bad, words in cases:
            with self.subTest(name=name):
                with self.assertRaisesApexx(apexx.InvalidArgument, "ff_infer", *words):
                    self.ctx.ff_infer(dense, util, **dict(ok, **{name: bad}), **self.kw)

    def test_keywords(self):
        dense, util = self.dense, self.util
        want = self.ctx.ff_infer(dense, util, **self.kw)
        # keywords made at run time (not the call site's interned names)
        built = {"".join(["wei", "ghts"]): self.w, "kmax" + "_l0": 2, "kmax" + "_l1": 4}
        for g, w in zip(self.ctx.ff_infer(dense, util, **built), want):
            np.testing.assert_array_equal(g, w)

        class Key(str):
            pass
        got = self.ctx.ff_infer(dense, util, **{Key("weights"): self.w, "kmax_l0": 2,
                                                "kmax_l1": 4})
        np.testing.assert_array_equal(got[0], want[0])
        with self.assertRaisesRegex(TypeError, "ff_infer\\(\\) got an unexpected keyword "
                                    "argument 'heavvy'"):
            self.ctx.ff_infer(dense, util, heavvy=None, **self.kw)
        with self.assertRaisesRegex(TypeError, "ff_infer\\(\\) got multiple values for "
                                    "argument 'utilities'"):
            self.ctx.ff_infer(dense, util, utilities=util, **self.kw)
        with self.assertRaisesRegex(TypeError, "sync\\(\\) got an unexpected keyword argument "
                                    "'strem'"):
            self.ctx.sync(strem=None)
        self.ctx.sync(stream=None, backend=None, validate=None)
        ids = np.array([5, 1, 0, 3], np.int64)
        np.testing.assert_array_equal(self.ctx.tile_order(ids=ids, grid_h=2, grid_w=3, mode="l2r"),
                                      self.ctx.tile_order(ids, 2, 3, "l2r"))
        with self.assertRaisesRegex(TypeError, "tile_order\\(\\) got an unexpected keyword "
                                    "argument 'grid'"):
            self.ctx.tile_order(ids, grid=2)
        # tile_l0 alone: tile_l1 follows it (tile_l0 / 2), also by keyword value
        util8 = self.rng.standard_normal((1, (H // 8) ** 2)).astype(np.float32)
        a = self.ctx.ff_infer(dense, util8, tile_l0=8, **self.kw)
        b = self.ctx.ff_infer(dense, util8, tile_l0=8, tile_l1=4, **self.kw)
        np.testing.assert_array_equal(a[0], b[0])
        with self.assertRaisesApexx(apexx.InvalidArgument, "tile_l1"):
            self.ctx.ff_infer(dense, util8, tile_l0=8, tile_l1=8, **self.kw)


@unittest.skipIf(torch is None, NO_TORCH)
class CudaOutputs(TestCase):
    def setUp(self):
        super().setUp()
        if not _cuda_ok(self.ctx):
            self.skipTest("no CUDA device visible to torch, or the cuda backend is not ok")

    def test_torch_cuda_made(self):
        w = self.ctx.ff_weights_seeded(C, 3)
        dev = torch.device("cuda", torch.cuda.device_count() - 1)
        dense = torch.randn(1, C, H, H, device=dev, dtype=torch.float16)
        util = torch.randn(1, (H // 16) ** 2, device=dev, dtype=torch.float16)
        made = self.ctx.ff_infer(dense, util, weights=w, kmax_l0=2, kmax_l1=4)
        shapes = [tuple(dense.shape), tuple(dense.shape), (1, 1, H, H)]
        given = [torch.full(s, float("nan"), device=dev, dtype=torch.float16) for s in shapes]
        back = self.ctx.ff_infer(dense, util, heavy=given[0], detail=given[1], alpha=given[2],
                                 weights=w, kmax_l0=2, kmax_l1=4)
        torch.cuda.synchronize(dev)
        for o, s, g, b in zip(made, shapes, given, back):
            self.assertIs(b, g)
            self.assertIs(type(o), torch.Tensor)
            self.assertEqual(o.device, dev)
            self.assertEqual(o.dtype, torch.float16)
            self.assertEqual(tuple(o.shape), s)
            self.assertTrue(o.is_contiguous())
            torch.testing.assert_close(o, g, atol=1e-3, rtol=1e-3)
        w.close()

    def test_cupy_made(self):
        try:
            import cupy
        except ImportError:
            self.skipTest("CuPy is not installed")
        f = cupy.asarray(self.rng.standard_normal((1, 4, 16, 16)).astype(np.float32))
        idx = cupy.asarray(np.array([[3, 0, 2]]))
        got = self.ctx.tilepack(f, idx, 8)
        self.ctx.sync()
        self.assertIs(type(got), cupy.ndarray)
        self.assertEqual(got.device.id, f.device.id)
        self.assertEqual(got.shape, (1, 3, 4, 8, 8))
