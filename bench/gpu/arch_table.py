#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The side-by-side table of bench/gpu/arch-check.sh: each cuda row of
apexx-bench (time per call, us, p50) in every build of the run, the ratio
of each build's time to the first build's (above 1: slower than it), and
the parity against the cpu backend where the report has one.

  python3 bench/gpu/arch_table.py [--peers torch_peers.json] WORKDIR PROFILE BUILD [BUILD ...]

WORKDIR holds bench-PROFILE-BUILD.json (apexx-bench --output-json); the
first BUILD is the reference column. With --peers (bench/peers/
torch_peers.py's JSON from the same card), the torch peer's time of each
row that has one (bench/gpu/table.py's ROWS and PEERS) and the ratio
torch us / BUILD us of every build (above 1: that build is faster). A missing or unreadable report is
named and its cells left empty; a row that did not run says its status.
Exit 1 when a row failed or its parity did."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from table import PEERS, ROWS  # noqa: E402  (bench/gpu/table.py)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"note: {path}: {e}", file=sys.stderr)
        return None


def cuda_rows(doc):
    """[(section.entry, cuda row)] in the report's order."""
    out = []
    for section, entries in ((doc or {}).get("benchmarks") or {}).items():
        for entry, bench in (entries or {}).items():
            row = ((bench or {}).get("rows") or {}).get("cuda")
            if row is not None:
                out.append((f"{section}.{entry}", row))
    return out


def cell(row):
    if row is None:
        return ""
    if row.get("status") != "ok":
        return row.get("status") or "?"
    return f"{row['p50_ms'] * 1e3:.1f}"


def parity(row):
    p = (row or {}).get("parity")
    if not p:
        return ""
    return "ok" if p.get("ok") else f"FAIL ({p.get('bad_elements')} bad)"


def main():
    argv = sys.argv[1:]
    peers_path = None
    if argv[:1] == ["--peers"] and len(argv) >= 2:
        peers_path, argv = argv[1], argv[2:]
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    work, profile, builds = argv[0], argv[1], argv[2:]
    peer_us = {}
    if peers_path:
        pdoc = load(peers_path) or {}
        by_op = {(r.get("profile", "large"), r.get("op")): r for r in pdoc.get("rows", [])}
        for name, section, entry in ROWS:
            r = by_op.get((profile, PEERS.get(name, "")))
            if r and r.get("us"):
                peer_us[f"{section}.{entry}"] = r["us"]
        if not peer_us:
            print(f"note: {peers_path}: no torch rows of the {profile} profile", file=sys.stderr)
    docs = {}
    for b in builds:
        path = os.path.join(work, f"bench-{profile}-{b}.json")
        docs[b] = load(path) if os.path.exists(path) else None
        if docs[b] is None:
            print(f"note: {path}: missing or unreadable", file=sys.stderr)
    names, rows = [], {}
    for b in builds:
        for name, row in cuda_rows(docs[b]):
            if name not in names:
                names.append(name)
            rows[(b, name)] = row
    if not names:
        print(f"arch_table.py: no cuda rows in {work}/bench-{profile}-*.json", file=sys.stderr)
        return 1
    ref = builds[0]
    cols = [f"{b} us" for b in builds] + [f"{b}/{ref}" for b in builds[1:]] + [
        f"parity {b}" for b in builds]
    if peers_path:
        cols += ["torch us"] + [f"torch/{b}" for b in builds]
    print(f"### {profile} profile: time per call, us (p50), cuda rows\n")
    print("| row | " + " | ".join(cols) + " |")
    print("| --- | " + " | ".join("---:" if " us" in c or "/" in c or c == "torch us" else "---" for c in cols)
          + " |")
    bad = 0
    for name in names:
        cells = [cell(rows.get((b, name))) for b in builds]
        r0 = rows.get((ref, name))
        for b in builds[1:]:
            r = rows.get((b, name))
            ok = r0 and r and r0.get("status") == "ok" and r.get("status") == "ok"
            cells.append(f"{r['p50_ms'] / r0['p50_ms']:.2f}" if ok and r0["p50_ms"] > 0 else "")
        for b in builds:
            r = rows.get((b, name))
            p = parity(r)
            bad += p.startswith("FAIL") or (r is not None and r.get("status") not in ("ok", "skipped"))
            cells.append(p)
        if peers_path:
            t = peer_us.get(name)
            cells.append(f"{t:.1f}" if t else "")
            for b in builds:
                r = rows.get((b, name))
                ok = t and r and r.get("status") == "ok" and r["p50_ms"] > 0
                cells.append(f"{t / (r['p50_ms'] * 1e3):.2f}" if ok else "")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
