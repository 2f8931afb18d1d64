#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The FF path of docs/ff_infer.md in plain PyTorch, beside apexx.

A PyTorch module with the seed FFModule's parameter names (so that its
state_dict() is what a user exports) and a forward that follows
docs/ff_infer.md: routing in float64 on the host, then per level pack,
token mean, bidirectional scan with merge gate, FiLM, refine block, override
unpack and fusion gate, rounding to the frame dtype at the document's rnd()
points. The script

  1. builds the module (torch.manual_seed), exports its state_dict as a
     safetensors file (safetensors.torch.save_file when installed, else the
     plain writer of tools/export_ff_weights.py),
  2. loads that file with apexx (apx_ff_weights_load through the Python
     package) and runs apx_ff_infer on the same inputs,
  3. compares heavy, detail and alpha (the tolerance of tests/test_cuda_ff.c)
     and the routing counts, and
  4. times both (eager torch frames, apexx eager and graph replay on cuda).

  torch_ff.py [--device cpu|cuda] [--dtype f16|bf16|f32] [--channels 128]
              [--size 128] [--kmax 32] [--iters 50] [--json OUT]
Exit status: 0 parity ok, 1 parity broken, 77 torch or apexx missing.
"""
import argparse
import json
import math
import os
import struct
import sys
import tempfile
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    print("SKIP: torch is not importable: %s" % e)
    sys.exit(77)


# ---- the module (parameter names = the seed's FFModule state_dict) --------
class Scan(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.decay_logit = nn.Parameter(torch.zeros(c))
        self.input_gain_raw = nn.Parameter(torch.zeros(c))
        self.output_gain_raw = nn.Parameter(torch.zeros(c))
        self.state_bias = nn.Parameter(torch.zeros(c))


class BiScan(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.merge_gate_logit = nn.Parameter(torch.zeros(c))
        self.forward_scan = Scan(c)
        self.backward_scan = Scan(c)


class Film(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.token_norm = nn.LayerNorm(c)
        self.mlp = nn.Sequential(nn.Linear(c, c), nn.SiLU(), nn.Linear(c, 2 * c))


class Refine(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.depthwise = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.pointwise = nn.Conv2d(c, 2 * c, 1)
        self.norm = nn.GroupNorm(1, 2 * c)


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.boundary_log_weight = nn.Parameter(torch.tensor(1.0))
        self.uncertainty_log_weight = nn.Parameter(torch.tensor(1.0))
        self.bias = nn.Parameter(torch.tensor(0.0))


class Path(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.scan_bidirectional = BiScan(c)
        self.scan_forward = Scan(c)  # in the seed's state dict, unused
        self.film = Film(c)
        self.refine = Refine(c)
        self.fusion_gate = Gate()


class FFModule(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.l0_path = Path(c)
        self.l1_path = Path(c)


def randomise(module, gen):
    """Non-default values for the parameters that start constant, so that a
    swapped or ignored tensor shows."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "scan" in name or "norm" in name or "fusion_gate" in name:
                p.add_(torch.randn(p.shape, generator=gen) * 0.3)


# ---- routing (docs/ff_infer.md "Routing", float64) -----------------------
def hilbert_d(x, y, n):
    d, s = 0, n // 2
    while s > 0:
        rx = 1 if x & s else 0
        ry = 1 if y & s else 0
        d += s * s * ((3 * rx) ^ ry)
        if ry == 0:
            if rx == 1:
                x = (s - 1) - (x & (s - 1))
                y = (s - 1) - (y & (s - 1))
            x, y = y, x
        s //= 2
    return d


def hilbert_sorted(ids, gh, gw):
    n = 1
    while n < max(gh, gw):
        n *= 2
    return sorted(ids, key=lambda i: hilbert_d(i % gw, i // gw, n))


def route(u, s, gh0, gw0, kmax0, kmax1, b1, b2, cost_heavy, cost_cheap, nesting):
    delta = max(cost_heavy - cost_cheap, 1e-9)
    order = sorted(range(len(u)), key=lambda i: (-(u[i] / delta), i))
    l0, spent = [], 0.0
    for i in order:
        if len(l0) >= kmax0:
            break
        if spent + delta <= b1 + 1e-9:
            l0.append(i)
            spent += delta
    l1, spent2 = [], 0.0
    if nesting and s is not None and kmax1 > 0 and b2 > 0 and l0:
        gw1 = 2 * gw0
        for p in sorted(l0, key=lambda i: (-(s[i] / 1.0), i)):
            if spent2 + 1.0 <= b2 + 1e-9 and len(l1) + 4 <= kmax1:
                ty, tx = divmod(p, gw0)
                l1 += [(2 * ty) * gw1 + 2 * tx, (2 * ty) * gw1 + 2 * tx + 1,
                       (2 * ty + 1) * gw1 + 2 * tx, (2 * ty + 1) * gw1 + 2 * tx + 1]
                spent2 += 1.0
    return l0, spent, hilbert_sorted(l1, 2 * gh0, 2 * gw0), spent2


# ---- one level (docs/ff_infer.md steps 1-9) --------------------------------
def sanitize(x, lim):
    return torch.nan_to_num(x, nan=0.0, posinf=lim, neginf=-lim).clamp(-lim, lim)


def level(path, X, ids, t, bp, up, dt):
    """heavy, alpha of one level for one batch row; X [1,C,H,W] in dt."""
    C = X.shape[1]
    f32 = torch.float32
    rnd = lambda v: v.to(dt).to(f32)
    g = path.fusion_gate
    w_b = F.softplus(g.boundary_log_weight.float())
    w_u = F.softplus(g.uncertainty_log_weight.float())
    alpha = rnd(torch.sigmoid(w_b * bp + w_u * up + g.bias.float()))
    Xf = X.float()
    U = Xf.clone()
    K = len(ids)
    if K:
        W = X.shape[3]
        gw = W // t
        tiles = torch.stack([Xf[0, :, (i // gw) * t:(i // gw + 1) * t,
                                (i % gw) * t:(i % gw + 1) * t] for i in ids])  # [K,C,t,t]
        tok = rnd(tiles.sum(dim=(2, 3)) / (t * t))  # [K,C]
        sc = path.scan_bidirectional
        lim = float(torch.tensor(1e4).to(dt))
        x = sanitize(tok, lim)
        ys = []
        for s, rng in ((sc.forward_scan, range(K)), (sc.backward_scan, range(K - 1, -1, -1))):
            d = rnd(1e-3 + 0.998 * torch.sigmoid(s.decay_logit.float()))
            d = d.clamp(1e-6, 1 - 1e-6)
            ig = rnd(F.softplus(s.input_gain_raw.float()) + 1e-6)
            og = rnd(F.softplus(s.output_gain_raw.float()) + 1e-6)
            sb = rnd(s.state_bias.float())
            st = torch.zeros(C, dtype=f32, device=X.device)
            y = [None] * K
            for k in rng:
                drv = ig * x[k] + sb
                st = d * st + (1 - d) * drv
                y[k] = rnd(og * st)
            ys.append(torch.stack(y))
        gate = rnd(torch.sigmoid(sc.merge_gate_logit.float()))
        mixed = rnd(rnd(gate * ys[0]) + rnd(rnd(1 - gate) * ys[1]))
        fm = path.film
        h = F.layer_norm(sanitize(mixed, 1e4), (C,), fm.token_norm.weight.float(),
                         fm.token_norm.bias.float(), 1e-5)
        h = F.linear(h, fm.mlp[0].weight.float(), fm.mlp[0].bias.float())
        h = h * torch.sigmoid(h)
        o = F.linear(h, fm.mlp[2].weight.float(), fm.mlp[2].bias.float())
        gamma, beta = rnd(torch.tanh(o[:, :C])), rnd(o[:, C:])
        m = (1 + gamma)[:, :, None, None] * tiles + beta[:, :, None, None]
        rf = path.refine
        dw = F.conv2d(m, rf.depthwise.weight.float(), rf.depthwise.bias.float(), padding=1,
                      groups=C)
        p = F.conv2d(dw, rf.pointwise.weight.float(), rf.pointwise.bias.float())
        n = F.group_norm(p, 1, rf.norm.weight.float(), rf.norm.bias.float(), 1e-5)
        r = rnd(n[:, :C] * torch.relu(n[:, C:]) + m)
        for k, i in enumerate(ids):
            U[0, :, (i // gw) * t:(i // gw + 1) * t, (i % gw) * t:(i % gw + 1) * t] = r[k]
    heavy = rnd(Xf + rnd(alpha * rnd(U - Xf)))
    return heavy, alpha


def proxy(p, like, dt):
    if p is None:
        return torch.ones(like.shape[0], 1, like.shape[2], like.shape[3], device=like.device)
    p = p.reshape(like.shape[0], 1, like.shape[2], like.shape[3]).to(dt).float()
    return torch.nan_to_num(p, nan=0.0, posinf=1.0, neginf=0.0)


@torch.no_grad()
def ff_forward(mod, dense, util, split, bnd, unc, t0=16, t1=8, kmax0=32, kmax1=64, b1=16.0,
               b2=8.0, nesting=True):
    """heavy, detail, alpha (in dense's dtype) and the routing per row."""
    dt = dense.dtype
    B, C, H, W = dense.shape
    gh0, gw0 = H // t0, W // t0
    bp, up = proxy(bnd, dense, dt), proxy(unc, dense, dt)
    u64 = util.double().cpu().tolist()
    s64 = split.double().cpu().tolist() if split is not None else [None] * B
    heavy, detail, alpha, routes = [], [], [], []
    for b in range(B):
        l0, sp1, l1, sp2 = route(u64[b], s64[b], gh0, gw0, kmax0, kmax1, b1, b2, 1.0, 0.2,
                                 nesting)
        routes.append((len(l0), sp1, len(l1), sp2))
        X = dense[b:b + 1]
        h0, a0 = level(mod.l0_path, X, hilbert_sorted(l0, gh0, gw0), t0, bp[b:b + 1],
                       up[b:b + 1], dt)
        if l1:
            h1, a1 = level(mod.l1_path, h0.to(dt), l1, t1, bp[b:b + 1], up[b:b + 1], dt)
            heavy.append(h1), alpha.append(a1), detail.append((h1 - h0).to(dt).float())
        else:
            heavy.append(h0), alpha.append(a0), detail.append((h0 - X.float()).to(dt).float())
    cat = lambda xs: torch.cat(xs).to(dt)
    return cat(heavy), cat(detail), cat(alpha), routes


# ---- safetensors export ----------------------------------------------------
def export(module, path):
    sd = {k: v.detach().float().contiguous().cpu() for k, v in module.state_dict().items()}
    try:
        from safetensors.torch import save_file
        save_file(sd, path)
        return "safetensors.torch.save_file"
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(here, "..", "..", "tools"))
        import export_ff_weights
        export_ff_weights.write_plain(
            path, {k: ("F32", list(v.shape), v.numpy().tobytes()) for k, v in sd.items()})
        return "tools/export_ff_weights.py write_plain"


# ---- main ------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16", "f32"])
    ap.add_argument("--channels", type=int, default=128)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--kmax", type=int, default=32, help="kmax_l0 (kmax_l1 = 2*kmax)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--json")
    a = ap.parse_args()
    try:
        import apexx
    except ImportError as e:
        print("SKIP: the apexx package is not importable: %s" % e)
        return 77
    dt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[a.dtype]
    dev = torch.device(a.device)
    C, S = a.channels, a.size
    gen = torch.Generator().manual_seed(a.seed + 17)
    torch.manual_seed(a.seed + 17)
    mod = FFModule(C)
    randomise(mod, gen)
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "ff.safetensors")
    writer = export(mod, path)
    mod = mod.to(dev)
    g = torch.Generator().manual_seed(a.seed + 101)
    g0 = (S // 16) ** 2
    dense = torch.randn(1, C, S, S, generator=g).to(dev, dt)
    util = torch.randn(1, g0, generator=g).to(dev, dt)
    split = torch.randn(1, g0, generator=g).to(dev, dt)
    bnd = torch.rand(1, 1, S, S, generator=g).to(dev, dt)
    unc = torch.rand(1, 1, S, S, generator=g).to(dev, dt)

    k0, k1 = a.kmax, 2 * a.kmax
    ref = ff_forward(mod, dense, util, split, bnd, unc, kmax0=k0, kmax1=k1)
    ctx = apexx.Context()
    w = ctx.ff_weights_load(path)
    outs = ctx.ff_infer(dense, util, split, boundary=bnd, uncertainty=unc, weights=w,
                        kmax_l0=k0, kmax_l1=k1, stats=True)
    heavy, detail, alpha, stats = outs if len(outs) == 4 else (*outs[0], outs[1])
    ctx.sync()
    tol = {"f16": 2e-3, "bf16": 1.6e-2, "f32": 1e-4}[a.dtype]
    ulp = {"f16": 2.0 ** -10, "bf16": 2.0 ** -7, "f32": 2.0 ** -23}[a.dtype]
    result = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
              "dtype": a.dtype, "channels": C, "size": S, "weights_writer": writer,
              "torch": torch.__version__}
    ok = True
    for name, got, want in (("heavy", heavy, ref[0]), ("detail", detail, ref[1]),
                            ("alpha", alpha, ref[2])):
        g_, w_ = got.float(), want.float()
        err = (g_ - w_).abs()
        bound = 4 * (tol + tol * w_.abs()) + 4 * ulp * w_.abs().clamp(min=1.0)
        bad = int((err > bound).sum())
        result[name] = {"max_abs_err": float(err.max()), "bad": bad}
        ok &= bad == 0
        print("%-7s max |apexx - torch| = %.3g, elements over the bound: %d" %
              (name, float(err.max()), bad))
    r = ref[3][0]
    counts = (int(stats["selected_l0"][0]), int(stats["selected_l1"][0]))
    print("routing: torch L0 %d (b1 %.17g), L1 %d (b2 %.17g); apexx L0 %d, L1 %d" %
          (r[0], r[1], r[2], r[3], counts[0], counts[1]))
    ok &= counts == (r[0], r[2])

    def timed(fn, n):
        if dev.type == "cuda":
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(n):
                fn()
            e1.record()
            torch.cuda.synchronize()
            return e0.elapsed_time(e1) * 1e3 / n
        t = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t) * 1e6 / n

    n_torch = max(3, a.iters // 10)
    result["torch_eager_us"] = timed(
        lambda: ff_forward(mod, dense, util, split, bnd, unc, kmax0=k0, kmax1=k1), n_torch)
    outs3 = (heavy, detail, alpha)
    run = lambda replay: ctx.ff_infer(dense, util, split, boundary=bnd, uncertainty=unc,
                                      weights=w, kmax_l0=k0, kmax_l1=k1,
                                      heavy=outs3[0], detail=outs3[1],
                                      alpha=outs3[2], graph_replay=replay)
    run(0)
    result["apexx_eager_us"] = timed(lambda: run(0), a.iters)
    if dev.type == "cuda":
        run(1)
        result["apexx_graph_replay_us"] = timed(lambda: run(1), a.iters)
    ctx.sync()
    result["parity_ok"] = bool(ok)
    for k in ("torch_eager_us", "apexx_eager_us", "apexx_graph_replay_us"):
        if k in result:
            print("%-22s %10.1f us/frame" % (k, result[k]))
    if "apexx_eager_us" in result:
        print("torch eager / apexx eager: %.1fx" % (result["torch_eager_us"] /
                                                    result["apexx_eager_us"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    w.close()
    ctx.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
