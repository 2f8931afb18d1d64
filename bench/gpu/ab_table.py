#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The side-by-side table of an A/B run's alternating apexx-bench
processes (bench/gpu/ab-build.sh: the large profile) from its work folder:
each cuda row's time per call (p50, us) in every round of A and of B, and
the ratio of their medians B/A (above 1: B is slower). The seed profile's
A/B is apexx-bench ab's own table.

  python3 bench/gpu/ab_table.py WORKDIR

WORKDIR holds bw-TAG-SIDE-ROUND.json (TAG large, seed or seed-off; SIDE A
or B). A missing or unreadable file is named and its cells left empty."""
import glob
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from table import ROWS, cuda_rows, load, us  # noqa: E402

TAGS = [("large", "large profile, validate=device"), ("seed", "seed profile, validate=device"),
        ("seed-off", "seed profile, validate=off")]


def rounds(work):
    found = set()
    tags = set()
    for path in glob.glob(os.path.join(work, "bw-*-[AB]-*.json")):
        m = re.search(r"bw-(.+)-[AB]-(\d+)\.json$", path)
        if m:
            tags.add(m.group(1))
            found.add(int(m.group(2)))
    return sorted(found), tags


def ratio_cell(a, b):
    a, b = [v for v in a if v is not None], [v for v in b if v is not None]
    if not a or not b or statistics.median(a) <= 0:
        return ""
    return f"{statistics.median(b) / statistics.median(a):.3f}"


def row_line(name, a, b):
    cells = [name] + [f"{v:.1f}" if v is not None else "" for v in a + b] + [ratio_cell(a, b)]
    return "| " + " | ".join(cells) + " |"


def header(rs):
    cols = [f"A r{r}" for r in rs] + [f"B r{r}" for r in rs]
    return ("| row | " + " | ".join(cols) + " | B/A |\n| --- | " +
            " | ".join("---:" for _ in cols) + " | ---: |")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    work = sys.argv[1]
    rs, tags = rounds(work)
    if not rs:
        print(f"ab_table.py: no round's reports in {work}", file=sys.stderr)
        return 1
    card, printed_card = None, False
    for tag, title in TAGS:
        if tag not in tags:
            continue
        side_rows = {}
        for side in "AB":
            for r in rs:
                path = os.path.join(work, f"bw-{tag}-{side}-{r}.json")
                doc = load(path, "apexx-bench report") if os.path.exists(path) else None
                if doc is None:
                    print(f"note: {path}: missing or unreadable", file=sys.stderr)
                card = card or ((doc or {}).get("environment", {}).get("gpu") or {}).get("name")
                side_rows[(side, r)] = {op: row for (_, op), row in cuda_rows(doc).items()}
        if card and not printed_card:
            print(f"Card: {card}")
            printed_card = True
        print(f"\n### {title}: time per call, us (p50)\n")
        print(header(rs))
        for op, _, _ in ROWS:
            a = [us(side_rows[("A", r)][op]) if op in side_rows[("A", r)] else None for r in rs]
            b = [us(side_rows[("B", r)][op]) if op in side_rows[("B", r)] else None for r in rs]
            if any(v is not None for v in a + b):
                print(row_line(op, a, b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
