#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Host time per call from Python at the seed profile (issue 27): apexx's
Context.<op>(..., out=...) and torch.ops.apexx.<op> beside torch's own
torch.index_select and torch.gather, in one run, on one device.

The seed profile (apexx-bench(1), PROFILES): tilepack on [1,128,128,128]
fp16 with K 32 ids, t 8; index_select on a [4096,128] fp16 source with 256
rows; gather with a [256,128] index into it. Each row is the least mean of
five series of n calls (no sync inside a series; --device cuda syncs once
after each series, so queued kernels count once). "C loop" is the same
apx_tilepack looped in C (Context._time_c): what the kernel costs
without Python.

--ff N adds ff_infer (issue 28: Context.ff_infer adds <= 5 us to the C
call, outputs given or not): apx_ff_infer looped in C beside
Context.ff_infer with heavy/detail/alpha given and without, N calls a
series; on cuda the default frame (B1 C128 128x128 f16, seeded weights),
on the cpu a small one (B1 C16 32x32 f16, kmax 2/4) whose compute does not
drown the binding's microseconds. --cpu-time times the calling thread's
CPU clock (time.thread_time) instead of the wall clock, the C loops too
(their _time_c call timed from Python, over its n + 1 calls): on a shared
machine it leaves out the time other processes hold the core. Prints a
Markdown table with the machine and the load average; --json FILE writes
the numbers.

--ff-against DIR (with --ff N on the cpu) then runs ff_infer of this build
and of another build's package (DIR/apexx, e.g. a copy of python/build/
from before a change) in one process, their series interleaved, and
prints the quartiles of each round's cost beyond the C loop.

Run from the build tree:
  PYTHONPATH=python/build APEXX_CONFIG=$PWD/conf/apexx.ini \\
  APEXX_BACKEND_DIR=$PWD/backends/.libs python3 bench/python_percall.py
"""
import argparse
import json
import os
import platform
import time

import apexx

try:
    import torch
except ImportError:  # the table needs torch's ops beside apexx's
    raise SystemExit("python_percall.py: torch is not installed (Debian: python3-torch)")
import apexx.torch  # noqa: F401 (registers torch.ops.apexx)


CLOCK = time.perf_counter  # --cpu-time: time.thread_time


def per_call(fn, n, sync):
    fn()
    sync()
    best = float("inf")
    for _ in range(5):
        t0 = CLOCK()
        for _ in range(n):
            fn()
        sync()
        best = min(best, (CLOCK() - t0) / n)
    return best


def c_loop(ctx, op, n, *args, **kwargs):
    """The least of five Context._time_c series: its own wall-clock figure,
    or with --cpu-time the thread's CPU time over the n + 1 calls it runs."""
    best = float("inf")
    for _ in range(5):
        t0 = CLOCK()
        secs = ctx._time_c(op, n, *args, **kwargs)
        best = min(best, secs if CLOCK is time.perf_counter else (CLOCK() - t0) / (n + 1))
    return best


def machine(device):
    if device == "cuda":
        return torch.cuda.get_device_name()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def rows(ctx, device, n):
    g = torch.Generator().manual_seed(0)
    half = torch.float16
    feats = torch.randn(1, 128, 128, 128, generator=g).to(device, half)
    idx = torch.randperm(256, generator=g)[:32].view(1, 32).to(device)
    packed = torch.empty(1, 32, 128, 8, 8, dtype=half, device=device)
    src = torch.randn(4096, 128, generator=g).to(device, half)
    rows_ = torch.randint(0, 4096, (256,), generator=g).to(device)
    picked = torch.empty(256, 128, dtype=half, device=device)
    index = torch.randint(0, 4096, (256, 128), generator=g).to(device)
    gathered = torch.empty(256, 128, dtype=half, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    ops = torch.ops.apexx
    stream = {"stream": torch.cuda.current_stream().cuda_stream} if device == "cuda" else {}
    table = [
        ("tilepack", "C loop (apx_tilepack)", c_loop(ctx, "tilepack", n, feats, idx, 8, packed,
                                                     **stream)),
        ("tilepack", "Context.tilepack(out=)",
         per_call(lambda: ctx.tilepack(feats, idx, 8, out=packed), n, sync)),
        ("tilepack", "torch.ops.apexx.tilepack",
         per_call(lambda: ops.tilepack(feats, idx, 8), n, sync)),
        ("index_select", "Context.index_select(out=)",
         per_call(lambda: ctx.index_select(src, rows_, out=picked), n, sync)),
        ("index_select", "torch.ops.apexx.index_select",
         per_call(lambda: ops.index_select(src, rows_), n, sync)),
        ("index_select", "torch.index_select(out=)",
         per_call(lambda: torch.index_select(src, 0, rows_, out=picked), n, sync)),
        ("index_select", "torch.index_select",
         per_call(lambda: torch.index_select(src, 0, rows_), n, sync)),
        ("gather", "Context.gather(out=)",
         per_call(lambda: ctx.gather(src, 0, index, out=gathered), n, sync)),
        ("gather", "torch.ops.apexx.gather",
         per_call(lambda: ops.gather(src, 0, index), n, sync)),
        ("gather", "torch.gather(out=)",
         per_call(lambda: torch.gather(src, 0, index, out=gathered), n, sync)),
        ("gather", "torch.gather", per_call(lambda: torch.gather(src, 0, index), n, sync)),
    ]
    return table


def ff_rows(ctx, device, n):
    g = torch.Generator().manual_seed(0)
    B, C, H, W = (1, 128, 128, 128) if device == "cuda" else (1, 16, 32, 32)
    kw = dict(weights=ctx.ff_weights_seeded(C, 0))
    if device != "cuda":
        kw.update(kmax_l0=2, kmax_l1=4)
    dense = torch.randn(B, C, H, W, generator=g).to(device, torch.float16)
    util = torch.randn(B, (H // 16) * (W // 16), generator=g).to(device, torch.float16)
    heavy, detail = torch.empty_like(dense), torch.empty_like(dense)
    alpha = torch.empty(B, 1, H, W, dtype=torch.float16, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    stream = {"stream": torch.cuda.current_stream().cuda_stream} if device == "cuda" else {}
    shape = f"[{B},{C},{H},{W}]"
    return [
        ("ff_infer " + shape, "C loop (apx_ff_infer)",
         c_loop(ctx, "ff_infer", n, dense, util, heavy=heavy, detail=detail, alpha=alpha, **kw,
                **stream)),
        ("ff_infer " + shape, "Context.ff_infer(heavy=, detail=, alpha=)",
         per_call(lambda: ctx.ff_infer(dense, util, heavy=heavy, detail=detail, alpha=alpha,
                                       **kw), n, sync)),
        ("ff_infer " + shape, "Context.ff_infer",
         per_call(lambda: ctx.ff_infer(dense, util, **kw), n, sync)),
    ]


def ff_against(other_dir, n, rounds):
    """This apexx and another build's (other_dir/apexx, copied and imported
    as apexx_other, its own _apexx.so) in one process: rounds of ff_infer
    series of n calls, the two builds in alternating order, each round's
    C loop beside its two calls; the quartiles of each round's difference
    to the C loop (us), thread CPU time with --cpu-time."""
    import importlib
    import shutil
    import statistics
    import sys
    import tempfile
    tmp = tempfile.mkdtemp(prefix="apexx-against-")
    shutil.copytree(os.path.join(other_dir, "apexx"), os.path.join(tmp, "apexx_other"))
    sys.path.insert(0, tmp)
    try:
        other = importlib.import_module("apexx_other")
    finally:
        sys.path.remove(tmp)
    g = torch.Generator().manual_seed(0)
    B, C, H, W = 1, 16, 32, 32
    dense = torch.randn(B, C, H, W, generator=g).half()
    util = torch.randn(B, (H // 16) * (W // 16), generator=g).half()
    outs = dict(heavy=torch.empty_like(dense), detail=torch.empty_like(dense),
                alpha=torch.empty(B, 1, H, W, dtype=torch.float16))
    sides = []
    for name, mod in (("this build", apexx), (other_dir, other)):
        c = mod.Context()
        sides.append((name, c, dict(weights=c.ff_weights_seeded(C, 0), kmax_l0=2, kmax_l1=4)))

    def series(fn):
        t0 = CLOCK()
        fn()
        return (CLOCK() - t0) / n * 1e6
    adds = {name: ([], []) for name, _, _ in sides}
    for r in range(rounds):
        for name, c, kw in (sides if r % 2 == 0 else sides[::-1]):
            loop = series(lambda: c._time_c("ff_infer", n - 1, dense, util, **outs, **kw))
            given = series(lambda: [c.ff_infer(dense, util, **outs, **kw) for _ in range(n)])
            made = series(lambda: [c.ff_infer(dense, util, **kw) for _ in range(n)])
            adds[name][0].append(given - loop)
            adds[name][1].append(made - loop)
    print(f"\nff_infer [1,16,32,32] beyond the C loop, {rounds} rounds of {n} calls "
          "interleaved, quartiles (us):\n")
    print("| build | heavy=, detail=, alpha= given | outputs made |")
    print("| --- | ---: | ---: |")
    for name, _, _ in sides:
        q = [" / ".join(f"{x:.2f}" for x in statistics.quantiles(v, n=4)) for v in adds[name]]
        print(f"| {name} | {q[0]} | {q[1]} |")
    shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("-n", type=int, default=2000, help="calls per series")
    ap.add_argument("--json", help="write the numbers here")
    ap.add_argument("--ff", type=int, default=0, metavar="N",
                    help="also ff_infer, N calls a series (0: not)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="the calling thread's CPU time instead of the wall clock")
    ap.add_argument("--ff-against", metavar="DIR",
                    help="with --ff N on the cpu: also ff_infer of this build and of the "
                    "package DIR/apexx (another build's) interleaved in this process")
    ap.add_argument("--rounds", type=int, default=30, help="--ff-against's rounds")
    args = ap.parse_args()
    if args.ff_against and (args.ff <= 0 or args.device != "cpu"):
        ap.error("--ff-against needs --ff N and the cpu device")
    global CLOCK
    if args.cpu_time:
        if args.device == "cuda":
            ap.error("--cpu-time is for the cpu device (a GPU's time is not the thread's)")
        CLOCK = time.thread_time
    ctx = apexx.Context()
    load = os.getloadavg()
    table = rows(ctx, args.device, args.n)
    if args.ff > 0:
        table += ff_rows(ctx, args.device, args.ff)
    load_after = os.getloadavg()
    where = (f"{machine(args.device)}; Python {platform.python_version()}, torch "
             f"{torch.__version__}; torch threads {torch.get_num_threads()}; "
             f"{'thread CPU time' if args.cpu_time else 'wall clock'}; load average "
             f"{load[0]:.1f} before, {load_after[0]:.1f} after")
    print(f"seed profile, {args.device}: {where}\n")
    print("| op | call | host time per call (us) |")
    print("| --- | --- | ---: |")
    for op, call, t in table:
        print(f"| {op} | {call} | {t * 1e6:.2f} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(device=args.device, where=where,
                           rows=[dict(op=o, call=c, us=t * 1e6) for o, c, t in table]),
                      fh, indent=1)
    if args.ff_against:
        ff_against(args.ff_against, args.ff, args.rounds)


if __name__ == "__main__":
    main()
