#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Torch peers of the apexx cuda ops at the large and the seed profile (the
shapes of apexx-bench --profile large / seed), so the cuda backend's numbers
have a framework baseline on the same card. Large: the median of 5
back-to-back calls between CUDA events; seed: 20 calls captured in a CUDA
graph, the replay's time per call (as apexx-bench --graph-replay times
apexx there; back-to-back calls between events where capture fails, and the
row says so).

  python3 bench/peers/torch_peers.py [--iters N] [--profile large|seed|both]
                                     [--json FILE]

Peers: tilepack = per-batch index_select of the tiles' pixels from the
flattened image plus the [B,K,C,t,t] permute; tileunpack override =
clone + per-batch index_copy_ of the tiles' pixels; fusiongate fuse =
torch.lerp; fusiongate alpha = sigmoid of the weighted proxies; gather =
torch.gather; index_select = torch.index_select; scatter_add = clone +
scatter_add_ (torch's CUDA atomics, not deterministic); plus a
device-to-device copy_ of the features as the bandwidth reference.
Exit 77 (with a reason) where torch or a CUDA device is missing."""
import argparse
import json
import statistics
import sys

try:
    import torch
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"SKIP: torch not importable: {e}")
    sys.exit(77)


def event_median(run, iters, calls):
    """Median over iters samples of run()'s time between two CUDA events,
    per call (run makes `calls` calls), in milliseconds; 3 warm-up runs."""
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / calls)
    return statistics.median(times)


def graph_timed(fn, iters, calls=20):
    """Milliseconds per call of `calls` calls replayed from a CUDA graph,
    or None when capture fails."""
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(calls):
                fn()
    except Exception as e:  # capture unsupported for this op
        torch.cuda.synchronize()
        print(f"note: graph capture failed ({type(e).__name__}: {e}); events used")
        return None
    return event_median(g.replay, iters, calls)


def batch_timed(fn, iters, calls=20):
    """Milliseconds per call of `calls` back-to-back calls between events."""
    def run():
        for _ in range(calls):
            fn()
    return event_median(run, iters, calls)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--profile", choices=("large", "seed", "both"), default="both")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        return 77
    rows = []
    name = torch.cuda.get_device_name(0)
    print(f"torch {torch.__version__} peers on {name}\n")
    print("| profile | op | time us | timing | min MB | GB/s | % copy |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: |")
    for profile in ("large", "seed"):
        if args.profile in (profile, "both"):
            rows += run_profile(profile, args.iters)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, "rows": rows}, f, indent=2)
    return 0


def run_profile(profile, iters):
    large = profile == "large"
    dev = torch.device("cuda")
    gen = torch.Generator(device="cpu").manual_seed(1234)
    h = torch.float16
    es = 2
    if large:
        B, C, H, W, t, K = 8, 256, 512, 512, 8, 2048
        M, D, N = 262144, 1024, 65536
    else:
        B, C, H, W, t, K = 1, 128, 128, 128, 8, 32
        M, D, N = 4096, 128, 256
    gh, gw = H // t, W // t
    numel = B * C * H * W
    rows = []

    def time_fn(fn):
        if large:  # 5 back-to-back calls between events
            return batch_timed(fn, iters, calls=5), "events x5"
        ms = graph_timed(fn, max(iters, 20))
        if ms is not None:
            return ms, "graph"
        return batch_timed(fn, max(iters, 20)), "events x20"

    def row(op, fn, nbytes):
        ms, how = time_fn(fn)
        gbps = nbytes / (ms * 1e-3) / 1e9
        r = {"profile": profile, "op": op, "us": ms * 1e3, "timing": how, "bytes": nbytes,
             "gb_per_s": gbps}
        rows.append(r)
        return gbps

    features = (torch.rand(B, C, H, W, generator=gen) * 4 - 2).to(dev, h)
    detail = (torch.rand(B, C, H, W, generator=gen) * 4 - 2).to(dev, h)
    out = torch.empty_like(features)
    copy_gbps = row("copy (device to device)", lambda: out.copy_(features), 2 * numel * es)

    ids = torch.stack([torch.randperm(gh * gw, generator=gen)[:K] for _ in range(B)]).to(dev)
    ty, tx = ids // gw, ids % gw
    dy = torch.arange(t, device=dev)
    # pixel index of every tile pixel, [B, K*t*t], in (k, dy, dx) order
    pix = ((ty[:, :, None, None] * t + dy[None, None, :, None]) * W
           + tx[:, :, None, None] * t + dy[None, None, None, :]).reshape(B, K * t * t)
    flat = features.view(B, C, H * W)
    tile_bytes = 2 * B * K * C * t * t * es

    def pack():
        return torch.stack([torch.index_select(flat[b], 1, pix[b]) for b in range(B)]) \
            .view(B, C, K, t, t).permute(0, 2, 1, 3, 4).contiguous()

    row("tilepack", pack, tile_bytes)
    packed = pack()
    packed_cols = packed.permute(0, 2, 1, 3, 4).reshape(B, C, K * t * t).contiguous()

    def unpack():
        o = features.clone().view(B, C, H * W)
        for b in range(B):
            o[b].index_copy_(1, pix[b], packed_cols[b])
        return o

    row("tileunpack override", unpack, 2 * numel * es)

    bnd = torch.rand(B, 1, H, W, generator=gen).to(dev, h)
    unc = torch.rand(B, 1, H, W, generator=gen).to(dev, h)
    wb = torch.nn.functional.softplus(torch.tensor(1.0)).item()
    plane = B * H * W
    row("fusiongate_alpha", lambda: torch.sigmoid(wb * bnd + wb * unc + 0.0), 3 * plane * es)
    alpha = torch.sigmoid(wb * bnd + wb * unc)
    row("fusiongate_fuse (lerp)", lambda: torch.lerp(features, detail, alpha),
        (3 * numel + plane) * es)
    del features, detail, out, packed, packed_cols, flat

    src = (torch.rand(M, D, generator=gen) * 4 - 2).to(dev, h)
    row_ids = torch.randint(0, M, (N,), generator=gen).to(dev)
    full = row_ids[:, None].expand(N, D).contiguous()
    rows_src = (torch.rand(N, D, generator=gen) * 4 - 2).to(dev, h)
    rows_bytes = N * D * es
    row("gather", lambda: torch.gather(src, 0, full), 2 * rows_bytes + N * D * 8)
    row("index_select", lambda: torch.index_select(src, 0, row_ids), 2 * rows_bytes + N * 8)
    row("scatter_add (atomics)", lambda: src.clone().scatter_add_(0, full, rows_src),
        2 * M * D * es + rows_bytes + N * D * 8)
    del src, full, rows_src, row_ids
    torch.cuda.empty_cache()

    for r in rows:
        r["pct_of_copy"] = 100.0 * r["gb_per_s"] / copy_gbps
        print(f"| {profile} | {r['op']} | {r['us']:.1f} | {r['timing']} | "
              f"{r['bytes'] / 1e6:.1f} | {r['gb_per_s']:.1f} | {r['pct_of_copy']:.1f}% |",
              flush=True)
    return rows


if __name__ == "__main__":
    sys.exit(main())
