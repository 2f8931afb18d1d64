# SPDX-License-Identifier: Apache-2.0
"""Every op through NumPy arrays (f32, f16; i32/i64 indices) against the
plain NumPy references of reference.py, with out=None (a new NumPy array)
and with out= (written in place, returned as the same object)."""
import numpy as np

import apexx
import reference as ref
from apexx_test import TestCase, assert_close

FLOATS = (np.float32, np.float16)
INDEX = (np.int32, np.int64)


class NumpyOps(TestCase):
    def feats(self, shape, dt):
        return self.rng.standard_normal(shape).astype(dt)

    def ids(self, B, K, n, dt, unique=False):
        if unique:
            return np.stack([self.rng.permutation(n)[:K] for _ in range(B)]).astype(dt)
        return self.rng.integers(0, n, (B, K)).astype(dt)

    def test_tilepack(self):
        for dt in FLOATS:
            for it in INDEX:
                f = self.feats((2, 3, 16, 24), dt)
                idx = self.ids(2, 5, 2 * 3, it)
                got = self.ctx.tilepack(f, idx, tile=8)
                self.assertIsInstance(got, np.ndarray)
                self.assertEqual(got.dtype, dt)
                np.testing.assert_array_equal(got, ref.tilepack(f, idx, 8))
                out = np.full((2, 5, 3, 8, 8), np.nan, dt)
                self.assertIs(self.ctx.tilepack(f, idx, 8, out), out)
                np.testing.assert_array_equal(out, ref.tilepack(f, idx, 8))
        f = self.feats((1, 2, 8, 8), np.float32)
        np.testing.assert_array_equal(apexx.tilepack(f, np.array([[3, 0]]), tile=4),
                                      ref.tilepack(f, np.array([[3, 0]]), 4))

    def test_tileunpack(self):
        for dt in FLOATS:
            B, C, H, W, t, K = 2, 3, 16, 16, 4, 7
            base = self.feats((B, C, H, W), dt)
            packed = self.feats((B, K, C, t, t), dt)
            idx = self.ids(B, K, 16, np.int64)
            levels = self.rng.integers(0, 3, (B, K)).astype(np.int32)
            org = ref.origins_of(idx, t, W)
            want, mag = ref.tileunpack(base, packed, org, None, "override", 0.5)
            np.testing.assert_array_equal(self.ctx.tileunpack(base, packed, idx=idx), want.astype(dt))
            want, mag = ref.tileunpack(base, packed, org, levels, "override", 0.5)
            got = self.ctx.tileunpack(base, packed, idx=idx, levels=levels)
            np.testing.assert_array_equal(got, want.astype(dt))
            # pixel origins (partial overlaps), blend
            origins = self.rng.integers(0, H - t + 1, (B, K, 2)).astype(np.int32)
            want, mag = ref.tileunpack(base, packed, origins, levels, "blend", 0.25)
            got = self.ctx.tileunpack(base, packed, origins=origins, levels=levels, mode="blend",
                                      blend_alpha=0.25)
            # nested blends round once per step in the storage dtype
            assert_close(self, got, want, mag * (K + 1), dt, msg=f"blend {dt}")
            # out may alias base exactly
            b2 = base.copy()
            want, _ = ref.tileunpack(base, packed, org, None, "override", 0.5)
            self.assertIs(self.ctx.tileunpack(b2, packed, idx=idx, out=b2), b2)
            np.testing.assert_array_equal(b2, want.astype(dt))

    def test_fused_pack_op_unpack(self):
        for dt in FLOATS:
            f = self.feats((2, 4, 16, 16), dt)
            idx = self.ids(2, 3, 4, np.int32, unique=True)
            kw = dict(value_scale=1.5, value_bias=-0.25, gate_scale=0.75, gate_bias=0.125)
            want, mag = ref.fused(f, idx, 8, 1.5, -0.25, 0.75, 0.125)
            got = self.ctx.fused_pack_op_unpack(f, idx, 8, **kw)
            assert_close(self, got, want, mag, dt, msg=f"fused {dt}")
            f2 = f.copy()
            self.ctx.fused_pack_op_unpack(f2, idx, 8, out=f2, **kw)
            np.testing.assert_array_equal(f2, got)

    def test_fusiongate(self):
        for dt in FLOATS:
            b = self.rng.random((2, 1, 8, 8)).astype(dt)
            u = self.rng.random((2, 1, 8, 8)).astype(dt)
            b[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
            want, mag = ref.fusiongate_alpha(b, u, 0.5, -1.0, 0.25)
            a = self.ctx.fusiongate_alpha(b, u, boundary_log_weight=0.5,
                                          uncertainty_log_weight=-1.0, bias=0.25)
            self.assertEqual(a.shape, (2, 1, 8, 8))
            assert_close(self, a, want, mag, dt, extra_ulps=1, msg="alpha")
            a3 = self.ctx.fusiongate_alpha(b[:, 0], u[:, 0])
            want3, mag3 = ref.fusiongate_alpha(b[:, 0], u[:, 0], 1.0, 1.0, 0.0)
            assert_close(self, a3, want3, mag3, dt, extra_ulps=1, msg="alpha 3-D")
            base = self.feats((2, 3, 8, 8), dt)
            detail = self.feats((2, 3, 8, 8), dt)
            want, mag = ref.fusiongate_fuse(base, detail, a)
            got = self.ctx.fusiongate_fuse(base, detail, a)
            assert_close(self, got, want, mag, dt, msg="fuse")
            self.ctx.fusiongate_fuse(base, detail, a, out=base)
            np.testing.assert_array_equal(base, got)

    def test_tilessm_scan(self):
        for dt in FLOATS:
            B, K, C = 2, 9, 5
            tok = self.feats((B, K, C), dt)
            tok[0, 1, 0] = np.nan
            decay = self.rng.uniform(0.1, 0.9, C).astype(dt)
            ig, og, sb = (self.rng.uniform(0.5, 1.5, C).astype(np.float32) for _ in range(3))
            init = self.feats((B, 2, C), dt)
            gate = self.rng.random(C).astype(dt)
            for direction in ("forward", "backward", "bidirectional"):
                for merge in ("sum", "avg", "gated"):
                    if direction != "bidirectional" and merge != "avg":
                        continue
                    ini = init if direction == "bidirectional" else init[:, 0].copy()
                    y, fs = self.ctx.tilessm_scan(tok, decay, ig, og, sb, init_state=ini,
                                                  merge_gate=gate, direction=direction,
                                                  merge=merge)
                    wy, ws, m = ref.tilessm_scan(tok, decay, ig, og, sb, ini, 1e4, direction,
                                                 merge, gate)
                    # fp32 state over K steps: a few storage roundings of the terms
                    assert_close(self, y, wy, 4 * m, dt, msg=f"y {dt} {direction} {merge}")
                    self.assertEqual(fs.shape, ws.shape)
                    assert_close(self, fs, ws, 4 * np.abs(ws) + 4, dt, msg="final_state")

    def test_gather_index_select(self):
        for dt in (np.float32, np.float16, np.int32, np.int64):
            src = (self.rng.standard_normal((4, 6, 5)) * 100).astype(dt)
            for dim in (0, 1, -1):
                shp = list(src.shape)
                shp[dim] = 7
                index = self.rng.integers(0, src.shape[dim], shp).astype(np.int64)
                index = index[:3] if dim != 0 else index
                got = self.ctx.gather(src, dim, index)
                np.testing.assert_array_equal(got, ref.gather(src, dim, index))
            s2 = src.reshape(4, 30)
            index = self.rng.integers(0, 4, 9).astype(np.int32)
            np.testing.assert_array_equal(self.ctx.index_select(s2, index), s2[index])

    def test_strided_index_tensors(self):
        """Index tensors are only read: expanded (np.broadcast_to, stride 0, read-only),
        transposed and reversed ones give the results of their contiguous copies, for
        gather, index_select, scatter_add, gather_backward and tilepack."""
        src = self.rng.standard_normal((5, 6)).astype(np.float32)
        row = self.rng.integers(0, 5, (1, 6)).astype(np.int64)
        expanded = np.broadcast_to(row, (4, 6))
        self.assertEqual(expanded.strides[0], 0)
        self.assertFalse(expanded.flags.writeable)
        dense = np.ascontiguousarray(expanded)
        np.testing.assert_array_equal(self.ctx.gather(src, 0, expanded), ref.gather(src, 0, dense))
        one = np.broadcast_to(np.int32(3), (7,))
        np.testing.assert_array_equal(self.ctx.index_select(src, one, dim=0), src[[3] * 7])
        reversed_ = np.arange(6, dtype=np.int64)[::-1]
        self.assertLess(reversed_.strides[0], 0)
        np.testing.assert_array_equal(self.ctx.index_select(src, reversed_, dim=1), src[:, ::-1])
        transposed = self.rng.integers(0, 5, (6, 5)).astype(np.int64).T
        np.testing.assert_array_equal(self.ctx.gather(src, 0, transposed),
                                      ref.gather(src, 0, np.ascontiguousarray(transposed)))
        upd = self.rng.standard_normal((4, 6)).astype(np.float32)
        np.testing.assert_array_equal(self.ctx.scatter_add(src, 0, expanded, upd),
                                      self.ctx.scatter_add(src, 0, dense, upd))
        np.testing.assert_array_equal(self.ctx.gather_backward(upd, 0, expanded, src_shape=(5, 6)),
                                      self.ctx.gather_backward(upd, 0, dense, src_shape=(5, 6)))
        f = self.feats((2, 3, 16, 16), np.float32)
        idx = np.broadcast_to(np.array([[1, 3]], np.int64), (2, 2))
        np.testing.assert_array_equal(self.ctx.tilepack(f, idx, tile=8),
                                      self.ctx.tilepack(f, np.ascontiguousarray(idx), tile=8))
        # out of range in the expanded index: named at its position as in the copy
        bad = np.broadcast_to(np.array([0, 9], np.int64), (3, 2))
        with self.assertRaisesApexx(apexx.InvalidArgument, "gather: index[0][1] = [9]",
                                    "outside [0, 4]"):
            self.ctx.gather(src, 0, bad)
        # data tensors are never copied: a strided src is still refused
        with self.assertRaisesApexx(apexx.InvalidArgument, "src", "not contiguous"):
            self.ctx.index_select(np.broadcast_to(src[:1], (5, 6)), one)

    def test_scatter_add_gather_backward(self):
        for dt in (np.float32, np.float16, np.int32):
            self_ = (self.rng.standard_normal((5, 4)) * 4).astype(dt)
            src = (self.rng.standard_normal((6, 4)) * 4).astype(dt)
            index = self.rng.integers(0, 5, (6, 4)).astype(np.int64)
            want, mag = ref.scatter_add(self_, 0, index, src)
            got = self.ctx.scatter_add(self_, 0, index, src)
            if dt == np.int32:
                np.testing.assert_array_equal(got, want.astype(dt))
            else:
                # fp32 accumulation rounded once: within one storage rounding of the sum
                assert_close(self, got, want, mag, dt, extra_ulps=1, msg=f"scatter_add {dt}")
            s2 = self_.copy()
            self.assertIs(self.ctx.scatter_add(s2, 0, index, src, out=s2), s2)
            np.testing.assert_array_equal(s2, got)
        # docs/ops.md, gather_backward golden, then gather_backward == zeros scatter_add
        idx = np.array([[0, 0, 2], [1, 1, 1]])
        g = self.ctx.gather_backward(np.ones((2, 3), np.float32), 1, idx, src_shape=(2, 3))
        np.testing.assert_array_equal(g, [[2, 0, 1], [0, 3, 0]])
        grad = self.rng.standard_normal((3, 4)).astype(np.float32)
        index = self.rng.integers(0, 6, (3, 4))
        want, mag = ref.scatter_add(np.zeros((6, 4), np.float32), 0, index, grad)
        out = np.full((6, 4), np.nan, np.float32)
        self.ctx.gather_backward(grad, 0, index, grad_src=out)
        assert_close(self, out, want, mag, np.float32, msg="gather_backward")

    def test_tile_order(self):
        golden = [0, 1, 5, 4, 8, 12, 13, 9, 10, 14, 15, 11, 7, 6, 2, 3]  # docs/ops.md tile_order
        np.testing.assert_array_equal(self.ctx.tile_order(np.arange(16), 4, 4), golden)
        for it in INDEX:
            ids = self.rng.integers(0, 6 * 5, 20).astype(it)
            for mode in ("hilbert", "l2r", "r2l", "u2d", "d2u", "multi_direction"):
                np.testing.assert_array_equal(self.ctx.tile_order(ids, 6, 5, mode=mode),
                                              ref.tile_order(ids, 6, 5, mode), err_msg=mode)
            ids2 = ids.copy()
            self.assertIs(self.ctx.tile_order(ids2, 6, 5, "l2r", out=ids2), ids2)
            np.testing.assert_array_equal(ids2, ref.tile_order(ids, 6, 5, "l2r"))

    def test_introspection(self):
        names = [b["name"] for b in self.ctx.backends()]
        self.assertIn("cpu", names)
        cpu = [b for b in self.ctx.backends() if b["name"] == "cpu"][0]
        self.assertEqual(cpu["state"], "ok")
        f = np.zeros((1, 1, 8, 8), np.float32)
        ex = self.ctx.explain("tilepack", f, np.zeros((1, 1), np.int32), tile=8)
        self.assertEqual(ex["backend"], "cpu")
        for p in ex["passed_over"]:
            self.assertTrue(p["reason"].startswith(p["code"]), p)
        ex = self.ctx.explain("tilepack", f, np.zeros((1, 1), np.int32), tile=8, backend="cpu")
        self.assertEqual(ex["backend"], "cpu")
        self.ctx.sync()
        self.assertEqual(apexx.version(), apexx.__version__)

    def test_ff_infer(self):
        C, H = 8, 32
        w = self.ctx.ff_weights_seeded(C, 7)
        self.assertEqual(w.channels, C)
        dense = self.feats((1, C, H, H), np.float32)
        util = self.rng.standard_normal((1, 4)).astype(np.float32)
        try:
            heavy, detail, alpha, stats = self.ctx.ff_infer(
                dense, util, split_utilities=util.copy(), weights=w, kmax_l0=4, kmax_l1=16,
                budget_b1=2.0, budget_b2=1.0, stats=True)
        except apexx.Unsupported as e:
            self.skipTest(f"ff_infer not available on this build: {e}")
        self.assertEqual(heavy.shape, dense.shape)
        self.assertEqual(alpha.shape, (1, 1, H, H))
        # budget 2 at cost 0.8 per L0 tile: 2 tiles; b2 1: one parent, 4 children
        self.assertEqual(stats["selected_l0"], [2])
        self.assertEqual(stats["selected_l1"], [4])
        self.assertEqual(sorted(stats["l0_ids"][0]),
                         sorted(np.argsort(-util[0], kind="stable")[:2].tolist()))
        # detail = heavy - heavy_l0; unselected tiles keep dense exactly
        sel = set(stats["l0_ids"][0])
        for tid in set(range(4)) - sel:
            ty, tx = divmod(tid, 2)
            np.testing.assert_array_equal(heavy[0, :, ty * 16:(ty + 1) * 16, tx * 16:(tx + 1) * 16],
                                          dense[0, :, ty * 16:(ty + 1) * 16, tx * 16:(tx + 1) * 16])
        w.close()
        self.assertEqual(w.channels, 0)

    def test_ff_infer_modes(self):
        """order_mode, overlap_mode, blend_alpha and scan_mode as keywords
        (docs/ff_infer.md, Options): the defaults given are the frame
        without them, bit for bit; every order name; blend with alpha 1 is
        the override frame and with alpha 0 leaves dense; forward differs
        from bidirectional; bad values raise InvalidArgument naming them."""
        C, H = 8, 32
        w = self.ctx.ff_weights_seeded(C, 9)
        dense = self.feats((2, C, H, H), np.float32)
        util = self.rng.standard_normal((2, 16)).astype(np.float32)
        kw = dict(split_utilities=util[:, ::-1].copy(), weights=w, tile_l0=8, tile_l1=4,
                  kmax_l0=8, kmax_l1=16, budget_b1=5.0, budget_b2=3.0)
        try:
            base = self.ctx.ff_infer(dense, util, **kw)
        except apexx.Unsupported as e:
            self.skipTest(f"ff_infer not available on this build: {e}")
        same = self.ctx.ff_infer(dense, util, order_mode="hilbert", overlap_mode="override",
                                 blend_alpha=0.5, scan_mode="bidirectional", **kw)
        for got, want in zip(same, base):
            np.testing.assert_array_equal(got, want)
        heavies = []
        for i, order in enumerate(["hilbert", "l2r", "r2l", "u2d", "d2u", "multi_direction"]):
            heavy, _, _ = self.ctx.ff_infer(dense, util, order_mode=order, **kw)
            by_int, _, _ = self.ctx.ff_infer(dense, util, order_mode=i, **kw)
            np.testing.assert_array_equal(heavy, by_int)
            heavies.append(heavy)
        for heavy in heavies[1:]:
            self.assertFalse(np.array_equal(heavy, heavies[0]))
        one = self.ctx.ff_infer(dense, util, overlap_mode="blend", blend_alpha=1.0, **kw)
        for got, want in zip(one, base):
            np.testing.assert_array_equal(got, want)
        zero, detail, _ = self.ctx.ff_infer(dense, util, overlap_mode="blend", blend_alpha=0.0, **kw)
        np.testing.assert_array_equal(zero, dense)
        np.testing.assert_array_equal(detail, np.zeros_like(dense))
        half, _, _ = self.ctx.ff_infer(dense, util, overlap_mode=1, blend_alpha=0.25, **kw)
        self.assertFalse(np.array_equal(half, base[0]))
        fwd, _, _ = self.ctx.ff_infer(dense, util, scan_mode="forward", **kw)
        self.assertFalse(np.array_equal(fwd, base[0]))
        bad = [(dict(order_mode="zigzag"), "order_mode = ['zigzag'] is not one of hilbert"),
               (dict(order_mode=6), "order_mode = [6] is not one of"),
               (dict(overlap_mode="max"), "overlap_mode = ['max'] is not one of override, blend"),
               (dict(blend_alpha=1.5), "blend_alpha = [1.5] is outside [0, 1]"),
               (dict(blend_alpha=-0.25, overlap_mode="blend"),
                "blend_alpha = [-0.25] is outside [0, 1]"),
               (dict(blend_alpha=float("nan")), "blend_alpha = [nan] is outside [0, 1]"),
               (dict(scan_mode="backward"), "scan_mode = [1] (backward) is not"),
               (dict(scan_mode="sideways"), "scan_mode = ['sideways'] is not one of")]
        for extra, text in bad:
            with self.assertRaises(apexx.InvalidArgument) as cm:
                self.ctx.ff_infer(dense, util, **kw, **extra)
            self.assertIn(text, str(cm.exception))
        w.close()
