# SPDX-License-Identifier: Apache-2.0
# Type stubs of the extension module apexx._apexx (see apexx/__init__.pyi;
# the package re-exports its op functions).
from typing import Any, Callable, Optional, Sequence, Tuple

from . import Context as Context, FFWeights as FFWeights
from . import (ff_infer as ff_infer, fused_pack_op_unpack as fused_pack_op_unpack,
               fusiongate_alpha as fusiongate_alpha, fusiongate_fuse as fusiongate_fuse,
               gather as gather, gather_backward as gather_backward,
               index_select as index_select, scatter_add as scatter_add,
               tile_order as tile_order, tilepack as tilepack, tilessm_scan as tilessm_scan,
               tileunpack as tileunpack)

HEADER_VERSION: str
DLPACK_VERSION: int
OPS: Tuple[str, ...]

def version() -> str: ...
def _set_hooks(errors: Sequence[type], alloc: Callable[..., Any],
               stream: Callable[[Any, int], Optional[int]],
               default_context: Callable[[], Context], /) -> None: ...
