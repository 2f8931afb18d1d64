#!/usr/bin/env python3
"""Write or inspect FF weights for apexx (docs/ff_weights.md).

  export_ff_weights.py OUT.safetensors --from STATE_DICT.pt
      torch.load a state dict (or a checkpoint holding one under
      "state_dict") and save it with safetensors.torch.save_file
      (needs torch and safetensors).
  export_ff_weights.py OUT.safetensors [--channels C] [--seed S]
      the documented seeded weights (apx_ff_weights_seeded), written with the
      standard library alone; byte-identical to apx_ff_weights_save.
  export_ff_weights.py --check FILE.safetensors
      list every tensor and check the FF names and shapes; exit 1 if any
      required tensor is missing or misshapen.
"""
import argparse
import json
import math
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


def write_plain(path, tensors, metadata=None):
    """The safetensors layout: u64 header length, JSON header padded with
    spaces to a multiple of 8, then the data in the header's order."""
    header, offset = {"__metadata__": metadata or {"format": "pt"}}, 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, _, data in tensors.values():
            f.write(data)


def check(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    for name, info in sorted(header.items()):
        print("%-56s %-5s %s" % (name, info["dtype"], info["shape"]))
    first = header.get("l0_path.scan_bidirectional.merge_gate_logit")
    if not first or len(first["shape"]) != 1:
        print("error: l0_path.scan_bidirectional.merge_gate_logit is missing or not [C]")
        return 1
    c, bad = first["shape"][0], 0
    for level in LEVELS:
        for name, dims, _ in TENSORS:
            full, want = "%s.%s" % (level, name), shape_of(dims, c)
            info = header.get(full)
            if info is None or info["shape"] != want or info["dtype"] not in ("F32", "F16", "BF16"):
                print("error: %s: %s, expected F32/F16/BF16 %s" % (
                    full, "missing" if info is None else "%s %s" % (info["dtype"], info["shape"]),
                    want))
                bad = 1
    print("C = %d: %s" % (c, "not usable by apexx" if bad else "ok"))
    return bad


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("path", help="the .safetensors file to write (or to check)")
    p.add_argument("--channels", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--from", dest="state_dict", metavar="STATE_DICT.pt")
    p.add_argument("--check", action="store_true")
    a = p.parse_args()
    if a.check:
        return check(a.path)
    if a.state_dict:
        try:
            import torch
            from safetensors.torch import save_file
        except ImportError as e:
            sys.exit("--from needs torch and safetensors (%s)" % e)
        sd = torch.load(a.state_dict, map_location="cpu", weights_only=True)
        sd = sd.get("state_dict", sd)
        save_file({k: v.contiguous() for k, v in sd.items() if torch.is_tensor(v)}, a.path,
                  metadata={"format": "pt"})
        return 0
    if not 1 <= a.channels <= 65536:
        sys.exit("--channels must be in [1, 65536]")
    write_plain(a.path, seeded(a.channels, a.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
