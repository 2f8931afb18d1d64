#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The apexx backward ops beside torch autograd of the same math (issue 27), on the
cpu backend or a CUDA device, in one run with a copy of the feature map as the
bandwidth reference.

  python3 bench/peers/torch_backward.py [--device cpu|cuda] [--profile seed|large]
                                        [--dtype f32|f16] [--iters N] [--json FILE]
                                        [--cpu-time] [--only WORD,...]

Each row times one backward: apexx's op through apexx.torch.<op>_backward (its
outputs allocated by the call, as autograd allocates them), and torch's as
torch.autograd.grad of a plain PyTorch composition of the forward (built once,
retain_graph: only the backward is timed), both given the same grad_out; the
ratio of the medians and of the least times (the latter less sensitive to a
shared machine and to the page faults of fresh outputs). Shapes:
seed = apexx-bench's map (B 1, C 128, 128 x 128, tile 8, 32 tiles, the scan
[1, 256, 128], index_select [4096, 128] by 256 rows); large = --profile large's
(B 8, C 256, 512 x 512, 2048 tiles, scan [8, 4096, 256], [262144, 1024] by 65536).
Compositions: tilepack = the tile grid's view indexed by the ids; tileunpack
(override, ids) = clone + index_copy_ of the tiles' pixels; fused_pack_op_unpack =
torch.where over the tiles' mask; fusiongate_fuse = base + alpha*(detail - base);
fusiongate_alpha = sigmoid(softplus(bw)*b + softplus(uw)*u + bias), the three
scalars learned; tilessm_scan (bidirectional, avg) = the recurrence step by step
(torch has no scan); index_select = torch.index_select. Minimal bytes: each
tensor the backward must read once, each gradient written once. Time: the median
of --iters calls (host clock on cpu, CUDA events around 5 calls on a device);
--cpu-time (cpu only): one thread each (torch.set_num_threads(1), the cpu
backend's threads = 1 through a configuration of its own in APEXX_CONFIG) timed
by the calling thread's CPU clock, so a machine shared with other work does not
inflate either side. Exit 77 (with a reason) where torch, apexx or the device is missing."""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

if "--cpu-time" in sys.argv:  # before apexx reads its configuration
    _ini = tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False)
    _ini.write("[backend cpu]\nthreads = 1\n")
    _ini.close()
    os.environ["APEXX_CONFIG"] = _ini.name

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"SKIP: torch not importable: {e}")
    sys.exit(77)
try:
    import apexx.torch as at
except ImportError as e:  # pragma: no cover
    print(f"SKIP: apexx.torch not importable: {e}")
    sys.exit(77)


CLOCK = time.perf_counter


def timed(fn, iters, device):
    """Median and least milliseconds of one call of fn."""
    for _ in range(3):
        fn()
    if device == "cpu":
        times = []
        for _ in range(iters):
            t0 = CLOCK()
            fn()
            times.append((CLOCK() - t0) * 1e3)
        return statistics.median(times), min(times)
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 5)
    return statistics.median(times), min(times)


def autograd_of(forward, inputs, grad_out):
    """A function running torch's backward of forward(*inputs) for grad_out."""
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    out = forward(*leaves)
    return lambda: torch.autograd.grad(out, leaves, grad_out, retain_graph=True)


def scan_ref(tok, decay, ig, og, sb):
    """tilessm_scan bidirectional, merge avg, zero init, no clamp reached."""
    B, K, C = tok.shape
    om = 1 - decay

    def run(order):
        s = tok.new_zeros(B, C)
        ys = [None] * K
        for k in order:
            s = decay * s + om * (ig * tok[:, k] + sb)
            ys[k] = og * s
        return torch.stack(ys, 1)
    return 0.5 * (run(range(K)) + run(reversed(range(K))))


def shapes(profile):
    if profile == "large":
        return dict(B=8, C=256, H=512, W=512, t=8, K=2048, SB=8, S=4096, SC=256,
                    M=262144, D=1024, N=65536)
    return dict(B=1, C=128, H=128, W=128, t=8, K=32, SB=1, S=256, SC=128, M=4096, D=128, N=256)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--profile", choices=("seed", "large"), default="seed")
    ap.add_argument("--dtype", choices=("f32", "f16"), default=None)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", default=None)
    ap.add_argument("--cpu-time", action="store_true")
    ap.add_argument("--only", default="",
                    help="comma-separated words: only the rows whose name holds one")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        return 77
    global CLOCK
    if a.cpu_time:
        if a.device != "cpu":
            print("torch_backward.py: --cpu-time is for --device cpu", file=sys.stderr)
            return 1
        torch.set_num_threads(1)
        CLOCK = time.thread_time
    dt = {"f32": torch.float32, "f16": torch.float16}[a.dtype or
                                                    ("f16" if a.device == "cuda" else "f32")]
    where = torch.cuda.get_device_name(0) if a.device == "cuda" else a.device
    print(f"apexx backward ops beside torch {torch.__version__} autograd on {where}, "
          f"profile {a.profile}, {dt}"
          f"{', one thread each, CPU time' if a.cpu_time else ''}\n")
    print("| backward | apexx us | torch us | apexx/torch | least apexx/torch | min MB | "
          "apexx GB/s | % copy |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rows = run(a.device, shapes(a.profile), dt, a.iters, [w for w in a.only.split(",") if w])
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": where, "torch": torch.__version__, "profile": a.profile,
                       "dtype": str(dt), "rows": rows}, f, indent=2)
    return 0


def run(dev, s, dt, iters, only=()):
    B, C, H, W, t, K = s["B"], s["C"], s["H"], s["W"], s["t"], s["K"]
    gen = torch.Generator().manual_seed(1234)
    es = torch.finfo(dt).bits // 8

    def rnd(*shape, lo=-2.0, hi=2.0):
        return (torch.rand(*shape, generator=gen) * (hi - lo) + lo).to(dev, dt)

    rows = []
    numel, plane, tiles = B * C * H * W, B * H * W, B * K * C * t * t
    x, g_map = rnd(B, C, H, W), rnd(B, C, H, W)
    dst = torch.empty_like(x)
    copy_ms = timed(lambda: dst.copy_(x), iters, dev)[0]
    copy_gbps = 2 * numel * es / (copy_ms * 1e-3) / 1e9

    def row(name, ours, theirs, nbytes):
        if only and not any(w in name for w in only):
            return
        (ms_a, least_a), (ms_t, least_t) = timed(ours, iters, dev), timed(theirs, iters, dev)
        gbps = nbytes / (ms_a * 1e-3) / 1e9
        r = {"op": name, "apexx_us": ms_a * 1e3, "torch_us": ms_t * 1e3,
             "apexx_least_us": least_a * 1e3, "torch_least_us": least_t * 1e3, "bytes": nbytes,
             "gb_per_s": gbps, "pct_of_copy": 100 * gbps / copy_gbps}
        rows.append(r)
        print(f"| {name} | {r['apexx_us']:.1f} | {r['torch_us']:.1f} | {ms_a / ms_t:.2f} | "
              f"{least_a / least_t:.2f} | {nbytes / 1e6:.2f} | {gbps:.1f} | "
              f"{r['pct_of_copy']:.1f}% |", flush=True)

    print(f"| copy (the map, reference) | {copy_ms * 1e3:.1f} | | | | {2 * numel * es / 1e6:.2f} | "
          f"{copy_gbps:.1f} | 100.0% |", flush=True)
    gh, gw = H // t, W // t
    ids = torch.stack([torch.randperm(gh * gw, generator=gen)[:K] for _ in range(B)]).to(dev)
    g_tiles = rnd(B, K, C, t, t)

    def pack(f):
        tl = f.reshape(B, C, gh, t, gw, t).permute(0, 2, 4, 1, 3, 5).reshape(B, gh * gw, C, t, t)
        return tl[torch.arange(B, device=dev)[:, None], ids]
    row("tilepack_backward", lambda: at.tilepack_backward(g_tiles, ids, x.shape),
        autograd_of(pack, [x], g_tiles), (tiles + numel) * es + ids.numel() * 8)

    dy = torch.arange(t, device=dev)
    pix = ((ids // gw)[:, :, None, None] * t + dy[None, None, :, None]) * W \
        + (ids % gw)[:, :, None, None] * t + dy[None, None, None, :]
    pix = pix.reshape(B, K * t * t)
    packed = rnd(B, K, C, t, t)

    def unpack(base, pk):
        cols = pk.permute(0, 2, 1, 3, 4).reshape(B, C, K * t * t)
        return torch.stack([base[b].reshape(C, H * W).index_copy(1, pix[b], cols[b])
                            for b in range(B)]).reshape(B, C, H, W)
    row("tileunpack_backward (override)", lambda: at.tileunpack_backward(g_map, idx=ids, tile=t),
        autograd_of(unpack, [x, packed], g_map), (2 * numel + tiles) * es + ids.numel() * 8)

    mask = torch.zeros(B, 1, H * W, dtype=torch.bool, device=dev)
    for b in range(B):
        mask[b, 0, pix[b]] = True
    mask = mask.reshape(B, 1, H, W)
    row("fused_pack_op_unpack_backward",
        lambda: at.fused_pack_op_unpack_backward(g_map, x, ids, t, 1.0, 0.0, 1.0, 0.0),
        autograd_of(lambda f: torch.where(mask, f * torch.relu(f), f), [x], g_map),
        3 * numel * es + ids.numel() * 8)

    detail, alpha = rnd(B, C, H, W), rnd(B, 1, H, W, lo=0.0, hi=1.0)
    row("fusiongate_fuse_backward", lambda: at.fusiongate_fuse_backward(g_map, x, detail, alpha),
        autograd_of(lambda b, d, al: b + al * (d - b), [x, detail, alpha], g_map),
        (5 * numel + 2 * plane) * es)

    bnd, unc = rnd(B, 1, H, W, lo=0.0, hi=1.0), rnd(B, 1, H, W, lo=0.0, hi=1.0)
    g_plane = rnd(B, 1, H, W)
    scalars = [torch.tensor(v, device=dev, dtype=torch.float32) for v in (0.3, -0.4, 0.1)]

    def alpha_ref(b, u, bw, uw, bias):
        return torch.sigmoid(F.softplus(bw) * b + F.softplus(uw) * u + bias)
    row("fusiongate_alpha_backward",
        lambda: at.fusiongate_alpha_backward(g_plane, bnd, unc, 0.3, -0.4, 0.1),
        autograd_of(alpha_ref, [bnd, unc] + scalars, g_plane), 5 * plane * es)

    SB, S, SC = s["SB"], s["S"], s["SC"]
    tok, g_tok = rnd(SB, S, SC), rnd(SB, S, SC)
    vec = [rnd(SC, lo=0.1, hi=0.9), rnd(SC, lo=0.05, hi=1.55), rnd(SC, lo=0.05, hi=1.55),
           rnd(SC, lo=-0.1, hi=0.1)]
    row("tilessm_scan_backward (bidirectional, avg)",
        lambda: at.tilessm_scan_backward(g_tok, tok, *vec, direction="bidirectional",
                                         merge="avg"),
        autograd_of(scan_ref, [tok] + vec, g_tok), 3 * SB * S * SC * es)

    M, D, N = s["M"], s["D"], s["N"]
    src, g_rows = rnd(M, D), rnd(N, D)
    index = torch.randint(0, M, (N,), generator=gen).to(dev)
    row("index_select_backward", lambda: at.index_select_backward(g_rows, index, src.shape),
        autograd_of(lambda sr: torch.index_select(sr, 0, index), [src], g_rows),
        (N * D + M * D) * es + N * 8)
    return rows


if __name__ == "__main__":
    sys.exit(main())
