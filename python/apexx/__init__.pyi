# SPDX-License-Identifier: Apache-2.0
# Type stubs of the apexx package. A tensor argument is any object with
# __dlpack__ and __dlpack_device__ (torch.Tensor, numpy.ndarray >= 1.22,
# cupy.ndarray, jax.Array: the DLPackTensor protocol) or a NumPy array;
# outputs are tensors of the library of the op's first tensor argument (T).
# The parameters are the runtime's (inspect.signature of the methods, made
# from the op descriptors; python/tests/test_signatures.py holds them
# equal): a required tensor after an argument with a default is typed
# without None and given "= ..." (Python has no required parameter after
# a defaulted one; the call refuses it missing).
from typing import (Any, Dict, List, Literal, Optional, Protocol, Sequence, Tuple, TypedDict, TypeVar,
                    Union, overload)

import numpy.typing

class DLPackTensor(Protocol):
    def __dlpack__(self, *, stream: Any = ...) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...

Tensor = Union[DLPackTensor, numpy.typing.NDArray[Any]]
T = TypeVar("T", bound=Tensor)

class _TorchStream(Protocol):
    @property
    def cuda_stream(self) -> int: ...

class _CupyStream(Protocol):
    @property
    def ptr(self) -> int: ...

# cudaStream_t as an int, a torch.cuda.Stream, a cupy.cuda.Stream
Stream = Union[int, _TorchStream, _CupyStream]
Validate = Optional[Literal["device", "eager"]]
Overlap = Union[Literal["override", "blend"], int]
Direction = Union[Literal["forward", "backward", "bidirectional"], int]
Merge = Union[Literal["sum", "avg", "gated"], int]
OrderMode = Union[Literal["hilbert", "l2r", "r2l", "u2d", "d2u", "multi_direction"], int]
# ff_infer's scan_mode: the FFModule's two (an int is an apx_scan_direction; 1, backward, is refused)
FFScanMode = Union[Literal["bidirectional", "forward"], int]

# ff_infer(stats=True)'s last result: per frame of the batch
class FFStats(TypedDict):
    selected_l0: List[int]
    selected_l1: List[int]
    budget_b1_spent: List[float]
    budget_b2_spent: List[float]
    l0_ids: List[List[int]]
    l1_ids: List[List[int]]

__version__: str
__all__: List[str]

class ApexxError(Exception):
    status: int
    message: str
    status_name: str
    def __init__(self, status: int, message: str) -> None: ...
class InvalidArgument(ApexxError, ValueError): ...
class Unsupported(ApexxError): ...
class NoMemory(ApexxError, MemoryError): ...
class ConfigError(ApexxError): ...
class BackendError(ApexxError): ...
class DeviceError(ApexxError): ...
class FileError(ApexxError): ...

class FFWeights:
    @property
    def channels(self) -> int: ...
    def save(self, path: str, /) -> None: ...
    def close(self) -> None: ...

class Context:
    def __init__(self, config: Optional[str] = None) -> None: ...
    def __enter__(self) -> "Context": ...
    def __exit__(self, *exc: Any) -> None: ...
    def close(self) -> None: ...
    # name, state, reason, device, device_name, version, library
    def backends(self) -> List[Dict[str, str]]: ...
    # files, overrides, warnings
    def config_source(self) -> Dict[str, str]: ...
    # {'backend': name or None, 'passed_over': [{backend, code, reason}]}
    def explain(self, op: str, /, *args: Any, **kwargs: Any) -> Dict[str, Any]: ...
    def sync(self, *, stream: Optional[Stream] = None, backend: Optional[str] = None,
             validate: Validate = None) -> None: ...
    def ff_weights_load(self, path: str, /) -> FFWeights: ...
    def ff_weights_seeded(self, channels: int, seed: int = 0) -> FFWeights: ...
    # out[b,k,c,dy,dx] = features[b,c,ty*t+dy,tx*t+dx]
    def tilepack(self, features: T, idx: Tensor, tile: int = 8, out: Optional[T] = None, *,
                 stream: Optional[Stream] = None, backend: Optional[str] = None,
                 validate: Validate = None) -> T: ...
    # out = base with tiles written back in key order (level, k)
    def tileunpack(self, base: T, packed: Tensor, idx: Optional[Tensor] = None,
                   origins: Optional[Tensor] = None, levels: Optional[Tensor] = None,
                   mode: Overlap = "override", blend_alpha: float = 0.5,
                   assume_priority_sorted: bool = True, out: Optional[T] = None, *,
                   stream: Optional[Stream] = None, backend: Optional[str] = None,
                   validate: Validate = None) -> T: ...
    # selected x -> (x*vs + vb) * max(x*gs + gb, 0)
    def fused_pack_op_unpack(self, features: T, idx: Tensor, tile: int = 8,
                             value_scale: float = 1.0, value_bias: float = 0.0,
                             gate_scale: float = 1.0, gate_bias: float = 0.0,
                             require_unique: bool = True, out: Optional[T] = None, *,
                             stream: Optional[Stream] = None, backend: Optional[str] = None,
                             validate: Validate = None) -> T: ...
    # alpha = sigmoid(softplus(bw)*b + softplus(uw)*u + bias)
    def fusiongate_alpha(self, boundary: T, uncertainty: Tensor,
                         boundary_log_weight: float = 1.0, uncertainty_log_weight: float = 1.0,
                         bias: float = 0.0, out: Optional[T] = None, *,
                         stream: Optional[Stream] = None, backend: Optional[str] = None,
                         validate: Validate = None) -> T: ...
    # out = base + alpha*(detail - base)
    def fusiongate_fuse(self, base: T, detail: Tensor, alpha: Tensor, out: Optional[T] = None,
                        *, stream: Optional[Stream] = None, backend: Optional[str] = None,
                        validate: Validate = None) -> T: ...
    # s = d*s + (1-d)*(ig*x + sb); y = og*s; returns (out, final_state)
    def tilessm_scan(self, tokens: T, decay: Tensor, input_gain: Tensor, output_gain: Tensor,
                     state_bias: Tensor, init_state: Optional[Tensor] = None,
                     merge_gate: Optional[Tensor] = None, clamp_value: float = 10000.0,
                     direction: Direction = "forward", merge: Merge = "avg",
                     out: Optional[T] = None, final_state: Optional[T] = None, *,
                     stream: Optional[Stream] = None, backend: Optional[str] = None,
                     validate: Validate = None) -> Tuple[T, T]: ...
    # out[..i..] = src[..index[..i..] along dim..]
    def gather(self, src: T, dim: int = 0, index: Tensor = ..., out: Optional[T] = None, *,
               stream: Optional[Stream] = None, backend: Optional[str] = None,
               validate: Validate = None) -> T: ...
    # out[..,i,..] = src[..,index[i],..] along dim
    def index_select(self, src: T, index: Tensor, out: Optional[T] = None, dim: int = 0, *,
                     stream: Optional[Stream] = None, backend: Optional[str] = None,
                     validate: Validate = None) -> T: ...
    # out = self; out[..index[i]..] += src[i] along dim
    def scatter_add(this, self: T, dim: int = 0, index: Tensor = ..., src: Tensor = ...,
                    out: Optional[T] = None, *, stream: Optional[Stream] = None,
                    backend: Optional[str] = None, validate: Validate = None) -> T: ...
    # grad_src = zeros(src_shape) scatter_add grad_out along dim
    def gather_backward(self, grad_out: T, dim: int = 0, index: Tensor = ...,
                        grad_src: Optional[T] = None, src_shape: Optional[Sequence[int]] = None,
                        *, stream: Optional[Stream] = None, backend: Optional[str] = None,
                        validate: Validate = None) -> T: ...
    # grad_features = zeros(features_shape); grad_out's tiles added at idx in K order
    def tilepack_backward(self, grad_out: T, idx: Tensor, grad_features: Optional[T] = None,
                          features_shape: Optional[Sequence[int]] = None, *,
                          stream: Optional[Stream] = None, backend: Optional[str] = None,
                          validate: Validate = None) -> T: ...
    # (grad_base, grad_packed) of tileunpack, in its priority order
    def tileunpack_backward(self, grad_out: T, idx: Optional[Tensor] = None,
                            origins: Optional[Tensor] = None, levels: Optional[Tensor] = None,
                            mode: Overlap = "override", blend_alpha: float = 0.5,
                            assume_priority_sorted: bool = True, tile: int = 8,
                            grad_base: Optional[T] = None, grad_packed: Optional[T] = None, *,
                            stream: Optional[Stream] = None, backend: Optional[str] = None,
                            validate: Validate = None) -> Tuple[T, T]: ...
    # (grad_features, grad_scalars) of fused_pack_op_unpack
    def fused_pack_op_unpack_backward(self, grad_out: T, features: Tensor, idx: Tensor,
                                      tile: int = 8, value_scale: float = 1.0,
                                      value_bias: float = 0.0, gate_scale: float = 1.0,
                                      gate_bias: float = 0.0, require_unique: bool = True,
                                      grad_features: Optional[T] = None,
                                      grad_scalars: Optional[T] = None, *,
                                      stream: Optional[Stream] = None,
                                      backend: Optional[str] = None,
                                      validate: Validate = None) -> Tuple[T, T]: ...
    # grad_src = zeros(src_shape); grad_src[..,index[i],..] += grad_out[..,i,..] along dim
    def index_select_backward(self, grad_out: T, index: Tensor, grad_src: Optional[T] = None,
                              dim: int = 0, src_shape: Optional[Sequence[int]] = None, *,
                              stream: Optional[Stream] = None, backend: Optional[str] = None,
                              validate: Validate = None) -> T: ...
    # out = ids stably sorted by the mode's key (host tensors)
    def tile_order(self, ids: T, grid_h: int, grid_w: int, mode: OrderMode = "hilbert",
                   out: Optional[T] = None, *, stream: Optional[Stream] = None,
                   backend: Optional[str] = None, validate: Validate = None) -> T: ...
    # the gradients of fusiongate_fuse: (grad_base, grad_detail, grad_alpha)
    def fusiongate_fuse_backward(self, grad_out: T, base: Tensor, detail: Tensor, alpha: Tensor,
                                 grad_base: Optional[T] = None, grad_detail: Optional[T] = None,
                                 grad_alpha: Optional[T] = None, *,
                                 stream: Optional[Stream] = None, backend: Optional[str] = None,
                                 validate: Validate = None) -> Tuple[T, T, T]: ...
    # the gradients of fusiongate_alpha: of the two proxies, then of the three scalars (0-d)
    def fusiongate_alpha_backward(self, grad_out: T, boundary: Tensor, uncertainty: Tensor,
                                  boundary_log_weight: float = 1.0,
                                  uncertainty_log_weight: float = 1.0, bias: float = 0.0,
                                  grad_boundary: Optional[T] = None,
                                  grad_uncertainty: Optional[T] = None,
                                  grad_boundary_log_weight: Optional[T] = None,
                                  grad_uncertainty_log_weight: Optional[T] = None,
                                  grad_bias: Optional[T] = None, *,
                                  stream: Optional[Stream] = None, backend: Optional[str] = None,
                                  validate: Validate = None) -> Tuple[T, T, T, T, T]: ...
    # the gradients of tilessm_scan: (grad_tokens, grad_decay, grad_input_gain,
    # grad_output_gain, grad_state_bias, grad_init_state, grad_merge_gate)
    def tilessm_scan_backward(self, grad_out: T, tokens: Tensor, decay: Tensor,
                              input_gain: Tensor, output_gain: Tensor, state_bias: Tensor,
                              init_state: Optional[Tensor] = None,
                              merge_gate: Optional[Tensor] = None,
                              grad_final_state: Optional[Tensor] = None,
                              clamp_value: float = 10000.0, direction: Direction = "forward",
                              merge: Merge = "avg", grad_tokens: Optional[T] = None,
                              grad_decay: Optional[T] = None, grad_input_gain: Optional[T] = None,
                              grad_output_gain: Optional[T] = None,
                              grad_state_bias: Optional[T] = None,
                              grad_init_state: Optional[T] = None,
                              grad_merge_gate: Optional[T] = None, *,
                              stream: Optional[Stream] = None, backend: Optional[str] = None,
                              validate: Validate = None) -> Tuple[T, T, T, T, T, T, T]: ...
    # one frame of the FF heavy path (docs/ff_infer.md): (heavy, detail, alpha[, stats])
    @overload
    def ff_infer(self, dense: T, utilities: Tensor, split_utilities: Optional[Tensor] = None,
                 boundary: Optional[Tensor] = None, uncertainty: Optional[Tensor] = None,
                 weights: FFWeights = ..., tile_l0: int = 16, tile_l1: int = 8,
                 kmax_l0: int = 32, kmax_l1: int = 64, budget_b1: float = 16.0,
                 budget_b2: float = 8.0, cost_heavy: float = 1.0, cost_cheap: float = 0.2,
                 enable_nesting: bool = True, graph_replay: bool = False,
                 heavy: Optional[T] = None, detail: Optional[T] = None,
                 alpha: Optional[T] = None, stats: Literal[False] = False,
                 order_mode: OrderMode = "hilbert", overlap_mode: Overlap = "override",
                 blend_alpha: float = 0.5, scan_mode: FFScanMode = "bidirectional", *,
                 stream: Optional[Stream] = None, backend: Optional[str] = None,
                 validate: Validate = None) -> Tuple[T, T, T]: ...
    @overload
    def ff_infer(self, dense: T, utilities: Tensor, split_utilities: Optional[Tensor] = None,
                 boundary: Optional[Tensor] = None, uncertainty: Optional[Tensor] = None,
                 weights: FFWeights = ..., tile_l0: int = 16, tile_l1: int = 8,
                 kmax_l0: int = 32, kmax_l1: int = 64, budget_b1: float = 16.0,
                 budget_b2: float = 8.0, cost_heavy: float = 1.0, cost_cheap: float = 0.2,
                 enable_nesting: bool = True, graph_replay: bool = False,
                 heavy: Optional[T] = None, detail: Optional[T] = None,
                 alpha: Optional[T] = None, *, stats: Literal[True],
                 order_mode: OrderMode = "hilbert", overlap_mode: Overlap = "override",
                 blend_alpha: float = 0.5, scan_mode: FFScanMode = "bidirectional",
                 stream: Optional[Stream] = None, backend: Optional[str] = None,
                 validate: Validate = None) -> Tuple[T, T, T, FFStats]: ...
    @overload
    def ff_infer(self, dense: T, utilities: Tensor, split_utilities: Optional[Tensor] = None,
                 boundary: Optional[Tensor] = None, uncertainty: Optional[Tensor] = None,
                 weights: FFWeights = ..., tile_l0: int = 16, tile_l1: int = 8,
                 kmax_l0: int = 32, kmax_l1: int = 64, budget_b1: float = 16.0,
                 budget_b2: float = 8.0, cost_heavy: float = 1.0, cost_cheap: float = 0.2,
                 enable_nesting: bool = True, graph_replay: bool = False,
                 heavy: Optional[T] = None, detail: Optional[T] = None,
                 alpha: Optional[T] = None, stats: bool = False,
                 order_mode: OrderMode = "hilbert", overlap_mode: Overlap = "override",
                 blend_alpha: float = 0.5, scan_mode: FFScanMode = "bidirectional", *,
                 stream: Optional[Stream] = None, backend: Optional[str] = None,
                 validate: Validate = None) -> Union[Tuple[T, T, T], Tuple[T, T, T, FFStats]]: ...

def default_context() -> Context: ...
def version() -> str: ...
# module-level functions: the Context methods on default_context()
def backends() -> List[Dict[str, str]]: ...
def explain(op: str, /, *args: Any, **kwargs: Any) -> Dict[str, Any]: ...
def sync(*, stream: Optional[Stream] = None, backend: Optional[str] = None,
         validate: Validate = None) -> None: ...
def tilepack(features: T, idx: Tensor, tile: int = 8, out: Optional[T] = None, *,
             stream: Optional[Stream] = None, backend: Optional[str] = None,
             validate: Validate = None) -> T: ...
def tileunpack(base: T, packed: Tensor, idx: Optional[Tensor] = None,
               origins: Optional[Tensor] = None, levels: Optional[Tensor] = None,
               mode: Overlap = "override", blend_alpha: float = 0.5,
               assume_priority_sorted: bool = True, out: Optional[T] = None, *,
               stream: Optional[Stream] = None, backend: Optional[str] = None,
               validate: Validate = None) -> T: ...
def fused_pack_op_unpack(features: T, idx: Tensor, tile: int = 8, value_scale: float = 1.0,
                         value_bias: float = 0.0, gate_scale: float = 1.0,
                         gate_bias: float = 0.0, require_unique: bool = True,
                         out: Optional[T] = None, *, stream: Optional[Stream] = None,
                         backend: Optional[str] = None, validate: Validate = None) -> T: ...
def fusiongate_alpha(boundary: T, uncertainty: Tensor, boundary_log_weight: float = 1.0,
                     uncertainty_log_weight: float = 1.0, bias: float = 0.0,
                     out: Optional[T] = None, *, stream: Optional[Stream] = None,
                     backend: Optional[str] = None, validate: Validate = None) -> T: ...
def fusiongate_fuse(base: T, detail: Tensor, alpha: Tensor, out: Optional[T] = None, *,
                    stream: Optional[Stream] = None, backend: Optional[str] = None,
                    validate: Validate = None) -> T: ...
def tilessm_scan(tokens: T, decay: Tensor, input_gain: Tensor, output_gain: Tensor,
                 state_bias: Tensor, init_state: Optional[Tensor] = None,
                 merge_gate: Optional[Tensor] = None, clamp_value: float = 10000.0,
                 direction: Direction = "forward", merge: Merge = "avg",
                 out: Optional[T] = None, final_state: Optional[T] = None, *,
                 stream: Optional[Stream] = None, backend: Optional[str] = None,
                 validate: Validate = None) -> Tuple[T, T]: ...
def gather(src: T, dim: int = 0, index: Tensor = ..., out: Optional[T] = None, *,
           stream: Optional[Stream] = None, backend: Optional[str] = None,
           validate: Validate = None) -> T: ...
def index_select(src: T, index: Tensor, out: Optional[T] = None, dim: int = 0, *,
                 stream: Optional[Stream] = None, backend: Optional[str] = None,
                 validate: Validate = None) -> T: ...
def scatter_add(self: T, dim: int = 0, index: Tensor = ..., src: Tensor = ...,
                out: Optional[T] = None, *, stream: Optional[Stream] = None,
                backend: Optional[str] = None, validate: Validate = None) -> T: ...
def gather_backward(grad_out: T, dim: int = 0, index: Tensor = ..., grad_src: Optional[T] = None,
                    src_shape: Optional[Sequence[int]] = None, *,
                    stream: Optional[Stream] = None, backend: Optional[str] = None,
                    validate: Validate = None) -> T: ...
def tilepack_backward(grad_out: T, idx: Tensor, grad_features: Optional[T] = None,
                      features_shape: Optional[Sequence[int]] = None, *,
                      stream: Optional[Stream] = None, backend: Optional[str] = None,
                      validate: Validate = None) -> T: ...
def tileunpack_backward(grad_out: T, idx: Optional[Tensor] = None,
                        origins: Optional[Tensor] = None, levels: Optional[Tensor] = None,
                        mode: Overlap = "override", blend_alpha: float = 0.5,
                        assume_priority_sorted: bool = True, tile: int = 8,
                        grad_base: Optional[T] = None, grad_packed: Optional[T] = None, *,
                        stream: Optional[Stream] = None, backend: Optional[str] = None,
                        validate: Validate = None) -> Tuple[T, T]: ...
def fused_pack_op_unpack_backward(grad_out: T, features: Tensor, idx: Tensor, tile: int = 8,
                                  value_scale: float = 1.0, value_bias: float = 0.0,
                                  gate_scale: float = 1.0, gate_bias: float = 0.0,
                                  require_unique: bool = True,
                                  grad_features: Optional[T] = None,
                                  grad_scalars: Optional[T] = None, *,
                                  stream: Optional[Stream] = None, backend: Optional[str] = None,
                                  validate: Validate = None) -> Tuple[T, T]: ...
def index_select_backward(grad_out: T, index: Tensor, grad_src: Optional[T] = None,
                          dim: int = 0, src_shape: Optional[Sequence[int]] = None, *,
                          stream: Optional[Stream] = None, backend: Optional[str] = None,
                          validate: Validate = None) -> T: ...
def tile_order(ids: T, grid_h: int, grid_w: int, mode: OrderMode = "hilbert",
               out: Optional[T] = None, *, stream: Optional[Stream] = None,
               backend: Optional[str] = None, validate: Validate = None) -> T: ...
@overload
def ff_infer(dense: T, utilities: Tensor, split_utilities: Optional[Tensor] = None,
             boundary: Optional[Tensor] = None, uncertainty: Optional[Tensor] = None,
             weights: FFWeights = ..., tile_l0: int = 16, tile_l1: int = 8, kmax_l0: int = 32,
             kmax_l1: int = 64, budget_b1: float = 16.0, budget_b2: float = 8.0,
             cost_heavy: float = 1.0, cost_cheap: float = 0.2, enable_nesting: bool = True,
             graph_replay: bool = False, heavy: Optional[T] = None, detail: Optional[T] = None,
             alpha: Optional[T] = None, stats: Literal[False] = False,
             order_mode: OrderMode = "hilbert", overlap_mode: Overlap = "override",
             blend_alpha: float = 0.5, scan_mode: FFScanMode = "bidirectional", *,
             stream: Optional[Stream] = None, backend: Optional[str] = None,
             validate: Validate = None) -> Tuple[T, T, T]: ...
@overload
def ff_infer(dense: T, utilities: Tensor, split_utilities: Optional[Tensor] = None,
             boundary: Optional[Tensor] = None, uncertainty: Optional[Tensor] = None,
             weights: FFWeights = ..., tile_l0: int = 16, tile_l1: int = 8, kmax_l0: int = 32,
             kmax_l1: int = 64, budget_b1: float = 16.0, budget_b2: float = 8.0,
             cost_heavy: float = 1.0, cost_cheap: float = 0.2, enable_nesting: bool = True,
             graph_replay: bool = False, heavy: Optional[T] = None, detail: Optional[T] = None,
             alpha: Optional[T] = None, *, stats: Literal[True],
             order_mode: OrderMode = "hilbert", overlap_mode: Overlap = "override",
             blend_alpha: float = 0.5, scan_mode: FFScanMode = "bidirectional",
             stream: Optional[Stream] = None, backend: Optional[str] = None,
             validate: Validate = None) -> Tuple[T, T, T, FFStats]: ...
@overload
def ff_infer(dense: T, utilities: Tensor, split_utilities: Optional[Tensor] = None,
             boundary: Optional[Tensor] = None, uncertainty: Optional[Tensor] = None,
             weights: FFWeights = ..., tile_l0: int = 16, tile_l1: int = 8, kmax_l0: int = 32,
             kmax_l1: int = 64, budget_b1: float = 16.0, budget_b2: float = 8.0,
             cost_heavy: float = 1.0, cost_cheap: float = 0.2, enable_nesting: bool = True,
             graph_replay: bool = False, heavy: Optional[T] = None, detail: Optional[T] = None,
             alpha: Optional[T] = None, stats: bool = False,
             order_mode: OrderMode = "hilbert", overlap_mode: Overlap = "override",
             blend_alpha: float = 0.5, scan_mode: FFScanMode = "bidirectional", *,
             stream: Optional[Stream] = None, backend: Optional[str] = None,
             validate: Validate = None) -> Union[Tuple[T, T, T], Tuple[T, T, T, FFStats]]: ...
# the gradients of fusiongate_fuse: (grad_base, grad_detail, grad_alpha)
def fusiongate_fuse_backward(grad_out: T, base: Tensor, detail: Tensor, alpha: Tensor,
                             grad_base: Optional[T] = None, grad_detail: Optional[T] = None,
                             grad_alpha: Optional[T] = None, *,
                             stream: Optional[Stream] = None, backend: Optional[str] = None,
                             validate: Validate = None) -> Tuple[T, T, T]: ...
# the gradients of fusiongate_alpha: of the two proxies, then of the three scalars (0-d)
def fusiongate_alpha_backward(grad_out: T, boundary: Tensor, uncertainty: Tensor,
                              boundary_log_weight: float = 1.0,
                              uncertainty_log_weight: float = 1.0, bias: float = 0.0,
                              grad_boundary: Optional[T] = None,
                              grad_uncertainty: Optional[T] = None,
                              grad_boundary_log_weight: Optional[T] = None,
                              grad_uncertainty_log_weight: Optional[T] = None,
                              grad_bias: Optional[T] = None, *,
                              stream: Optional[Stream] = None, backend: Optional[str] = None,
                              validate: Validate = None) -> Tuple[T, T, T, T, T]: ...
# the gradients of tilessm_scan: (grad_tokens, grad_decay, grad_input_gain,
# grad_output_gain, grad_state_bias, grad_init_state, grad_merge_gate)
def tilessm_scan_backward(grad_out: T, tokens: Tensor, decay: Tensor,
                          input_gain: Tensor, output_gain: Tensor, state_bias: Tensor,
                          init_state: Optional[Tensor] = None,
                          merge_gate: Optional[Tensor] = None,
                          grad_final_state: Optional[Tensor] = None,
                          clamp_value: float = 10000.0, direction: Direction = "forward",
                          merge: Merge = "avg", grad_tokens: Optional[T] = None,
                          grad_decay: Optional[T] = None, grad_input_gain: Optional[T] = None,
                          grad_output_gain: Optional[T] = None,
                          grad_state_bias: Optional[T] = None,
                          grad_init_state: Optional[T] = None,
                          grad_merge_gate: Optional[T] = None, *,
                          stream: Optional[Stream] = None, backend: Optional[str] = None,
                          validate: Validate = None) -> Tuple[T, T, T, T, T, T, T]: ...
