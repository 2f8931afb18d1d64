# SPDX-License-Identifier: Apache-2.0
"""inspect.signature on the binding and its type stubs (docs/python.md,
Signatures and types). Each op method's signature is its descriptor's
(apx_op_describe, read here through ctypes): the arguments by name and in
order, the defaults of ARGS_INIT (a required tensor or handle after a
defaulted argument shows None), then the op's Python-only keywords and
stream, backend, validate as keyword-only; the module functions have the
methods' signatures without the bound parameter; the other methods and
functions have real parameter lists, not (*args, **kwargs). The stubs
(apexx/__init__.pyi, apexx/torch.pyi) list the same parameters, kinds and
defaults as the runtime, and type each op's tensors as tensors."""
import ast
import ctypes
import inspect
import math
import os

import apexx
from apexx import _apexx
from apexx_test import TestCase
from test_op_table import ARG_KINDS, OpDesc, _libapexx_path

TENSOR_KINDS = ("input", "index", "output")
COMMON = ["stream", "backend", "validate"]
P = inspect.Parameter


def described_parameters():
    """{op: [(name, kind, default or P.empty)]} from the descriptors and
    their ARGS_INIT."""
    lib = ctypes.CDLL(_libapexx_path(), mode=os.RTLD_LOCAL | os.RTLD_NOW)
    lib.apx_op_describe.restype = ctypes.POINTER(OpDesc)
    lib.apx_op_describe.argtypes = [ctypes.c_int]
    ops = {}
    while True:
        p = lib.apx_op_describe(len(ops))
        if not p:
            return ops
        d = p.contents
        params, defaulted = [], False
        for i in range(d.arg_count):
            a = d.args[i]
            kind = ARG_KINDS[a.kind]
            at = (d.args_init or 0) + a.offset
            if kind in ("input", "index", "handle"):
                default = None if a.optional or defaulted else P.empty
            elif kind == "output":
                default = None
            elif kind == "int64":
                default = ctypes.c_int64.from_address(at).value
            elif kind == "dim":
                default = ctypes.c_int.from_address(at).value
            elif kind == "double":
                default = ctypes.c_double.from_address(at).value
            elif kind == "flag":
                default = bool(ctypes.c_int.from_address(at).value)
            elif kind == "enum":
                default = a.enum_names[ctypes.c_int.from_address(at).value].decode()
            elif kind == "result":
                default = False
            else:
                raise AssertionError(f"{d.name.decode()}: argument kind {kind}")
            defaulted = defaulted or default is not P.empty
            params.append((a.name.decode(), kind, default))
        ops[d.name.decode()] = params


def plain(signature, drop_first):
    """[(name, kind, default)] of a signature."""
    params = list(signature.parameters.values())[1 if drop_first else 0:]
    return [(p.name, p.kind, p.default) for p in params]


class _Stub:
    """A function of a .pyi: its parameters as (name, kind, default,
    annotation text); the last overload where there are several."""

    def __init__(self, node):
        a = node.args
        self.node = node
        self.params = []
        positional = a.posonlyargs + a.args
        defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
        for arg, default in zip(positional, defaults):
            kind = P.POSITIONAL_ONLY if arg in a.posonlyargs else P.POSITIONAL_OR_KEYWORD
            self.params.append(self._param(arg, kind, default))
        if a.vararg:
            self.params.append(self._param(a.vararg, P.VAR_POSITIONAL, None))
        for arg, default in zip(a.kwonlyargs, a.kw_defaults):
            self.params.append(self._param(arg, P.KEYWORD_ONLY, default))
        if a.kwarg:
            self.params.append(self._param(a.kwarg, P.VAR_KEYWORD, None))

    @staticmethod
    def _param(arg, kind, default):
        if default is None:
            value = P.empty
        elif isinstance(default, ast.Constant) and default.value is Ellipsis:
            value = Ellipsis  # "has a default", the runtime's is None
        else:
            value = ast.literal_eval(default)
        return (arg.arg, kind, value, ast.unparse(arg.annotation) if arg.annotation else "")


def stubs(path):
    """({function: _Stub}, {class: {method: _Stub}}) of a .pyi file."""
    with open(path) as f:
        tree = ast.parse(f.read())

    def functions(body):
        found = {}
        for n in body:
            if isinstance(n, ast.FunctionDef):
                found[n.name] = _Stub(n)  # a later overload replaces an earlier one
        return found
    classes = {n.name: functions(n.body) for n in tree.body if isinstance(n, ast.ClassDef)}
    return functions(tree.body), classes


def same_default(stub, runtime):
    if stub is Ellipsis:
        return runtime is not P.empty
    if isinstance(runtime, float) and isinstance(stub, (int, float)):
        return math.isclose(stub, runtime)
    return stub == runtime and type(stub) is type(runtime)


class Signatures(TestCase):
    @classmethod
    def setUpClass(cls):
        cls.described = described_parameters()
        here = os.path.dirname(apexx.__file__)
        cls.functions, cls.classes = stubs(os.path.join(here, "__init__.pyi"))

    def test_op_methods_have_the_descriptor_signature(self):
        for name, params in self.described.items():
            with self.subTest(op=name):
                method = getattr(apexx.Context, name)
                sig = inspect.signature(method)
                first = next(iter(sig.parameters.values()))
                self.assertEqual(first.kind, P.POSITIONAL_ONLY, f"{name}: the bound parameter")
                got = plain(sig, True)
                want = [(n, P.POSITIONAL_OR_KEYWORD, default) for n, _, default in params]
                self.assertEqual(got[:len(want)], want, f"Context.{name}")
                tail = got[len(want):]
                self.assertEqual([(n, k, d) for n, k, d in tail if k == P.KEYWORD_ONLY],
                                 [(n, P.KEYWORD_ONLY, None) for n in COMMON])
                # the op's Python-only keywords (gather_backward's src_shape)
                for n, k, d in tail:
                    if k != P.KEYWORD_ONLY:
                        self.assertEqual((k, d), (P.POSITIONAL_OR_KEYWORD, None), n)
                bound = inspect.signature(getattr(self.ctx, name))
                self.assertEqual(plain(bound, False), got, f"ctx.{name} (bound)")

    def test_module_functions_have_the_method_signature(self):
        for name in list(_apexx.OPS) + ["explain", "sync", "backends"]:
            with self.subTest(function=name):
                method = plain(inspect.signature(getattr(apexx.Context, name)), True)
                self.assertEqual(plain(inspect.signature(getattr(apexx, name)), False), method)
                self.assertIn("(On apexx.default_context().)", getattr(apexx, name).__doc__)
        self.assertEqual(apexx.tilepack.__module__, "apexx")

    def test_other_methods_have_real_signatures(self):
        want = {
            "backends": [], "close": [], "config_source": [],
            "explain": [("op", P.POSITIONAL_ONLY, P.empty), ("args", P.VAR_POSITIONAL, P.empty),
                        ("kwargs", P.VAR_KEYWORD, P.empty)],
            "sync": [(n, P.KEYWORD_ONLY, None) for n in COMMON],
            "ff_weights_load": [("path", P.POSITIONAL_ONLY, P.empty)],
            "ff_weights_seeded": [("channels", P.POSITIONAL_OR_KEYWORD, P.empty),
                                  ("seed", P.POSITIONAL_OR_KEYWORD, 0)],
        }
        for name, params in want.items():
            with self.subTest(method=name):
                self.assertEqual(plain(inspect.signature(getattr(apexx.Context, name)), True),
                                 params)
        self.assertEqual(plain(inspect.signature(apexx.Context), False),
                         [("config", P.POSITIONAL_OR_KEYWORD, None)])
        self.assertEqual(plain(inspect.signature(apexx.FFWeights.save), True),
                         [("path", P.POSITIONAL_ONLY, P.empty)])
        self.assertEqual(plain(inspect.signature(apexx.version), False), [])
        self.assertEqual(plain(inspect.signature(_apexx.version), False), [])

    def test_signatures_are_what_the_calls_take(self):
        """The signature's names are accepted as keywords; one more
        positional argument than it lists is refused."""
        for name in _apexx.OPS:
            with self.subTest(op=name):
                params = plain(inspect.signature(getattr(apexx.Context, name)), True)
                positional = [n for n, k, _ in params if k == P.POSITIONAL_OR_KEYWORD]
                with self.assertRaisesRegex(TypeError, rf"takes at most {len(positional)} "):
                    getattr(self.ctx, name)(*[None] * (len(positional) + 1))
                with self.assertRaisesRegex(TypeError, "unexpected keyword argument 'no_such'"):
                    getattr(self.ctx, name)(no_such=1)

    def _compare(self, where, stub, runtime):
        """stub: _Stub.params (without a method's bound parameter); runtime:
        plain()'s list."""
        got = [(n, k) for n, k, _, _ in stub]
        self.assertEqual(got, [(n, k) for n, k, _ in runtime],
                         f"{where}: the stub's parameters; the runtime's: {runtime}")
        for (n, _, sd, _), (_, _, rd) in zip(stub, runtime):
            self.assertTrue((sd is P.empty) == (rd is P.empty) and
                            (sd is P.empty or same_default(sd, rd)),
                            f"{where}: {n}'s default is {sd!r} in the stub, {rd!r} at run time")

    def test_stubs_equal_the_runtime(self):
        context = self.classes["Context"]
        names = ["backends", "config_source", "explain", "sync", "close", "ff_weights_load",
                 "ff_weights_seeded"] + list(_apexx.OPS)
        for name in names:
            with self.subTest(method=name):
                self.assertIn(name, context, f"apexx/__init__.pyi: Context lacks {name}")
                runtime = plain(inspect.signature(getattr(apexx.Context, name)), True)
                self._compare(f"Context.{name}", context[name].params[1:], runtime)
        for name in names[:4] + list(_apexx.OPS):
            if name in ("close", "config_source"):
                continue
            with self.subTest(function=name):
                self.assertIn(name, self.functions, f"apexx/__init__.pyi lacks {name}")
                runtime = plain(inspect.signature(getattr(apexx, name)), False)
                self._compare(f"apexx.{name}", self.functions[name].params, runtime)
        for name in ("default_context", "version"):
            self.assertEqual(self.functions[name].params, [])
        self.assertEqual(self.classes["FFWeights"]["save"].params[1][:2],
                         ("path", P.POSITIONAL_ONLY))

    def test_stubs_type_tensors_as_tensors(self):
        """Each op's tensor arguments are typed Tensor (or the T of the
        first one), its options by their kind; the result is T or a tuple
        of T."""
        option_types = {"int64": "int", "dim": "int", "double": "float", "flag": "bool",
                        "result": "bool"}
        context = self.classes["Context"]
        for name, params in self.described.items():
            stub = {n: ann for n, _, _, ann in context[name].params}
            with self.subTest(op=name):
                for n, kind, _ in params:
                    ann = stub[n]
                    if kind in TENSOR_KINDS:
                        self.assertRegex(ann, r"^(Optional\[)?(Tensor|T)\]?$", f"{name}.{n}")
                    elif kind in option_types:
                        self.assertIn(option_types[kind], ann, f"{name}.{n}")
                    elif kind == "handle":
                        self.assertEqual(ann, "FFWeights", f"{name}.{n}")
                returns = ast.unparse(context[name].node.returns)
                self.assertRegex(returns, r"^(T|Tuple\[T(, T)*\]|Union\[.*\])$", name)

    def test_torch_stubs_equal_the_runtime(self):
        try:
            import apexx.torch as apexx_torch
        except ImportError as e:
            self.skipTest(f"apexx.torch cannot be imported ({e})")
        functions, classes = stubs(os.path.join(os.path.dirname(apexx.__file__), "torch.pyi"))
        for name in apexx_torch.__all__:
            obj = getattr(apexx_torch, name)
            with self.subTest(name=name):
                if isinstance(obj, type):
                    self.assertIn(name, classes, f"apexx/torch.pyi lacks the class {name}")
                elif callable(obj):
                    self.assertIn(name, functions, f"apexx/torch.pyi lacks {name}")
                    self._compare(f"apexx.torch.{name}", functions[name].params,
                                  plain(inspect.signature(obj), False))
                    for n, _, _, ann in functions[name].params:
                        if "Tensor" in ann:  # a tensor, or a learned scalar (float or 0-d)
                            self.assertRegex(ann, r"^((Optional\[)?Tensor\]?|Union\[float, Tensor\])$",
                                             f"{name}.{n}")
