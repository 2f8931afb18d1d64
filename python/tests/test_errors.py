# SPDX-License-Identifier: Apache-2.0
"""Every class of bad input raises the documented exception naming the
argument: wrong dtype, non-contiguous, wrong device, wrong shape, out of
range, read-only or overlapping outputs, non-tensors, bad options; the
status classes carry .status and the library's message."""
import os
import tempfile

import numpy as np

import apexx
from apexx_test import TestCase


class FakeDevice:
    """A DLPack producer on a device apexx does not serve (kDLOpenCL)."""

    def __dlpack_device__(self):
        return (4, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("must not be asked for data")


class Errors(TestCase):
    def setUp(self):
        super().setUp()
        self.f = np.zeros((1, 2, 8, 8), np.float32)
        self.idx = np.array([[0, 3]], np.int32)

    def test_time_c(self):
        # the bench's baseline: the op looped in C, seconds a call; its
        # arguments validated as the op's
        f = np.arange(128, dtype=np.float32).reshape(1, 2, 8, 8)
        out = np.zeros((1, 2, 2, 4, 4), np.float32)
        t = self.ctx._time_c("tilepack", 3, f, self.idx, 4, out)
        self.assertIsInstance(t, float)
        self.assertGreater(t, 0.0)
        np.testing.assert_array_equal(out[0, 1], f[0, :, 4:8, 4:8])
        with self.assertRaisesApexx(apexx.InvalidArgument, "_time_c", "no_such_op"):
            self.ctx._time_c("no_such_op", 3)
        with self.assertRaisesApexx(apexx.InvalidArgument, "_time_c", "n = [0]"):
            self.ctx._time_c("tilepack", 0, self.f, self.idx, 4, out)
        with self.assertRaisesApexx(apexx.InvalidArgument, "tilepack", "tile", "3"):
            self.ctx._time_c("tilepack", 3, self.f, self.idx, 3, out)
        with self.assertRaises(TypeError):
            self.ctx._time_c("tilepack")

    def test_hierarchy(self):
        self.assertTrue(issubclass(apexx.InvalidArgument, ValueError))
        for cls, st in ((apexx.InvalidArgument, 1), (apexx.Unsupported, 2), (apexx.NoMemory, 3),
                        (apexx.ConfigError, 4), (apexx.BackendError, 5), (apexx.DeviceError, 6)):
            self.assertTrue(issubclass(cls, apexx.ApexxError))
            e = cls(st, "m")
            self.assertEqual((e.status, e.message, str(e)), (st, "m", "m"))

    def test_wrong_dtype(self):
        with self.assertRaisesApexx(apexx.InvalidArgument, "tilepack", "features", "float64") as c:
            self.ctx.tilepack(self.f.astype(np.float64), self.idx, 4)
        self.assertEqual(c.exception.status, 1)
        with self.assertRaisesApexx(apexx.InvalidArgument, "idx", "uint8"):
            self.ctx.tilepack(self.f, self.idx.astype(np.uint8), 4)
        with self.assertRaisesApexx(apexx.InvalidArgument, "idx"):  # float ids: the core's check
            self.ctx.tilepack(self.f, self.idx.astype(np.float32), 4)
        with self.assertRaisesApexx(apexx.InvalidArgument, "src", "bool"):
            self.ctx.index_select(np.zeros((2, 2), bool), np.zeros(1, np.int64))
        with self.assertRaisesApexx(apexx.InvalidArgument, "out"):
            self.ctx.tilepack(self.f, self.idx, 4, out=np.zeros((1, 2, 2, 4, 4), np.float16))

    def test_non_contiguous(self):
        big = np.zeros((1, 2, 8, 16), np.float32)
        with self.assertRaisesApexx(apexx.InvalidArgument, "features", "not contiguous"):
            self.ctx.tilepack(big[..., ::2], self.idx, 4)
        with self.assertRaisesApexx(apexx.InvalidArgument, "out", "not contiguous"):
            self.ctx.tilepack(self.f, self.idx, 4, out=np.zeros((1, 2, 2, 4, 8), np.float32)[..., ::2])
        # an index is only read: a strided one is passed as a contiguous copy; data is never copied
        self.ctx.gather(self.f, 0, np.zeros((1, 2, 8, 8), np.int64).transpose(0, 1, 3, 2))
        with self.assertRaisesApexx(apexx.InvalidArgument, "src", "not contiguous"):
            self.ctx.gather(np.zeros((1, 2, 8, 8), np.float32).transpose(0, 1, 3, 2), 0,
                            np.zeros((1, 2, 8, 8), np.int64))
        # size-1 dimensions may carry any stride
        self.ctx.tilepack(np.zeros((1, 2, 8, 8), np.float32)[:, :, :, :], self.idx[:, :], 4)

    def test_wrong_device(self):
        with self.assertRaisesApexx(apexx.InvalidArgument, "features", "device"):
            self.ctx.tilepack(FakeDevice(), self.idx, 4)
        with self.assertRaisesApexx(apexx.InvalidArgument, "out", "device"):
            self.ctx.tilepack(self.f, self.idx, 4, out=FakeDevice())

    def test_wrong_shape(self):
        with self.assertRaisesApexx(apexx.InvalidArgument, "features"):
            self.ctx.tilepack(self.f[0], self.idx, 4)
        with self.assertRaisesApexx(apexx.InvalidArgument, "out"):
            self.ctx.tilepack(self.f, self.idx, 4, out=np.zeros((1, 2, 2, 4, 5), np.float32))
        with self.assertRaisesApexx(apexx.InvalidArgument, "tile"):
            self.ctx.tilepack(self.f, self.idx, 3)
        with self.assertRaisesApexx(apexx.InvalidArgument, "decay"):
            t = np.zeros((1, 2, 3), np.float32)
            self.ctx.tilessm_scan(t, np.zeros(4, np.float32), *[np.zeros(3, np.float32)] * 3)

    def test_out_of_range(self):
        with self.assertRaisesApexx(apexx.InvalidArgument, "idx[0][1]", "[4]"):
            self.ctx.tilepack(self.f, np.array([[0, 4]], np.int32), 4)
        with self.assertRaisesApexx(apexx.InvalidArgument, "index"):
            self.ctx.gather(np.zeros(3, np.float32), 0, np.array([-1]))

    def test_aliasing(self):
        base = np.zeros((1, 2, 8, 8), np.float32)
        packed = np.zeros((1, 2, 2, 4, 4), np.float32)
        self.ctx.tileunpack(base, packed, idx=self.idx, out=base)  # exact alias: allowed
        buf = np.zeros(2 * base.size, np.float32)
        b1 = buf[: base.size].reshape(base.shape)
        b2 = buf[base.size // 2: base.size // 2 + base.size].reshape(base.shape)
        with self.assertRaisesApexx(apexx.InvalidArgument, "out"):
            self.ctx.tileunpack(b1, packed, idx=self.idx, out=b2)  # partial overlap
        src = np.zeros((2, 2), np.float32)
        with self.assertRaisesApexx(apexx.InvalidArgument, "out"):
            self.ctx.gather(src, 0, np.zeros((2, 2), np.int64), out=src)  # gather: no alias
        with self.assertRaisesApexx(apexx.InvalidArgument, "out"):
            self.ctx.scatter_add(src, 0, np.zeros((2, 2), np.int64), src, out=src)
        with self.assertRaisesApexx(apexx.InvalidArgument, "out", "read-only"):
            ro = np.zeros((1, 2, 2, 4, 4), np.float32)
            ro.flags.writeable = False
            self.ctx.tilepack(self.f, self.idx, 4, out=ro)

    def test_bad_python_arguments(self):
        with self.assertRaises(TypeError):
            self.ctx.tilepack([1, 2], self.idx, 4)
        with self.assertRaises(TypeError):
            self.ctx.tilepack(self.f, self.idx, tile="4")
        with self.assertRaises(TypeError):
            self.ctx.tilepack(self.f, self.idx, 4, bogus=1)
        with self.assertRaises(TypeError):
            self.ctx.tilepack(self.f, self.idx, 4, None, 5)
        with self.assertRaises(TypeError):
            self.ctx.tilepack(self.f, self.idx, 4, tile=4)
        with self.assertRaises(TypeError):
            self.ctx.tilepack(self.f)
        with self.assertRaisesApexx(apexx.InvalidArgument, "mode", "override"):
            self.ctx.tileunpack(self.f, np.zeros((1, 2, 2, 4, 4), np.float32), idx=self.idx,
                                mode="sideways")
        with self.assertRaisesApexx(apexx.InvalidArgument, "validate"):
            self.ctx.tilepack(self.f, self.idx, 4, validate="later")
        with self.assertRaisesApexx(apexx.InvalidArgument, "explain"):
            self.ctx.explain("no_such_op")
        with self.assertRaisesApexx(apexx.InvalidArgument, "src_shape"):
            self.ctx.gather_backward(np.zeros(2, np.float32), 0, np.zeros(2, np.int64))

    def test_backends_and_config(self):
        with self.assertRaisesApexx(apexx.InvalidArgument, "nosuch") as c:
            self.ctx.tilepack(self.f, self.idx, 4, backend="nosuch")
        unloaded = [b["name"] for b in self.ctx.backends() if b["state"] != "ok"]
        if unloaded:
            with self.assertRaisesApexx(apexx.Unsupported, unloaded[0]) as c:
                self.ctx.tilepack(self.f, self.idx, 4, backend=unloaded[0])
            self.assertEqual(c.exception.status, 2)
        with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as fh:
            fh.write("[apexx\norder = cpu\n")
        try:
            with self.assertRaisesApexx(apexx.ConfigError, fh.name) as c:
                apexx.Context(fh.name)
            self.assertEqual(c.exception.status, 4)
        finally:
            os.unlink(fh.name)

    def test_closed_context(self):
        c = apexx.Context()
        w = c.ff_weights_seeded(4, 1)
        c.close()  # deferred until the weights go
        self.assertEqual(w.channels, 4)
        w.close()
        with self.assertRaisesApexx(apexx.InvalidArgument, "closed"):
            c.tilepack(self.f, self.idx, 4)
        with apexx.Context() as c2:
            c2.tilepack(self.f, self.idx, 4)
        with self.assertRaisesApexx(apexx.InvalidArgument, "closed"):
            c2.backends()
