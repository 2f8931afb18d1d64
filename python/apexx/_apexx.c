/* SPDX-License-Identifier: Apache-2.0 */
/* apexx._apexx: the module. Its functions (version, _set_hooks for
 * apexx/__init__.py, one per op that the package re-exports as apexx.NAME:
 * apxpy_add_op_functions), its constants (HEADER_VERSION, DLPACK_VERSION, OPS:
 * the op methods of Context, from the op descriptors) and its types
 * (Context, FFWeights). The binding's files: binding.h. */
#include "binding.h"

#include <dlpack/dlpack.h>

/* DLPack before 1.0 (Debian 12's 0.6) defines DLPACK_VERSION (60 = 0.6);
 * 1.x headers (torch's copy) define the major and minor numbers instead. */
#if defined(DLPACK_VERSION)
#define APX_DLPACK_HEADER_VERSION DLPACK_VERSION
#elif defined(DLPACK_MAJOR_VERSION) && defined(DLPACK_MINOR_VERSION)
#define APX_DLPACK_HEADER_VERSION (DLPACK_MAJOR_VERSION * 100 + DLPACK_MINOR_VERSION * 10)
#else
#define APX_DLPACK_HEADER_VERSION 0
#endif

/* _set_hooks(errors, alloc, stream, default_context): errors is a sequence
 * indexed by status (0 = ApexxError). */
static PyObject *mod_set_hooks(PyObject *mod, PyObject *args) {
  (void)mod;
  PyObject *errors, *alloc, *stream, *default_context;
  if (!PyArg_ParseTuple(args, "OOOO:_set_hooks", &errors, &alloc, &stream, &default_context))
    return NULL;
  PyObject *seq = PySequence_Fast(errors, "errors must be a sequence");
  if (!seq) return NULL;
  if (PySequence_Fast_GET_SIZE(seq) != APXPY_STATUS_COUNT) {
    Py_DECREF(seq);
    PyErr_SetString(PyExc_ValueError, "errors: one class per status");
    return NULL;
  }
  for (int i = 0; i < APXPY_STATUS_COUNT; i++) {
    PyObject *c = PySequence_Fast_GET_ITEM(seq, i);
    Py_INCREF(c);
    Py_XSETREF(apxpy_error_classes[i], c);
  }
  Py_DECREF(seq);
  Py_INCREF(alloc);
  Py_XSETREF(apxpy_alloc_hook, alloc);
  Py_INCREF(stream);
  Py_XSETREF(apxpy_stream_hook, stream);
  Py_INCREF(default_context);
  Py_XSETREF(apxpy_default_context_hook, default_context);
  Py_RETURN_NONE;
}

static PyObject *mod_version(PyObject *mod, PyObject *unused) {
  (void)mod, (void)unused;
  return PyUnicode_FromString(apx_version());
}

static PyMethodDef module_methods[] = {
    {"_set_hooks", mod_set_hooks, METH_VARARGS,
     "_set_hooks($module, errors, alloc, stream, default_context, /)\n--\n\n"
     "internal: exception classes and hooks"},
    {"version", mod_version, METH_NOARGS,
     "version($module, /)\n--\n\nReturns libapexx's version string."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef apexx_module = {PyModuleDef_HEAD_INIT, "_apexx",
                                          "libapexx binding (use the apexx package)", -1,
                                          module_methods, NULL, NULL, NULL, NULL};

static int intern_names(void) {
  apxpy_str_dlpack = PyUnicode_InternFromString("__dlpack__");
  apxpy_str_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
  apxpy_str_stream = PyUnicode_InternFromString("stream");
  apxpy_str_requires_grad = PyUnicode_InternFromString("requires_grad");
  apxpy_str_detach = PyUnicode_InternFromString("detach");
  apxpy_str_device = PyUnicode_InternFromString("device");
  apxpy_str_data_ptr = PyUnicode_InternFromString("data_ptr");
  return apxpy_str_dlpack && apxpy_str_dlpack_device && apxpy_str_stream &&
                 apxpy_str_requires_grad && apxpy_str_detach && apxpy_str_device &&
                 apxpy_str_data_ptr
             ? 0
             : -1;
}

PyMODINIT_FUNC PyInit__apexx(void) {
  if (apxpy_context_type_init() < 0 || PyType_Ready(&apxpy_WeightsType) < 0) return NULL;
  if (intern_names() < 0) return NULL;
  PyObject *m = PyModule_Create(&apexx_module);
  if (!m) return NULL;
  if (apxpy_add_op_functions(m) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  PyObject *ops = apxpy_op_names();
  Py_INCREF(&apxpy_ContextType);
  Py_INCREF(&apxpy_WeightsType);
  if (!ops || PyModule_AddObject(m, "OPS", ops) < 0 ||
      PyModule_AddObject(m, "Context", (PyObject *)&apxpy_ContextType) < 0 ||
      PyModule_AddObject(m, "FFWeights", (PyObject *)&apxpy_WeightsType) < 0 ||
      PyModule_AddStringConstant(m, "HEADER_VERSION", APEXX_VERSION_STRING) < 0 ||
      PyModule_AddIntConstant(m, "DLPACK_VERSION", APX_DLPACK_HEADER_VERSION) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
