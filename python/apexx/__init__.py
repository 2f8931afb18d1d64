# SPDX-License-Identifier: Apache-2.0
"""apexx: tile-sparse vision kernels (libapexx) on any DLPack tensor.

Every op takes tensors from PyTorch, NumPy, CuPy, JAX or anything else with
``__dlpack__`` / ``__dlpack_device__`` (or a host buffer), with the C API's
argument names and defaults, and returns its outputs as tensors of the
input's library (``out=`` to write into a tensor of your own)::

    import apexx, numpy as np
    ctx = apexx.Context()                       # or apexx.tilepack(...) on a default context
    packed = ctx.tilepack(features, idx, tile=8)

CUDA tensors run on the caller's current stream (torch / CuPy) or
``stream=``. Failures raise :class:`ApexxError` subclasses carrying the
apexx status and the library's message. See docs/python.md.
"""

import sys as _sys

from . import _apexx
from ._apexx import Context, FFWeights

__all__ = [
    "Context", "FFWeights", "ApexxError", "InvalidArgument", "Unsupported", "NoMemory",
    "ConfigError", "BackendError", "DeviceError", "FileError", "default_context", "version",
    "backends", "explain", "sync",
] + list(_apexx.OPS)  # one function per op: the op descriptors' (and tile_order)

__version__ = _apexx.HEADER_VERSION


class ApexxError(Exception):
    """An apexx call failed: ``status`` is the apx_status code, ``message``
    the library's text (apx_last_error)."""

    status_name = "APX_ERR"

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message

    def __reduce__(self):
        return (type(self), (self.status, self.message))


class InvalidArgument(ApexxError, ValueError):
    """APX_ERR_INVALID_ARG: a bad argument (shape, dtype, range, aliasing,
    non-contiguous tensor, unsupported device). Also a ValueError."""

    status_name = "APX_ERR_INVALID_ARG"


class Unsupported(ApexxError):
    """APX_ERR_UNSUPPORTED: no backend can run the call (the message lists
    why each backend was passed over)."""

    status_name = "APX_ERR_UNSUPPORTED"


class NoMemory(ApexxError, MemoryError):
    """APX_ERR_NO_MEMORY."""

    status_name = "APX_ERR_NO_MEMORY"


class ConfigError(ApexxError):
    """APX_ERR_CONFIG: a malformed or unsafe configuration file."""

    status_name = "APX_ERR_CONFIG"


class BackendError(ApexxError):
    """APX_ERR_BACKEND: a backend failed (e.g. a CUDA launch error)."""

    status_name = "APX_ERR_BACKEND"


class DeviceError(ApexxError):
    """APX_ERR_DEVICE: an error found on the device (validate = device),
    reported by the next ``sync()`` (or at once with ``validate="eager"``)."""

    status_name = "APX_ERR_DEVICE"


class FileError(ApexxError):
    """APX_ERR_IO: a file could not be read or written by the system (a full
    disk, a quota, a file size limit); the message carries the system's
    text."""

    status_name = "APX_ERR_IO"


_ERRORS = (ApexxError, InvalidArgument, Unsupported, NoMemory, ConfigError, BackendError,
           DeviceError, FileError)


def _lib_of(obj):
    return type(obj).__module__.split(".", 1)[0]


def _alloc(like, shape, dtype):
    """A new tensor of `shape`/`dtype` from the library of `like`, on its
    device (the binding's allocator for out=None)."""
    lib = _lib_of(like)
    if lib == "torch":
        import torch
        return torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
    if lib == "cupy":
        import cupy
        with like.device:
            return cupy.empty(shape, dtype=dtype)
    dev_type, dev_id = like.__dlpack_device__() if hasattr(like, "__dlpack_device__") else (1, 0)
    if dev_type in (1, 3):  # kDLCPU, kDLCUDAHost
        import numpy
        if dtype == "bfloat16":
            raise InvalidArgument(1, "apexx: NumPy has no bfloat16; pass out= (a torch or "
                                  "ml_dtypes bfloat16 tensor)")
        return numpy.empty(shape, dtype=dtype)
    if dev_type == 2:  # kDLCUDA, a library without an allocator hook (JAX ...)
        try:
            import torch
            return torch.empty(shape, dtype=getattr(torch, dtype), device=f"cuda:{dev_id}")
        except ImportError:
            pass
        try:
            import cupy
            with cupy.cuda.Device(dev_id):
                return cupy.empty(shape, dtype=dtype)
        except ImportError:
            pass
    raise InvalidArgument(1, f"apexx: cannot allocate an output like {type(like).__name__}; "
                          "pass out=")


def _current_stream(obj, device_id):
    """The caller's current CUDA stream (an int) for `obj`'s library: torch's
    current_stream, CuPy's get_current_stream; None (the default stream) for
    other libraries. obj None (sync): torch's where CUDA is initialised,
    else CuPy's."""
    lib = _lib_of(obj) if obj is not None else None
    if lib in ("torch", None):
        torch = _sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            return torch.cuda.current_stream(device_id if device_id >= 0 else None).cuda_stream
    if lib in ("cupy", None):
        cupy = _sys.modules.get("cupy")
        if cupy is not None:
            return cupy.cuda.get_current_stream().ptr
    return None


_default = None


def default_context():
    """The context of the module-level functions (created on first use with
    the default configuration lookup: $APEXX_CONFIG, the installed file)."""
    global _default
    if _default is None:
        _default = Context()
    return _default


_apexx._set_hooks(_ERRORS, _alloc, _current_stream, default_context)


def version():
    """libapexx's version string."""
    return _apexx.version()


def backends():
    return default_context().backends()


def explain(op, /, *args, **kwargs):
    return default_context().explain(op, *args, **kwargs)


def sync(*, stream=None, backend=None, validate=None):
    return default_context().sync(stream=stream, backend=backend, validate=validate)


for _function in (backends, explain, sync):
    _function.__doc__ = getattr(Context, _function.__name__).__doc__ + \
        "\n(On apexx.default_context().)"
# one function per op, made by the extension from the op descriptors as the
# methods are: ctx.NAME on default_context(), with the same signature
for _name in _apexx.OPS:
    globals()[_name] = getattr(_apexx, _name)
del _function, _name
