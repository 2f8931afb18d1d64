# SPDX-License-Identifier: Apache-2.0
"""apexx.onnx: export models that call apexx.torch ops to ONNX for TensorRT.

Importing this module registers ONNX symbolic functions for the ``apexx::*``
ops with ``torch.onnx.register_custom_op_symbolic`` (the TorchScript-based
exporter of ``torch.onnx.export``). The ops that have a TensorRT plugin in
``libapexx_trt_plugins.so`` become nodes of the ONNX domain ``apexx`` whose
op type is the plugin's name, whose inputs are the plugin's inputs and whose
attributes are its creator's fields plus ``plugin_version`` and
``plugin_namespace``, which TensorRT's ONNX parser reads to find the creator
(docs/trt.md, From PyTorch to TensorRT):

=================================  ========================================
apexx op                           ONNX node (domain ``apexx``)
=================================  ========================================
tilepack(features, idx, tile)      TilePack(features, idx); tile_size: int
tileunpack(base, packed, idx,      TileUnpackFusion(base, packed, idx,
levels), mode "override"           levels); num_inputs: int = 4
fusiongate_fuse(base,              TileUnpackFusion(base, packed, idx,
tileunpack(base, ...), alpha)      levels, alpha); num_inputs: int = 5
tilessm_scan(tokens, decay,        TileSSMScan(tokens, decay, input_gain,
input_gain, output_gain,           output_gain, state_bias[, init_state]);
state_bias[, init_state]),         direction: int (0 forward, 1 backward),
direction forward or backward      clamp_value: float, num_inputs: int
=================================  ========================================

Ids and levels are cast to int32 (the plugins' type) where the model's are
not. Every other apexx op, and the cases the plugins do not cover (blend
mode, origins, a bidirectional scan, a merge gate), raise ``ExportError``
naming the op and why at export time.

``export(model, args, f, **kwargs)`` is ``torch.onnx.export`` with the
``apexx`` opset declared (``custom_opsets``) and, on torch versions whose
default is the dynamo-based exporter, the TorchScript-based one chosen: the
dynamo exporter (torch >= 2.5) needs an onnxscript translation table for
these ops, which apexx does not have (docs/trt.md says why).
"""

import inspect as _inspect

try:
    import torch as _torch
except ImportError as _e:  # pragma: no cover - depends on the machine
    raise ImportError("apexx.onnx needs PyTorch (torch.onnx), which is not installed for "
                      "this Python") from _e
import torch.onnx as _torch_onnx
from torch.onnx import symbolic_helper as _sym

import apexx.torch  # noqa: F401 (registers torch.ops.apexx.*, which the exporter traces)

__all__ = ["DOMAIN", "PLUGIN_VERSION", "PLUGIN_NAMESPACE", "CUSTOM_OPSETS", "PLUGINS",
           "ExportError", "export"]

DOMAIN = "apexx"
# what backends/trt/trt_units.h registers (APX_TRT_PLUGIN_VERSION, APX_TRT_NAMESPACE);
# python/tests/test_onnx_export.py checks them against the library's creator list
PLUGIN_VERSION = "1"
PLUGIN_NAMESPACE = "apexx"
CUSTOM_OPSETS = {DOMAIN: 1}
# apexx op -> the plugin its node names
PLUGINS = {"tilepack": "TilePack", "tileunpack": "TileUnpackFusion",
           "fusiongate_fuse": "TileUnpackFusion", "tilessm_scan": "TileSSMScan"}
# the opset from which the symbolics apply (every opset torch exports)
_OPSET_FROM = 9

_base_error = getattr(getattr(_torch_onnx, "errors", None), "OnnxExporterError", RuntimeError)


class ExportError(_base_error):
    """An apexx op (or this use of it) has no TensorRT plugin to become: the message
    names the op and the reason."""


def _fail(op, why):
    raise ExportError(f"apexx::{op} cannot be exported to ONNX for TensorRT: {why} "
                      f"(apexx's plugins: TilePack, TileUnpackFusion, TileSSMScan; "
                      f"docs/trt.md, From PyTorch to TensorRT)")


def _plugin_node(g, plugin, *inputs, outputs=1, **attrs):
    return g.op(f"{DOMAIN}::{plugin}", *inputs, plugin_version_s=PLUGIN_VERSION,
                plugin_namespace_s=PLUGIN_NAMESPACE, outputs=outputs, **attrs)


def _int32(g, value):
    """value as int32, the plugins' type for ids and levels (a Cast only when needed)."""
    if _sym._try_get_scalar_type(value) == "Int":
        return value
    return g.op("Cast", value, to_i=_torch_onnx.TensorProtoDataType.INT32)


@_sym.parse_args("v", "v", "i")
def _tilepack(g, features, idx, tile):
    if tile <= 0:
        _fail("tilepack", f"tile [{tile}] is not positive")
    return _plugin_node(g, "TilePack", features, _int32(g, idx), tile_size_i=tile)


@_sym.parse_args("v", "v", "v", "v", "v", "s", "f", "b")
def _tileunpack(g, base, packed, idx, origins, levels, mode, blend_alpha, assume_sorted):
    if mode != "override":
        _fail("tileunpack", f"mode [{mode}]: the TileUnpackFusion plugin writes tiles in "
                            "override mode only")
    if _sym._is_none(idx) or not _sym._is_none(origins):
        _fail("tileunpack", "tiles placed by origins: the TileUnpackFusion plugin takes ids")
    idx = _int32(g, idx)
    if _sym._is_none(levels):
        # no levels: key = k (docs/ops.md, tileunpack), the plugin's (level, k) with
        # every level 0
        levels = g.op("ConstantOfShape", g.op("Shape", idx),
                      value_t=_torch.zeros(1, dtype=_torch.int32))
    else:
        levels = _int32(g, levels)
    # assume_priority_sorted changes no result with levels given, and without levels
    # 0 is an error that the op itself raised while tracing
    return _plugin_node(g, "TileUnpackFusion", base, packed, idx, levels, num_inputs_i=4)


def _fusiongate_fuse(g, base, detail, alpha):
    node = detail.node()
    if node.kind() != f"{DOMAIN}::TileUnpackFusion" or node.inputsSize() != 4:
        _fail("fusiongate_fuse", "only fusiongate_fuse(base, tileunpack(base, ...), alpha) "
                                 "has a plugin (TileUnpackFusion with alpha); this detail "
                                 f"comes from [{node.kind()}]")
    inputs = list(node.inputs())
    if inputs[0].unique() != base.unique():
        _fail("fusiongate_fuse", "its base is not the base of the tileunpack that gives "
                                 "detail: TileUnpackFusion blends against its own base")
    # the four-input node is left without users when nothing else reads the merged
    # map, and the exporter's dead code pass removes it
    return _plugin_node(g, "TileUnpackFusion", *inputs, alpha, num_inputs_i=5)


@_sym.parse_args("v", "v", "v", "v", "v", "v", "v", "f", "s", "s")
def _tilessm_scan(g, tokens, decay, input_gain, output_gain, state_bias, init_state,
                  merge_gate, clamp_value, direction, merge):
    if direction not in ("forward", "backward"):
        _fail("tilessm_scan", f"direction [{direction}]: the TileSSMScan plugin scans "
                              "forward or backward")
    if not _sym._is_none(merge_gate):
        _fail("tilessm_scan", "merge_gate is given: the TileSSMScan plugin has no merge")
    inputs = [tokens, decay, input_gain, output_gain, state_bias]
    if not _sym._is_none(init_state):
        inputs.append(init_state)
    return _plugin_node(g, "TileSSMScan", *inputs, outputs=2,
                        direction_i=0 if direction == "forward" else 1,
                        clamp_value_f=clamp_value, num_inputs_i=len(inputs))


def _no_plugin(name):
    def symbolic(g, *args, **kwargs):
        _fail(name, "it has no TensorRT plugin")
    return symbolic


_SYMBOLICS = {"tilepack": _tilepack, "tileunpack": _tileunpack,
              "fusiongate_fuse": _fusiongate_fuse, "tilessm_scan": _tilessm_scan}


def _register():
    for name in apexx.torch._OPS:
        _torch_onnx.register_custom_op_symbolic(
            f"apexx::{name}", _SYMBOLICS.get(name, _no_plugin(name)), _OPSET_FROM)


_register()


def export(model, args, f, **kwargs):
    """torch.onnx.export(model, args, f, **kwargs) with the apexx opset declared and the
    TorchScript-based exporter (the one these ops are registered with). Raises
    ExportError for an apexx op without a plugin, and for dynamo=True."""
    if kwargs.get("dynamo"):
        raise ExportError("apexx.onnx.export: dynamo=True: the apexx ops have symbolic "
                          "functions for the TorchScript-based exporter only (no onnxscript "
                          "translation table); call it with dynamo=False")
    opsets = dict(kwargs.pop("custom_opsets", None) or {})
    opsets.setdefault(DOMAIN, CUSTOM_OPSETS[DOMAIN])
    if "dynamo" in _inspect.signature(_torch_onnx.export).parameters:
        kwargs["dynamo"] = False
    return _torch_onnx.export(model, args, f, custom_opsets=opsets, **kwargs)
