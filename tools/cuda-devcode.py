#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Is the device code of two builds of the cuda backend the same? For a
refactor that claims no change in the kernels (files split, code moved),
without a GPU and without cuobjdump: the nvcc-built host objects carry each
translation unit's device code in their .nv_fatbin section (an sm_XX cubin
and the compute_XX PTX, zstd-compressed by nvcc 13: the zstd program
decompresses them).

  tools/cuda-devcode.py dump OBJ... -o DIR    cubins, PTX and a resource
                                               table per object into DIR
  tools/cuda-devcode.py compare BEFORE AFTER  two folders of objects (e.g.
                                               copies of backends/cuda/.libs)

compare prints, per object, whether its cubin is byte-identical and its PTX
identical, and per device function of either side whose line differs: its
registers, frame and stack (.nv.info), static shared and constant bank 0
bytes, code bytes and hashes of its machine code, relocations and
attributes. The names of a unit's internal namespace (_INTERNAL_<hash>...)
and of its anonymous namespaces (_GLOBAL__N__<hash>_: a hash of the
preprocessed unit, changed by any header edit) are compared without the
hash. Exit status: 0 the same device code, 1
differences, 2 bad input."""
import hashlib
import os
import re
import struct
import subprocess
import sys
import tempfile

INTERNAL = re.compile(rb"_INTERNAL_[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]+")
# an anonymous namespace's name carries a hash of the preprocessed unit, so
# a header change that leaves the code alone renames it (cuda::std::ignore)
ANON = re.compile(rb"_GLOBAL__N__[0-9a-f]{8}_")
FATBIN_MAGIC = 0xBA55ED50


def norm(b):
    return INTERNAL.sub(b"_INTERNAL_", ANON.sub(b"_GLOBAL__N__", b))


def unhashed(b):
    """The bytes with the units' hashes in internal and anonymous namespace
    names zeroed (the same length)."""
    b = re.sub(rb"_INTERNAL_[0-9a-f]{8}_", b"_INTERNAL_00000000_", b)
    return ANON.sub(b"_GLOBAL__N__00000000_", b)


def fatbin_section(obj):
    with tempfile.NamedTemporaryFile() as t:
        subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", obj, t.name],
                       check=True)
        with open(t.name, "rb") as f:
            return f.read()


def entries(fb):
    """(kind 1 PTX / 2 ELF, arch, payload) of each fatbin entry."""
    off = 0
    while off + 16 <= len(fb):
        magic, _, hsz, fsz = struct.unpack_from("<IHHQ", fb, off)
        if magic != FATBIN_MAGIC:
            off += 8
            continue
        e, end = off + hsz, off + hsz + fsz
        while e < end:
            kind, _, ehs, psz = struct.unpack_from("<HHIQ", fb, e)
            csz = struct.unpack_from("<I", fb, e + 16)[0]
            arch = struct.unpack_from("<I", fb, e + 28)[0]
            flags = struct.unpack_from("<Q", fb, e + 40)[0]
            usz = struct.unpack_from("<Q", fb, e + 56)[0]
            payload = fb[e + ehs:e + ehs + psz]
            if flags & 0x8000:  # zstd
                payload = subprocess.run(["zstd", "-d", "-c"], input=payload[:csz],
                                         capture_output=True, check=True).stdout
            elif flags & 0x2000:
                raise SystemExit("cuda-devcode: an LZ4-compressed fatbin entry: not handled")
            yield kind, arch, payload[:usz] if usz else payload
            e += ehs + psz
        off = end


def cubin_functions(c):
    """{function: resource line} of an ELF cubin."""
    shoff = struct.unpack_from("<Q", c, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", c, 0x3a)
    secs = [struct.unpack_from("<IIQQQQIIQQ", c, shoff + i * shentsize) for i in range(shnum)]

    def cstr(off):
        return c[off:c.index(b"\0", off)]

    names = [cstr(secs[shstrndx][4] + s[0]).decode() for s in secs]
    data = [c[s[4]:s[4] + s[5]] if s[1] != 8 else b"" for s in secs]  # 8: NOBITS
    syms = []
    for s in secs:
        if s[1] == 2:  # SYMTAB
            for j in range(s[5] // 24):
                syms.append(cstr(secs[s[6]][4] + struct.unpack_from("<I", c, s[4] + j * 24)[0]))
    h = lambda b: hashlib.sha1(b).hexdigest()[:12]  # noqa: E731
    funcs = {}
    for i, n in enumerate(names):
        if n.startswith(".text."):
            funcs[n[6:]] = {"REG": 0, "FRAME": 0, "MAXSTACK": 0, "SHARED": 0, "CONST0": 0,
                            "CODE": secs[i][5], "text": h(data[i]), "rel": "-", "info": "-"}
    for i, n in enumerate(names):
        for pre, key in ((".nv.shared.", "SHARED"), (".nv.constant0.", "CONST0")):
            if n.startswith(pre) and n[len(pre):] in funcs:
                funcs[n[len(pre):]][key] = secs[i][5]
        if n.startswith(".nv.info.") and n[9:] in funcs:
            funcs[n[9:]]["info"] = h(data[i])
        if n.startswith((".rel.text.", ".rela.text.")) and n.split(".text.", 1)[1] in funcs:
            ent = 24 if n.startswith(".rela") else 16
            rel = []
            for j in range(secs[i][5] // ent):
                off, info = struct.unpack_from("<QQ", data[i], j * ent)
                add = struct.unpack_from("<q", data[i], j * ent + 16)[0] if ent == 24 else 0
                rel.append(b"%d %d %s %d" % (off, info & 0xffffffff, norm(syms[info >> 32]), add))
            funcs[n.split(".text.", 1)[1]]["rel"] = h(b"\n".join(rel))
        if n == ".nv.info":  # EIFMT_SVAL records keyed by function symbol
            d, p = data[i], 0
            while p + 4 <= len(d):
                fmt, attr = d[p], d[p + 1]
                size = struct.unpack_from("<H", d, p + 2)[0] if fmt == 4 else 0
                key = {0x2f: "REG", 0x11: "FRAME", 0x23: "MAXSTACK"}.get(attr)
                if fmt == 4 and key and size == 8:
                    sym, v = struct.unpack_from("<II", d, p + 4)
                    f = syms[sym].decode() if sym < len(syms) else ""
                    if f in funcs:
                        funcs[f][key] = v
                p += 4 + size
    return {norm(f.encode()).decode(): " ".join(
        f"{k}:{r[k]}" for k in ("REG", "FRAME", "MAXSTACK", "SHARED", "CONST0", "CODE")) +
        f" text={r['text']} rel={r['rel']} info={r['info']}" for f, r in funcs.items()}


def device_code(obj):
    """{'cubin': {arch: bytes}, 'ptx': {arch: bytes}, 'funcs': {name@arch: line}}"""
    out = {"cubin": {}, "ptx": {}, "funcs": {}}
    for kind, arch, data in entries(fatbin_section(obj)):
        if kind == 1:
            out["ptx"][arch] = norm(data.rstrip(b"\0"))
        elif kind == 2:
            out["cubin"][arch] = data
            for f, line in cubin_functions(data).items():
                out["funcs"][f"{f}@sm_{arch}"] = line
    return out


def objects(d):
    return {n[:-2]: os.path.join(d, n) for n in sorted(os.listdir(d)) if n.endswith(".o")}


def compare(a_dir, b_dir):
    a_objs, b_objs = objects(a_dir), objects(b_dir)
    if not a_objs or not b_objs:
        print("cuda-devcode: no .o files in one of the folders", file=sys.stderr)
        return 2
    same, a_funcs, b_funcs = True, {}, {}
    for name in sorted(set(a_objs) | set(b_objs)):
        if name not in a_objs or name not in b_objs:
            print(f"{name}.o: only in {'after' if name in b_objs else 'before'}")
            same = False
        a = device_code(a_objs[name]) if name in a_objs else {"cubin": {}, "ptx": {}, "funcs": {}}
        b = device_code(b_objs[name]) if name in b_objs else {"cubin": {}, "ptx": {}, "funcs": {}}
        a_funcs.update({f"{name}.o: {f}": v for f, v in a["funcs"].items()})
        b_funcs.update({f"{name}.o: {f}": v for f, v in b["funcs"].items()})
        if name not in a_objs or name not in b_objs:
            continue
        cub = "byte-identical" if a["cubin"] == b["cubin"] else "differs"
        if cub == "differs" and a["cubin"].keys() == b["cubin"].keys() and all(
                unhashed(a["cubin"][k]) == unhashed(b["cubin"][k]) for k in a["cubin"]):
            cub = "byte-identical but for the unit hashes in names"
        ptx = "identical" if a["ptx"] == b["ptx"] else "differs"
        same = same and cub.startswith("byte-identical") and ptx == "identical"
        print(f"{name}.o: {len(b['funcs'])} device functions, cubin {cub}, PTX {ptx}")
    diff = sorted(f for f in set(a_funcs) | set(b_funcs) if a_funcs.get(f) != b_funcs.get(f))
    for f in diff:
        print(f"  {f}\n    before: {a_funcs.get(f, '-')}\n    after:  {b_funcs.get(f, '-')}")
    print(f"{len(b_funcs)} device functions after, {len(a_funcs)} before; "
          f"{len(diff)} whose resources or code differ")
    return 0 if same and not diff else 1


def dump(objs, out):
    os.makedirs(out, exist_ok=True)
    for obj in objs:
        base = os.path.basename(obj).rsplit(".", 1)[0]
        dc = device_code(obj)
        for arch, data in dc["cubin"].items():
            with open(os.path.join(out, f"{base}.sm_{arch}.cubin"), "wb") as f:
                f.write(data)
        for arch, data in dc["ptx"].items():
            with open(os.path.join(out, f"{base}.compute_{arch}.ptx"), "wb") as f:
                f.write(data)
        with open(os.path.join(out, f"{base}.res"), "w") as f:
            for k in sorted(dc["funcs"]):
                f.write(f"{k} {dc['funcs'][k]}\n")
    return 0


def main(argv):
    if len(argv) == 3 and argv[0] == "compare":
        return compare(argv[1], argv[2])
    if len(argv) >= 4 and argv[0] == "dump" and argv[-2] == "-o":
        return dump(argv[1:-2], argv[-1])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
