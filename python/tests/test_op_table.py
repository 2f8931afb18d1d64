# SPDX-License-Identifier: Apache-2.0
"""The clients read the op descriptors (docs/architecture.md, Adding an op).
Every op libapexx describes (apx_op_describe, walked here through ctypes
until it returns NULL) is a Context method, a module function and a type
stub of the binding and a listing of apexx-info --ops, with the
descriptor's arguments by name and in order. A client that kept a list of
its own (of ops, or of an op's arguments) would miss an op added to the op
table, and these tests would name it."""
import ast
import ctypes
import inspect
import json
import os
import re
import subprocess

import apexx
from apexx import _apexx
from apexx_test import TestCase, libapexx_in_build

# include/apexx/apexx.h: apx_op_arg and apx_op_desc (the public, frozen layout)
ARG_KINDS = ["input", "index", "output", "int64", "dim", "double", "flag", "enum", "handle",
             "result"]


class OpArg(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int), ("offset", ctypes.c_size_t),
                ("optional", ctypes.c_int), ("ndim", ctypes.c_int), ("dtypes", ctypes.c_int),
                ("same_dtype_as", ctypes.c_int), ("alias_of", ctypes.c_int),
                ("layout", ctypes.c_char_p), ("enum_names", ctypes.POINTER(ctypes.c_char_p)),
                ("enum_count", ctypes.c_int), ("type_name", ctypes.c_char_p)]


class OpDesc(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("id", ctypes.c_int), ("name", ctypes.c_char_p),
                ("summary", ctypes.c_char_p), ("args_size", ctypes.c_size_t),
                ("args_init", ctypes.c_void_p), ("arg_count", ctypes.c_int),
                ("args", ctypes.POINTER(OpArg)), ("caps", ctypes.c_uint32),
                ("output_shape", ctypes.c_void_p), ("index_range", ctypes.c_void_p)]


def _libapexx_path():
    """The libapexx the extension module loaded (its path in this process's
    maps), else the build tree's."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path).startswith("libapexx.so"):
                return path
    build = os.environ.get("APEXX_BUILDDIR")
    return libapexx_in_build(build) if build else None


def descriptors():
    """[(name, [(arg name, kind name), ...])] of every op, in id order."""
    path = _libapexx_path()
    if path is None:
        raise AssertionError("libapexx is not loaded and APEXX_BUILDDIR is not set")
    lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
    lib.apx_op_describe.restype = ctypes.POINTER(OpDesc)
    lib.apx_op_describe.argtypes = [ctypes.c_int]
    ops = []
    while True:
        p = lib.apx_op_describe(len(ops))
        if not p:
            return ops
        d = p.contents
        assert d.size >= ctypes.sizeof(OpDesc), f"apx_op_desc of {d.size} bytes"
        assert d.id == len(ops), (d.name, d.id)
        args = [(d.args[i].name.decode(), ARG_KINDS[d.args[i].kind]) for i in range(d.arg_count)]
        ops.append((d.name.decode(), args))


class _NotATensor:
    """An argument no op accepts: the op fails on it, never on its name."""


class OpTable(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ops = descriptors()

    def test_the_library_describes_ops(self):
        self.assertGreater(len(self.ops), 0)
        self.assertEqual(self.ops[0][0], "tilepack")
        self.assertEqual(self.ops[0][1][-1], ("out", "output"))

    def test_binding_has_one_method_per_descriptor(self):
        names = [name for name, _ in self.ops]
        self.assertEqual(list(_apexx.OPS), names + ["tile_order"])
        for name in names:
            with self.subTest(op=name):
                self.assertTrue(callable(getattr(apexx.Context, name, None)),
                                f"apexx.Context has no method {name}")
                self.assertIn(name, apexx.__all__)
                self.assertTrue(callable(getattr(apexx, name, None)),
                                f"apexx has no function {name}")

    def test_methods_take_the_descriptor_arguments_by_name(self):
        for name, args in self.ops:
            listed = list(inspect.signature(getattr(apexx.Context, name)).parameters)[1:]
            self.assertEqual(listed[:len(args)], [a for a, _ in args], f"{name}'s signature")
            for arg, kind in args:
                with self.subTest(op=name, arg=arg):
                    try:
                        self.ctx.explain(name, **{arg: _NotATensor()})
                    except TypeError as e:
                        self.assertNotIn("unexpected keyword", str(e))
                    except apexx.ApexxError:
                        pass
            with self.assertRaisesRegex(TypeError, r"takes at most (\d+) positional") as c:
                getattr(self.ctx, name)(*[None] * (len(args) + 8))
            self.assertGreaterEqual(int(re.search(r"at most (\d+)", str(c.exception))[1]),
                                    len(args))

    def test_type_stubs_name_every_op(self):
        """apexx/__init__.pyi types each op (the one Python-side edit a new
        op needs): a Context method with the descriptor's arguments in order,
        and a module function."""
        with open(os.path.join(os.path.dirname(apexx.__file__), "__init__.pyi")) as f:
            tree = ast.parse(f.read())
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        context = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Context")
        methods = {n.name: [a.arg for a in n.args.args[1:]] for n in context.body
                   if isinstance(n, ast.FunctionDef)}
        described = dict(self.ops)
        for name in _apexx.OPS:
            with self.subTest(op=name):
                if name not in methods:
                    self.fail(f"apexx/__init__.pyi: class Context lacks {name}")
                if name not in functions:
                    self.fail(f"apexx/__init__.pyi lacks the function {name}")
                if name in described:
                    want = [a for a, _ in described[name]]
                    self.assertEqual(methods[name][:len(want)], want,
                                     f"apexx/__init__.pyi: Context.{name}'s arguments")

    def test_apexx_info_lists_every_descriptor(self):
        build = os.environ.get("APEXX_BUILDDIR")
        if not build:
            self.skipTest("APEXX_BUILDDIR not set (run through make check)")
        info = os.path.join(build, "tools", "apexx-info")
        out = subprocess.run([info, "--ops", "--json"], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        listed = [(op["name"], [(a["name"], a["kind"]) for a in op["args"]])
                  for op in json.loads(out)]
        self.assertEqual(listed, self.ops)
