#!/usr/bin/env python3
"""Torch peers of the apexx cuda ops, timed with CUDA events at the large
profile (the same shapes and minimal-byte counts as bench/gpu/cuda_bw.c), so
the cuda backend's numbers have a framework baseline on the same card.

  python3 bench/peers/torch_peers.py [--iters N] [--json FILE]

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


def timed(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        return 77
    dev = torch.device("cuda")
    gen = torch.Generator(device="cpu").manual_seed(1234)
    h = torch.float16
    es = 2
    B, C, H, W, t, K = 8, 256, 512, 512, 8, 2048
    gh, gw = H // t, W // t
    numel = B * C * H * W
    rows = []

    def row(op, ms, nbytes, copy_gbps=None):
        gbps = nbytes / (ms * 1e-3) / 1e9
        rows.append({"op": op, "us": ms * 1e3, "bytes": nbytes, "gb_per_s": gbps})
        return gbps

    features = (torch.rand(B, C, H, W, generator=gen) * 4 - 2).to(dev, h)
    detail = (torch.rand(B, C, H, W, generator=gen) * 4 - 2).to(dev, h)
    out = torch.empty_like(features)
    copy_ms = timed(lambda: out.copy_(features), args.iters)
    copy_gbps = row("copy (device to device)", copy_ms, 2 * numel * es)

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

    row("tilepack", timed(pack, args.iters), tile_bytes)
    packed = pack()
    packed_cols = packed.permute(0, 2, 1, 3, 4).reshape(B, C, K * t * t).contiguous()

    def unpack():
        o = features.clone().view(B, C, H * W)
        for b in range(B):
            o[b].index_copy_(1, pix[b], packed_cols[b])
        return o

    row("tileunpack override", timed(unpack, args.iters), 2 * numel * es)

    bnd = torch.rand(B, 1, H, W, generator=gen).to(dev, h)
    unc = torch.rand(B, 1, H, W, generator=gen).to(dev, h)
    wb = torch.nn.functional.softplus(torch.tensor(1.0)).item()
    plane = B * H * W
    row("fusiongate_alpha", timed(lambda: torch.sigmoid(wb * bnd + wb * unc + 0.0), args.iters),
        3 * plane * es)
    alpha = torch.sigmoid(wb * bnd + wb * unc)
    row("fusiongate_fuse (lerp)", timed(lambda: torch.lerp(features, detail, alpha), args.iters),
        (3 * numel + plane) * es)
    del features, detail, out, packed, packed_cols, flat

    M, D, N = 262144, 1024, 65536
    src = (torch.rand(M, D, generator=gen) * 4 - 2).to(dev, h)
    row_ids = torch.randint(0, M, (N,), generator=gen).to(dev)
    full = row_ids[:, None].expand(N, D).contiguous()
    rows_src = (torch.rand(N, D, generator=gen) * 4 - 2).to(dev, h)
    rows_bytes = N * D * es
    row("gather", timed(lambda: torch.gather(src, 0, full), args.iters),
        2 * rows_bytes + N * D * 8)
    row("index_select", timed(lambda: torch.index_select(src, 0, row_ids), args.iters),
        2 * rows_bytes + N * 8)
    row("scatter_add (atomics)", timed(lambda: src.clone().scatter_add_(0, full, rows_src),
                                       args.iters),
        2 * M * D * es + rows_bytes + N * D * 8)

    name = torch.cuda.get_device_name(0)
    print(f"torch {torch.__version__} peers on {name}\n")
    print("| op | time us | min MB | GB/s | % copy |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        r["pct_of_copy"] = 100.0 * r["gb_per_s"] / copy_gbps
        print(f"| {r['op']} | {r['us']:.1f} | {r['bytes'] / 1e6:.1f} | "
              f"{r['gb_per_s']:.1f} | {r['pct_of_copy']:.1f}% |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
