#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tools/export_ff_weights.py --from and --prefix (docs/ff_weights.md,
# Exporting from PyTorch): the FF module taken out of a whole model's
# weights, from a .safetensors file (the script's own reader and writer,
# no safetensors package) and, where torch imports, from torch.save'd
# state dicts (zip and legacy pickle, float32, float16, bfloat16, a
# non-contiguous tensor); the result equals the seeded file byte for byte
# and runs in apexx-bench's ff_infer. Refused with a message and nothing
# written: no --prefix where one is needed, a prefix with no FF tensors,
# a truncated source, a directory as the target; a failed export leaves
# the target as it was.
set -u
b=${APEXX_BUILDDIR:?run under make check}
s=${APEXX_SRCDIR:?run under make check}
py=${APEXX_TEST_PYTHON:-}
[ -n "$py" ] || py=python3
if ! command -v "$py" >/dev/null 2>&1; then
	echo "SKIP: no Python 3 ($py): tools/export_ff_weights.py is not checked"
	exit 77
fi
tool=$s/tools/export_ff_weights.py
fail=0
ok() { printf 'ok: %s\n' "$1"; }
bad() { printf 'FAIL: %s\n' "$1"; fail=1; }
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
export PYTHONDONTWRITEBYTECODE=1

# refused NAME OUT EXPECTED-MESSAGE-PART ARGS...: exit 1, the message, OUT not written
refused() {
	name=$1 out=$2 expect=$3
	shift 3
	before=$(cat "$out" 2>/dev/null || echo absent)
	"$py" "$tool" "$out" "$@" >"$t/out" 2>"$t/err"
	rc=$?
	if [ $rc -eq 0 ]; then
		bad "$name: accepted"
		return
	fi
	msg=$(cat "$t/err")
	after=$(cat "$out" 2>/dev/null || echo absent)
	if [ $rc -ne 1 ] || grep -q Traceback "$t/err"; then
		bad "$name: exit $rc: $msg"
	elif ! grep -qF -- "$expect" "$t/err"; then
		bad "$name: the message lacks [$expect]: $msg"
	elif [ "$before" != "$after" ]; then
		bad "$name: $out changed"
	elif ls "$t" | grep -q '\.tmp\.'; then
		bad "$name: a temporary was left: $(ls "$t" | grep '\.tmp\.')"
	else
		ok "$name: $msg"
	fi
}

"$py" "$tool" "$t/ref.safetensors" --channels 6 --seed 11 >/dev/null ||
	{ bad "the seeded export failed"; exit 1; }

# the test's own safetensors reader and writer (not the tool's)
cat >"$t/st.py" <<'EOF'
import json, struct


def read(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items()}


def write(path, tensors):
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for k, (dtype, shape, data) in tensors.items():
        header[k] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(d for _, _, d in tensors.values()))
EOF

# a whole model's weights: other modules around model.ff (model.ffn shares
# the first letters), the FF tensors in the seeded file's order
"$py" - "$t" <<'EOF' || { bad "cannot write the whole-model file"; exit 1; }
import struct, sys
t = sys.argv[1]
sys.path.insert(0, t)
import st
whole = {"model.backbone.conv.weight": ("F32", [2, 3], struct.pack("<6f", *range(6))),
         "model.ffn.weight": ("F16", [4], b"\0" * 8)}
whole.update(("model.ff." + n, v) for n, v in st.read(t + "/ref.safetensors").items())
whole["model.head.bias"] = ("I64", [], struct.pack("<q", 7))
st.write(t + "/whole.safetensors", whole)
EOF

for p in model.ff model.ff.; do
	rm -f "$t/ff.safetensors"
	if "$py" "$tool" "$t/ff.safetensors" --from "$t/whole.safetensors" --prefix "$p" >"$t/out" 2>&1 &&
		cmp -s "$t/ff.safetensors" "$t/ref.safetensors"; then
		ok "--from whole.safetensors --prefix $p: the seeded file byte for byte ($(cat "$t/out"))"
	else
		bad "--from whole.safetensors --prefix $p: $(cat "$t/out")"
	fi
done
"$py" "$tool" --check "$t/ff.safetensors" >"$t/out" 2>&1 && ok "--check: $(tail -n 1 "$t/out")" ||
	bad "--check refuses the export: $(tail -n 3 "$t/out")"

# apexx loads and runs it: ff_infer_ok FILE
ff_infer_ok() {
	"$b/bench/apexx-bench" --backends cpu --ops ff_infer --dtype fp32 --channels 6 --height 32 \
		--width 32 --kmax 4 --iters 1 --warmup 0 --repetitions 1 --quiet \
		--ff-weights "$1" --output-json "$t/report.json" >"$t/bench.out" 2>&1 &&
		"$py" -c 'import json, sys
row = json.load(open(sys.argv[1]))["benchmarks"]["end_to_end_infer"]["ff_infer"]["rows"]["cpu"]
sys.exit(row["status"] != "ok")' "$t/report.json" >>"$t/bench.out" 2>&1
}
ff_infer_ok "$t/ff.safetensors" && ok "apexx-bench ff_infer runs with the exported weights" ||
	bad "apexx-bench ff_infer with the exported weights: $(tail -n 3 "$t/bench.out")"

refused "a whole model without --prefix" "$t/no-prefix.safetensors" \
	"the FF module's tensors are under --prefix [model.ff]" --from "$t/whole.safetensors"
refused "a prefix without the FF tensors" "$t/head.safetensors" "under --prefix [model.ff]" \
	--from "$t/whole.safetensors" --prefix model.head
refused "a prefix no name starts with (ffn is not ff)" "$t/none.safetensors" \
	"l0_path.scan_bidirectional.merge_gate_logit is missing" --from "$t/whole.safetensors" --prefix model.f
head -c 200 "$t/whole.safetensors" >"$t/truncated.safetensors"
refused "a truncated source" "$t/trunc-out.safetensors" "past the file's 200 bytes" \
	--from "$t/truncated.safetensors" --prefix model.ff
printf 'not weights' >"$t/text.txt"
refused "a source of another kind" "$t/text-out.safetensors" "neither a safetensors file nor a PyTorch checkpoint" \
	--from "$t/text.txt"
mkdir "$t/dir.safetensors"
refused "a directory as the target" "$t/dir.safetensors" "exists and is not a regular file" \
	--from "$t/whole.safetensors" --prefix model.ff
printf 'keep' >"$t/kept.safetensors"
refused "a failed export keeps the target" "$t/kept.safetensors" "is missing" \
	--from "$t/whole.safetensors" --prefix model.head
if "$py" "$tool" "$t/x.safetensors" --prefix model.ff >"$t/out" 2>&1; then
	bad "--prefix without --from: accepted"
else
	grep -q -- '--prefix needs --from' "$t/out" && ok "--prefix without --from: refused" ||
		bad "--prefix without --from: $(cat "$t/out")"
fi

# PyTorch checkpoints
if ! "$py" -c 'import torch' 2>/dev/null; then
	echo "skip: torch does not import in $py (Debian: python3-torch): the .pt cases are not run"
	exit $fail
fi
"$py" - "$t" <<'EOF' || bad "cannot write the torch checkpoints"
import sys
import torch
t = sys.argv[1]
sys.path.insert(0, t)
import st
ff = st.read(t + "/ref.safetensors")
sd = {"model.backbone.conv.weight": torch.ones(2, 3)}
for name, (_, shape, data) in ff.items():
    sd["model.ff." + name] = torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(shape).clone()
torch.save({"state_dict": sd, "epoch": 3}, t + "/ckpt.pt")
torch.save(sd, t + "/legacy.pt", _use_new_zipfile_serialization=False)
# half and bfloat16 tensors, one non-contiguous, an int64 scalar buffer
mixed = {}
for i, (name, v) in enumerate(sd.items()):
    if name.startswith("model.ff."):
        v = v.to(torch.bfloat16 if i % 2 else torch.float16)
        if v.dim() == 2:
            v = v.t().contiguous().t()
    mixed[name] = v
mixed["model.ff.num_batches_tracked"] = torch.tensor(5)
torch.save(mixed, t + "/mixed.pt")
torch.save(mixed, t + "/mixed-ref.pt")
EOF
for src in ckpt.pt legacy.pt; do
	rm -f "$t/ff.safetensors"
	if "$py" "$tool" "$t/ff.safetensors" --from "$t/$src" --prefix model.ff >"$t/out" 2>&1 &&
		cmp -s "$t/ff.safetensors" "$t/ref.safetensors"; then
		ok "--from $src --prefix model.ff: the seeded file byte for byte"
	else
		bad "--from $src --prefix model.ff: $(tail -n 3 "$t/out")"
	fi
done
if "$py" "$tool" "$t/mixed.safetensors" --from "$t/mixed.pt" --prefix model.ff >"$t/out" 2>&1 &&
	"$py" "$tool" --check "$t/mixed.safetensors" >"$t/check" 2>&1; then
	ok "float16/bfloat16 with a non-contiguous tensor: $(tail -n 1 "$t/check")"
	"$py" - "$t" <<'EOF' && ok "every tensor reads back equal to the checkpoint's" || bad "the export differs from the checkpoint"
import sys
import torch
t = sys.argv[1]
sys.path.insert(0, t)
import st
got = st.read(t + "/mixed.safetensors")
want = torch.load(t + "/mixed-ref.pt")
kinds = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}
bad = 0
for name, v in want.items():
    if not name.startswith("model.ff."):
        continue
    dtype, shape, data = got.pop(name[len("model.ff."):])
    back = torch.frombuffer(bytearray(data), dtype=kinds[dtype]).reshape(shape) if data else torch.empty(shape)
    if back.dtype != v.dtype or list(v.shape) != shape or not torch.equal(back, v):
        print("differs:", name, dtype, shape)
        bad = 1
if got:
    print("extra:", sorted(got))
    bad = 1
sys.exit(bad)
EOF
else
	bad "float16/bfloat16 export: $(tail -n 3 "$t/out") $(tail -n 3 "$t/check" 2>/dev/null)"
fi
ff_infer_ok "$t/mixed.safetensors" && ok "apexx-bench ff_infer runs with the float16/bfloat16 export" ||
	bad "apexx-bench ff_infer with the float16/bfloat16 export: $(tail -n 3 "$t/bench.out")"
printf 'PK\003\004broken' >"$t/broken.pt"
refused "a broken checkpoint" "$t/broken-out.safetensors" "torch.load failed" --from "$t/broken.pt"
exit $fail
