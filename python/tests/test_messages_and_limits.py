# SPDX-License-Identifier: Apache-2.0
"""Issue 30 through the binding: any byte in a message reaches Python as
ApexxError text (never UnicodeDecodeError); arguments that size outputs are
validated by apexx before anything is allocated; out-of-range enums are
range errors; a failed write is FileError; non-finite weights are refused;
the parity helper counts NaN as a mismatch."""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

import apexx
from apexx_test import TestCase, assert_close


def _safetensors(path, tensors):
    """Write {name (bytes or str): float32 array} as a safetensors file."""
    header, offset, blobs = [], 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        key = name if isinstance(name, bytes) else name.encode()
        shape = ",".join(str(d) for d in np.shape(array))
        header.append(b'"%s":{"dtype":"F32","shape":[%s],"data_offsets":[%d,%d]}'
                      % (key, shape.encode(), offset, offset + len(data)))
        offset += len(data)
        blobs.append(data)
    text = b"{" + b",".join(header) + b"}"
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


class Messages(TestCase):
    """Item 3: non-UTF-8 bytes (a Latin-1 path, a tensor name from a file, a
    configuration value, the 1023-byte cut inside a character)."""

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="apexx-pymsg-")
        self.addCleanup(shutil.rmtree, self.dir)
        self.bdir = os.fsencode(self.dir)

    def test_latin1_path(self):
        path = self.bdir + b"/caf\xe9.safetensors"
        with self.assertRaisesApexx(apexx.InvalidArgument, "cannot open the file",
                                    "caf\\xe9.safetensors"):
            self.ctx.ff_weights_load(path)

    def test_tensor_name_from_the_file(self):
        path = os.path.join(self.dir, "names.safetensors")
        w = self.ctx.ff_weights_seeded(3, 1)
        w.save(path)
        w.close()
        with open(path, "rb") as f:
            data = f.read()
        n = struct.unpack("<Q", data[:8])[0]
        header = data[8:8 + n].rstrip(b" ")
        # an extra tensor named caf\xe9 whose shape is not a list
        extra = b',"caf\xe9":{"dtype":"F32","shape":3,"data_offsets":[0,0]}}'
        header = header[:-1] + extra
        header += b" " * (-len(header) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header + data[8 + n:])
        with self.assertRaisesApexx(apexx.InvalidArgument, "tensor [caf\\xe9]: shape is missing"):
            self.ctx.ff_weights_load(path)

    def test_configuration_value_and_source(self):
        ini = self.bdir + b"/caf\xe9.ini"
        with open(ini, "wb") as f:
            f.write(b"[apexx]\nvalidate = caf\xe9\n")
        with self.assertRaisesApexx(apexx.ConfigError, "caf\\xe9"):
            apexx.Context(config=ini)
        with open(ini, "wb") as f:
            f.write(b"[apexx]\n")
        ctx = apexx.Context(config=ini)
        self.assertIn("caf\\xe9.ini", ctx.config_source()["files"])
        ctx.close()

    def test_cut_inside_a_character(self):
        """Paths of 2-byte characters long enough for the 1023-byte cut,
        once at an odd and once at an even offset: one of them cuts a
        character in two."""
        for pad in (b"", b"x"):
            path = self.bdir + b"/" + pad + ("\u00e9" * 120 + "/").encode() * 5 + b"w.st"
            with self.assertRaisesApexx(apexx.InvalidArgument, "apx_ff_weights_load: ") as c:
                self.ctx.ff_weights_load(path)
            self.assertIn("\u00e9" * 100, c.exception.message)


class Limits(TestCase):
    """Items 17, 18: validated by apexx before outputs are allocated."""

    def test_tile_that_sizes_the_output(self):
        f = np.zeros((1, 2, 8, 8), np.float32)
        idx = np.array([[0]], np.int32)
        with self.assertRaisesApexx(apexx.InvalidArgument, "tilepack: tile = [-8] must be > 0"):
            self.ctx.tilepack(f, idx, tile=-8)
        with self.assertRaisesApexx(apexx.InvalidArgument, "tile [2147483648]"):
            self.ctx.tilepack(f, idx, tile=2 ** 31)
        with self.assertRaisesApexx(apexx.InvalidArgument, "tile = [-8]"):
            self.ctx.fused_pack_op_unpack(f, idx, tile=-8)

    def test_ff_infer_stats_sized_by_kmax(self):
        w = self.ctx.ff_weights_seeded(4, 1)
        dense = np.zeros((1, 4, 32, 32), np.float32)
        util = np.zeros((1, 4), np.float32)
        for k in (2 ** 40, 2 ** 63 - 1):
            with self.assertRaisesApexx(apexx.InvalidArgument, f"kmax_l0 = [{k}] is outside [0, 4]"):
                self.ctx.ff_infer(dense, util, weights=w, kmax_l0=k, stats=True)
            with self.assertRaisesApexx(apexx.InvalidArgument, f"kmax_l1 = [{k}] is outside [0, 16]"):
                self.ctx.ff_infer(dense, util, weights=w, kmax_l0=2, kmax_l1=k, stats=True)
        stats = self.ctx.ff_infer(dense, util, weights=w, kmax_l0=2, kmax_l1=4, stats=True)[3]
        self.assertEqual(stats["selected_l0"], [2])
        w.close()

    def test_big_endian_array(self):
        f = np.zeros((1, 2, 8, 8), ">f4")
        with self.assertRaisesApexx(apexx.InvalidArgument, "features is stored big-endian",
                                    "newbyteorder"):
            self.ctx.tilepack(f, np.array([[0]], np.int32), tile=4)
        got = self.ctx.tilepack(f.astype(f.dtype.newbyteorder("=")), np.array([[0]], np.int32),
                                tile=4)
        self.assertEqual(got.shape, (1, 1, 2, 4, 4))

    def test_tile_order_mode_range(self):
        ids = np.arange(4, dtype=np.int64)
        for mode in (2 ** 32 + 1, -1, 6):
            with self.assertRaisesApexx(apexx.InvalidArgument, f"mode = [{mode}] is not an "
                                        "apx_order_mode"):
                self.ctx.tile_order(ids, 2, 2, mode=mode)
        np.testing.assert_array_equal(self.ctx.tile_order(ids, 2, 2, mode=1), ids)


class Weights(TestCase):
    """Items 7 and 19 through the binding."""

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="apexx-pyw-")
        self.addCleanup(shutil.rmtree, self.dir)

    def test_nan_weight_is_refused(self):
        w = self.ctx.ff_weights_seeded(2, 1)
        path = os.path.join(self.dir, "nan.safetensors")
        w.save(path)
        w.close()
        with open(path, "rb") as f:
            data = bytearray(f.read())
        n = struct.unpack("<Q", data[:8])[0]
        import json
        header = json.loads(bytes(data[8:8 + n]))
        begin = header["l0_path.film.mlp.0.weight"]["data_offsets"][0]
        data[8 + n + begin + 4 * 3:8 + n + begin + 4 * 4] = struct.pack("<f", float("nan"))
        with open(path, "wb") as f:
            f.write(data)
        with self.assertRaisesApexx(apexx.InvalidArgument,
                                    "tensor [l0_path.film.mlp.0.weight] holds NaN at index [1, 1]"):
            self.ctx.ff_weights_load(path)

    def test_full_disk_is_a_file_error(self):
        """FFWeights.save under a file size limit (as a full disk): FileError
        with the system's text; in a child process."""
        target = os.path.join(self.dir, "big.safetensors")
        code = (
            "import resource, signal, apexx\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
            "w = apexx.Context().ff_weights_seeded(16, 1)\n"
            "try:\n"
            f"    w.save({target!r})\n"
            "except apexx.FileError as e:\n"
            "    print('FileError', e.status, e)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("FileError 7 apx_ff_weights_save: cannot write: File too large", out.stdout)
        self.assertFalse(os.path.exists(target))
        self.assertEqual(os.listdir(self.dir), [])


class ParityHelpers(TestCase):
    """Item 7: the tests' parity helper counts NaN as a mismatch, in the
    result, in the reference, or in both."""

    def test_assert_close_counts_nan(self):
        want = np.array([1.0, 2.0, 3.0])
        for got, ref in ((np.array([1.0, np.nan, 3.0]), want),
                         (want.astype(np.float32), np.array([1.0, np.nan, 3.0])),
                         (np.array([np.nan] * 3, np.float32), np.array([np.nan] * 3))):
            with self.assertRaises(AssertionError):
                assert_close(self, got, ref, np.abs(want), np.float32)
        assert_close(self, want.astype(np.float32), want, np.abs(want), np.float32)
