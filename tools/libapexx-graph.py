#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The graphs behind docs/architecture.md, Layers: which files of libapexx
include which, and which object calls into which, with the circles in
either (none expected).

  tools/libapexx-graph.py [--edges] [BUILD_DIR]

BUILD_DIR is a built tree (default: the source tree, built in place); the
include graph is read from the sources (#include "..." lines, resolved as
the compiler does: the including file's folder, then libapexx/, include/,
common/), the call graph from the objects of libapexx.so (nm: a file that
uses a symbol another file defines calls into it). --edges prints every
edge too. Exit status: 0 no circle, 1 a circle, 2 bad input."""
import os
import re
import subprocess
import sys

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources():
    out = []
    for root, _, files in os.walk(os.path.join(SRC, "libapexx")):
        if "/." in root:
            continue
        out += [os.path.join(root, f) for f in files if f.endswith((".c", ".h"))]
    return sorted(out)


def resolve(name, including):
    for base in (os.path.dirname(including), os.path.join(SRC, "libapexx"),
                 os.path.join(SRC, "include"), os.path.join(SRC, "common")):
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(p):
            return p
    return None  # config.h (generated), or a system header


def rel(p):
    return os.path.relpath(p, SRC)


def include_graph():
    g = {}
    for f in sources():
        with open(f, encoding="utf-8") as fh:
            names = INCLUDE.findall(fh.read())
        g[rel(f)] = sorted({rel(t) for t in (resolve(n, f) for n in names) if t})
    return g


def objects(build):
    libs = os.path.join(build, "libapexx")
    out = []
    for root, _, files in os.walk(libs):
        if os.path.basename(root) != ".libs":
            continue
        out += [os.path.join(root, f) for f in files
                if f.startswith("libapexx_la-") and f.endswith(".o")]
    return sorted(out)


def unit_of(obj):
    """libapexx_la-weights.o -> the source file's name (libtool drops the
    folder; the folder comes from the sources)."""
    return os.path.basename(obj)[len("libapexx_la-"):-2] + ".c"


def call_graph(build):
    objs = objects(build)
    if not objs:
        sys.exit("libapexx-graph: no libapexx objects under %s/libapexx (build it first)" % build)
    by_name = {}
    for f in sources():
        if f.endswith(".c"):
            by_name.setdefault(os.path.basename(f), []).append(rel(f))
    defined, used = {}, {}
    for o in objs:
        names = by_name.get(unit_of(o), [])
        if not names:  # a removed source's object left in the build tree
            continue
        if len(names) > 1:
            sys.exit("libapexx-graph: %s matches %d sources" % (o, len(names)))
        unit = names[0]
        nm = subprocess.run(["nm", o], check=True, capture_output=True, text=True).stdout
        used[unit] = set()
        for line in nm.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U":
                used[unit].add(parts[1])
            elif len(parts) == 3 and parts[1] in "TDBRVW":
                defined[parts[2]] = unit
    g = {}
    for unit, syms in used.items():
        g[unit] = sorted({defined[s] for s in syms if s in defined and defined[s] != unit})
    return g


def circles(g):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def main(argv):
    edges = "--edges" in argv
    rest = [a for a in argv if a != "--edges"]
    if len(rest) > 1 or any(a.startswith("-") for a in rest):
        print(__doc__, file=sys.stderr)
        return 2
    build = os.path.abspath(rest[0]) if rest else SRC
    status = 0
    for title, g in (("include", include_graph()), ("call", call_graph(build))):
        n = sum(len(v) for v in g.values())
        found = circles(g)
        print("%s graph: %d files, %d edges, %d circle%s" %
              (title, len(g), n, len(found), "" if len(found) == 1 else "s"))
        if edges:
            for v in sorted(g):
                for w in g[v]:
                    print("  %s -> %s" % (v, w))
        for c in found:
            print("  circle: " + " <-> ".join(c))
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
