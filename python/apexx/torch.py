# SPDX-License-Identifier: Apache-2.0
"""apexx.torch: the apexx ops as PyTorch operators.

Importing this module registers ``torch.ops.apexx.<op>`` (tilepack,
tileunpack, fused_pack_op_unpack, fusiongate_alpha, fusiongate_fuse,
tilessm_scan, gather, index_select, scatter_add, gather_backward, and the
backward ops tilepack_backward, tileunpack_backward,
fused_pack_op_unpack_backward, index_select_backward) with
``torch.library``: a CPU and a CUDA kernel (the apexx call on the default
context, on the current stream) and a fake (meta) implementation that
computes output shapes only, so that the ops trace under ``torch.compile``
and can be captured in CUDA graphs. Autograd: ``tilepack``, ``tileunpack``,
``fused_pack_op_unpack``, ``index_select``, ``fusiongate_fuse``,
``fusiongate_alpha`` and ``tilessm_scan`` through their backward ops
(``tilepack_backward`` ..., registered here too), ``gather`` through
``gather_backward`` (zeros scatter_add grad), ``scatter_add`` (``grad`` for
``self``, ``gather(grad)`` for ``src``); the linear backward ops
(gather_backward, tilepack_backward, tileunpack_backward,
index_select_backward) have their forward op as gradient (double
backward). ``apexx.torch.fusiongate_alpha`` also takes its three scalars
as 0-d tensors and gives them gradients (the seed's FusionGate learns
them). Every other op raises ``NoBackwardError`` (a NotImplementedError)
naming the op when a backward pass reaches it, on torch.ops.apexx.<op> and
apexx.torch.<op> alike: a gradient is never dropped silently.

The functions of this module are functional (they allocate their outputs)
and take the C API's argument names and defaults; enums are strings.

``REGISTRATION`` says how the ops were registered: their fake kernels
(register_fake, impl_abstract or a Meta kernel) and their autograd
(torch >= 2.4's register_autograd, or an Autograd-key kernel running an
autograd.Function on older torch).
"""

try:
    import torch as _torch
except ImportError as _e:  # pragma: no cover - depends on the machine
    raise ImportError(
        "apexx.torch needs PyTorch, which is not installed for this Python "
        "(the apexx package itself works without it: use apexx.Context on NumPy, "
        "CuPy or any DLPack tensor)") from _e

from typing import Optional, Tuple, Union

import apexx as _apexx

Tensor = _torch.Tensor

__all__ = ["tilepack", "tileunpack", "fused_pack_op_unpack", "fusiongate_alpha",
           "fusiongate_fuse", "tilessm_scan", "gather", "index_select", "scatter_add",
           "gather_backward", "fusiongate_fuse_backward", "fusiongate_alpha_backward",
           "tilessm_scan_backward", "tilepack_backward", "tileunpack_backward",
           "fused_pack_op_unpack_backward", "index_select_backward", "NoBackwardError",
           "REGISTRATION"]


def _ctx():
    return _apexx.default_context()


# ---- eager kernels (real tensors; outputs allocated here) ----------------------------
def _tilepack_impl(features, idx, tile=8):
    out = features.new_empty((features.shape[0], idx.shape[1], features.shape[1], tile, tile))
    _ctx().tilepack(features, idx, tile, out=out)
    return out


def _tileunpack_impl(base, packed, idx=None, origins=None, levels=None, mode="override",
                     blend_alpha=0.5, assume_priority_sorted=True):
    out = base.new_empty(base.shape)
    _ctx().tileunpack(base, packed, idx, origins, levels, mode, blend_alpha,
                      assume_priority_sorted, out=out)
    return out


def _fused_impl(features, idx, tile=8, value_scale=1.0, value_bias=0.0, gate_scale=1.0,
                gate_bias=0.0, require_unique=True):
    out = features.new_empty(features.shape)
    _ctx().fused_pack_op_unpack(features, idx, tile, value_scale, value_bias, gate_scale,
                                gate_bias, require_unique, out=out)
    return out


def _alpha_shape(boundary):
    if boundary.dim() == 3:
        return (boundary.shape[0], 1, boundary.shape[1], boundary.shape[2])
    return (boundary.shape[0], 1, boundary.shape[2], boundary.shape[3])


def _alpha_impl(boundary, uncertainty, boundary_log_weight=1.0, uncertainty_log_weight=1.0,
                bias=0.0):
    out = boundary.new_empty(_alpha_shape(boundary))
    _ctx().fusiongate_alpha(boundary, uncertainty, boundary_log_weight,
                            uncertainty_log_weight, bias, out=out)
    return out


def _fuse_impl(base, detail, alpha):
    out = base.new_empty(base.shape)
    _ctx().fusiongate_fuse(base, detail, alpha, out=out)
    return out


def _final_shape(tokens, direction):
    if direction == "bidirectional":
        return (tokens.shape[0], 2, tokens.shape[2])
    return (tokens.shape[0], tokens.shape[2])


def _scan_impl(tokens, decay, input_gain, output_gain, state_bias, init_state=None,
               merge_gate=None, clamp_value=1e4, direction="forward", merge="avg"):
    out = tokens.new_empty(tokens.shape)
    final = tokens.new_empty(_final_shape(tokens, direction))
    _ctx().tilessm_scan(tokens, decay, input_gain, output_gain, state_bias, init_state,
                        merge_gate, clamp_value, direction, merge, out=out, final_state=final)
    return out, final


def _gather_impl(src, dim, index):
    out = src.new_empty(index.shape)
    _ctx().gather(src, dim, index, out=out)
    return out


def _index_select_shape(src, index, dim):
    """src's shape with index's length at dim (src's own where dim is out of range: apexx
    then names the bad dim)."""
    shape = list(src.shape)
    if -len(shape) <= dim < len(shape) and index.dim() == 1:
        shape[dim] = index.shape[0]
    return shape


def _index_select_impl(src, index, dim=0):
    out = src.new_empty(_index_select_shape(src, index, dim))
    _ctx().index_select(src, index, out=out, dim=dim)
    return out


def _scatter_add_impl(self, dim, index, src):
    out = self.new_empty(self.shape)
    _ctx().scatter_add(self, dim, index, src, out=out)
    return out


def _gather_backward_impl(grad_out, dim, index, src_shape):
    out = grad_out.new_empty(tuple(src_shape))
    _ctx().gather_backward(grad_out, dim, index, grad_src=out)
    return out


def _tilepack_backward_impl(grad_out, idx, features_shape):
    out = grad_out.new_empty(tuple(features_shape))
    _ctx().tilepack_backward(grad_out, idx, grad_features=out)
    return out


def _unpack_grad_shapes(grad_out, idx, origins, tile):
    k = (idx if idx is not None else origins).shape[1]
    return tuple(grad_out.shape), (grad_out.shape[0], k, grad_out.shape[1], tile, tile)


def _tileunpack_backward_impl(grad_out, idx=None, origins=None, levels=None, mode="override",
                              blend_alpha=0.5, assume_priority_sorted=True, tile=8):
    base_shape, packed_shape = _unpack_grad_shapes(grad_out, idx, origins, tile)
    grad_base, grad_packed = grad_out.new_empty(base_shape), grad_out.new_empty(packed_shape)
    _ctx().tileunpack_backward(grad_out, idx, origins, levels, mode, blend_alpha,
                               assume_priority_sorted, tile, grad_base=grad_base,
                               grad_packed=grad_packed)
    return grad_base, grad_packed


def _fused_backward_impl(grad_out, features, idx, tile=8, value_scale=1.0, value_bias=0.0,
                         gate_scale=1.0, gate_bias=0.0, require_unique=True):
    out = grad_out.new_empty(grad_out.shape)
    _ctx().fused_pack_op_unpack_backward(grad_out, features, idx, tile, value_scale, value_bias,
                                         gate_scale, gate_bias, require_unique,
                                         grad_features=out)
    return out


def _index_select_backward_impl(grad_out, index, src_shape, dim=0):
    out = grad_out.new_empty(tuple(src_shape))
    _ctx().index_select_backward(grad_out, index, grad_src=out, dim=dim)
    return out


# ---- fake (meta) implementations: shapes and dtypes only ---------------------------
def _tilepack_fake(features, idx, tile=8):
    return features.new_empty((features.shape[0], idx.shape[1], features.shape[1], tile, tile))


def _tileunpack_fake(base, packed, idx=None, origins=None, levels=None, mode="override",
                     blend_alpha=0.5, assume_priority_sorted=True):
    return base.new_empty(base.shape)


def _fused_fake(features, idx, tile=8, value_scale=1.0, value_bias=0.0, gate_scale=1.0,
                gate_bias=0.0, require_unique=True):
    return features.new_empty(features.shape)


def _alpha_fake(boundary, uncertainty, boundary_log_weight=1.0, uncertainty_log_weight=1.0,
                bias=0.0):
    return boundary.new_empty(_alpha_shape(boundary))


def _fuse_fake(base, detail, alpha):
    return base.new_empty(base.shape)


def _scan_fake(tokens, decay, input_gain, output_gain, state_bias, init_state=None,
               merge_gate=None, clamp_value=1e4, direction="forward", merge="avg"):
    return tokens.new_empty(tokens.shape), tokens.new_empty(_final_shape(tokens, direction))


def _gather_fake(src, dim, index):
    return src.new_empty(index.shape)


def _index_select_fake(src, index, dim=0):
    return src.new_empty(_index_select_shape(src, index, dim))


def _scatter_add_fake(self, dim, index, src):
    return self.new_empty(self.shape)


def _gather_backward_fake(grad_out, dim, index, src_shape):
    return grad_out.new_empty(tuple(src_shape))


# the backward ops (docs/ops.md, each beside its forward): every gradient the C op has
def _fuse_backward_impl(grad_out, base, detail, alpha):
    return _ctx().fusiongate_fuse_backward(grad_out, base, detail, alpha)


def _fuse_backward_fake(grad_out, base, detail, alpha):
    return base.new_empty(base.shape), base.new_empty(base.shape), alpha.new_empty(alpha.shape)


def _alpha_backward_impl(grad_out, boundary, uncertainty, boundary_log_weight=1.0,
                         uncertainty_log_weight=1.0, bias=0.0):
    return _ctx().fusiongate_alpha_backward(grad_out, boundary, uncertainty,
                                            boundary_log_weight, uncertainty_log_weight, bias)


def _alpha_backward_fake(grad_out, boundary, uncertainty, boundary_log_weight=1.0,
                         uncertainty_log_weight=1.0, bias=0.0):
    scalar = grad_out.new_empty(())
    return (boundary.new_empty(boundary.shape), uncertainty.new_empty(uncertainty.shape),
            scalar, grad_out.new_empty(()), grad_out.new_empty(()))


def _scan_backward_impl(grad_out, tokens, decay, input_gain, output_gain, state_bias,
                        init_state=None, merge_gate=None, grad_final_state=None,
                        clamp_value=1e4, direction="forward", merge="avg"):
    return _ctx().tilessm_scan_backward(grad_out, tokens, decay, input_gain, output_gain,
                                        state_bias, init_state, merge_gate, grad_final_state,
                                        clamp_value, direction, merge)


def _scan_backward_fake(grad_out, tokens, decay, input_gain, output_gain, state_bias,
                        init_state=None, merge_gate=None, grad_final_state=None,
                        clamp_value=1e4, direction="forward", merge="avg"):
    c = (tokens.shape[2],)
    gated = direction == "bidirectional" and merge == "gated"
    return (tokens.new_empty(tokens.shape), decay.new_empty(c), input_gain.new_empty(c),
            output_gain.new_empty(c), state_bias.new_empty(c),
            init_state.new_empty(init_state.shape) if init_state is not None
            else tokens.new_empty(_final_shape(tokens, direction)),
            merge_gate.new_empty(merge_gate.shape) if gated and merge_gate is not None
            else (merge_gate if merge_gate is not None else tokens).new_empty(c))


def _tilepack_backward_fake(grad_out, idx, features_shape):
    return grad_out.new_empty(tuple(features_shape))


def _tileunpack_backward_fake(grad_out, idx=None, origins=None, levels=None, mode="override",
                              blend_alpha=0.5, assume_priority_sorted=True, tile=8):
    base_shape, packed_shape = _unpack_grad_shapes(grad_out, idx, origins, tile)
    return grad_out.new_empty(base_shape), grad_out.new_empty(packed_shape)


def _fused_backward_fake(grad_out, features, idx, tile=8, value_scale=1.0, value_bias=0.0,
                         gate_scale=1.0, gate_bias=0.0, require_unique=True):
    return grad_out.new_empty(grad_out.shape)


def _index_select_backward_fake(grad_out, index, src_shape, dim=0):
    return grad_out.new_empty(tuple(src_shape))


_OPS = {
    "tilepack": ("tilepack(Tensor features, Tensor idx, int tile=8) -> Tensor",
                 _tilepack_impl, _tilepack_fake),
    "tileunpack": ("tileunpack(Tensor base, Tensor packed, Tensor? idx=None, "
                   "Tensor? origins=None, Tensor? levels=None, str mode=\"override\", "
                   "float blend_alpha=0.5, bool assume_priority_sorted=True) -> Tensor",
                   _tileunpack_impl, _tileunpack_fake),
    "fused_pack_op_unpack": ("fused_pack_op_unpack(Tensor features, Tensor idx, int tile=8, "
                             "float value_scale=1.0, float value_bias=0.0, "
                             "float gate_scale=1.0, float gate_bias=0.0, "
                             "bool require_unique=True) -> Tensor",
                             _fused_impl, _fused_fake),
    "fusiongate_alpha": ("fusiongate_alpha(Tensor boundary, Tensor uncertainty, "
                         "float boundary_log_weight=1.0, float uncertainty_log_weight=1.0, "
                         "float bias=0.0) -> Tensor", _alpha_impl, _alpha_fake),
    "fusiongate_fuse": ("fusiongate_fuse(Tensor base, Tensor detail, Tensor alpha) -> Tensor",
                        _fuse_impl, _fuse_fake),
    "tilessm_scan": ("tilessm_scan(Tensor tokens, Tensor decay, Tensor input_gain, "
                     "Tensor output_gain, Tensor state_bias, Tensor? init_state=None, "
                     "Tensor? merge_gate=None, float clamp_value=10000.0, "
                     "str direction=\"forward\", str merge=\"avg\") -> (Tensor, Tensor)",
                     _scan_impl, _scan_fake),
    "gather": ("gather(Tensor src, int dim, Tensor index) -> Tensor", _gather_impl,
               _gather_fake),
    "index_select": ("index_select(Tensor src, Tensor index, int dim=0) -> Tensor", _index_select_impl,
                     _index_select_fake),
    "scatter_add": ("scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
                    _scatter_add_impl, _scatter_add_fake),
    "gather_backward": ("gather_backward(Tensor grad_out, int dim, Tensor index, "
                        "int[] src_shape) -> Tensor", _gather_backward_impl,
                        _gather_backward_fake),
    "fusiongate_fuse_backward": ("fusiongate_fuse_backward(Tensor grad_out, Tensor base, "
                                 "Tensor detail, Tensor alpha) -> (Tensor, Tensor, Tensor)",
                                 _fuse_backward_impl, _fuse_backward_fake),
    "fusiongate_alpha_backward": ("fusiongate_alpha_backward(Tensor grad_out, Tensor boundary, "
                                  "Tensor uncertainty, float boundary_log_weight=1.0, "
                                  "float uncertainty_log_weight=1.0, float bias=0.0) -> "
                                  "(Tensor, Tensor, Tensor, Tensor, Tensor)",
                                  _alpha_backward_impl, _alpha_backward_fake),
    "tilessm_scan_backward": ("tilessm_scan_backward(Tensor grad_out, Tensor tokens, "
                              "Tensor decay, Tensor input_gain, Tensor output_gain, "
                              "Tensor state_bias, Tensor? init_state=None, "
                              "Tensor? merge_gate=None, Tensor? grad_final_state=None, "
                              "float clamp_value=10000.0, str direction=\"forward\", "
                              "str merge=\"avg\") -> (Tensor, Tensor, Tensor, Tensor, Tensor, "
                              "Tensor, Tensor)", _scan_backward_impl, _scan_backward_fake),
    # the backward ops of the tile ops and index_select (train-tile's block)
    "tilepack_backward": ("tilepack_backward(Tensor grad_out, Tensor idx, "
                          "SymInt[] features_shape) -> Tensor", _tilepack_backward_impl,
                          _tilepack_backward_fake),
    "tileunpack_backward": ("tileunpack_backward(Tensor grad_out, Tensor? idx=None, "
                            "Tensor? origins=None, Tensor? levels=None, str mode=\"override\", "
                            "float blend_alpha=0.5, bool assume_priority_sorted=True, "
                            "SymInt tile=8) -> (Tensor, Tensor)",
                            _tileunpack_backward_impl, _tileunpack_backward_fake),
    "fused_pack_op_unpack_backward": ("fused_pack_op_unpack_backward(Tensor grad_out, "
                                      "Tensor features, Tensor idx, int tile=8, "
                                      "float value_scale=1.0, float value_bias=0.0, "
                                      "float gate_scale=1.0, float gate_bias=0.0, "
                                      "bool require_unique=True) -> Tensor",
                                      _fused_backward_impl, _fused_backward_fake),
    "index_select_backward": ("index_select_backward(Tensor grad_out, Tensor index, "
                              "SymInt[] src_shape, int dim=0) -> Tensor", _index_select_backward_impl,
                              _index_select_backward_fake),
}


# ---- registration ---------------------------------------------------------------------
def _register():
    lib = _torch.library.Library("apexx", "DEF")
    register_fake = getattr(_torch.library, "register_fake", None)
    impl_abstract = getattr(_torch.library, "impl_abstract", None)
    for name, (schema, impl, fake) in _OPS.items():
        lib.define(schema)
        lib.impl(name, impl, "CPU")
        lib.impl(name, impl, "CUDA")
        if register_fake is not None:
            register_fake("apexx::" + name, fake, lib=lib)
        elif impl_abstract is not None:
            impl_abstract("apexx::" + name, fake, lib=lib)
        else:
            lib.impl(name, fake, "Meta")
    return lib, ("register_fake" if register_fake is not None
                 else "impl_abstract" if impl_abstract is not None else "meta")


_LIB, _FAKE_KIND = _register()
_ops = _torch.ops.apexx


# ---- autograd ---------------------------------------------------------------------
# Every op gets an autograd formula, registered in one place (_register_autograd): the ops
# of _BACKWARD their backward, every other op one that raises when a gradient reaches it.
# The error comes at backward time, as PyTorch's own ops without a derivative do ("the
# derivative for ... is not implemented"): a forward on inputs that require grad stays
# valid when no gradient is asked for through it (evaluation without no_grad, a loss that
# does not depend on the op's output), and a backward that does ask fails loudly instead
# of leaving the inputs' .grad at None.
def _gather_setup(ctx, inputs, output):
    src, dim, index = inputs
    ctx.dim = dim
    ctx.src_shape = list(src.shape)
    ctx.save_for_backward(index)


def _gather_grad(ctx, grad):
    (index,) = ctx.saved_tensors
    return _ops.gather_backward(grad.contiguous(), ctx.dim, index, ctx.src_shape), None, None


def _scatter_add_setup(ctx, inputs, output):
    self, dim, index, src = inputs
    ctx.dim = dim
    ctx.src_shape = list(src.shape)
    ctx.save_for_backward(index)


def _scatter_add_grad(ctx, grad):
    (index,) = ctx.saved_tensors
    grad = grad.contiguous()
    gathered = _ops.gather(grad, ctx.dim, index)
    if list(gathered.shape) != ctx.src_shape:  # index smaller than src: zeros elsewhere
        full = gathered.new_zeros(ctx.src_shape)
        full[tuple(slice(0, n) for n in gathered.shape)] = gathered
        gathered = full
    return grad, None, None, gathered


def _fuse_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _fuse_grad(ctx, grad):
    base, detail, alpha = ctx.saved_tensors
    return _ops.fusiongate_fuse_backward(grad.contiguous(), base, detail, alpha)


# The setups complete the inputs with the schema's defaults: torch < 2.4's dispatcher
# leaves out trailing arguments equal to their defaults, and the backward returns one
# gradient per input it was given (ctx.inputs).
def _alpha_setup(ctx, inputs, output):
    ctx.inputs = len(inputs)
    boundary, uncertainty, *scalars = list(inputs) + [1.0, 1.0, 0.0][len(inputs) - 2:]
    ctx.scalars = scalars
    ctx.save_for_backward(boundary, uncertainty)


def _alpha_grad(ctx, grad):
    boundary, uncertainty = ctx.saved_tensors
    grads = _ops.fusiongate_alpha_backward(grad.contiguous(), boundary, uncertainty,
                                           *ctx.scalars)
    return (grads[0], grads[1], None, None, None)[:ctx.inputs]


def _scan_setup(ctx, inputs, output):
    ctx.inputs = len(inputs)
    inputs = list(inputs) + [None, None, 1e4, "forward", "avg"][len(inputs) - 5:]
    ctx.options = inputs[7:]
    ctx.save_for_backward(*inputs[:7])


def _scan_grad(ctx, grad_out, grad_final):
    tokens, decay, input_gain, output_gain, state_bias, init_state, merge_gate = \
        ctx.saved_tensors
    clamp_value, direction, merge = ctx.options
    grads = _ops.tilessm_scan_backward(
        grad_out.contiguous(), tokens, decay, input_gain, output_gain, state_bias, init_state,
        merge_gate, None if grad_final is None else grad_final.contiguous(), clamp_value,
        direction, merge)
    gate_grad = None
    if merge_gate is not None:  # zeros where the merge reads no gate
        gate_grad = grads[6] if grads[6].shape == merge_gate.shape \
            else _torch.zeros_like(merge_gate)
    return (*grads[:5], grads[5] if init_state is not None else None, gate_grad,
            None, None, None)[:ctx.inputs]


def _gather_backward_setup(ctx, inputs, output):
    grad_out, dim, index, src_shape = inputs
    ctx.dim = dim
    ctx.save_for_backward(index)


def _gather_backward_grad(ctx, grad):
    (index,) = ctx.saved_tensors  # gather_backward is linear in grad_out: its adjoint, a gather
    return _ops.gather(grad.contiguous(), ctx.dim, index), None, None, None


# ---- the tile ops and index_select (train-tile's block) ----
def _tilepack_setup(ctx, inputs, output):
    features, idx, tile = inputs
    ctx.features_shape = list(features.shape)
    ctx.save_for_backward(idx)


def _tilepack_grad(ctx, grad):
    (idx,) = ctx.saved_tensors
    return _ops.tilepack_backward(grad.contiguous(), idx, ctx.features_shape), None, None


def _tilepack_backward_setup(ctx, inputs, output):
    grad_out, idx, features_shape = inputs
    ctx.tile = grad_out.shape[3]
    ctx.save_for_backward(idx)


def _tilepack_backward_grad(ctx, grad):
    (idx,) = ctx.saved_tensors  # linear in grad_out: its adjoint is tilepack
    return _ops.tilepack(grad.contiguous(), idx, ctx.tile), None, None


def _tileunpack_setup(ctx, inputs, output):
    base, packed, idx, origins, levels, mode, blend_alpha, assume_sorted = inputs
    ctx.options = (mode, blend_alpha, assume_sorted, packed.shape[3])
    ctx.save_for_backward(idx, origins, levels)


def _tileunpack_grad(ctx, grad):
    idx, origins, levels = ctx.saved_tensors
    grad_base, grad_packed = _ops.tileunpack_backward(grad.contiguous(), idx, origins, levels,
                                                      *ctx.options)
    return grad_base, grad_packed, None, None, None, None, None, None


def _tileunpack_backward_setup(ctx, inputs, output):
    grad_out, idx, origins, levels, mode, blend_alpha, assume_sorted, tile = inputs
    ctx.options = (mode, blend_alpha, assume_sorted)
    ctx.save_for_backward(idx, origins, levels)


def _tileunpack_backward_grad(ctx, grad_base, grad_packed):
    idx, origins, levels = ctx.saved_tensors  # linear in grad_out: its adjoint is tileunpack
    grad = _ops.tileunpack(grad_base.contiguous(), grad_packed.contiguous(), idx, origins, levels,
                           *ctx.options)
    return grad, None, None, None, None, None, None, None


def _fused_setup(ctx, inputs, output):
    features, idx = inputs[:2]
    ctx.options = inputs[2:]
    ctx.save_for_backward(features, idx)


def _fused_grad(ctx, grad):
    features, idx = ctx.saved_tensors
    grad_features = _ops.fused_pack_op_unpack_backward(grad.contiguous(), features, idx,
                                                       *ctx.options)
    return (grad_features,) + (None,) * 7


def _index_select_setup(ctx, inputs, output):
    ctx.inputs = len(inputs)
    src, index, dim = list(inputs) + [0][len(inputs) - 2:]
    ctx.src_shape = list(src.shape)
    ctx.dim = dim
    ctx.save_for_backward(index)


def _index_select_grad(ctx, grad):
    (index,) = ctx.saved_tensors
    return (_ops.index_select_backward(grad.contiguous(), index, ctx.src_shape, ctx.dim),
            None, None)[:ctx.inputs]


def _index_select_backward_setup(ctx, inputs, output):
    ctx.inputs = len(inputs)
    ctx.dim = inputs[3] if len(inputs) > 3 else 0
    ctx.save_for_backward(inputs[1])


def _index_select_backward_grad(ctx, grad):
    (index,) = ctx.saved_tensors  # linear in grad_out: its adjoint is index_select
    return (_ops.index_select(grad.contiguous(), index, ctx.dim), None, None,
            None)[:ctx.inputs]


# name -> (setup_context, backward) in register_autograd's convention: setup_context(ctx,
# inputs, output) saves what backward needs; backward(ctx, *grads) returns one gradient
# (or None) per input of the schema.
_BACKWARD = {
    "gather": (_gather_setup, _gather_grad),
    "scatter_add": (_scatter_add_setup, _scatter_add_grad),
    "fusiongate_fuse": (_fuse_setup, _fuse_grad),
    "fusiongate_alpha": (_alpha_setup, _alpha_grad),
    "tilessm_scan": (_scan_setup, _scan_grad),
    "gather_backward": (_gather_backward_setup, _gather_backward_grad),
    # train-tile's block
    "tilepack": (_tilepack_setup, _tilepack_grad),
    "tilepack_backward": (_tilepack_backward_setup, _tilepack_backward_grad),
    "tileunpack": (_tileunpack_setup, _tileunpack_grad),
    "tileunpack_backward": (_tileunpack_backward_setup, _tileunpack_backward_grad),
    "fused_pack_op_unpack": (_fused_setup, _fused_grad),
    "index_select": (_index_select_setup, _index_select_grad),
    "index_select_backward": (_index_select_backward_setup, _index_select_backward_grad),
}


class NoBackwardError(NotImplementedError):
    """A gradient was asked for through an apexx op that has no backward yet (a
    NotImplementedError, so also a RuntimeError, like PyTorch's missing derivatives)."""


def _no_backward(name):
    def backward(ctx, *grads):
        raise NoBackwardError(
            f"the derivative for 'apexx::{name}' is not implemented yet: no gradient can "
            f"flow through apexx.torch.{name} (torch.ops.apexx.{name}) to its inputs; call "
            "it on detached inputs or under torch.no_grad() where none is needed")
    return backward


def _register_autograd(name, setup, backward):
    """Registers name's autograd formula on torch.ops.apexx.<name>, so that the op and
    apexx.torch.<name> (which calls it) are differentiable alike: register_autograd on
    torch >= 2.4; before, an Autograd-key kernel that runs the op below autograd inside
    an autograd.Function."""
    if hasattr(_torch.library, "register_autograd"):
        _torch.library.register_autograd("apexx::" + name, backward, setup_context=setup,
                                         lib=_LIB)
        return
    op = getattr(_ops, name)

    def below_autograd(args):
        guard = _torch._C._AutoDispatchBelowAutograd()  # an RAII guard on torch < 2.4
        try:
            return op(*args)
        finally:
            del guard

    def forward(ctx, *args):
        output = below_autograd(args)
        if setup is not None:
            setup(ctx, args, output)
        return output

    function = type("_" + name + "_autograd", (_torch.autograd.Function,),
                    {"forward": staticmethod(forward), "backward": staticmethod(backward)})

    schema = op.default._schema if hasattr(op, "default") else op._schema
    defaults = [a.default_value for a in schema.arguments]
    names = [a.name for a in schema.arguments]

    def full_args(args, kwargs):
        # the dispatcher hands a Python kernel the arguments as given, trailing defaults
        # left out: setup and backward see every argument of the schema
        args = list(args) + [kwargs[n] if n in kwargs else defaults[i]
                             for i, n in enumerate(names) if i >= len(args)]
        return tuple(args)

    def autograd_kernel(*args, **kwargs):
        args = full_args(args, kwargs)
        if _torch.is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad
                                            for a in args):
            return function.apply(*args)
        return below_autograd(args)

    _LIB.impl(name, autograd_kernel, "Autograd")


for _name in _OPS:
    _register_autograd(_name, *_BACKWARD.get(_name, (None, _no_backward(_name))))
REGISTRATION = "custom ops (" + _FAKE_KIND + (
    ", register_autograd)" if hasattr(_torch.library, "register_autograd")
    else ", autograd.Function)")


# ---- the public functions ---------------------------------------------------------
def tilepack(features: Tensor, idx: Tensor, tile: int = 8) -> Tensor:
    """out[b,k,c,dy,dx] = features[b,c,ty*t+dy,tx*t+dx], (ty,tx) = divmod(idx[b,k], W/t)."""
    return _ops.tilepack(features, idx, tile)


def tileunpack(base: Tensor, packed: Tensor, idx: Optional[Tensor] = None,
               origins: Optional[Tensor] = None, levels: Optional[Tensor] = None,
               mode: str = "override", blend_alpha: float = 0.5,
               assume_priority_sorted: bool = True) -> Tensor:
    """out = base with the packed tiles written back in key order (level, k)."""
    return _ops.tileunpack(base, packed, idx, origins, levels, mode, blend_alpha,
                           assume_priority_sorted)


def fused_pack_op_unpack(features: Tensor, idx: Tensor, tile: int = 8,
                         value_scale: float = 1.0, value_bias: float = 0.0,
                         gate_scale: float = 1.0, gate_bias: float = 0.0,
                         require_unique: bool = True) -> Tensor:
    """Selected pixels x -> (x*value_scale + value_bias) * max(x*gate_scale + gate_bias, 0)."""
    return _ops.fused_pack_op_unpack(features, idx, tile, value_scale, value_bias, gate_scale,
                                     gate_bias, require_unique)


class _AlphaLearned(_torch.autograd.Function):
    """fusiongate_alpha with any of its three scalars given as a 0-d tensor: the op runs on
    their values (read with .item(), a device sync for CUDA tensors) and the backward
    gives each tensor its gradient (fusiongate_alpha_backward's 0-d sums)."""

    @staticmethod
    def forward(ctx, boundary, uncertainty, *scalars):
        ctx.scalars = scalars
        ctx.save_for_backward(boundary, uncertainty)
        return _ops.fusiongate_alpha(boundary, uncertainty,
                                     *[float(v) for v in scalars])

    @staticmethod
    def backward(ctx, grad):
        boundary, uncertainty = ctx.saved_tensors
        grads = _ops.fusiongate_alpha_backward(grad.contiguous(), boundary, uncertainty,
                                               *[float(v) for v in ctx.scalars])
        scalar_grads = [g.to(v.dtype).reshape(v.shape) if isinstance(v, Tensor) else None
                        for g, v in zip(grads[2:], ctx.scalars)]
        return (grads[0], grads[1], *scalar_grads)


def fusiongate_alpha(boundary: Tensor, uncertainty: Tensor,
                     boundary_log_weight: Union[float, Tensor] = 1.0,
                     uncertainty_log_weight: Union[float, Tensor] = 1.0,
                     bias: Union[float, Tensor] = 0.0) -> Tensor:
    """alpha = sigmoid(softplus(bw)*b + softplus(uw)*u + bias), [B,1,H,W]; the three scalars
    may be one-element tensors, which then get gradients."""
    scalars = (boundary_log_weight, uncertainty_log_weight, bias)
    if any(isinstance(v, Tensor) for v in scalars):
        for name, v in zip(("boundary_log_weight", "uncertainty_log_weight", "bias"), scalars):
            if isinstance(v, Tensor) and v.numel() != 1:
                raise ValueError(f"fusiongate_alpha: {name} has shape {tuple(v.shape)}; a "
                                 "learned scalar must be a 0-d (or one-element) tensor")
        return _AlphaLearned.apply(boundary, uncertainty, *scalars)
    return _ops.fusiongate_alpha(boundary, uncertainty, boundary_log_weight,
                                 uncertainty_log_weight, bias)


def fusiongate_fuse(base: Tensor, detail: Tensor, alpha: Tensor) -> Tensor:
    """out = base + alpha*(detail - base)."""
    return _ops.fusiongate_fuse(base, detail, alpha)


def tilessm_scan(tokens: Tensor, decay: Tensor, input_gain: Tensor, output_gain: Tensor,
                 state_bias: Tensor, init_state: Optional[Tensor] = None,
                 merge_gate: Optional[Tensor] = None, clamp_value: float = 1e4,
                 direction: str = "forward", merge: str = "avg") -> Tuple[Tensor, Tensor]:
    """s = d*s + (1-d)*(ig*x + sb), y = og*s per (b,c); returns (y, final_state)."""
    return _ops.tilessm_scan(tokens, decay, input_gain, output_gain, state_bias, init_state,
                             merge_gate, clamp_value, direction, merge)


def gather(src: Tensor, dim: int, index: Tensor) -> Tensor:
    """torch.gather: out[..i..] = src[..index[..i..] along dim..]; differentiable in src."""
    return _ops.gather(src, dim, index)


def index_select(src: Tensor, index: Tensor, dim: int = 0) -> Tensor:
    """torch.index_select(src, dim, index): out[..,i,..] = src[..,index[i],..] along dim
    (negative counts from the end); differentiable in src."""
    return _ops.index_select(src, index, dim)


def scatter_add(self: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """out = self; out[..index[i]..] += src[i] along dim; differentiable in self and src."""
    return _ops.scatter_add(self, dim, index, src)


def gather_backward(grad_out: Tensor, dim: int, index: Tensor, src_shape) -> Tensor:
    """grad_src = zeros(src_shape) scatter_add grad_out along dim at index."""
    return _ops.gather_backward(grad_out, dim, index, list(src_shape))


def fusiongate_fuse_backward(grad_out: Tensor, base: Tensor, detail: Tensor,
                             alpha: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """(grad_base, grad_detail, grad_alpha) of fusiongate_fuse: g - g*alpha, g*alpha, and the
    sum over the channels of g*(detail - base)."""
    return _ops.fusiongate_fuse_backward(grad_out, base, detail, alpha)


def fusiongate_alpha_backward(grad_out: Tensor, boundary: Tensor, uncertainty: Tensor,
                              boundary_log_weight: float = 1.0,
                              uncertainty_log_weight: float = 1.0,
                              bias: float = 0.0) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(grad_boundary, grad_uncertainty, grad_boundary_log_weight, grad_uncertainty_log_weight,
    grad_bias) of fusiongate_alpha, the last three 0-d."""
    return _ops.fusiongate_alpha_backward(grad_out, boundary, uncertainty, boundary_log_weight,
                                          uncertainty_log_weight, bias)


def tilessm_scan_backward(grad_out: Tensor, tokens: Tensor, decay: Tensor, input_gain: Tensor,
                          output_gain: Tensor, state_bias: Tensor,
                          init_state: Optional[Tensor] = None,
                          merge_gate: Optional[Tensor] = None,
                          grad_final_state: Optional[Tensor] = None, clamp_value: float = 1e4,
                          direction: str = "forward", merge: str = "avg") -> Tuple[Tensor, ...]:
    """The gradients of tilessm_scan (the reverse-time adjoint scan): of tokens, decay,
    input_gain, output_gain, state_bias, init_state and merge_gate, in that order."""
    return _ops.tilessm_scan_backward(grad_out, tokens, decay, input_gain, output_gain,
                                      state_bias, init_state, merge_gate, grad_final_state,
                                      clamp_value, direction, merge)


def tilepack_backward(grad_out: Tensor, idx: Tensor, features_shape) -> Tensor:
    """grad_features = zeros(features_shape); grad_out's tiles added at idx in K order."""
    return _ops.tilepack_backward(grad_out, idx, list(features_shape))


def tileunpack_backward(grad_out: Tensor, idx: Optional[Tensor] = None,
                        origins: Optional[Tensor] = None, levels: Optional[Tensor] = None,
                        mode: str = "override", blend_alpha: float = 0.5,
                        assume_priority_sorted: bool = True,
                        tile: int = 8) -> Tuple[Tensor, Tensor]:
    """(grad_base, grad_packed) of tileunpack, in its priority order."""
    return _ops.tileunpack_backward(grad_out, idx, origins, levels, mode, blend_alpha,
                                    assume_priority_sorted, tile)


def fused_pack_op_unpack_backward(grad_out: Tensor, features: Tensor, idx: Tensor, tile: int = 8,
                                  value_scale: float = 1.0, value_bias: float = 0.0,
                                  gate_scale: float = 1.0, gate_bias: float = 0.0,
                                  require_unique: bool = True) -> Tensor:
    """grad_features of fused_pack_op_unpack (grad_out outside the selected tiles)."""
    return _ops.fused_pack_op_unpack_backward(grad_out, features, idx, tile, value_scale,
                                              value_bias, gate_scale, gate_bias, require_unique)


def index_select_backward(grad_out: Tensor, index: Tensor, src_shape, dim: int = 0) -> Tensor:
    """grad_src = zeros(src_shape); grad_src[..,index[i],..] += grad_out[..,i,..] along dim."""
    return _ops.index_select_backward(grad_out, index, list(src_shape), dim)
