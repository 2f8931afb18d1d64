# SPDX-License-Identifier: Apache-2.0
"""apexx.onnx (docs/trt.md, From PyTorch to TensorRT): a block calling apexx.torch ops is
exported with torch.onnx.export (the TorchScript-based exporter), checked with
onnx.checker, and each node of the apexx domain is taken as TensorRT's ONNX parser takes
it: its op type, plugin_version and plugin_namespace must name a creator the plugin library
registers, its attributes become that creator's declared fields (an attribute of another
kind than its field's is an error here, as in the parser) and go through the plugins' own
field parser (apx__trt_parse_fields, reached through tests/trt-units-ctypes.so), which
rejects unknown names, wrong types and values out of range; the input count and the
inputs' element types go through the plugins' rules too, and the parsed values must be the
model's. Deliberately wrong nodes (a renamed, retyped or out-of-range attribute, another
plugin version, an int64 id input, a wrong input count) must fail the same check. Ops and
uses without a plugin must raise ExportError naming the op. The exported file and its node
list stay in $APEXX_TEST_ONNX_OUT (make check: python/build/test-onnx/). Skipped without
torch, onnx (Debian: python3-onnx) or the test module."""
import copy
import ctypes
import io
import os
import tempfile
import unittest

from apexx_test import TestCase

try:
    import torch
except ImportError:
    torch = None
try:
    import onnx
    from onnx import helper as onnx_helper
except ImportError:
    onnx = None

# nvinfer1::PluginFieldType (backends/trt/trt_units.h, apx__trt_field_type)
FIELD_FLOAT32, FIELD_FLOAT64, FIELD_INT32, FIELD_CHAR, FIELD_INT64 = 1, 2, 5, 6, 10
INT_FIELDS = {3: "b", 4: "h", FIELD_INT32: "i", FIELD_INT64: "q"}
FLOAT_FIELDS = {FIELD_FLOAT32: "f", FIELD_FLOAT64: "d"}
# ONNX TensorProto element type -> nvinfer1::DataType (apx__trt_dtype)
TRT_DTYPE = {1: 0, 10: 1, 3: 2, 6: 3, 9: 4, 2: 5, 16: 7, 7: 8}
# the attributes TensorRT's parser reads to find the creator, not fields
CREATOR_ATTRS = ("plugin_version", "plugin_namespace")


class PluginFieldError(Exception):
    """A node that TensorRT's parser or the plugin's creator would refuse."""


class TrtUnits:
    """The plugins' pure C units (creator list, field declarations, field parser)."""

    def __init__(self, path):
        lib = ctypes.CDLL(path)
        lib.apx_test_trt_creator_find.argtypes = [ctypes.c_char_p] * 3
        lib.apx_test_trt_field_decl.argtypes = [ctypes.c_int, ctypes.c_int,
                                                ctypes.POINTER(ctypes.c_char_p),
                                                ctypes.POINTER(ctypes.c_int),
                                                ctypes.POINTER(ctypes.c_int)]
        lib.apx_test_trt_nb_outputs.argtypes = [ctypes.c_int]
        lib.apx_test_trt_parse.argtypes = [
            ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
            ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.POINTER(ctypes.c_int),
            ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int),
            ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_float), ctypes.c_char_p,
            ctypes.c_size_t]
        self.lib = lib

    def creator(self, name, version, name_space):
        return self.lib.apx_test_trt_creator_find(name.encode(), version.encode(),
                                                  name_space.encode())

    def decls(self, kind):
        name, ftype, length = ctypes.c_char_p(), ctypes.c_int(), ctypes.c_int()
        count = self.lib.apx_test_trt_field_decl(kind, 0, name, ftype, length)
        out = {}
        for i in range(count):
            self.lib.apx_test_trt_field_decl(kind, i, name, ftype, length)
            out[name.value.decode()] = (ftype.value, length.value)
        return out

    def nb_outputs(self, kind):
        return self.lib.apx_test_trt_nb_outputs(kind)

    def parse(self, kind, fields, in_types):
        """fields: [(name, field type, packed bytes, length)]; in_types: the inputs'
        nvinfer1::DataType (-1 unknown). Returns the parsed parameters."""
        n = len(fields)
        keep = [ctypes.create_string_buffer(f[2], len(f[2])) for f in fields]
        names = (ctypes.c_char_p * max(n, 1))(*[f[0].encode() for f in fields])
        types = (ctypes.c_int * max(n, 1))(*[f[1] for f in fields])
        data = (ctypes.c_void_p * max(n, 1))(*[ctypes.cast(b, ctypes.c_void_p) for b in keep])
        lengths = (ctypes.c_int * max(n, 1))(*[f[3] for f in fields])
        ins = (ctypes.c_int * max(len(in_types), 1))(*in_types)
        tile, num_inputs, direction = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        clamp = ctypes.c_float()
        err = ctypes.create_string_buffer(512)
        rc = self.lib.apx_test_trt_parse(kind, n, names, types, data, lengths, len(in_types),
                                         ins, tile, num_inputs, direction, clamp, err,
                                         len(err))
        if rc != 0:
            raise PluginFieldError(err.value.decode())
        return {"tile_size": tile.value, "num_inputs": num_inputs.value,
                "direction": direction.value, "clamp_value": clamp.value}


def elem_types(model):
    """name -> ONNX element type of every value whose type the file states or implies."""
    types = {}
    graph = onnx.shape_inference.infer_shapes(model).graph
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        if v.type.tensor_type.elem_type:
            types[v.name] = v.type.tensor_type.elem_type
    for init in graph.initializer:
        types[init.name] = init.data_type
    return types


def check_plugin_node(units, node, types):
    """The node as TensorRT's ONNX parser and the plugin's creator take it; returns
    (plugin name, parsed parameters) or raises PluginFieldError."""
    attrs = {a.name: a for a in node.attribute}
    version = attrs["plugin_version"].s.decode() if "plugin_version" in attrs else "1"
    name_space = attrs["plugin_namespace"].s.decode() if "plugin_namespace" in attrs else ""
    kind = units.creator(node.op_type, version, name_space)
    if kind < 0:
        raise PluginFieldError(f"no creator ({node.op_type}, version [{version}], namespace "
                               f"[{name_space}]) in the plugin library")
    decls = units.decls(kind)
    fields = []
    for a in node.attribute:
        if a.name in CREATOR_ATTRS:
            continue
        ftype = decls.get(a.name, (None, 1))[0]
        if a.type == onnx.AttributeProto.INT:
            if ftype is None:
                ftype = FIELD_INT64
            if ftype not in INT_FIELDS:
                raise PluginFieldError(f"{node.op_type}: attribute {a.name} is an INT, its "
                                       f"field has type [{ftype}]")
            fmt = INT_FIELDS[ftype]
            bits = 8 * ctypes.sizeof({"b": ctypes.c_int8, "h": ctypes.c_int16,
                                      "i": ctypes.c_int32, "q": ctypes.c_int64}[fmt])
            if not -(1 << (bits - 1)) <= a.i < (1 << (bits - 1)):
                raise PluginFieldError(f"{node.op_type}: {a.name} [{a.i}] does not fit its "
                                       f"{bits}-bit field")
            fields.append((a.name, ftype, a.i.to_bytes(bits // 8, "little", signed=True), 1))
        elif a.type == onnx.AttributeProto.FLOAT:
            if ftype is None:
                ftype = FIELD_FLOAT32
            if ftype not in FLOAT_FIELDS:
                raise PluginFieldError(f"{node.op_type}: attribute {a.name} is a FLOAT, its "
                                       f"field has type [{ftype}]")
            ctype = ctypes.c_float if ftype == FIELD_FLOAT32 else ctypes.c_double
            fields.append((a.name, ftype, bytes(ctype(a.f)), 1))
        elif a.type == onnx.AttributeProto.STRING:
            if ftype not in (None, FIELD_CHAR):
                raise PluginFieldError(f"{node.op_type}: attribute {a.name} is a STRING, its "
                                       f"field has type [{ftype}]")
            fields.append((a.name, FIELD_CHAR, a.s, len(a.s)))
        else:
            raise PluginFieldError(f"{node.op_type}: attribute {a.name} has ONNX type "
                                   f"[{a.type}], which no field takes")
    in_types = [TRT_DTYPE.get(types.get(i, 0), -1) for i in node.input]
    params = units.parse(kind, fields, in_types)
    if len(node.output) != units.nb_outputs(kind):
        raise PluginFieldError(f"{node.op_type}: [{len(node.output)}] outputs, the plugin "
                               f"has {units.nb_outputs(kind)}")
    return node.op_type, params


def plugin_nodes(model):
    return [n for n in model.graph.node if n.domain == "apexx"]


def node_list(model):
    lines = []
    for n in model.graph.node:
        values = [(a.name, onnx_helper.get_attribute_value(a)) for a in n.attribute
                  if a.type != onnx.AttributeProto.TENSOR]
        attrs = ", ".join(f"{k}={v.decode()!r}" if isinstance(v, bytes) else f"{k}={v!r}"
                          for k, v in values)
        dom = f"{n.domain}::" if n.domain else ""
        lines.append(f"{dom}{n.op_type}({', '.join(n.input)}) -> {', '.join(n.output)}"
                     + (f"  [{attrs}]" if attrs else ""))
    return lines


def block_inputs(int32_idx=False):
    g = torch.Generator().manual_seed(31)
    B, C, H, W, T = 2, 3, 8, 8, 5
    idx = torch.tensor([[0, 3, 1], [2, 1, 3]], dtype=torch.int32 if int32_idx else torch.int64)
    return (torch.randn(B, C, H, W, generator=g), idx,
            torch.tensor([[0, 1, 0], [1, 0, 0]], dtype=torch.int32),
            torch.rand(B, 1, H, W, generator=g), torch.randn(B, T, C, generator=g),
            torch.rand(C, generator=g) * 0.8 + 0.1, torch.rand(C, generator=g),
            torch.rand(C, generator=g), torch.rand(C, generator=g),
            torch.randn(B, C, generator=g))


def block_class():
    import apexx.torch as at

    class Block(torch.nn.Module):
        """tilepack -> relu*2 -> tileunpack (with levels; and without, fused with alpha),
        and tilessm_scan backward with init_state and forward without."""

        def forward(self, x, idx, levels, alpha, tokens, decay, ig, og, sb, init):
            packed = torch.relu(at.tilepack(x, idx, 4)) * 2
            merged = at.tileunpack(x, packed, idx, levels=levels)
            fused = at.fusiongate_fuse(x, at.tileunpack(x, packed, idx), alpha)
            y, state = at.tilessm_scan(tokens, decay, ig, og, sb, init, clamp_value=100.0,
                                       direction="backward")
            y2, _ = at.tilessm_scan(tokens, decay, ig, og, sb)
            return merged, fused, y, state, y2

    return Block


NAMES = {"input_names": ["x", "idx", "levels", "alpha", "tokens", "decay", "input_gain",
                         "output_gain", "state_bias", "init_state"],
         "output_names": ["merged", "fused", "y", "final_state", "y_forward"]}

# the apexx nodes of Block, in graph order, with the parameters the model asked for
EXPECTED = [
    ("TilePack", {"tile_size": 4}),
    ("TileUnpackFusion", {"num_inputs": 4}),
    ("TileUnpackFusion", {"num_inputs": 5}),
    ("TileSSMScan", {"direction": 1, "clamp_value": 100.0, "num_inputs": 6}),
    ("TileSSMScan", {"direction": 0, "clamp_value": 1e4, "num_inputs": 5}),
]


@unittest.skipIf(torch is None, "torch is not installed for this Python (Debian: python3-torch)")
@unittest.skipIf(onnx is None, "onnx is not installed for this Python (Debian: python3-onnx)")
class OnnxExport(TestCase):
    @classmethod
    def setUpClass(cls):
        modules = os.environ.get("APEXX_TEST_MODULES")
        lib = os.path.join(modules, "trt-units-ctypes.so") if modules else None
        if not lib or not os.path.exists(lib):
            raise unittest.SkipTest(f"the test module tests/trt-units-ctypes.so is not built "
                                    f"([{lib}] from $APEXX_TEST_MODULES; make check sets it)")
        cls.units = TrtUnits(lib)
        import apexx.onnx
        cls.apexx_onnx = apexx.onnx
        cls.out_dir = os.environ.get("APEXX_TEST_ONNX_OUT") or tempfile.mkdtemp(
            prefix="apexx-onnx-")
        os.makedirs(cls.out_dir, exist_ok=True)

    def export(self, model, args, path=None, **kwargs):
        f = path or io.BytesIO()
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's note on custom ops' shapes
            self.apexx_onnx.export(model, args, f, opset_version=13, **kwargs)
        return onnx.load(path) if path else onnx.load_from_string(f.getvalue())

    def check_all(self, model):
        types = elem_types(model)
        return [check_plugin_node(self.units, n, types) for n in plugin_nodes(model)]

    def test_block(self):
        path = os.path.join(self.out_dir, "apexx_block.onnx")
        model = self.export(block_class()(), block_inputs(), path, **NAMES)
        onnx.checker.check_model(model)
        self.assertIn(("apexx", 1), [(o.domain, o.version) for o in model.opset_import])
        nodes = node_list(model)
        with open(os.path.join(self.out_dir, "apexx_block.nodes.txt"), "w") as f:
            f.write("\n".join(nodes) + "\n")
        got = self.check_all(model)
        self.assertEqual([g[0] for g in got], [e[0] for e in EXPECTED], "\n".join(nodes))
        for (name, params), (_, want) in zip(got, EXPECTED):
            for key, value in want.items():
                self.assertAlmostEqual(params[key], value, msg=f"{name}.{key}", places=3)
        for n in plugin_nodes(model):
            self.assertEqual(sorted(a.name for a in n.attribute if a.name in CREATOR_ATTRS),
                             sorted(CREATOR_ATTRS), n.op_type)
        # the int64 ids were cast to int32 for the plugins; int32 ids are passed as given
        casts = [n for n in model.graph.node if n.op_type == "Cast"]
        self.assertTrue(casts and all(onnx_helper.get_attribute_value(c.attribute[0]) == 6
                                      for c in casts), nodes)
        model32 = self.export(block_class()(), block_inputs(int32_idx=True))
        self.assertEqual([n.op_type for n in model32.graph.node if n.op_type == "Cast"], [])
        self.assertEqual(len(self.check_all(model32)), len(EXPECTED))

    def mutated(self, model, op_type, change):
        m = copy.deepcopy(model)
        node = next(n for n in m.graph.node if n.op_type == op_type)
        change(m, node)
        return m

    def test_wrong_nodes_fail(self):
        """The check itself: each wrong node is refused with the C units' message."""
        model = self.export(block_class()(), block_inputs())
        self.check_all(model)

        def set_attr(name, value, rename=None):
            def change(m, node):
                for a in node.attribute:
                    if a.name == name:
                        node.attribute.remove(a)
                        break
                node.attribute.append(onnx_helper.make_attribute(rename or name, value))
            return change

        def int64_ids(m, node):
            node.input[1] = m.graph.input[1].name  # the model's int64 idx, Cast skipped

        def drop_input(m, node):
            del node.input[-1]

        cases = [
            ("TilePack", set_attr("tile_size", 4, rename="tilesize"),
             "field [tilesize] is not one of this plugin's fields"),
            ("TilePack", set_attr("tile_size", 0), "tile_size [0] is not positive"),
            ("TilePack", set_attr("tile_size", 1 << 40), "does not fit its 32-bit field"),
            ("TilePack", set_attr("tile_size", 4.0), "attribute tile_size is a FLOAT"),
            ("TilePack", set_attr("plugin_version", "2"), "version [2]"),
            ("TilePack", set_attr("plugin_namespace", "other"), "namespace [other]"),
            ("TilePack", int64_ids, "input 1 has TensorRT type [8]"),
            ("TileSSMScan", set_attr("clamp_value", 100), "attribute clamp_value is an INT"),
            ("TileSSMScan", set_attr("direction", 2), "direction [2] is not 0"),
            ("TileSSMScan", set_attr("num_inputs", 5), "[6] inputs, expected 5"),
            ("TileUnpackFusion", drop_input, "[3] inputs, expected 4"),
        ]
        for op_type, change, words in cases:
            with self.subTest(op_type=op_type, words=words):
                with self.assertRaises(PluginFieldError) as cm:
                    self.check_all(self.mutated(model, op_type, change))
                self.assertIn(words, str(cm.exception))

    def test_no_plugin_raises(self):
        import apexx.torch as at
        x = torch.randn(2, 3, 8, 8)
        idx = torch.tensor([[0, 3], [1, 2]])
        tokens, c = torch.randn(2, 4, 3), torch.rand(3) * 0.5 + 0.2

        def module(fn):
            return type("M", (torch.nn.Module,), {"forward": lambda self, *a: fn(*a)})()

        cases = [
            ("index_select", lambda s, i: at.index_select(s, i),
             (torch.randn(4, 3), torch.tensor([0, 2])), "it has no TensorRT plugin"),
            ("gather", lambda s, i: at.gather(s, 1, i),
             (torch.randn(4, 3), torch.zeros(4, 2, dtype=torch.int64)), "no TensorRT plugin"),
            ("fused_pack_op_unpack", lambda f, i: at.fused_pack_op_unpack(f, i, 4), (x, idx),
             "no TensorRT plugin"),
            ("fusiongate_alpha", lambda b, u: at.fusiongate_alpha(b, u),
             (torch.rand(2, 1, 8, 8), torch.rand(2, 1, 8, 8)), "no TensorRT plugin"),
            ("tileunpack", lambda f, i: at.tileunpack(f, at.tilepack(f, i, 4), i,
                                                      mode="blend"), (x, idx), "mode [blend]"),
            ("tileunpack", lambda f, o: at.tileunpack(f, torch.zeros(2, 1, 3, 4, 4),
                                                      origins=o),
             (x, torch.tensor([[[1, 2]], [[0, 0]]])), "origins"),
            ("tilessm_scan", lambda t, d: at.tilessm_scan(t, d, d, d, d,
                                                          direction="bidirectional")[0],
             (tokens, c), "direction [bidirectional]"),
            ("fusiongate_fuse", lambda b, a: at.fusiongate_fuse(b, b * 2, a),
             (x, torch.rand(2, 1, 8, 8)), "only fusiongate_fuse(base, tileunpack(base"),
        ]
        for op, fn, args, words in cases:
            with self.subTest(op=op, words=words):
                with self.assertRaises(self.apexx_onnx.ExportError) as cm:
                    self.export(module(fn), args)
                self.assertIn(f"apexx::{op} cannot be exported", str(cm.exception))
                self.assertIn(words, str(cm.exception))
        with self.assertRaises(self.apexx_onnx.ExportError) as cm:
            self.export(block_class()(), block_inputs(), dynamo=True)
        self.assertIn("dynamo=True", str(cm.exception))

    def test_plugin_identity(self):
        """apexx.onnx's plugin version and namespace are the ones the library registers."""
        for plugin in sorted(set(self.apexx_onnx.PLUGINS.values())):
            self.assertGreaterEqual(self.units.creator(plugin, self.apexx_onnx.PLUGIN_VERSION,
                                                       self.apexx_onnx.PLUGIN_NAMESPACE), 0,
                                    plugin)
