# SPDX-License-Identifier: Apache-2.0
"""A small training loop through apexx (issue 27): a tile-sparse block built from
apexx.torch ops (tilepack, tilessm_scan, tileunpack, fusiongate_alpha,
fusiongate_fuse) with learned scan vectors, a FiLM-like scale and shift and the
fusion gate's three scalars, trained by SGD for a few steps, against the same
block built from plain PyTorch ops (the compositions the gradient tests use)
from the same initial parameters: the loss and every parameter after every step
agree within fp32 tolerance, and the loss goes down. On the cpu backend here;
on a CUDA device too where torch sees one (python/tests/gpu_run.sh), else that
case skips with the reason."""
import unittest

from apexx_test import TestCase

try:
    import torch
    from test_torch_autograd import alpha_ref, fuse_ref, scan_ref
    from test_torch_autograd_tile import _compose_tilepack, _compose_tileunpack
except ImportError:
    torch = None

STEPS = 6
LR = 0.5


def _apexx_block(at):
    def tileunpack(base, packed, idx, t):
        return at.tileunpack(base, packed, idx=idx)

    def scan(tok, decay, ig, og, sb):
        return at.tilessm_scan(tok, decay, ig, og, sb, direction="bidirectional",
                               merge="avg")[0]
    return at.tilepack, scan, tileunpack, at.fusiongate_alpha, at.fusiongate_fuse


def _torch_block():
    def tileunpack(base, packed, idx, t):
        gw = base.shape[3] // t
        y0 = [[(i // gw) * t for i in row] for row in idx.tolist()]
        x0 = [[(i % gw) * t for i in row] for row in idx.tolist()]
        return _compose_tileunpack(base, packed, y0, x0, None, False, 0.0)

    def scan(tok, decay, ig, og, sb):
        return scan_ref(tok, decay, ig, og, sb, direction="bidirectional", merge="avg")[0]
    return _compose_tilepack, scan, tileunpack, alpha_ref, fuse_ref


def _forward(ops, p, x, idx, t, boundary, uncertainty):
    tilepack, scan, tileunpack, alpha, fuse = ops
    packed = tilepack(x, idx, t)                       # [B,K,C,t,t]
    tok = packed.mean(dim=(3, 4))                      # [B,K,C]
    decay = torch.sigmoid(p["decay_logit"]) * 0.98 + 0.01
    y = scan(tok, decay, p["input_gain"], p["output_gain"], p["state_bias"])
    film = packed * (1 + p["scale"][:, None, None]) + p["shift"][:, None, None]
    heavy = tileunpack(x, film + y[..., None, None], idx, t)
    a = alpha(boundary, uncertainty, p["blw"], p["ulw"], p["bias"])
    return fuse(x, heavy, a)


@unittest.skipIf(torch is None, "torch is not installed for this Python (Debian: python3-torch)")
class TrainingLoop(TestCase):
    def _data(self, device):
        gen = torch.Generator().manual_seed(int(self.rng.integers(1 << 31)))
        B, C, H, W, t = 2, 6, 16, 24, 4
        G = (H // t) * (W // t)
        x = torch.randn(B, C, H, W, generator=gen)
        target = torch.randn(B, C, H, W, generator=gen)
        idx = torch.stack([torch.randperm(G, generator=gen)[:9] for _ in range(B)])
        boundary = torch.rand(B, 1, H, W, generator=gen)
        uncertainty = torch.rand(B, H, W, generator=gen)
        params = {
            "decay_logit": torch.randn(C, generator=gen),
            "input_gain": torch.randn(C, generator=gen),
            "output_gain": torch.randn(C, generator=gen),
            "state_bias": torch.randn(C, generator=gen) * 0.1,
            "scale": torch.randn(C, generator=gen) * 0.1,
            "shift": torch.randn(C, generator=gen) * 0.1,
            "blw": torch.tensor(0.3), "ulw": torch.tensor(-0.5), "bias": torch.tensor(0.1),
        }
        data = [v.to(device) for v in (x, target, idx, boundary, uncertainty)]
        return data, t, {k: v.to(device) for k, v in params.items()}

    def _train(self, ops, data, t, init):
        x, target, idx, boundary, uncertainty = data
        p = {k: v.clone().requires_grad_() for k, v in init.items()}
        losses, states = [], []
        for _ in range(STEPS):
            out = _forward(ops, p, x, idx, t, boundary, uncertainty)
            loss = ((out - target) ** 2).mean()
            for v in p.values():
                v.grad = None
            loss.backward()
            with torch.no_grad():
                for name, v in p.items():
                    self.assertIsNotNone(v.grad, f"{name}: no gradient")
                    v -= LR * v.grad
            losses.append(loss.item())
            states.append({k: v.detach().cpu().clone() for k, v in p.items()})
        return losses, states

    def _loop(self, device):
        import apexx.torch as at
        data, t, init = self._data(device)
        ours = self._train(_apexx_block(at), data, t, init)
        theirs = self._train(_torch_block(), data, t, init)
        for step in range(STEPS):
            self.assertAlmostEqual(ours[0][step], theirs[0][step], delta=1e-5 * theirs[0][step],
                                   msg=f"{device} step {step}: loss")
            for name, want in theirs[1][step].items():
                torch.testing.assert_close(ours[1][step][name], want, rtol=1e-4, atol=1e-5,
                                           msg=lambda m: f"{device} step {step}: {name}: {m}")
        self.assertLess(ours[0][-1], ours[0][0] * 0.99, f"{device}: the loss did not go down")
        # every learned parameter moved: no gradient was dropped on the way
        for name, v in ours[1][-1].items():
            self.assertFalse(torch.equal(v, init[name].cpu()), f"{device}: {name} never updated")

    def test_sgd_on_cpu(self):
        self._loop("cpu")

    def test_sgd_on_cuda(self):
        if not torch.cuda.is_available():
            self.skipTest("no CUDA device visible to torch")
        self._loop("cuda")


if __name__ == "__main__":
    unittest.main()
