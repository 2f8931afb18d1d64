#!/usr/bin/env python3
"""One Markdown table per profile from a GPU run's JSON files: apexx's
cuda backend (bench/gpu/cuda_bw, validate=device and validate=off) beside
the torch peers (bench/peers/torch_peers.py) on the same card.

  python3 bench/gpu/table.py --bw cuda_bw.json [--bw-off cuda_bw-off.json]
                             [--peers torch_peers.json]

Columns: time per call (us), GB/s over the op's minimal bytes, % of the
device-to-device copy measured in the same run, the issue's target and
cuda_bw's verdict, the torch peer's time and the speed ratio
torch us / apexx us (above 1: apexx is faster), with validate=device, the
default. A file that is missing or unreadable is named and its columns
left empty, so a partial run still gives a table."""
import argparse
import json
import sys

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


def load(path, what):
    if not path:
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"note: {what} {path}: {e}", file=sys.stderr)
        return None


def by_key(doc):
    rows = {}
    for r in (doc or {}).get("rows", []):
        rows[(r.get("profile", "large"), r["op"])] = r
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bw", required=True)
    ap.add_argument("--bw-off")
    ap.add_argument("--peers")
    args = ap.parse_args()
    bw = load(args.bw, "cuda_bw")
    if bw is None:
        print(f"table.py: cannot read {args.bw}", file=sys.stderr)
        return 1
    off = by_key(load(args.bw_off, "cuda_bw validate=off"))
    peers_doc = load(args.peers, "torch peers")
    peers = by_key(peers_doc)
    print(f"Card: {bw.get('device', '?')}"
          + (f"; torch {peers_doc.get('torch')}" if peers_doc else ""))
    profiles = []
    for r in bw["rows"]:
        if r["profile"] not in profiles:
            profiles.append(r["profile"])
    for prof in profiles:
        print(f"\n### {prof} profile\n")
        print("| op | us | us (validate=off) | GB/s | % of copy | % (off) | target | verdict "
              "| torch us | torch/apexx |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |")
        for r in bw["rows"]:
            if r["profile"] != prof:
                continue
            o = off.get((prof, r["op"]))
            p = peers.get((prof, PEERS.get(r["op"], "")))
            cells = [
                r["op"],
                f"{r['us']:.1f}" + (f" ({r['timing']})" if r.get("timing") else ""),
                f"{o['us']:.1f}" if o else "",
                f"{r['gb_per_s']:.0f}",
                f"{r['pct_of_copy']:.1f}%",
                f"{o['pct_of_copy']:.1f}%" if o else "",
                r.get("target", ""),
                r.get("verdict", "") + (f" / {o.get('verdict', '')}" if o and o.get("verdict")
                                        else ""),
                f"{p['us']:.1f}" + (f" ({p['timing']})" if p.get("timing") else "") if p else "",
                f"{p['us'] / r['us']:.2f}x" if p and r["us"] > 0 else "",
            ]
            print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
