# SPDX-License-Identifier: Apache-2.0
"""Autograd of apexx.torch's tile ops and index_select (test_torch_autograd.py has
the fusion gate's and the scan's) (skipped where torch is
not installed): the gradients of tilepack, tileunpack (override and blend,
ids and origins, levels, assume_priority_sorted), fused_pack_op_unpack and
index_select, as torch.ops.apexx.<op> and apexx.torch.<op>, against torch
autograd of a plain PyTorch composition of the same math (f32, random
shapes, repeated ids, overlapping origins) and against central finite
differences; the backward ops' own gradients (double backward); and
torch.library.opcheck on each op where torch >= 2.4."""
import unittest

from apexx_test import TestCase

try:
    import torch
except ImportError:
    torch = None


def _compose_tilepack(x, idx, t):
    """tilepack as torch ops: the tile grid as [B, tiles, C, t, t], rows picked by idx."""
    b, c, h, w = x.shape
    tiles = x.reshape(b, c, h // t, t, w // t, t).permute(0, 2, 4, 1, 3, 5)
    tiles = tiles.reshape(b, (h // t) * (w // t), c, t, t)
    return tiles[torch.arange(b)[:, None], idx]


def _keys(levels, b, k_count):
    """docs/ops.md, tileunpack (priority): key = ((level - lmin) << order_bits) + k, else k."""
    if levels is None:
        return list(range(k_count))
    lmin = int(levels.min())
    order_bits = max(1, (k_count - 1).bit_length())
    return [((int(levels[b, k]) - lmin) << order_bits) + k for k in range(k_count)]


def _compose_tileunpack(base, packed, y0, x0, levels, blend, alpha):
    """tileunpack as torch ops: the tiles applied to a copy of base in ascending key order."""
    out = base.clone()
    t = packed.shape[3]
    for b in range(base.shape[0]):
        keys = _keys(levels, b, packed.shape[1])
        for k in sorted(range(packed.shape[1]), key=lambda k: keys[k]):
            ys, xs = slice(y0[b][k], y0[b][k] + t), slice(x0[b][k], x0[b][k] + t)
            if blend:
                out[b, :, ys, xs] = (1 - alpha) * out[b, :, ys, xs] + alpha * packed[b, k]
            else:
                out[b, :, ys, xs] = packed[b, k]
    return out


def _compose_fused(x, idx, t, vs, vb, gs, gb):
    """fused_pack_op_unpack as torch ops: the transform where the tile mask is set."""
    b, c, h, w = x.shape
    gw = w // t
    mask = torch.zeros(b, 1, h, w, dtype=torch.bool)
    for bb in range(b):
        for i in idx[bb].tolist():
            mask[bb, :, (i // gw) * t:(i // gw + 1) * t, (i % gw) * t:(i % gw + 1) * t] = True
    return torch.where(mask, (x * vs + vb) * torch.relu(x * gs + gb), x)


@unittest.skipIf(torch is None, "torch is not installed for this Python (Debian: python3-torch)")
class TorchAutogradTile(TestCase):
    @classmethod
    def setUpClass(cls):
        import apexx.torch as at
        cls.at = at

    def setUp(self):
        super().setUp()
        self.gen = torch.Generator().manual_seed(int(self.rng.integers(1 << 31)))

    def randn(self, *shape):
        return torch.randn(*shape, generator=self.gen)

    def randint(self, lo, hi, shape):
        return torch.randint(lo, hi, shape, generator=self.gen)

    def forms(self, name):
        return (("torch.ops.apexx", getattr(torch.ops.apexx, name)),
                ("apexx.torch", getattr(self.at, name)))

    def grads(self, fn, inputs, weight):
        """The gradients of sum(fn(*inputs) * weight) for the float inputs."""
        leaves = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor)
                  and a.is_floating_point() else a for a in inputs]
        out = fn(*leaves)
        (out * weight).sum().backward()
        return [a.grad for a in leaves if isinstance(a, torch.Tensor) and a.is_floating_point()]

    def check_against(self, name, apexx_args, compose, compose_args, out_shape, rtol=1e-5,
                      atol=1e-5):
        weight = self.randn(*out_shape)
        want = self.grads(compose, compose_args, weight)
        for form, fn in self.forms(name):
            got = self.grads(fn, apexx_args, weight)
            self.assertEqual(len(got), len(want))
            for i, (g, w) in enumerate(zip(got, want)):
                self.assertIsNotNone(g, f"{form}.{name}: input {i} has no gradient")
                torch.testing.assert_close(g, w, rtol=rtol, atol=atol,
                                           msg=lambda m: f"{form}.{name} input {i}: {m}")

    def check_finite_differences(self, fn, inputs, at, out_shape, eps=1e-2, rtol=2e-3):
        """<grad of sum(fn * w) wrt inputs[at], v> against a central difference along v."""
        weight = self.randn(*out_shape)
        grad = self.grads(fn, inputs, weight)
        float_positions = [i for i, a in enumerate(inputs)
                           if isinstance(a, torch.Tensor) and a.is_floating_point()]
        g = grad[float_positions.index(at)]
        v = self.randn(*inputs[at].shape)

        def f(shift):
            moved = list(inputs)
            moved[at] = inputs[at] + shift * v
            with torch.no_grad():
                return float((fn(*moved).double() * weight.double()).sum())
        numeric = (f(eps) - f(-eps)) / (2 * eps)
        analytic = float((g.double() * v.double()).sum())
        scale = float((g.double().abs() * v.double().abs()).sum()) + 1.0
        self.assertLessEqual(abs(numeric - analytic), rtol * scale,
                             f"finite difference {numeric} vs gradient {analytic}")

    # ---- tilepack --------------------------------------------------------------------
    def test_tilepack_gradient(self):
        for _ in range(4):
            b, c, t = (int(v) for v in self.rng.integers(1, 4, 3))
            gh, gw, k = (int(v) for v in self.rng.integers(1, 4, 3))
            k += 2  # repeats are likely: K of 3..5 ids over 1..9 tiles
            x = self.randn(b, c, gh * t, gw * t)
            idx = self.randint(0, gh * gw, (b, k))
            self.check_against("tilepack", (x, idx, t), _compose_tilepack, (x, idx, t),
                               (b, k, c, t, t))
            self.check_finite_differences(torch.ops.apexx.tilepack, (x, idx, t), 0,
                                          (b, k, c, t, t))

    def test_tilepack_half_gradient(self):
        """f16 and bf16: the summed repeats in fp32, rounded once."""
        x = self.randn(2, 3, 8, 8)
        idx = torch.tensor([[1, 1, 3, 1], [0, 2, 2, 3]])
        weight = self.randn(2, 4, 3, 4, 4)
        want = self.grads(_compose_tilepack, (x, idx, 4), weight)[0]
        for dt in (torch.float16, torch.bfloat16):
            got = self.grads(self.at.tilepack, (x.to(dt), idx, 4), weight.to(dt))[0]
            self.assertEqual(got.dtype, dt)
            torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)

    # ---- tileunpack ------------------------------------------------------------------
    def unpack_case(self, use_origins, use_levels, blend):
        b, c, t = (int(v) for v in self.rng.integers(1, 4, 3))
        gh, gw = (int(v) for v in self.rng.integers(1, 4, 2))
        k = int(self.rng.integers(1, 7))
        h, w = gh * t, gw * t
        base, packed = self.randn(b, c, h, w), self.randn(b, k, c, t, t)
        idx = self.randint(0, gh * gw, (b, k))
        if use_origins:
            origins = torch.stack([self.randint(0, h - t + 1, (b, k)),
                                   self.randint(0, w - t + 1, (b, k))], dim=2)
            y0, x0 = origins[..., 0].tolist(), origins[..., 1].tolist()
        else:
            origins = None
            y0, x0 = ((idx // gw) * t).tolist(), ((idx % gw) * t).tolist()
        levels = self.randint(-2, 3, (b, k)) if use_levels else None
        alpha = float(self.rng.choice([0.0, 0.3, 1.0])) if blend else 0.5
        sorted_flag = bool(self.rng.integers(0, 2)) if use_levels else True
        apexx_args = (base, packed, None if use_origins else idx, origins, levels,
                      "blend" if blend else "override", alpha, sorted_flag)
        compose_args = (base, packed, y0, x0, levels, blend, alpha)
        return apexx_args, compose_args, (b, c, h, w)

    def test_tileunpack_gradient(self):
        for use_origins in (False, True):
            for use_levels in (False, True):
                for blend in (False, True):
                    with self.subTest(origins=use_origins, levels=use_levels, blend=blend):
                        for _ in range(2):
                            args, compose_args, shape = self.unpack_case(use_origins,
                                                                         use_levels, blend)
                            self.check_against("tileunpack", args, _compose_tileunpack,
                                               compose_args, shape)
                            for at in (0, 1):
                                self.check_finite_differences(torch.ops.apexx.tileunpack,
                                                              args, at, shape)

    # ---- fused_pack_op_unpack --------------------------------------------------------
    def test_fused_gradient(self):
        for require_unique in (True, False):
            for _ in range(3):
                b, c, t = (int(v) for v in self.rng.integers(1, 4, 3))
                gh, gw = (int(v) for v in self.rng.integers(1, 4, 2))
                x = self.randn(b, c, gh * t, gw * t)
                if require_unique:
                    k = int(self.rng.integers(0, gh * gw + 1))
                    idx = torch.stack([torch.randperm(gh * gw, generator=self.gen)[:k]
                                       for _ in range(b)])
                else:
                    idx = self.randint(0, gh * gw, (b, int(self.rng.integers(1, 6))))
                vs, vb, gs, gb = (float(v) for v in self.rng.normal(0, 1.5, 4))
                # keep the gate away from its kink, where a finite difference jumps
                gate = x * gs + gb
                x = torch.where(gate.abs() < 0.05, x + (0.2 / gs if abs(gs) > 0.1 else 0.0), x)
                args = (x, idx, t, vs, vb, gs, gb, require_unique)
                self.check_against("fused_pack_op_unpack", args, _compose_fused,
                                   (x, idx, t, vs, vb, gs, gb), x.shape)
                if (x * gs + gb).abs().min() > 0.02:
                    self.check_finite_differences(torch.ops.apexx.fused_pack_op_unpack, args,
                                                  0, x.shape, eps=1e-3)

    # ---- index_select ----------------------------------------------------------------
    def test_index_select_gradient(self):
        for _ in range(4):
            m, d, n = (int(v) for v in self.rng.integers(1, 7, 3))
            src, index = self.randn(m, d), self.randint(0, m, (n + 2,))
            self.check_against("index_select", (src, index),
                               lambda s, i: torch.index_select(s, 0, i), (src, index), (n + 2, d))
            self.check_finite_differences(torch.ops.apexx.index_select, (src, index), 0,
                                          (n + 2, d))

    def test_index_select_any_dim_gradient(self):
        """Along every dim of ndim 1..4 (dim from either end), repeats and an empty
        index: the gradient against torch.index_select's, the backward op's own
        gradient (double backward) against index_select along the same dim."""
        for ndim in range(1, 5):
            for dim in range(-ndim, ndim):
                shape = [int(v) for v in self.rng.integers(1, 5, ndim)]
                n = int(self.rng.integers(0, 7))
                src = self.randn(*shape)
                index = self.randint(0, shape[dim], (n,))
                if n > 2:
                    index[1] = index[0]  # a repeat: its gradients add up
                out_shape = list(shape)
                out_shape[dim] = n
                self.check_against("index_select", (src, index, dim),
                                   lambda s, i, d: torch.index_select(s, d, i),
                                   (src, index, dim), out_shape)
                grad_out = self.randn(*out_shape)
                for form, fn in self.forms("index_select_backward"):
                    g = grad_out.clone().requires_grad_()
                    got = fn(g, index, shape, dim)
                    want = torch.zeros(shape).index_add_(dim, index, grad_out)
                    torch.testing.assert_close(got, want, msg=lambda m: f"{form}: {m}")
                    weight = self.randn(*shape)
                    (got * weight).sum().backward()
                    torch.testing.assert_close(g.grad, torch.index_select(weight, dim, index),
                                               msg=lambda m: f"{form} double backward: {m}")

    # ---- double backward -------------------------------------------------------------
    def test_double_backward_of_the_linear_ops(self):
        """The backward ops of tilepack, tileunpack and index_select (and gather's) are
        linear in the gradient: their own gradients are the forward ops."""
        x, idx = self.randn(2, 3, 8, 8), torch.tensor([[1, 1, 3], [0, 2, 2]])
        src, index = self.randn(5, 3), torch.tensor([4, 0, 4, 1])
        gidx = torch.tensor([[0, 4, 4], [2, 2, 0]])
        cases = [
            ("tilepack", (x, idx, 4), _compose_tilepack, (x, idx, 4), (2, 3, 3, 4, 4)),
            ("index_select", (src, index), lambda s, i: torch.index_select(s, 0, i),
             (src, index), (4, 3)),
            ("gather", (src, 0, gidx), torch.gather, (src, 0, gidx), (2, 3)),
            ("tileunpack", (x, self.randn(2, 3, 3, 4, 4), idx, None, None, "blend", 0.25, True),
             lambda b, p: _compose_tileunpack(b, p, ((idx // 2) * 4).tolist(),
                                              ((idx % 2) * 4).tolist(), None, True, 0.25),
             None, (2, 3, 8, 8)),
        ]
        for name, args, compose, compose_args, out_shape in cases:
            with self.subTest(op=name):
                floats = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
                compose_args = compose_args or tuple(floats)
                weight = self.randn(*out_shape)

                def second(fn, fargs):
                    leaves = [a.detach().clone().requires_grad_()
                              if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                              for a in fargs]
                    floats_in = [a for a in leaves if isinstance(a, torch.Tensor)
                                 and a.requires_grad]
                    w = weight.clone().requires_grad_()
                    grads = torch.autograd.grad((fn(*leaves) * w).sum(), floats_in,
                                                create_graph=True)
                    (sum((g * g).sum() for g in grads)).backward()
                    return w.grad
                want = second(compose, compose_args)
                for form, fn in self.forms(name):
                    got = second(fn, args)
                    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5,
                                               msg=lambda m: f"{form}.{name}: {m}")

    # ---- opcheck ---------------------------------------------------------------------
    def test_opcheck(self):
        opcheck = getattr(torch.library, "opcheck", None)
        if opcheck is None:
            self.skipTest(f"torch {torch.__version__} has no torch.library.opcheck "
                          "(torch >= 2.4)")
        x, idx = self.randn(2, 3, 8, 8).requires_grad_(), torch.tensor([[1, 1, 3], [0, 2, 2]])
        packed = self.randn(2, 3, 3, 4, 4).requires_grad_()
        src, index = self.randn(5, 3).requires_grad_(), torch.tensor([4, 0, 4, 1])
        cases = [
            ("tilepack", (x, idx, 4)),
            ("tileunpack", (x, packed, idx, None, None, "override", 0.5, True)),
            ("tileunpack", (x, packed, idx, None, torch.tensor([[1, 0, 1], [0, 0, 2]]), "blend",
                            0.25, False)),
            ("fused_pack_op_unpack", (x, torch.tensor([[1, 3], [0, 2]]), 4, 1.5, 0.1, -0.7,
                                      0.2, True)),
            ("index_select", (src, index)),
            ("tilepack_backward", (packed, idx, [2, 3, 8, 8])),
            ("tileunpack_backward", (x, idx, None, None, "blend", 0.25, True, 4)),
            # no gradient of its own (NoBackwardError): inputs that need none
            ("fused_pack_op_unpack_backward", (x.detach(), x.detach(), idx, 4, 1.5, 0.1, -0.7,
                                               0.2, False)),
            ("index_select_backward", (self.randn(4, 3).requires_grad_(), index, [5, 3])),
        ]
        for name, args in cases:
            with self.subTest(op=name):
                opcheck(getattr(torch.ops.apexx, name), args)
