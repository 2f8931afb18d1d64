# SPDX-License-Identifier: Apache-2.0
"""GPU suite (skipped without torch CUDA): torch CUDA tensors on a
non-default stream against the cpu backend, outputs on the input's device,
deferred device errors at sync() and validate="eager", CUDA graph capture
of a sequence of apexx calls, apexx.torch under torch.compile, CuPy arrays
where CuPy is installed."""
import unittest

import numpy as np

import apexx
from apexx_test import TestCase

try:
    import torch
    HAVE_CUDA = torch.cuda.is_available()
    WHY = "no CUDA device visible to torch"
except ImportError:
    torch, HAVE_CUDA, WHY = None, False, "torch is not installed for this Python"


def _cuda_backend_ok(ctx):
    return any(b["name"] == "cuda" and b["state"] == "ok" for b in ctx.backends())


@unittest.skipUnless(HAVE_CUDA, WHY)
class Gpu(TestCase):
    def setUp(self):
        super().setUp()
        if not _cuda_backend_ok(self.ctx):
            self.skipTest("the cuda backend is not ok: " + "; ".join(
                f"{b['name']}: {b['state']} {b['reason']}" for b in self.ctx.backends()))
        self.gen = torch.Generator(device="cuda").manual_seed(int(self.rng.integers(1 << 31)))
        self.stream = torch.cuda.Stream()

    def randn(self, *shape, dtype=None):
        dtype = torch.float16 if dtype is None else dtype
        return torch.randn(*shape, generator=self.gen, device="cuda").to(dtype)

    def ids(self, B, K, n):
        return torch.stack([torch.randperm(n, device="cuda", generator=self.gen)[:K]
                            for _ in range(B)])

    def parity(self, name, *args, **kw):
        """The op on CUDA tensors on self.stream vs the cpu backend on host copies."""
        with torch.cuda.stream(self.stream):
            got = getattr(self.ctx, name)(*args, **kw)
        self.stream.synchronize()
        host = [a.cpu() if isinstance(a, torch.Tensor) else a for a in args]
        hkw = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
        want = getattr(self.ctx, name)(*host, backend="cpu", **hkw)
        gots = got if isinstance(got, tuple) else (got,)
        wants = want if isinstance(want, tuple) else (want,)
        for g, w in zip(gots, wants):
            self.assertEqual(g.device.type, "cuda")
            if g.dtype.is_floating_point:
                # docs/ops.md, Rounding and parity: |err| <= atol + rtol*mag, mag from the formula's
                # terms where cancellation matters (fused: value * gate)
                mag = w.float().abs()
                if name == "fused_pack_op_unpack":
                    x = host[0].float()
                    vs, vb = kw.get("value_scale", 1.0), kw.get("value_bias", 0.0)
                    gs, gb = kw.get("gate_scale", 1.0), kw.get("gate_bias", 0.0)
                    mag = torch.maximum(mag, ((x * vs).abs() + abs(vb)) *
                                        ((x * gs).abs() + abs(gb)))
                tol = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3.2e-2}[g.dtype]
                err = (g.cpu().float() - w.float()).abs()
                self.assertTrue(bool((err <= tol + tol * mag).all()),
                                f"{name} {g.dtype}: max err {float(err.max())}")
            else:
                self.assertTrue(torch.equal(g.cpu(), w))
        return got

    def test_parity_all_ops(self):
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            f = self.randn(2, 16, 32, 32, dtype=dt)
            idx = self.ids(2, 6, 16)
            packed = self.parity("tilepack", f, idx, 8)
            self.parity("tileunpack", f, packed, idx=idx)
            self.parity("fused_pack_op_unpack", f, idx, 8, value_scale=1.5, gate_bias=0.1)
            b = torch.rand(2, 1, 32, 32, device="cuda", dtype=dt)
            u = torch.rand(2, 1, 32, 32, device="cuda", dtype=dt)
            a = self.parity("fusiongate_alpha", b, u)
            self.parity("fusiongate_fuse", f, self.randn(2, 16, 32, 32, dtype=dt), a)
            v = torch.full((16,), 0.5, device="cuda", dtype=dt)
            self.parity("tilessm_scan", self.randn(2, 7, 16, dtype=dt), v, v, v, v,
                        direction="bidirectional", merge="gated")
            src = self.randn(8, 5, dtype=dt)
            index = torch.randint(0, 8, (6, 5), device="cuda", generator=self.gen)
            self.parity("gather", src, 0, index)
            self.parity("index_select", src, index[:, 0].contiguous())
            self.parity("scatter_add", self.randn(8, 5, dtype=dt), 0, index, self.randn(6, 5, dtype=dt))
            self.parity("gather_backward", self.randn(6, 5, dtype=dt), 0, index, src_shape=(8, 5))
            # the backward ops the cuda backend runs (repeated ids and rows accumulate)
            self.parity("tilepack_backward", self.randn(2, 6, 16, 8, 8, dtype=dt),
                        torch.tensor([[1, 1, 3, 0, 1, 15], [2, 2, 2, 9, 9, 4]], device="cuda"),
                        features_shape=(2, 16, 32, 32))
            self.parity("index_select_backward", self.randn(6, 5, dtype=dt), index[:, 0].contiguous(),
                        src_shape=(8, 5))
            self.parity("tileunpack_backward", f, idx, mode="blend", blend_alpha=0.25, tile=8)

    def test_stream_handshake_and_explicit_stream(self):
        f = self.randn(1, 8, 16, 16)
        idx = self.ids(1, 4, 4)
        out = torch.empty(1, 4, 8, 8, 8, device="cuda", dtype=f.dtype)
        # stream= given: the DLPack handshake orders the producer's stream before it
        self.ctx.tilepack(f, idx, 8, out=out, stream=self.stream)
        self.ctx.sync(stream=self.stream)
        want = self.ctx.tilepack(f.cpu(), idx.cpu(), 8, backend="cpu")
        self.assertTrue(torch.equal(out.cpu(), want))
        ex = self.ctx.explain("tilepack", f, idx, 8)
        self.assertEqual(ex["backend"], "cuda")

    def test_wrong_device_mix(self):
        f = self.randn(1, 2, 8, 8)
        with self.assertRaises(apexx.ApexxError) as c:
            self.ctx.tilepack(f, torch.tensor([[0]]), 4)  # host ids with device features
        self.assertIn(c.exception.status, (1, 2))

    def test_deferred_error(self):
        f = self.randn(1, 2, 8, 8)
        bad = torch.tensor([[0, 9]], device="cuda")
        with torch.cuda.stream(self.stream):
            self.ctx.tilepack(f, bad, 4)  # validate = device: no error yet
            with self.assertRaisesApexx(apexx.DeviceError, "idx") as c:
                self.ctx.sync()
        self.assertEqual(c.exception.status, 6)
        with torch.cuda.stream(self.stream):
            with self.assertRaisesApexx(apexx.DeviceError, "idx"):
                self.ctx.tilepack(f, bad, 4, validate="eager")
            self.ctx.sync()  # reported once

    def test_graph_capture(self):
        f = self.randn(1, 16, 32, 32)
        idx = self.ids(1, 8, 16)
        packed = torch.empty(1, 8, 16, 8, 8, device="cuda", dtype=f.dtype)
        merged = torch.empty_like(f)
        b = torch.rand(1, 1, 32, 32, device="cuda", dtype=f.dtype)
        alpha = torch.empty_like(b)
        fused = torch.empty_like(f)

        def frame():
            self.ctx.tilepack(f, idx, 8, out=packed)
            self.ctx.tileunpack(f, packed, idx=idx, out=merged)
            self.ctx.fusiongate_alpha(b, b, out=alpha)
            self.ctx.fusiongate_fuse(f, merged, alpha, out=fused)

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            frame()  # warm-up outside capture (pools, modules)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            frame()
        for _ in range(3):
            f.copy_(self.randn(1, 16, 32, 32))
            b.copy_(torch.rand(1, 1, 32, 32, device="cuda", dtype=f.dtype))
            fused.zero_()
            g.replay()
            torch.cuda.synchronize()
            hp = self.ctx.tilepack(f.cpu(), idx.cpu(), 8, backend="cpu")
            hm = self.ctx.tileunpack(f.cpu(), hp, idx=idx.cpu(), backend="cpu")
            ha = self.ctx.fusiongate_alpha(b.cpu(), b.cpu(), backend="cpu")
            hf = self.ctx.fusiongate_fuse(f.cpu(), hm, ha, backend="cpu")
            self.assertTrue(torch.equal(packed.cpu(), hp))
            torch.testing.assert_close(fused.cpu().float(), hf.float(), atol=4e-3, rtol=4e-3)

    def test_torch_ops_compile_and_autograd(self):
        import apexx.torch as at
        x = self.randn(1, 8, 16, 16)
        idx = self.ids(1, 3, 4)
        f = lambda x, idx: at.tilepack(x * 2, idx, 8) + 1  # noqa: E731
        cf = torch.compile(f, fullgraph=True)
        torch.testing.assert_close(cf(x, idx), f(x, idx))
        src = self.randn(5, 4, dtype=torch.float32).requires_grad_()
        index = torch.randint(0, 5, (3, 4), device="cuda", generator=self.gen)
        at.gather(src, 0, index).sum().backward()
        src2 = src.detach().clone().requires_grad_()
        torch.gather(src2, 0, index).sum().backward()
        torch.testing.assert_close(src.grad, src2.grad)
        # tilepack and index_select train on the GPU: their backward ops run on the cuda backend
        xg = self.randn(2, 8, 16, 16, dtype=torch.float32).requires_grad_()
        ids = torch.tensor([[1, 1, 3], [0, 2, 2]], device="cuda")
        w = self.randn(2, 3, 8, 8, 8, dtype=torch.float32)
        (at.tilepack(xg, ids, 8) * w).sum().backward()
        x2 = xg.detach().clone().requires_grad_()
        tiles = x2.reshape(2, 8, 2, 8, 2, 8).permute(0, 2, 4, 1, 3, 5).reshape(2, 4, 8, 8, 8)
        (tiles[torch.arange(2, device="cuda")[:, None], ids] * w).sum().backward()
        torch.testing.assert_close(xg.grad, x2.grad)
        rows = torch.tensor([4, 0, 4, 1], device="cuda")
        wr = self.randn(4, 4, dtype=torch.float32)
        src3 = src.detach().clone().requires_grad_()
        (at.index_select(src3, rows) * wr).sum().backward()
        src4 = src.detach().clone().requires_grad_()
        (torch.index_select(src4, 0, rows) * wr).sum().backward()
        torch.testing.assert_close(src3.grad, src4.grad)

    def test_cupy(self):
        try:
            import cupy
        except ImportError:
            self.skipTest("CuPy is not installed")
        f = cupy.asarray(self.rng.standard_normal((1, 4, 16, 16)).astype(np.float32))
        idx = cupy.asarray(np.array([[3, 0, 2]]))
        with cupy.cuda.Stream(non_blocking=True):
            got = self.ctx.tilepack(f, idx, 8)
            self.ctx.sync()
        self.assertIsInstance(got, cupy.ndarray)
        want = self.ctx.tilepack(cupy.asnumpy(f), cupy.asnumpy(idx), 8, backend="cpu")
        np.testing.assert_array_equal(cupy.asnumpy(got), want)
