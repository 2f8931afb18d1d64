#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Write or inspect FF weights for apexx (docs/ff_weights.md).

  export_ff_weights.py OUT.safetensors --from SOURCE [--prefix PREFIX]
      copy the tensors of SOURCE into OUT: a PyTorch checkpoint (torch.save
      of a state dict, or of a dict holding one under "state_dict"; needs
      torch) or a .safetensors file (read by this script). --prefix keeps
      only the tensors whose names start with PREFIX and drops it, to take
      the FF module out of a whole model's state dict (model.ff.l0_path...
      -> l0_path...). OUT must hold the FF tensors apexx needs (as --check
      says), else nothing is written.
  export_ff_weights.py OUT.safetensors [--channels C] [--seed S]
      the documented seeded weights (apx_ff_weights_seeded); byte-identical
      to apx_ff_weights_save.
  export_ff_weights.py --check FILE.safetensors
      list every tensor and check the FF names and shapes; exit 1 if any
      required tensor is missing or misshapen.

Every mode but a PyTorch SOURCE needs the standard library alone (no
safetensors package). OUT is written beside the target and renamed over
it, so it is never left half-written.
"""
import argparse
import json
import math
import os
import stat
import struct
import sys

LEVELS = ("l0_path", "l1_path")
# name, shape in units of C (ints are constants, "C"/"2C" scale), seeded init
TENSORS = [("scan_bidirectional.merge_gate_logit", ["C"], 0.0)]
for _scan in ("forward_scan", "backward_scan"):
    TENSORS += [("scan_bidirectional.%s.%s" % (_scan, _p), ["C"], 0.0)
                for _p in ("decay_logit", "input_gain_raw", "output_gain_raw", "state_bias")]
TENSORS += [
    ("film.token_norm.weight", ["C"], 1.0), ("film.token_norm.bias", ["C"], 0.0),
    ("film.mlp.0.weight", ["C", "C"], "C"), ("film.mlp.0.bias", ["C"], "C"),
    ("film.mlp.2.weight", ["2C", "C"], "C"), ("film.mlp.2.bias", ["2C"], "C"),
    ("refine.depthwise.weight", ["C", 1, 3, 3], 9), ("refine.depthwise.bias", ["C"], 9),
    ("refine.pointwise.weight", ["2C", "C", 1, 1], "C"), ("refine.pointwise.bias", ["2C"], "C"),
    ("refine.norm.weight", ["2C"], 1.0), ("refine.norm.bias", ["2C"], 0.0),
    ("fusion_gate.boundary_log_weight", [], 1.0),
    ("fusion_gate.uncertainty_log_weight", [], 1.0), ("fusion_gate.bias", [], 0.0),
]
DTYPE_SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
              "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}


def shape_of(dims, c):
    return [c if d == "C" else 2 * c if d == "2C" else d for d in dims]


def seeded(c, seed):
    """name -> (dtype, shape, bytes): splitmix64, U[-b, b) with b = 1/sqrt(fan_in)."""
    mask, state, out = (1 << 64) - 1, seed & ((1 << 64) - 1), {}

    def uniform():
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return ((z ^ (z >> 31)) >> 11) * 2.0 ** -53

    for level in LEVELS:
        for name, dims, init in TENSORS:
            shape = shape_of(dims, c)
            n = math.prod(shape)
            if isinstance(init, float):
                values = [init] * n
            else:
                bound = 1.0 / math.sqrt(c if init == "C" else init)
                values = [(2.0 * uniform() - 1.0) * bound for _ in range(n)]
            out["%s.%s" % (level, name)] = ("F32", shape, struct.pack("<%df" % n, *values))
    return out


class ExportError(Exception):
    """Bad input or output: the message names the file, the tensor or the value."""


def write_plain(path, tensors, metadata=None):
    """The safetensors layout: u64 header length, JSON header padded with
    spaces to a multiple of 8, then the data in the header's order. Written
    to PATH.tmp.PID.N beside the target, synced and renamed over it; a target
    that exists and is not a regular file is refused."""
    header, offset = {"__metadata__": metadata or {"format": "pt"}}, 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise ExportError("%s: exists and is not a regular file" % path)
    tmp = None
    try:
        for n in range(100):  # a stale PATH.tmp.PID.N of a killed run is left alone
            try:
                tmp = "%s.tmp.%d.%d" % (path, os.getpid(), n)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                break
            except FileExistsError:
                tmp = None
        if tmp is None:
            raise ExportError("%s: 100 temporaries %s.tmp.%d.N exist" % (path, path, os.getpid()))
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            for _, _, data in tensors.values():
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None and os.path.lexists(tmp):
            os.unlink(tmp)
        raise ExportError("%s: %s" % (path, e.strerror or e)) from None


def read_header(f, path):
    """The header of an open safetensors file: (data start, {name: entry}),
    every entry checked against the file's size."""
    size = os.fstat(f.fileno()).st_size
    raw = f.read(8)
    if len(raw) != 8:
        raise ExportError("%s: %d bytes, too short for a safetensors file" % (path, size))
    (n,) = struct.unpack("<Q", raw)
    if n > min(size - 8, 100 << 20):
        raise ExportError("%s: header length [%d] is past the file's %d bytes or 100 MiB"
                          % (path, n, size))
    try:
        header = json.loads(f.read(n))
    except ValueError as e:
        raise ExportError("%s: the header is not JSON (%s)" % (path, e)) from None
    if not isinstance(header, dict):
        raise ExportError("%s: the header is not a JSON object" % path)
    meta = header.pop("__metadata__", None)
    data_size = size - 8 - n
    for name, info in header.items():
        ok = (isinstance(info, dict) and isinstance(info.get("dtype"), str)
              and isinstance(info.get("shape"), list)
              and all(isinstance(d, int) and d >= 0 for d in info["shape"])
              and isinstance(info.get("data_offsets"), list) and len(info["data_offsets"]) == 2
              and all(isinstance(o, int) for o in info["data_offsets"]))
        if not ok:
            raise ExportError("%s: tensor %s: not {dtype, shape, data_offsets}: %s"
                              % (path, name, json.dumps(info)[:200]))
        begin, end = info["data_offsets"]
        if not 0 <= begin <= end <= data_size:
            raise ExportError("%s: tensor %s: data_offsets [%d, %d] outside the data's %d bytes"
                              % (path, name, begin, end, data_size))
        width = DTYPE_SIZE.get(info["dtype"])
        if width is not None and end - begin != math.prod(info["shape"]) * width:
            raise ExportError("%s: tensor %s: %d bytes for %s %s (%d expected)"
                              % (path, name, end - begin, info["dtype"], info["shape"],
                                 math.prod(info["shape"]) * width))
    return 8 + n, header, meta


def read_safetensors(path, wanted):
    """({name: (dtype, shape, bytes)} for the names that wanted(name) keeps,
    every name) of a safetensors file, read without the safetensors package."""
    with open(path, "rb") as f:
        start, header, _ = read_header(f, path)
        out = {}
        for name, info in header.items():
            if not wanted(name):
                continue
            begin, end = info["data_offsets"]
            f.seek(start + begin)
            out[name] = (info["dtype"], info["shape"], f.read(end - begin))
    return out, list(header)


TORCH_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64",
                "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
                "bool": "BOOL"}


def read_torch(path, wanted):
    """({name: (dtype, shape, bytes)} for the tensors that wanted(name)
    keeps, every tensor's name) of a torch.save'd state dict (or of its
    "state_dict")."""
    try:
        import torch
    except ImportError as e:
        raise ExportError("%s is a PyTorch checkpoint: reading it needs torch (%s; Debian: "
                          "python3-torch), or give a .safetensors file" % (path, e)) from None
    if sys.byteorder != "little":
        raise ExportError("safetensors data are little-endian; this host is %s-endian" % sys.byteorder)
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many kinds for a file it cannot read
        raise ExportError("%s: torch.load failed: %s" % (path, str(e).splitlines()[0] if str(e) else type(e).__name__)) from None
    if isinstance(sd, dict) and isinstance(sd.get("state_dict"), dict):
        sd = sd["state_dict"]
    if not isinstance(sd, dict):
        raise ExportError("%s: holds a %s, not a state dict" % (path, type(sd).__name__))
    out, names = {}, [n for n, t in sd.items() if isinstance(n, str) and torch.is_tensor(t)]
    for name in names:
        t = sd[name]
        if not wanted(name):
            continue
        dtype = TORCH_DTYPES.get(str(t.dtype).replace("torch.", ""))
        if dtype is None:
            raise ExportError("%s: tensor %s: dtype %s has no safetensors equivalent here"
                              % (path, name, t.dtype))
        flat = t.detach().cpu().contiguous().reshape(-1)
        data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
        out[name] = (dtype, list(t.shape), data)
    return out, names


def read_source(path, wanted):
    """A safetensors file or a PyTorch checkpoint, told apart by their first bytes."""
    try:
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ExportError("%s: not a regular file" % path)
            head = f.read(9)
    except OSError as e:
        raise ExportError("%s: %s" % (path, e.strerror or e)) from None
    if len(head) == 9 and head[8:9] == b"{":
        return read_safetensors(path, wanted)
    if head[:4] == b"PK\x03\x04" or head[:1] == b"\x80":
        return read_torch(path, wanted)
    raise ExportError("%s: neither a safetensors file nor a PyTorch checkpoint (first bytes %r)"
                      % (path, head))


def ff_problems(header):
    """The FF tensors a header lacks or holds misshapen, as messages; C from
    l0_path.scan_bidirectional.merge_gate_logit."""
    first = header.get("l0_path.scan_bidirectional.merge_gate_logit")
    if not first or len(first["shape"]) != 1:
        return ["l0_path.scan_bidirectional.merge_gate_logit is missing or not [C]"]
    c, problems = first["shape"][0], []
    for level in LEVELS:
        for name, dims, _ in TENSORS:
            full, want = "%s.%s" % (level, name), shape_of(dims, c)
            info = header.get(full)
            if info is None or info["shape"] != want or info["dtype"] not in ("F32", "F16", "BF16"):
                problems.append("%s: %s, expected F32/F16/BF16 %s" % (
                    full, "missing" if info is None else "%s %s" % (info["dtype"], info["shape"]),
                    want))
    return problems


def export(out_path, source, prefix):
    """--from: SOURCE's tensors (those under PREFIX, renamed) into OUT."""
    if prefix is not None:
        if not prefix or prefix.startswith("."):
            raise ExportError("--prefix [%s]: expected a name such as model.ff" % prefix)
        prefix = prefix if prefix.endswith(".") else prefix + "."
        tensors, names = read_source(source, lambda name: name.startswith(prefix))
        tensors = {name[len(prefix):]: v for name, v in tensors.items()}
    else:
        tensors, names = read_source(source, lambda name: True)
    problems = ff_problems({k: {"dtype": d, "shape": s} for k, (d, s, _) in tensors.items()})
    if problems:
        anchor = ".l0_path.scan_bidirectional.merge_gate_logit"
        found = sorted(n for n in names if n.endswith(anchor))
        hint = ""
        if found:
            hint = "; the FF module's tensors are under --prefix %s" % " or ".join(
                "[%s]" % n[:-len(anchor)] for n in found)
        elif prefix is not None and not tensors:
            hint = "; no tensor name in %s starts with [%s]" % (source, prefix)
        raise ExportError("%s: not FF weights apexx can load (%d problem(s), first: %s)%s; "
                          "nothing written" % (source if prefix is None else "%s under %s" % (source, prefix),
                                               len(problems), problems[0], hint))
    write_plain(out_path, tensors)
    print("wrote %s: %d tensors, C = %d" % (
        out_path, len(tensors), tensors["l0_path.scan_bidirectional.merge_gate_logit"][1][0]))


def check(path):
    with open(path, "rb") as f:
        _, header, _ = read_header(f, path)
    for name, info in sorted(header.items()):
        print("%-56s %-5s %s" % (name, info["dtype"], info["shape"]))
    problems = ff_problems(header)
    for p in problems:
        print("error: " + p)
    first = header.get("l0_path.scan_bidirectional.merge_gate_logit")
    c = first["shape"][0] if first and len(first["shape"]) == 1 else "?"
    print("C = %s: %s" % (c, "not usable by apexx" if problems else "ok"))
    return 1 if problems else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("path", help="the .safetensors file to write (or to check)")
    p.add_argument("--channels", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--from", dest="source", metavar="SOURCE",
                   help="a PyTorch checkpoint (.pt) or a .safetensors file")
    p.add_argument("--prefix", metavar="PREFIX",
                   help="with --from: keep the tensors under PREFIX (model.ff), without it")
    p.add_argument("--check", action="store_true")
    a = p.parse_args()
    if a.prefix is not None and not a.source:
        p.error("--prefix needs --from")
    if a.source and (a.channels is not None or a.seed is not None or a.check):
        p.error("--from takes the weights from SOURCE: --channels, --seed and --check do not apply")
    try:
        if a.check:
            return check(a.path)
        if a.source:
            export(a.path, a.source, a.prefix)
            return 0
        channels = 128 if a.channels is None else a.channels
        if not 1 <= channels <= 65536:
            p.error("--channels [%d] is outside [1, 65536]" % channels)
        write_plain(a.path, seeded(channels, 0 if a.seed is None else a.seed))
        return 0
    except (ExportError, OSError) as e:
        print("export_ff_weights.py: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
