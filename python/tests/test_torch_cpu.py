# SPDX-License-Identifier: Apache-2.0
"""torch CPU tensors (skipped where torch is not installed): DLPack inputs
and torch outputs for f32/f16/bf16, autograd tensors, the apexx.torch
operators (fake kernels, autograd of gather and scatter_add, torch.compile
where available)."""
import unittest

import numpy as np

import apexx
import reference as ref
from apexx_test import TestCase, assert_close

try:
    import torch
except ImportError:
    torch = None


def _np(t):
    return t.detach().float().numpy() if t.dtype == torch.bfloat16 else t.detach().numpy()


@unittest.skipIf(torch is None, "torch is not installed for this Python (Debian: python3-torch)")
class TorchCpu(TestCase):
    def setUp(self):
        super().setUp()
        self.gen = torch.Generator().manual_seed(int(self.rng.integers(1 << 31)))

    def randn(self, *shape, dtype=None):
        dtype = torch.float32 if dtype is None else dtype
        return torch.randn(*shape, generator=self.gen).to(dtype)

    def test_tilepack_dtypes(self):
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            f = self.randn(2, 3, 16, 16, dtype=dt)
            idx = torch.randint(0, 4, (2, 3), generator=self.gen)
            got = self.ctx.tilepack(f, idx, 8)
            self.assertIsInstance(got, torch.Tensor)
            self.assertEqual((got.dtype, got.device), (dt, f.device))
            want = ref.tilepack(_np(f), idx.numpy(), 8)
            np.testing.assert_array_equal(_np(got), want)
            out = torch.empty_like(got)
            self.assertIs(self.ctx.tilepack(f, idx.int(), 8, out=out), out)
            np.testing.assert_array_equal(_np(out), want)

    def test_ops_against_reference(self):
        f = self.randn(1, 4, 8, 8)
        idx = torch.tensor([[3, 0]])
        want, mag = ref.fused(f.numpy(), idx.numpy(), 4, 2.0, 0.5, 1.0, -0.1)
        got = self.ctx.fused_pack_op_unpack(f, idx, 4, 2.0, 0.5, 1.0, -0.1)
        assert_close(self, got.numpy(), want, mag, np.float32)
        bf = self.randn(1, 4, 8, 8, dtype=torch.bfloat16)
        packed = self.ctx.tilepack(bf, idx, 4)
        base = torch.zeros_like(bf)
        self.ctx.tileunpack(base, packed, idx=idx, out=base)
        np.testing.assert_array_equal(_np(self.ctx.tilepack(base, idx, 4)), _np(packed))
        src = self.randn(5, 3)
        index = torch.randint(0, 5, (4, 3), generator=self.gen)
        np.testing.assert_array_equal(self.ctx.gather(src, 0, index).numpy(),
                                      torch.gather(src, 0, index).numpy())
        s = self.randn(5, 3)
        assert_close(self, self.ctx.scatter_add(s, 0, index, src[:4].contiguous()).numpy(),
                     *ref.scatter_add(s.numpy(), 0, index.numpy(), src[:4].numpy()), np.float32)

    def test_index_select_any_dim(self):
        """torch.index_select's semantics along every dim of ndim 1..4, dim given
        from either end, through Context.index_select (allocated and out=),
        torch.ops.apexx.index_select and apexx.torch.index_select: empty and
        repeated indices, every dtype, i32 and i64 index; an out-of-range value
        names its position, its value and the extent at dim."""
        import apexx.torch as at
        dtypes = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64)
        for ndim in range(1, 5):
            for dim in range(-ndim, ndim):
                shape = [int(v) for v in self.rng.integers(1, 6, ndim)]
                dt = dtypes[(ndim + dim) % len(dtypes)]
                src = self.randn(*shape, dtype=torch.float32).mul(100).to(dt)
                for n in (0, 1, 7):
                    index = torch.randint(0, shape[dim], (n,), generator=self.gen)
                    if n > 2:
                        index[3] = index[0]
                    if n % 2:
                        index = index.int()
                    want = torch.index_select(src, dim, index)
                    got = self.ctx.index_select(src, index, dim=dim)
                    self.assertEqual(got.shape, want.shape)
                    self.assertTrue(torch.equal(got, want), f"ndim {ndim} dim {dim} n {n}")
                    out = torch.empty_like(want)
                    self.assertIs(self.ctx.index_select(src, index, out=out, dim=dim), out)
                    self.assertTrue(torch.equal(out, want))
                    self.assertTrue(torch.equal(torch.ops.apexx.index_select(src, index, dim),
                                                want))
                    self.assertTrue(torch.equal(at.index_select(src, index, dim), want))
        src = self.randn(3, 4, 5)
        with self.assertRaisesApexx(apexx.InvalidArgument, "index_select: index[1] = [4]",
                                    "outside [0, 3]", "src.shape[1] = [4]"):
            self.ctx.index_select(src, torch.tensor([0, 4]), dim=-2)
        with self.assertRaisesApexx(apexx.InvalidArgument, "dim = [3]", "outside [-3, 2]"):
            self.ctx.index_select(src, torch.tensor([0]), dim=3)
        with self.assertRaisesApexx(apexx.InvalidArgument, "dim = [-4]"):
            at.index_select(src, torch.tensor([0]), -4)
        with self.assertRaisesApexx(apexx.InvalidArgument, "index must be [N]"):
            self.ctx.index_select(src, torch.tensor([[0]]), dim=1)

    def test_expanded_index(self):
        """idx.expand(...) (stride 0) and a transposed index are accepted where the
        op only reads them, through Context, torch.ops.apexx and apexx.torch, with
        autograd: the results and gradients of their .contiguous() copies."""
        import apexx.torch as at
        src = self.randn(5, 6)
        row = torch.randint(0, 5, (1, 6), generator=self.gen)
        expanded = row.expand(4, 6)
        self.assertEqual(expanded.stride(), (0, 1))
        want = torch.gather(src, 0, expanded)
        self.assertTrue(torch.equal(self.ctx.gather(src, 0, expanded), want))
        self.assertTrue(torch.equal(torch.ops.apexx.gather(src, 0, expanded), want))
        one = torch.tensor([2]).expand(7)
        self.assertTrue(torch.equal(self.ctx.index_select(src, one, dim=0),
                                    torch.index_select(src, 0, one)))
        self.assertTrue(torch.equal(at.index_select(src, one, 0), torch.index_select(src, 0, one)))
        upd = self.randn(4, 6)
        torch.testing.assert_close(at.scatter_add(src, 0, expanded, upd),
                                   torch.scatter_add(src, 0, expanded, upd))
        transposed = torch.randint(0, 5, (6, 5), generator=self.gen).t()
        self.assertTrue(torch.equal(self.ctx.gather(src, 0, transposed),
                                    torch.gather(src, 0, transposed)))
        leaf = src.clone().requires_grad_()
        (at.gather(leaf, 0, expanded) * upd).sum().backward()
        torch.testing.assert_close(leaf.grad, torch.zeros(5, 6).scatter_add_(0, expanded, upd))
        with self.assertRaisesApexx(apexx.InvalidArgument, "src", "not contiguous"):
            self.ctx.gather(src.t(), 0, transposed)

    def test_requires_grad_and_rejections(self):
        f = self.randn(1, 2, 8, 8).requires_grad_()
        got = self.ctx.tilepack(f, torch.tensor([[1]]), 4)
        self.assertFalse(got.requires_grad)
        with self.assertRaisesApexx(apexx.InvalidArgument, "features", "not contiguous"):
            self.ctx.tilepack(self.randn(1, 2, 8, 8).transpose(2, 3), torch.tensor([[1]]), 4)
        with self.assertRaisesApexx(apexx.InvalidArgument, "features", "float64"):
            self.ctx.tilepack(self.randn(1, 2, 8, 8).double(), torch.tensor([[1]]), 4)
        with self.assertRaisesApexx(apexx.InvalidArgument, "idx", "int16"):
            self.ctx.tilepack(self.randn(1, 2, 8, 8), torch.tensor([[1]], dtype=torch.int16), 4)
        # a view with a storage offset (DLPack byte_offset / data pointer)
        big = self.randn(2, 2, 8, 8)
        np.testing.assert_array_equal(self.ctx.tilepack(big[1:], torch.tensor([[2]]), 4).numpy(),
                                      ref.tilepack(big[1:].numpy(), np.array([[2]]), 4))


@unittest.skipIf(torch is None, "torch is not installed for this Python (Debian: python3-torch)")
class TorchOps(TestCase):
    @classmethod
    def setUpClass(cls):
        import apexx.torch as at
        cls.at = at

    def test_registered(self):
        print(f"  apexx.torch: {self.at.REGISTRATION} on torch {torch.__version__}")
        f = torch.randn(1, 2, 8, 8)
        idx = torch.tensor([[3, 1]])
        got = torch.ops.apexx.tilepack(f, idx, 4)
        np.testing.assert_array_equal(got.numpy(), ref.tilepack(f.numpy(), idx.numpy(), 4))
        if "(meta," not in self.at.REGISTRATION:  # torch < 2.2: no AutogradMeta kernel
            m = torch.ops.apexx.tilepack(f.to("meta"), idx.to("meta"), 4)
            self.assertEqual((m.shape, m.device.type), ((1, 2, 2, 4, 4), "meta"))
        y, s = self.at.tilessm_scan(torch.ones(1, 3, 2), *[torch.full((2,), 0.5)] * 4,
                                    direction="bidirectional", merge="sum")
        self.assertEqual((tuple(y.shape), tuple(s.shape)), ((1, 3, 2), (1, 2, 2)))
        a = self.at.fusiongate_alpha(torch.rand(1, 1, 4, 4), torch.rand(1, 4, 4))
        self.assertEqual(tuple(a.shape), (1, 1, 4, 4))

    def test_gather_autograd(self):
        src = torch.randn(3, 4, requires_grad=True)
        index = torch.tensor([[0, 0, 2, 1], [2, 2, 2, 0]])
        out = self.at.gather(src, 0, index)
        np.testing.assert_array_equal(out.detach().numpy(), torch.gather(src, 0, index).detach().numpy())
        g = torch.randn(2, 4)
        out.backward(g)
        src2 = src.detach().clone().requires_grad_()
        torch.gather(src2, 0, index).backward(g)
        torch.testing.assert_close(src.grad, src2.grad)

    def test_scatter_add_autograd(self):
        self_ = torch.randn(3, 2, requires_grad=True)
        src = torch.randn(3, 2, requires_grad=True)
        index = torch.tensor([[0, 2], [0, 0], [1, 1]])
        out = self.at.scatter_add(self_, 0, index, src)
        a2, s2 = self_.detach().clone().requires_grad_(), src.detach().clone().requires_grad_()
        ref_out = torch.scatter_add(a2, 0, index, s2)
        torch.testing.assert_close(out, ref_out)
        g = torch.arange(6.0).view(3, 2)
        out.backward(g)
        ref_out.backward(g)
        torch.testing.assert_close(self_.grad, a2.grad)
        torch.testing.assert_close(src.grad, s2.grad)
        torch.testing.assert_close(src.grad, torch.tensor([[0.0, 5.0], [0.0, 1.0], [2.0, 3.0]]))

    def _one_call_per_op(self):
        """A small valid call of every op: name -> (args, indices of its float inputs)."""
        f = torch.randn(1, 2, 8, 8)
        idx = torch.tensor([[1, 2]])
        src, index = torch.randn(5, 3), torch.tensor([[0, 4, 4], [2, 2, 0]])
        vec = [torch.full((2,), v) for v in (0.5, 1.5, 0.7, 0.1)]
        return {
            "tilepack": ((f, idx, 4), (0,)),
            "tileunpack": ((f, torch.randn(1, 2, 2, 4, 4), idx), (0, 1)),
            "fused_pack_op_unpack": ((f, idx, 4), (0,)),
            "fusiongate_alpha": ((torch.rand(1, 1, 4, 4), torch.rand(1, 1, 4, 4)), (0, 1)),
            "fusiongate_fuse": ((f, torch.randn(1, 2, 8, 8), torch.rand(1, 1, 8, 8)),
                                (0, 1, 2)),
            "tilessm_scan": ((torch.randn(1, 3, 2), *vec), (0, 1, 2, 3, 4)),
            "gather": ((src, 0, index), (0,)),
            "index_select": ((src, torch.tensor([4, 0, 4])), (0,)),
            "scatter_add": ((torch.randn(5, 3), 0, index, src), (0, 3)),
            "gather_backward": ((torch.randn(2, 3), 0, index, [5, 3]), (0,)),
            # the backward ops of fusiongate_fuse, fusiongate_alpha and tilessm_scan
            "fusiongate_fuse_backward": ((f, f, torch.randn(1, 2, 8, 8), torch.rand(1, 1, 8, 8)),
                                         (0, 1, 2, 3)),
            "fusiongate_alpha_backward": ((torch.rand(1, 1, 4, 4), torch.rand(1, 1, 4, 4),
                                           torch.rand(1, 4, 4)), (0, 1, 2)),
            "tilessm_scan_backward": ((torch.randn(1, 3, 2), torch.randn(1, 3, 2), *vec),
                                      (0, 1, 2, 3, 4, 5)),
            # the backward ops of the tile ops and index_select
            "tilepack_backward": ((torch.randn(1, 2, 2, 4, 4), idx, [1, 2, 8, 8]), (0,)),
            "tileunpack_backward": ((f, idx, None, None, "override", 0.5, True, 4), (0,)),
            "fused_pack_op_unpack_backward": ((torch.randn(1, 2, 8, 8), f, idx, 4), (0, 1)),
            "index_select_backward": ((torch.randn(3, 3), torch.tensor([4, 0, 4]), [5, 3]),
                                      (0,)),
        }

    def test_no_silent_dropped_gradient(self):
        """Every op, as torch.ops.apexx.<op> and apexx.torch.<op>: a backward through it
        gives each float input that requires grad a gradient, or raises an error naming
        the op; never .grad = None in silence (torch 1.13 dropped it, 2.x only warned)."""
        cases = self._one_call_per_op()
        self.assertEqual(sorted(cases), sorted(self.at._OPS))
        for name, (args, float_at) in cases.items():
            for form, fn in (("torch.ops.apexx", getattr(torch.ops.apexx, name)),
                             ("apexx.torch", getattr(self.at, name))):
                with self.subTest(op=name, form=form):
                    leaves = [a.detach().clone().requires_grad_() if i in float_at else a
                              for i, a in enumerate(args)]
                    with torch.no_grad():  # no gradient asked for: no graph, no error
                        outs = fn(*leaves)
                    outs = outs if isinstance(outs, tuple) else (outs,)
                    self.assertFalse(any(o.requires_grad for o in outs))
                    outs = fn(*leaves)  # inputs that require grad: the forward runs
                    outs = outs if isinstance(outs, tuple) else (outs,)
                    self.assertTrue(all(o.requires_grad for o in outs))
                    try:
                        sum(o.float().sum() for o in outs).backward()
                    except RuntimeError as e:
                        self.assertIsInstance(e, self.at.NoBackwardError)
                        self.assertIn(f"apexx::{name}", str(e))
                        self.assertIn("not implemented", str(e))
                        continue
                    for i in float_at:
                        self.assertIsNotNone(leaves[i].grad, f"{form}.{name}: input {i}")

    def test_compile(self):
        if not hasattr(torch, "compile"):
            self.skipTest(f"torch {torch.__version__} has no torch.compile")

        def f(x, idx):
            return self.at.tilepack(x * 2, idx, 4) + 1

        x, idx = torch.randn(1, 2, 8, 8), torch.tensor([[1, 2]])
        cf = torch.compile(f, backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(cf(x, idx), f(x, idx))
