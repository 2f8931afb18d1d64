#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One Markdown table per profile from a GPU run's JSON files: apexx-bench's
cuda rows (validate=device and validate=off, bench/gpu/run-all.sh's bw step)
beside the torch peers (bench/peers/torch_peers.py) on the same card.

  python3 bench/gpu/table.py --bw REPORT.json [--bw REPORT.json ...]
                             [--bw-off REPORT.json ...] [--peers torch_peers.json]

Each --bw / --bw-off file is an apexx-bench report (docs/report.md); its
profile is the report's config.profile (large, seed). Columns: time per
call in us (p50; "graph" when the row was timed by graph replay, "events"
otherwise), the same with validate=off, GB/s over the op's minimal bytes
(bytes_moved), % of the device copy measured in the same run
(pct_of_copy), the target and the verdict of each mode, the torch peer's
time and the ratio torch us / apexx us (above 1: apexx is faster), with
validate=device, the default. A file that is missing or unreadable is
named and its columns left empty, so a partial run still gives a table."""
import argparse
import json
import sys

# table row -> (section, entry) of the report
ROWS = [
    ("copy (device to device)", "reference", "copy"),
    ("tilepack", "tile_ops", "tilepack"),
    ("tileunpack override", "tile_ops", "tileunpack_override"),
    ("tileunpack blend", "tile_ops", "tileunpack_blend"),
    ("fused_pack_op_unpack", "tile_ops", "fused_pack_op_unpack"),
    ("fusiongate_alpha", "tile_ops", "fusiongate_alpha"),
    ("fusiongate_fuse", "tile_ops", "fusiongate_fuse"),
    ("tilessm forward", "tilessm", "tilessm_forward"),
    ("tilessm bidirectional", "tilessm", "tilessm_bidirectional"),
    ("gather", "indexing", "gather"),
    ("index_select", "indexing", "index_select"),
    ("scatter_add", "indexing", "scatter_add"),
    ("gather_backward", "indexing", "gather_backward"),
]
# the backward ops (issue 27), under their entry names
BACKWARD = [
    ("tilepack_backward", "tile_ops", "tilepack_backward"),
    ("tileunpack_backward override", "tile_ops", "tileunpack_backward_override"),
    ("tileunpack_backward blend", "tile_ops", "tileunpack_backward_blend"),
    ("fused_pack_op_unpack_backward", "tile_ops", "fused_pack_op_unpack_backward"),
    ("fusiongate_alpha_backward", "tile_ops", "fusiongate_alpha_backward"),
    ("fusiongate_fuse_backward", "tile_ops", "fusiongate_fuse_backward"),
    ("tilessm_scan_backward forward", "tilessm", "tilessm_scan_backward_forward"),
    ("tilessm_scan_backward bidirectional", "tilessm", "tilessm_scan_backward_bidirectional"),
    ("index_select_backward", "indexing", "index_select_backward"),
]
ROWS += BACKWARD
# the FF frame (issue 28), eager and graph replay, at its three batches
FRAME = [
    ("ff_infer B=1", "end_to_end_infer", "ff_infer"),
    ("ff_infer B=1 graph", "end_to_end_infer", "ff_infer_graph"),
    ("ff_infer B=8", "end_to_end_infer", "ff_infer_b8"),
    ("ff_infer B=8 graph", "end_to_end_infer", "ff_infer_graph_b8"),
    ("ff_infer B=32", "end_to_end_infer", "ff_infer_b32"),
    ("ff_infer B=32 graph", "end_to_end_infer", "ff_infer_graph_b32"),
]
ROWS += FRAME

# apexx op name -> torch peer op name (torch_peers.py)
PEERS = {
    "copy (device to device)": "copy (device to device)",
    "tilepack": "tilepack",
    "tileunpack override": "tileunpack override",
    "fusiongate_alpha": "fusiongate_alpha",
    "fusiongate_fuse": "fusiongate_fuse (lerp)",
    "gather": "gather",
    "index_select": "index_select",
    "scatter_add": "scatter_add (atomics)",
}

# the targets: a share of the copy at the large profile, a time per
# call at the seed profile (docs/performance.md, "Targets")
TARGETS = {
    "large": {
        "tilepack": 75, "tileunpack override": 85, "tileunpack blend": 85,
        "fused_pack_op_unpack": 85, "fusiongate_fuse": 85, "tilessm forward": 50,
        "gather": 85, "index_select": 85, "scatter_add": 50,
    },
    "seed": {op: 6.0 for op, _, _ in ROWS
             if op not in ("copy (device to device)", "tilessm bidirectional",
                           "gather_backward") and
             op not in [f[0] for f in FRAME]},
}
# issue 28: the frame <= 40 us eager, <= 30 us graph replay, B=8 <= 80 us
TARGETS["seed"].update({"ff_infer B=1": 40.0, "ff_infer B=1 graph": 30.0,
                        "ff_infer B=8": 80.0, "ff_infer B=8 graph": 80.0})
# issue 27: each backward <= 10 us a call at the seed profile (graph replay)
TARGETS["seed"].update({op: 10.0 for op, _, _ in BACKWARD})


def load(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"note: {what} {path}: {e}", file=sys.stderr)
        return None


def cuda_rows(doc):
    """{(profile, table op): row} of a report's ok cuda rows."""
    rows = {}
    if not doc:
        return rows
    profile = doc.get("config", {}).get("profile", "default")
    bench = doc.get("benchmarks", {})
    for op, section, entry in ROWS:
        row = bench.get(section, {}).get(entry, {}).get("rows", {}).get("cuda")
        if row and row.get("status") == "ok":
            rows[(profile, op)] = row
    return rows


def us(row):
    return row["p50_ms"] * 1e3


def verdict(profile, op, row):
    target = TARGETS.get(profile, {}).get(op)
    if target is None or row is None:
        return ""
    if profile == "large":
        share = row.get("pct_of_copy")
        return "" if share is None else ("ok" if share >= target else "MISS")
    return "ok" if us(row) <= target else "MISS"


def target_text(profile, op):
    target = TARGETS.get(profile, {}).get(op)
    if target is None:
        return ""
    return f">= {target}%" if profile == "large" else f"<= {target:g} us"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bw", action="append", default=[])
    ap.add_argument("--bw-off", action="append", default=[])
    ap.add_argument("--peers")
    args = ap.parse_args()
    dev, off, card, profiles = {}, {}, None, []
    for path in args.bw:
        doc = load(path, "apexx-bench report")
        if doc:
            card = card or (doc.get("environment", {}).get("gpu") or {}).get("name")
            prof = doc.get("config", {}).get("profile", "default")
            if prof not in profiles:
                profiles.append(prof)
        dev.update(cuda_rows(doc))
    for path in args.bw_off:
        off.update(cuda_rows(load(path, "apexx-bench report (validate=off)")))
    if not dev:
        print("table.py: no cuda rows in the --bw reports", file=sys.stderr)
        return 1
    peers_doc = load(args.peers, "torch peers") if args.peers else None
    peers = {(r.get("profile", "large"), r["op"]): r for r in (peers_doc or {}).get("rows", [])}
    print(f"Card: {card or '?'}" + (f"; torch {peers_doc.get('torch')}" if peers_doc else ""))
    for prof in profiles:
        print(f"\n### {prof} profile\n")
        print("| op | us | us (validate=off) | GB/s | % of copy | % (off) | target | verdict "
              "| torch us | torch/apexx |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |")
        for op, _, _ in ROWS:
            r = dev.get((prof, op))
            if r is None:
                continue
            o = off.get((prof, op))
            p = peers.get((prof, PEERS.get(op, "")))
            timing = "graph" if r.get("timer") == "graph_replay" else "events"
            share = r.get("pct_of_copy")
            share_off = o.get("pct_of_copy") if o else None
            v_dev, v_off = verdict(prof, op, r), verdict(prof, op, o)
            cells = [
                op,
                f"{us(r):.1f} ({timing})",
                f"{us(o):.1f}" if o else "",
                f"{r['gb_per_s']:.0f}" if r.get("gb_per_s") is not None else "",
                f"{share:.1f}%" if share is not None else "",
                f"{share_off:.1f}%" if share_off is not None else "",
                target_text(prof, op),
                v_dev + (f" / {v_off}" if v_off else ""),
                f"{p['us']:.1f}" + (f" ({p['timing']})" if p.get("timing") else "") if p else "",
                f"{p['us'] / us(r):.2f}x" if p and us(r) > 0 else "",
            ]
            print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
