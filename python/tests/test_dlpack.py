# SPDX-License-Identifier: Apache-2.0
"""DLPack 1.x and 0.x producers (docs/python.md, DLPack): host tensors exported
through capsules made here with ctypes, as a producer written in C makes them:
"dltensor_versioned" (DLManagedTensorVersioned, asked with max_version=(1, 0)),
its read-only and is_copied flags honoured for outputs, a version apexx does not
read refused; "dltensor" from producers whose __dlpack__ takes no max_version
(asked again plainly, once per type); torch's and NumPy's own __dlpack__."""
import ctypes
import unittest

import numpy as np

import apexx
import reference as ref
from apexx_test import TestCase

try:
    import torch
except ImportError:
    torch = None

READ_ONLY, IS_COPIED = 1, 2
_DL_CODE = {np.dtype(np.int32): (0, 32), np.dtype(np.int64): (0, 64),
            np.dtype(np.float32): (2, 32), np.dtype(np.float16): (2, 16)}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", DLTensor)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Producer:
    """A NumPy array's memory exported as a DLPack 1.x producer does: a
    "dltensor_versioned" capsule when asked with max_version >= (1, 0), else a
    "dltensor" one. The structs live as long as the producer (no deleter: the
    capsules own nothing). strides (in elements) describe a strided view."""

    def __init__(self, array, version=(1, 0), flags=0, shape=None, strides=None):
        self.array = np.ascontiguousarray(array)
        self.asked = []
        shape = self.array.shape if shape is None else shape
        self._shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self._strides = None if strides is None else (ctypes.c_int64 * len(strides))(*strides)
        code, bits = _DL_CODE[self.array.dtype]
        self._dl = DLTensor(self.array.ctypes.data, DLDevice(1, 0), len(shape),
                            DLDataType(code, bits, 1), self._shape, self._strides, 0)
        self._versioned = DLManagedTensorVersioned(DLPackVersion(*version), None, None, flags,
                                                   self._dl)
        self._legacy = DLManagedTensor(self._dl, None, None)
        self._names = (b"dltensor_versioned", b"dltensor")

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.asked.append(max_version)
        if max_version is not None and max_version[0] >= 1:
            return _capsule_new(ctypes.addressof(self._versioned), self._names[0], None)
        return _capsule_new(ctypes.addressof(self._legacy), self._names[1], None)


class Producer0x(Producer):
    """A DLPack 0.x producer: its __dlpack__ takes no max_version (TypeError)."""
    attempts = 0

    def __dlpack__(self, *args, **kwargs):
        type(self).attempts += 1
        if "max_version" in kwargs:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        return super().__dlpack__(**kwargs)


class Delegate:
    """An object exporting through another library's __dlpack__ (torch 1.13's,
    NumPy's), so that apexx reads it through that method."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        return self.tensor.__dlpack__(**kwargs)


class DLPack(TestCase):
    def test_versioned_inputs_and_outputs(self):
        src = self.rng.standard_normal((5, 6)).astype(np.float32)
        index = self.rng.integers(0, 5, 8).astype(np.int64)
        ps, pi = Producer(src), Producer(index)
        out = Producer(np.zeros((8, 6), np.float32))
        self.assertIs(self.ctx.index_select(ps, pi, out=out), out)
        np.testing.assert_array_equal(out.array, src[index])
        self.assertEqual((ps.asked, pi.asked, out.asked), ([(1, 0)],) * 3)
        # a read-only input is fine
        ro = Producer(src, flags=READ_ONLY)
        out2 = Producer(np.zeros((8, 6), np.float32))
        self.ctx.index_select(ro, pi, out=out2)
        np.testing.assert_array_equal(out2.array, src[index])

    def test_read_only_and_copied_outputs_are_refused(self):
        src = self.rng.standard_normal((5, 6)).astype(np.float32)
        index = np.array([4, 0], np.int64)
        ro = Producer(np.full((2, 6), 7, np.float32), flags=READ_ONLY)
        with self.assertRaisesApexx(apexx.InvalidArgument, "index_select: out is read-only"):
            self.ctx.index_select(src, index, out=ro)
        np.testing.assert_array_equal(ro.array, 7)
        copied = Producer(np.full((2, 6), 7, np.float32), flags=IS_COPIED)
        with self.assertRaisesApexx(apexx.InvalidArgument, "out", "is_copied"):
            self.ctx.index_select(src, index, out=copied)
        np.testing.assert_array_equal(copied.array, 7)
        # index_select_backward's grad_src: the output's own name
        ro2 = Producer(np.zeros((5, 6), np.float32), flags=READ_ONLY)
        with self.assertRaisesApexx(apexx.InvalidArgument, "grad_src is read-only"):
            self.ctx.index_select_backward(src[:2].copy(), index, grad_src=ro2)

    def test_unknown_version_is_refused(self):
        p = Producer(np.zeros((2, 2), np.float32), version=(2, 0))
        with self.assertRaisesApexx(apexx.InvalidArgument, "src", "DLPack version [2.0]",
                                    "reads 0.x and 1.x"):
            self.ctx.index_select(p, np.array([0], np.int64))

    def test_versioned_strided_index(self):
        """An expanded index (stride 0) in a versioned capsule: passed as its copy."""
        src = self.rng.standard_normal((5, 6)).astype(np.float32)
        row = self.rng.integers(0, 5, 6).astype(np.int64)
        expanded = Producer(row, shape=(4, 6), strides=(0, 1))
        want = ref.gather(src, 0, np.broadcast_to(row, (4, 6)))
        np.testing.assert_array_equal(self.ctx.gather(src, 0, expanded), want)
        with self.assertRaisesApexx(apexx.InvalidArgument, "src", "not contiguous"):
            self.ctx.gather(Producer(src[:1], shape=(4, 6), strides=(0, 1)), 0, expanded)

    def test_0x_producer_is_asked_again_once_per_type(self):
        class Legacy(Producer0x):
            attempts = 0

        src = self.rng.standard_normal((3, 4)).astype(np.float32)
        index = np.array([2, 2, 0], np.int64)
        got = self.ctx.index_select(Legacy(src), index)
        np.testing.assert_array_equal(got, src[index])
        self.assertEqual(Legacy.attempts, 2)  # refused max_version, then plainly
        self.ctx.index_select(Legacy(src), index)
        self.assertEqual(Legacy.attempts, 3)  # the type is known: asked plainly at once

    def test_numpy_own_dlpack(self):
        """NumPy's __dlpack__: 1.x from NumPy >= 2.1, 0.x before (1.24 here)."""
        if not hasattr(np.ndarray, "__dlpack__"):
            self.skipTest(f"NumPy {np.__version__} has no __dlpack__")
        src = self.rng.standard_normal((4, 5)).astype(np.float32)
        index = np.array([3, 1], np.int32)
        np.testing.assert_array_equal(self.ctx.index_select(Delegate(src), index), src[index])

    @unittest.skipIf(torch is None, "torch is not installed for this Python (Debian: python3-torch)")
    def test_torch_own_dlpack(self):
        """torch's __dlpack__ (0.x on torch 1.13: no max_version; 1.x where torch has it)."""
        src = torch.randn(4, 5)
        index = torch.tensor([3, 1, 3])
        out = torch.zeros(3, 5)
        self.ctx.index_select(Delegate(src), Delegate(index), out=Delegate(out))
        self.assertTrue(torch.equal(out, torch.index_select(src, 0, index)))
