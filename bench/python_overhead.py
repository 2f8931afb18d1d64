#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Python call overhead of the apexx binding (issue 14's numbers).

host: ctx.tilepack on tiny host tensors (features [1,1,8,8] f32, idx [1,1])
      per call, with out= given and with out=None, minus the same C call
      looped in C over the same tensors (Context._time_c);
      NumPy arrays and, where installed, torch CPU tensors.
cuda: (torch CUDA) ctx.tilepack at the seed profile (B1 C128 128x128 t8
      K32 fp16) on torch CUDA tensors on the current stream, per call
      (N calls, then one sync), against the C loop on the same tensors and
      stream.
Prints a Markdown table; --json FILE writes the numbers.
Run from the build tree: PYTHONPATH=python/build APEXX_CONFIG=... python3 bench/python_overhead.py
"""
import argparse
import json
import platform
import time

import numpy as np

import apexx


def per_call(fn, n):
    fn()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def c_per_call(ctx, f, idx, out, tile, n, **kw):
    return min(ctx._time_c("tilepack", n, f, idx, tile, out, **kw) for _ in range(5))


def host_rows(ctx, n):
    rows = []
    f = np.zeros((1, 1, 8, 8), np.float32)
    idx = np.zeros((1, 1), np.int64)
    out = np.zeros((1, 1, 1, 8, 8), np.float32)
    c = c_per_call(ctx, f, idx, out, 8, n)
    rows.append(("numpy, out given", per_call(lambda: ctx.tilepack(f, idx, 8, out), n), c))
    rows.append(("numpy, out=None", per_call(lambda: ctx.tilepack(f, idx, 8), n), c))
    try:
        import torch
    except ImportError:
        return rows
    tf, ti, to = torch.from_numpy(f), torch.from_numpy(idx), torch.from_numpy(out)
    rows.append(("torch cpu, out given", per_call(lambda: ctx.tilepack(tf, ti, 8, to), n), c))
    rows.append(("torch cpu, out=None", per_call(lambda: ctx.tilepack(tf, ti, 8), n), c))
    return rows


def cuda_rows(ctx, n):
    import torch
    g = torch.Generator(device="cuda").manual_seed(0)
    f = torch.randn(1, 128, 128, 128, device="cuda", generator=g).half()
    idx = torch.randperm(256, device="cuda", generator=g)[:32].view(1, 32)
    out = torch.empty(1, 32, 128, 8, 8, device="cuda", dtype=torch.float16)
    stream = torch.cuda.current_stream().cuda_stream

    def py_loop(with_out):
        def run():
            for _ in range(n):
                ctx.tilepack(f, idx, 8, out) if with_out else ctx.tilepack(f, idx, 8)
            torch.cuda.current_stream().synchronize()
        run()
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            run()
            best = min(best, (time.perf_counter() - t0) / n)
        return best

    c = c_per_call(ctx, f, idx, out, 8, n, stream=stream)
    return [("torch cuda seed profile, out given", py_loop(True), c),
            ("torch cuda seed profile, out=None", py_loop(False), c)], torch.cuda.get_device_name()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=20000, help="calls per timing (host)")
    ap.add_argument("--cuda-n", type=int, default=2000, help="calls per timing (cuda)")
    ap.add_argument("--json", help="write the numbers here")
    args = ap.parse_args()
    ctx = apexx.Context()
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    rows = [r + ("host", cpu) for r in host_rows(ctx, args.n)]
    try:
        import torch
        if torch.cuda.is_available() and any(b["name"] == "cuda" and b["state"] == "ok"
                                             for b in ctx.backends()):
            crow, card = cuda_rows(ctx, args.cuda_n)
            rows += [r + ("cuda", card) for r in crow]
    except ImportError:
        pass
    print("| case | Python per call (us) | C per call (us) | overhead (us) | ratio | device |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    result = []
    for name, py, c, kind, dev in rows:
        print(f"| {name} | {py * 1e6:.2f} | {c * 1e6:.2f} | {(py - c) * 1e6:.2f} | "
              f"{py / c:.2f}x | {dev} |")
        result.append(dict(case=name, python_us=py * 1e6, c_us=c * 1e6,
                           overhead_us=(py - c) * 1e6, ratio=py / c, kind=kind, device=dev))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(python=platform.python_version(), rows=result), fh, indent=1)


if __name__ == "__main__":
    main()
