# SPDX-License-Identifier: Apache-2.0
"""A Context or FFWeights stays alive for as long as a call uses it
(docs/python.md, Lifetime): close() from another thread waits for the calls
in flight, close() from inside a call on the same thread (a callback) is
refused with InvalidArgument, and a stress loop closes both while threads
call ff_infer and ff_weights_load (run under ASan by an --enable-asan
build, docs/reliability.md)."""
import os
import random
import shutil
import tempfile
import threading

import numpy as np

import apexx
from apexx_test import TestCase

C = 8


class _Callback:
    """A host tensor (DLPack over a NumPy array) whose __dlpack_device__,
    asked while the call is in flight, runs `during` first."""

    def __init__(self, array, during):
        self.array, self.during = array, during

    def __dlpack_device__(self):
        self.during()
        return (1, 0)

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()


class _Path:
    """A path whose __fspath__ runs `during` first (inside ff_weights_load)."""

    def __init__(self, path, during):
        self.path, self.during = path, during

    def __fspath__(self):
        self.during()
        return self.path


def _closer(close):
    """Run close() on a new thread; give it 0.3 s; report whether it was
    still waiting then, and the thread (joined by the caller)."""
    seen = {}

    def run():
        try:
            close()
        except Exception as e:  # noqa: BLE001 - reported to the test
            seen["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(0.3)
    seen["waiting"] = t.is_alive()
    return t, seen


class Lifetime(TestCase):
    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="apexx-pylife-")
        self.addCleanup(shutil.rmtree, self.dir)

    def frame(self, hw=32):
        """dense, utilities and the kmax keywords of one frame (16-pixel L0
        tiles)."""
        g0 = (hw // 16) ** 2
        dense = self.rng.standard_normal((1, C, hw, hw)).astype(np.float32)
        util = self.rng.standard_normal((1, g0)).astype(np.float32)
        return dense, util, {"kmax_l0": min(32, g0), "kmax_l1": min(64, 4 * g0)}

    def test_weights_close_waits_for_ff_infer(self):
        ctx = apexx.Context()
        w = ctx.ff_weights_seeded(C, 3)
        dense, util, kw = self.frame()
        want = ctx.ff_infer(dense, util, weights=w, **kw)[0]
        state = {}

        def during():
            state["thread"], state["seen"] = _closer(w.close)

        boundary = _Callback(np.ones((1, 1, 32, 32), np.float32), during)
        heavy = ctx.ff_infer(dense, util, boundary=boundary, weights=w, **kw)[0]
        state["thread"].join()
        self.assertTrue(state["seen"]["waiting"], "FFWeights.close returned during ff_infer")
        self.assertNotIn("error", state["seen"])
        np.testing.assert_array_equal(heavy, want)
        self.assertEqual(w.channels, 0)  # closed once the call returned
        with self.assertRaisesApexx(apexx.InvalidArgument, "ff_infer: weights are freed"):
            ctx.ff_infer(dense, util, weights=w, **kw)
        ctx.close()

    def test_context_close_waits_for_ff_weights_load(self):
        ctx = apexx.Context()
        path = os.path.join(self.dir, "w.safetensors")
        ctx.ff_weights_seeded(C, 4).save(path)
        state = {}

        def during():
            state["thread"], state["seen"] = _closer(ctx.close)

        w = ctx.ff_weights_load(_Path(path, during))
        state["thread"].join()
        self.assertTrue(state["seen"]["waiting"], "Context.close returned during ff_weights_load")
        self.assertNotIn("error", state["seen"])
        self.assertEqual(w.channels, C)
        with self.assertRaisesApexx(apexx.InvalidArgument, "the context is closed"):
            ctx.backends()
        w.save(os.path.join(self.dir, "again.safetensors"))  # the context lives on for w
        w.close()

    def test_close_inside_a_call_is_refused(self):
        ctx = apexx.Context()
        w = ctx.ff_weights_seeded(C, 5)
        dense, util, kw = self.frame()
        refused = []

        def during():
            for close in (ctx.close, w.close):
                try:
                    close()
                except apexx.InvalidArgument as e:
                    refused.append(str(e))

        boundary = _Callback(np.ones((1, 1, 32, 32), np.float32), during)
        ctx.ff_infer(dense, util, boundary=boundary, weights=w, **kw)
        self.assertEqual(len(refused), 2, refused)
        self.assertIn("Context.close: called inside an apexx call on this thread", refused[0])
        self.assertIn("FFWeights.close: called inside an apexx call on this thread", refused[1])
        ctx.ff_infer(dense, util, weights=w, **kw)  # both still usable
        w.close()
        ctx.close()

    def test_close_during_calls_stress(self):
        """Threads call ff_infer (GIL released: 512 KiB of input) and
        ff_weights_load while the main thread closes the weights, then the
        context, at a random moment; every call either works or raises
        InvalidArgument saying the object is closed."""
        rounds = int(os.environ.get("APEXX_TEST_LIFETIME_ROUNDS", "12"))
        path = os.path.join(self.dir, "w.safetensors")
        dense, util, kw = self.frame(128)
        closed_words = ("closed", "freed", "being closed")
        pick = random.Random(int(self.rng.integers(1 << 30)))
        for r in range(rounds):
            ctx = apexx.Context()
            w = ctx.ff_weights_seeded(C, 6)
            w.save(path)
            errors, done = [], {"infer": 0, "load": 0}
            lock = threading.Lock()

            def infer():
                while True:
                    try:
                        ctx.ff_infer(dense, util, weights=w, **kw)
                    except apexx.InvalidArgument as e:
                        if not any(word in str(e) for word in closed_words):
                            errors.append(e)
                        return
                    except Exception as e:  # noqa: BLE001 - reported below
                        errors.append(e)
                        return
                    with lock:
                        done["infer"] += 1

            def load():
                while True:
                    try:
                        ctx.ff_weights_load(path).close()
                    except apexx.InvalidArgument as e:
                        if not any(word in str(e) for word in closed_words):
                            errors.append(e)
                        return
                    except Exception as e:  # noqa: BLE001 - reported below
                        errors.append(e)
                        return
                    with lock:
                        done["load"] += 1

            threads = [threading.Thread(target=f) for f in (infer, infer, load)]
            for t in threads:
                t.start()
            threading.Event().wait(pick.uniform(0.0, 0.03))
            w.close()
            ctx.close()
            for t in threads:
                t.join(30)
                self.assertFalse(t.is_alive(), f"round {r}: a thread did not stop")
            self.assertEqual(errors, [], f"round {r}")
            self.assertEqual(w.channels, 0)
