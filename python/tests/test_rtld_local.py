# SPDX-License-Identifier: Apache-2.0
"""libapexx loaded privately (ctypes.CDLL with RTLD_LOCAL, Python's default;
the extension module itself is loaded RTLD_LOCAL too): every backend is ok
or names a reason that is not a missing symbol, and an op runs through the
extension."""
import ctypes
import os

import numpy as np

import reference as ref
from apexx_test import TestCase, libapexx_in_build


class BackendInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("library", ctypes.c_char_p),
                ("version", ctypes.c_char_p), ("device", ctypes.c_int),
                ("device_name", ctypes.c_char_p), ("state", ctypes.c_int),
                ("reason", ctypes.c_char_p)]


class RtldLocal(TestCase):
    def test_ctypes_rtld_local(self):
        build = os.environ.get("APEXX_BUILDDIR")
        if not build:
            self.skipTest("APEXX_BUILDDIR not set (run through make check)")
        path = libapexx_in_build(build)
        lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
        lib.apx_backend_state_name.restype = ctypes.c_char_p
        lib.apx_last_error.restype = ctypes.c_char_p
        c = ctypes.c_void_p()
        st = lib.apx_open(ctypes.byref(c), None)
        self.assertEqual(st, 0, lib.apx_last_error())
        try:
            n = lib.apx_backend_count(c)
            self.assertGreater(n, 0)
            states = {}
            for i in range(n):
                info = BackendInfo()
                self.assertEqual(lib.apx_backend_info(c, i, ctypes.byref(info)), 0)
                state = lib.apx_backend_state_name(info.state).decode()
                reason = (info.reason or b"").decode()
                print(f"  RTLD_LOCAL backend {info.name.decode()}: {state}"
                      f"{': ' + reason if reason else ''}")
                states[info.name.decode()] = state
                self.assertNotIn("undefined symbol", reason)
                if state != "ok":
                    self.assertTrue(reason, f"{info.name} is {state} without a reason")
            self.assertEqual(states.get("cpu"), "ok")
        finally:
            lib.apx_close(c)
        f = self.rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
        idx = np.array([[2, 1]], np.int64)
        np.testing.assert_array_equal(self.ctx.tilepack(f, idx, 4, backend="cpu"),
                                      ref.tilepack(f, idx, 4))
