# SPDX-License-Identifier: Apache-2.0
"""Autograd of apexx.torch.fusiongate_fuse, fusiongate_alpha and tilessm_scan (issue 27),
on torch.ops.apexx.<op> and apexx.torch.<op> alike, on CPU tensors (skipped where torch is
not installed): the gradients against torch autograd of a plain PyTorch composition of
the same math (docs/ops.md; f32, random shapes, every scan direction and merge, clamp on
and off, init_state and merge_gate in every form, NaN and infinite proxies and tokens),
against central finite differences of the op itself, and torch.library.opcheck where
torch >= 2.4 (skipped with the reason before)."""
import itertools
import unittest

from apexx_test import TestCase

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None


# ---- the plain PyTorch compositions (docs/ops.md, each op's formula) -------------------
def fuse_ref(base, detail, alpha):
    a = alpha.unsqueeze(1) if alpha.dim() == 3 else alpha
    return base + a * (detail - base)


def alpha_ref(boundary, uncertainty, blw, ulw, bias):
    b = torch.nan_to_num(boundary, nan=0.0, posinf=1.0, neginf=0.0)
    u = torch.nan_to_num(uncertainty, nan=0.0, posinf=1.0, neginf=0.0)
    if b.dim() == 3:
        b = b.unsqueeze(1)
    if u.dim() == 3:
        u = u.unsqueeze(1)
    return torch.sigmoid(F.softplus(blw) * b + F.softplus(ulw) * u + bias)


def scan_ref(tokens, decay, input_gain, output_gain, state_bias, init_state=None,
             merge_gate=None, clamp_value=1e4, direction="forward", merge="avg"):
    B, K, C = tokens.shape
    lim = abs(clamp_value)
    x = torch.nan_to_num(tokens, nan=0.0, posinf=lim, neginf=-lim).clamp(-lim, lim)
    d = decay.clamp(1e-6, 1 - 1e-6)
    om = 1 - d

    def run(dir_index, reverse):
        if init_state is None:
            s = tokens.new_zeros(B, C)
        elif init_state.dim() == 3:
            s = init_state[:, dir_index]
        else:
            s = init_state
        ys = [None] * K
        for k in (reversed(range(K)) if reverse else range(K)):
            s = d * s + om * (input_gain * x[:, k] + state_bias)
            ys[k] = output_gain * s
        y = torch.stack(ys, 1) if K else tokens.new_zeros(B, 0, C)
        return y, s

    if direction == "forward":
        return run(0, False)
    if direction == "backward":
        return run(1, True)
    yf, sf = run(0, False)
    yb, sb = run(1, True)
    final = torch.stack((sf, sb), 1)
    if merge == "sum":
        return yf + yb, final
    if merge == "avg":
        return 0.5 * (yf + yb), final
    g = tokens.new_full((C,), 0.5) if merge_gate is None else merge_gate.clamp(0, 1)
    if g.dim() == 3:  # [B,1,C]
        return g * yf + (1 - g) * yb, final
    return g * yf + (1 - g) * yb, final


def _leaves(values):
    return [None if v is None else v.detach().clone().requires_grad_() for v in values]


def _grads(leaves):
    return [None if v is None else v.grad for v in leaves]


@unittest.skipIf(torch is None, "torch is not installed for this Python (Debian: python3-torch)")
class TorchAutograd(TestCase):
    @classmethod
    def setUpClass(cls):
        import apexx.torch as at
        cls.at = at
        cls.forms = (("torch.ops.apexx", torch.ops.apexx), ("apexx.torch", at))

    def setUp(self):
        super().setUp()
        self.gen = torch.Generator().manual_seed(int(self.rng.integers(1 << 31)))

    def randn(self, *shape):
        return torch.randn(shape, generator=self.gen)

    def rand(self, *shape):
        return torch.rand(shape, generator=self.gen)

    def randint(self, lo, hi):
        return int(torch.randint(lo, hi + 1, (1,), generator=self.gen))

    def assert_grads(self, got, want, what):
        for i, (g, w) in enumerate(zip(got, want)):
            if w is None:
                self.assertTrue(g is None or not g.abs().any(), f"{what}: input {i}")
                continue
            self.assertIsNotNone(g, f"{what}: input {i} got no gradient")
            scale = max(1.0, float(w.abs().max())) if w.numel() else 1.0
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5 * scale,
                                       msg=lambda m: f"{what}: input {i}: {m}")

    # ---- against torch autograd of the composition ----
    def test_fuse_against_composition(self):
        for rep, (name, ops) in itertools.product(range(4), self.forms):
            B, C, H, W = (self.randint(1, 3), self.randint(1, 5), self.randint(1, 9),
                          self.randint(1, 9))
            alpha = self.rand(B, H, W) if rep % 2 else self.rand(B, 1, H, W)
            inputs = [self.randn(B, C, H, W), self.randn(B, C, H, W), alpha]
            g = self.randn(B, C, H, W)
            ours, theirs = _leaves(inputs), _leaves(inputs)
            (ops.fusiongate_fuse(*ours) * g).sum().backward()
            (fuse_ref(*theirs) * g).sum().backward()
            self.assert_grads(_grads(ours), _grads(theirs), f"{name}.fusiongate_fuse rep {rep}")

    def test_alpha_against_composition(self):
        for rep, (name, ops) in itertools.product(range(4), self.forms):
            B, H, W = self.randint(1, 3), self.randint(1, 9), self.randint(1, 9)
            b = self.randn(B, 1, H, W) * 2
            u = self.randn(B, H, W) * 2 if rep % 2 else self.randn(B, 1, H, W) * 2
            if rep >= 2:  # sanitised proxies: gradient 0 there
                b.view(-1)[0], u.view(-1)[-1] = float("nan"), float("inf")
                if b.numel() > 1:
                    b.view(-1)[1] = float("-inf")
            scalars = [float(self.randn()) * 3, 22.0 if rep == 3 else float(self.randn()),
                       float(self.randn())]
            g = self.randn(B, 1, H, W)
            ours, theirs = _leaves([b, u]), _leaves([b, u])
            (ops.fusiongate_alpha(*ours, *scalars) * g).sum().backward()
            (alpha_ref(*theirs, *[torch.tensor(v) for v in scalars]) * g).sum().backward()
            self.assert_grads(_grads(ours), _grads(theirs), f"{name}.fusiongate_alpha rep {rep}")

    def test_alpha_learned_scalars(self):
        """boundary_log_weight, uncertainty_log_weight and bias as 0-d tensors that require
        grad (the seed's FusionGate learns them) through apexx.torch.fusiongate_alpha."""
        b, u = self.randn(2, 1, 5, 6), self.randn(2, 5, 6)
        scalars = [torch.tensor(0.3), torch.tensor(-1.2), torch.tensor(0.4)]
        g = self.randn(2, 1, 5, 6)
        ours, theirs = _leaves([b, u] + scalars), _leaves([b, u] + scalars)
        out = self.at.fusiongate_alpha(*ours)
        (out * g).sum().backward()
        (alpha_ref(*theirs) * g).sum().backward()
        self.assert_grads(_grads(ours), _grads(theirs), "apexx.torch.fusiongate_alpha learned")
        # a mix of floats and tensors
        lw = torch.tensor(25.0, requires_grad=True)  # beyond softplus's threshold
        (self.at.fusiongate_alpha(b, u, lw, 1.0, 0.0) * g).sum().backward()
        lw2 = torch.tensor(25.0, requires_grad=True)
        (alpha_ref(b, u, lw2, torch.tensor(1.0), torch.tensor(0.0)) * g).sum().backward()
        torch.testing.assert_close(lw.grad, lw2.grad, rtol=1e-4, atol=1e-6)

    def _scan_case(self, direction, merge, init_form, gate_form, clamp):
        B, K, C = self.randint(1, 3), self.randint(1, 12), self.randint(1, 9)
        tokens = self.randn(B, K, C) * 2
        if clamp < 10:  # some tokens beyond the clamp, some non-finite
            tokens.view(-1)[0] = float("inf")
            tokens.view(-1)[-1] = float("nan")
        vectors = [self.rand(C) * 0.98 + 0.01, self.randn(C), self.randn(C), self.randn(C)]
        if C > 1:
            vectors[0][0] = 1.5  # decay beyond its clamp: gradient 0
        init = {0: None, 2: self.randn(B, C), 3: self.randn(B, 2, C)}[init_form]
        gate = {0: None, 1: self.rand(C) * 1.4 - 0.2, 3: self.rand(B, 1, C) * 1.4 - 0.2}[gate_form]
        return tokens, vectors, init, gate

    def test_scan_against_composition(self):
        """Every direction and merge, init_state absent, [B,C] and [B,2,C], merge_gate absent,
        [C] and [B,1,C] (values outside [0, 1]), clamp on and off, both call forms."""
        combos = [(d, m) for d in ("forward", "backward") for m in ("avg",)] + \
                 [("bidirectional", m) for m in ("sum", "avg", "gated")]
        for (direction, merge), init_form, gate_form, clamp in itertools.product(
                combos, (0, 2, 3), (0, 1, 3), (1e4, 1.5)):
            tokens, vectors, init, gate = self._scan_case(direction, merge, init_form, gate_form,
                                                          clamp)
            inputs = [tokens, *vectors, init, gate]
            gy = self.randn(*tokens.shape)
            for name, ops in self.forms:
                what = (f"{name}.tilessm_scan {direction} {merge} init {init_form} "
                        f"gate {gate_form} clamp {clamp}")
                ours, theirs = _leaves(inputs), _leaves(inputs)
                y, final = ops.tilessm_scan(*ours, clamp, direction, merge)
                gf = self.randn(*final.shape)
                ((y * gy).sum() + (final * gf).sum()).backward()
                yr, fr = scan_ref(*theirs, clamp, direction, merge)
                torch.testing.assert_close(y, yr, rtol=1e-4, atol=1e-4)
                ((yr * gy).sum() + (fr * gf).sum()).backward()
                want = _grads(theirs)
                if not (direction == "bidirectional" and merge == "gated"):
                    want[6] = None  # the gate is not read: zero gradient
                self.assert_grads(_grads(ours), want, what)

    def test_scan_only_out_used(self):
        """A loss of out alone (final_state unused) and of final_state alone."""
        tokens, vectors, init, gate = self._scan_case("bidirectional", "gated", 3, 1, 1e4)
        for which in (0, 1):
            ours, theirs = _leaves([tokens, *vectors, init, gate]), \
                _leaves([tokens, *vectors, init, gate])
            self.at.tilessm_scan(*ours, 1e4, "bidirectional", "gated")[which].sum().backward()
            scan_ref(*theirs, 1e4, "bidirectional", "gated")[which].sum().backward()
            want = _grads(theirs)
            self.assert_grads(_grads(ours), want, f"tilessm_scan output {which} alone")

    # ---- against finite differences of the op itself ----
    def _directional(self, loss, inputs, index, eps):
        """(analytic, central-difference) derivative of loss along a random direction of
        input `index` (f32)."""
        leaves = _leaves(inputs)
        loss(*leaves).backward()
        v = self.randn(*inputs[index].shape)
        analytic = float((leaves[index].grad * v).sum())
        with torch.no_grad():
            plus = list(inputs)
            minus = list(inputs)
            plus[index] = inputs[index] + eps * v
            minus[index] = inputs[index] - eps * v
            numeric = (float(loss(*plus)) - float(loss(*minus))) / (2 * eps)
        return analytic, numeric

    def assert_fd(self, analytic, numeric, what):
        tol = 2e-2 * max(abs(analytic), abs(numeric), 1e-2)
        self.assertLessEqual(abs(analytic - numeric), tol,
                             f"{what}: autograd {analytic!r}, finite differences {numeric!r}")

    def test_finite_differences(self):
        at = self.at
        B, C, H, W = 2, 3, 4, 5
        fuse_in = [self.randn(B, C, H, W), self.randn(B, C, H, W), self.rand(B, 1, H, W)]
        g = self.randn(B, C, H, W)
        for i in range(3):
            self.assert_fd(*self._directional(lambda *a: (at.fusiongate_fuse(*a) * g).sum(),
                                              fuse_in, i, 1e-2), f"fusiongate_fuse input {i}")
        alpha_in = [self.randn(B, 1, H, W), self.randn(B, H, W), torch.tensor(0.4),
                    torch.tensor(-0.7), torch.tensor(0.2)]
        ga = self.randn(B, 1, H, W)
        for i in range(5):
            self.assert_fd(*self._directional(lambda *a: (at.fusiongate_alpha(*a) * ga).sum(),
                                              alpha_in, i, 1e-2), f"fusiongate_alpha input {i}")
        for direction, merge in (("forward", "avg"), ("backward", "avg"),
                                 ("bidirectional", "sum"), ("bidirectional", "avg"),
                                 ("bidirectional", "gated")):
            K = 6
            scan_in = [self.randn(B, K, C), self.rand(C) * 0.8 + 0.1, self.randn(C),
                       self.randn(C), self.randn(C), self.randn(B, 2, C),
                       self.rand(B, 1, C) * 0.8 + 0.1]
            gy, gf = self.randn(B, K, C), self.randn(B, 2 if direction == "bidirectional" else 1,
                                                     C)

            def loss(*a):
                y, final = at.tilessm_scan(*a, 1e4, direction, merge)
                return (y * gy).sum() + (final * gf.reshape(final.shape)).sum()

            for i in range(7 if merge == "gated" else 6):
                self.assert_fd(*self._directional(loss, scan_in, i, 1e-2),
                               f"tilessm_scan {direction} {merge} input {i}")

    # ---- CUDA: the cuda backend's backward ops against the cpu backend's ----
    def test_cuda_gradients_match_cpu(self):
        if not torch.cuda.is_available():
            self.skipTest("no CUDA device visible to torch")
        tokens, vectors, init, gate = self._scan_case("bidirectional", "gated", 3, 3, 1.5)
        B, H, W = 2, 9, 11
        cases = {
            "fusiongate_fuse": ([self.randn(B, 3, H, W), self.randn(B, 3, H, W),
                                 self.rand(B, H, W)], ()),
            "fusiongate_alpha": ([self.randn(B, 1, H, W), self.randn(B, H, W)], (0.3, -0.4, 0.1)),
            "tilessm_scan": ([tokens, *vectors, init, gate], (1.5, "bidirectional", "gated")),
        }
        for name, (tensors, options) in cases.items():
            grads = []
            for device in ("cpu", "cuda"):
                leaves = _leaves([t.to(device) for t in tensors])
                outs = getattr(torch.ops.apexx, name)(*leaves, *options)
                outs = outs if isinstance(outs, tuple) else (outs,)
                sum((o * torch.linspace(-1, 1, o.numel(), device=device).view(o.shape)).sum()
                    for o in outs).backward()
                grads.append([g.cpu() for g in _grads(leaves)])
            self.assert_grads(grads[1], grads[0], f"torch.ops.apexx.{name} on cuda")

    # ---- opcheck ----
    def test_opcheck(self):
        opcheck = getattr(getattr(torch, "library", None), "opcheck", None)
        if opcheck is None:
            self.skipTest(f"torch {torch.__version__} has no torch.library.opcheck (torch >= 2.4)")
        B, C, H, W = 2, 3, 4, 5
        req = lambda t: t.requires_grad_()  # noqa: E731
        cases = {
            "fusiongate_fuse": (req(self.randn(B, C, H, W)), req(self.randn(B, C, H, W)),
                                req(self.rand(B, 1, H, W))),
            "fusiongate_alpha": (req(self.randn(B, 1, H, W)), req(self.randn(B, H, W)),
                                 0.3, -0.2, 0.1),
            "tilessm_scan": (req(self.randn(B, 5, C)), req(self.rand(C) * 0.9), req(self.randn(C)),
                             req(self.randn(C)), req(self.randn(C)), req(self.randn(B, 2, C)),
                             req(self.rand(C)), 1e4, "bidirectional", "gated"),
        }
        for name, args in cases.items():
            with self.subTest(op=name):
                opcheck(getattr(torch.ops.apexx, name).default, args)


if __name__ == "__main__":
    unittest.main()
