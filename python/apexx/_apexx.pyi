# SPDX-License-Identifier: Apache-2.0
# Type stubs of the extension module apexx._apexx (see apexx/__init__.pyi).
from typing import Any, Callable, Sequence

from . import Context as Context, FFWeights as FFWeights

HEADER_VERSION: str
DLPACK_VERSION: int

def version() -> str: ...
def _set_hooks(errors: Sequence[type], alloc: Callable[..., Any],
               stream: Callable[[Any, int], Any]) -> None: ...
