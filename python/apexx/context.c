/* SPDX-License-Identifier: Apache-2.0 */
/* apexx._apexx: the Context type. Opening and closing (close waits for the
 * calls in flight), the backends, the configuration, sync, the FF weights'
 * constructors, and one method per op (ops.c). */
#include "binding.h"

#include <string.h>

/* ---- context methods ---------------------------------------------------------- */
static PyObject *m_backends(ContextObject *self, PyObject *unused) {
  (void)unused;
  if (!apxpy_context_usable(self)) return NULL;
  int n = apx_backend_count(self->ctx);
  PyObject *list = PyList_New(0);
  if (!list) return NULL;
  for (int i = 0; i < n; i++) {
    struct apx_backend_info info;
    if (apx_backend_info(self->ctx, i, &info) != APX_OK) {
      Py_DECREF(list);
      return apxpy_raise_apx(APX_ERR_BACKEND);
    }
    PyObject *d = Py_BuildValue(
        "{s:N,s:s,s:N,s:s,s:N,s:N,s:N}", "name", apxpy_text_of(info.name), "state",
        apx_backend_state_name(info.state) ? apx_backend_state_name(info.state) : "?", "reason",
        apxpy_text_of(info.reason), "device",
        apx_device_name(info.device) ? apx_device_name(info.device) : "?", "device_name",
        apxpy_text_of(info.device_name), "version", apxpy_text_of(info.version), "library",
        apxpy_text_of(info.library));
    if (!d || PyList_Append(list, d) < 0) {
      Py_XDECREF(d);
      Py_DECREF(list);
      return NULL;
    }
    Py_DECREF(d);
  }
  return list;
}

static PyObject *m_sync(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames) {
  static const char *const names[] = {NULL};
  static apxpy_keywords keywords;
  PyObject *s[APXPY_MAX_ARGS];
  int n;
  apxpy_call cs;
  if (!keywords.names && apxpy_keywords_init(&keywords, "sync", names) < 0) return NULL;
  if (apxpy_parse_args("sync", &keywords, args, nargs, kwnames, s, &n) < 0) return NULL;
  if (apxpy_call_setup(&cs, self, "sync", s, n) < 0) {
    apxpy_call_release(&cs);
    return NULL;
  }
  if (!cs.stream_known && apxpy_stream_hook) {
    /* the current stream of torch / CuPy where either is in use */
    if (apxpy_resolve_stream(&cs, Py_None, -1) < 0) {
      apxpy_call_release(&cs);
      return NULL;
    }
  }
  apx_status st;
  Py_BEGIN_ALLOW_THREADS st = apx_sync(self->ctx, &cs.call);
  Py_END_ALLOW_THREADS apxpy_call_release(&cs);
  if (st != APX_OK) return apxpy_raise_apx(st);
  Py_RETURN_NONE;
}

void apxpy_context_free_now(ContextObject *self) {
  if (self->ctx) {
    apx_close(self->ctx);
    self->ctx = NULL;
  }
}

static PyObject *m_close(ContextObject *self, PyObject *unused) {
  (void)unused;
  if (!self->ctx) Py_RETURN_NONE;
  int was_closing = self->closing;
  self->closing = 1; /* new calls are refused from here */
  if (apxpy_calls_wait(&self->calls, "Context.close") < 0) {
    self->closing = was_closing;
    return NULL;
  }
  if (self->live_weights == 0) apxpy_context_free_now(self); /* else when the last one goes */
  Py_RETURN_NONE;
}

static PyObject *m_enter(ContextObject *self, PyObject *unused) {
  (void)unused;
  Py_INCREF(self);
  return (PyObject *)self;
}

static PyObject *m_exit(ContextObject *self, PyObject *args) {
  (void)args;
  return m_close(self, NULL);
}

static PyObject *m_config_source(ContextObject *self, PyObject *unused) {
  (void)unused;
  if (!apxpy_context_usable(self)) return NULL;
  return Py_BuildValue("{s:N,s:N,s:N}", "files", apxpy_text_of(apx_config_source(self->ctx)),
                       "overrides", apxpy_text_of(apx_config_overrides(self->ctx)), "warnings",
                       apxpy_text_of(apx_config_warnings(self->ctx)));
}


/* The context's own methods; the op methods follow them in the type's
 * table (apxpy_context_type_init). Each docstring starts with its
 * signature for inspect.signature (CPython's "NAME($self, ...)\n--\n\n"),
 * the parameters its parsing takes. */
#define FC (METH_FASTCALL | METH_KEYWORDS)
#define COMMON_KEYWORDS_ "*, stream=None, backend=None, validate=None"
static const PyMethodDef own_methods[] = {
    {"backends", (PyCFunction)m_backends, METH_NOARGS,
     "backends($self, /)\n--\n\n"
     "Returns a list of dicts: name, state, reason, device, device_name, version, library "
     "(configuration order)."},
    {"explain", (PyCFunction)(void (*)(void))apxpy_explain, FC,
     "explain($self, op, /, *args, **kwargs)\n--\n\n"
     "Returns {'backend': name or None, 'passed_over': [{backend, code, reason}]}: which "
     "backend the call would run on and why each other was passed over. Takes the op's own "
     "arguments; validates them as the op would."},
    {"sync", (PyCFunction)(void (*)(void))m_sync, FC,
     "sync($self, /, " COMMON_KEYWORDS_ ")\n--\n\n"
     "Waits for the stream (default: the current torch or CuPy stream) on every device "
     "backend and raises a deferred device error (apexx.DeviceError), e.g. an out-of-range "
     "index found on the device; validate= is accepted and has no effect."},
    {"close", (PyCFunction)m_close, METH_NOARGS,
     "close($self, /)\n--\n\n"
     "Unloads the backends (after the last FFWeights of this context is freed)."},
    {"__enter__", (PyCFunction)m_enter, METH_NOARGS, "__enter__($self, /)\n--\n\n"},
    {"__exit__", (PyCFunction)m_exit, METH_VARARGS,
     "__exit__($self, /, *exc)\n--\n\nCloses the context."},
    {"config_source", (PyCFunction)m_config_source, METH_NOARGS,
     "config_source($self, /)\n--\n\n"
     "Returns {'files', 'overrides', 'warnings'} of the configuration in use."},
    {"ff_weights_load", (PyCFunction)apxpy_ff_weights_load, METH_O,
     "ff_weights_load($self, path, /)\n--\n\n"
     "Returns FFWeights from a safetensors file with FFModule's state_dict names "
     "(docs/ff_weights.md)."},
    {"ff_weights_seeded", (PyCFunction)(void (*)(void))apxpy_ff_weights_seeded,
     METH_VARARGS | METH_KEYWORDS,
     "ff_weights_seeded($self, /, channels, seed=0)\n--\n\n"
     "Returns FFWeights from the documented generator."},
    {"_time_c", (PyCFunction)(void (*)(void))apxpy_time_c, FC,
     "_time_c($self, op, n, /, *args, **kwargs)\n--\n\n"
     "Returns the seconds per call of op with these arguments looped n times in C after "
     "one call (bench baseline of the binding's cost)."},
};
#define OWN_METHODS ((int)(sizeof own_methods / sizeof own_methods[0]))

/* The own methods, one per op, the sentinel. */
static PyMethodDef context_methods[OWN_METHODS + APX_OP_COUNT + 2];

static int context_init(ContextObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"config", NULL};
  PyObject *config = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:Context", kwlist, &config)) return -1;
  if (self->ctx) {
    PyErr_SetString(PyExc_RuntimeError, "Context: already initialised");
    return -1;
  }
  PyObject *bytes = NULL;
  if (config != Py_None && !PyUnicode_FSConverter(config, &bytes)) return -1;
  apx_status st;
  apx_context *ctx = NULL;
  const char *path = bytes ? PyBytes_AS_STRING(bytes) : NULL;
  Py_BEGIN_ALLOW_THREADS st = apx_open(&ctx, path);
  Py_END_ALLOW_THREADS Py_XDECREF(bytes);
  if (st != APX_OK) {
    apxpy_raise_apx(st);
    return -1;
  }
  self->ctx = ctx;
  return 0;
}

static void context_dealloc(ContextObject *self) {
  apxpy_context_free_now(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

PyTypeObject apxpy_ContextType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "apexx.Context",
    .tp_basicsize = sizeof(ContextObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Context(config=None)\n--\n\n"
              "An apexx context. Reads the INI configuration (the path, else $APEXX_CONFIG, "
              "else the installed apexx.ini, else built-in defaults), loads and probes the "
              "backends. One method per op.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)context_init,
    .tp_dealloc = (destructor)context_dealloc,
    .tp_methods = context_methods,
};

PyObject *apxpy_default_context_hook;

ContextObject *apxpy_default_context(void) {
  if (!apxpy_default_context_hook) {
    PyErr_SetString(PyExc_RuntimeError, "apexx: import the apexx package (apexx._apexx has no "
                                        "default context hook)");
    return NULL;
  }
  PyObject *ctx = PyObject_CallObject(apxpy_default_context_hook, NULL);
  if (ctx && !PyObject_TypeCheck(ctx, &apxpy_ContextType)) {
    PyErr_Format(PyExc_TypeError, "apexx.default_context() returned a %s, not a Context",
                 Py_TYPE(ctx)->tp_name);
    Py_CLEAR(ctx);
  }
  return (ContextObject *)ctx;
}

int apxpy_context_type_init(void) {
  memcpy(context_methods, own_methods, sizeof own_methods);
  int ops = apxpy_op_methods(context_methods + OWN_METHODS, APX_OP_COUNT + 2);
  if (ops < 0) return -1;
  memset(&context_methods[OWN_METHODS + ops], 0, sizeof context_methods[0]);
  return PyType_Ready(&apxpy_ContextType);
}
