/* SPDX-License-Identifier: Apache-2.0 */
/* apexx._apexx: one call's state. Arguments sorted by name, scalar options
 * read with the op's argument names in the messages, the calls in flight
 * on a Context or FFWeights, and running (or explaining) an op. */
#include "binding.h"

#include <pthread.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* ---- calls in flight ---------------------------------------------------------
 * A Context or FFWeights stays alive and usable while a call uses it: a call
 * counts itself in (GIL held) before it reads the object's handle and out
 * when it is done with it, and close() refuses new calls, then waits with the
 * GIL released until the count is 0. A close from inside a call on the same
 * thread (a tensor's __dlpack__, a path's __fspath__) is refused instead of
 * waiting for itself. */
static __thread int g_thread_calls; /* calls in flight on this thread */
static pthread_mutex_t g_calls_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_calls_ended = PTHREAD_COND_INITIALIZER;
static unsigned long g_calls_generation; /* bumped when a count reaches 0 */

void apxpy_calls_enter(int *count) {
  (*count)++;
  g_thread_calls++;
}

void apxpy_calls_leave(int *count) {
  g_thread_calls--;
  if (--*count == 0) {
    pthread_mutex_lock(&g_calls_mutex);
    g_calls_generation++;
    pthread_cond_broadcast(&g_calls_ended);
    pthread_mutex_unlock(&g_calls_mutex);
  }
}

int apxpy_calls_wait(const int *count, const char *who) {
  while (*count > 0) {
    if (g_thread_calls > 0) {
      apxpy_raise_invalid("%s: called inside an apexx call on this thread (a callback) while "
                          "[%d] call(s) use the object: close it after the call returns",
                          who, *count);
      return -1;
    }
    pthread_mutex_lock(&g_calls_mutex);
    unsigned long seen = g_calls_generation;
    Py_BEGIN_ALLOW_THREADS
    while (g_calls_generation == seen) pthread_cond_wait(&g_calls_ended, &g_calls_mutex);
    pthread_mutex_unlock(&g_calls_mutex);
    Py_END_ALLOW_THREADS
  }
  return 0;
}

int apxpy_context_usable(ContextObject *self) {
  if (self->ctx && !self->closing) return 1;
  apxpy_raise_invalid("apexx: the context is closed");
  return 0;
}

/* ---- argument parsing (METH_FASTCALL | METH_KEYWORDS) ---------------------- */
static const char *const common_names[APXPY_COMMON_OPTS] = {"stream", "backend", "validate"};

int apxpy_keywords_init(apxpy_keywords *kw, const char *op, const char *const *names) {
  int n = 0;
  while (names[n]) n++;
  if (n + APXPY_COMMON_OPTS > APXPY_MAX_ARGS) {
    PyErr_Format(PyExc_RuntimeError, "%s: [%d] arguments, more than the binding's %d", op,
                 n + APXPY_COMMON_OPTS, APXPY_MAX_ARGS);
    return -1;
  }
  kw->n = n;
  kw->names = names;
  for (int i = 0; i < n + APXPY_COMMON_OPTS; i++) {
    kw->keys[i] = PyUnicode_InternFromString(i < n ? names[i] : common_names[i - n]);
    if (!kw->keys[i]) return -1;
  }
  return 0;
}

/* The slot of keyword key, or -1. */
static int keyword_slot(const apxpy_keywords *kw, PyObject *key) {
  const int total = kw->n + APXPY_COMMON_OPTS;
  for (int i = 0; i < total; i++)
    if (kw->keys[i] == key) return i;
  for (int i = 0; i < total; i++) { /* a str made at run time (**kwargs built by hand) */
    int cmp = PyUnicode_Compare(key, kw->keys[i]);
    if (cmp == 0) return i;
    if (cmp == -1 && PyErr_Occurred()) PyErr_Clear();
  }
  return -1;
}

int apxpy_parse_args(const char *op, const apxpy_keywords *kw, PyObject *const *args,
                     Py_ssize_t nargs, PyObject *kwnames, PyObject **slots, int *nslots) {
  const int n = kw->n;
  for (int i = 0; i < n + APXPY_COMMON_OPTS; i++) slots[i] = NULL;
  *nslots = n;
  if (nargs > n) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional arguments (%zd given)", op,
                 n, nargs);
    return -1;
  }
  for (Py_ssize_t i = 0; i < nargs; i++) slots[i] = args[i];
  Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nk; k++) {
    PyObject *key = PyTuple_GET_ITEM(kwnames, k);
    int found = keyword_slot(kw, key);
    if (found < 0) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", op, key);
      return -1;
    }
    if (slots[found]) {
      PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%U'", op, key);
      return -1;
    }
    slots[found] = args[nargs + k];
  }
  return 0;
}

/* stream=: resolved now, so that host-only calls with stream= still pass it. */
static int stream_given(apxpy_call *cs, PyObject *stream) {
  uintptr_t s;
  cs->stream_obj = stream;
  if (apxpy_stream_from_object(stream, &s) < 0) return -1;
  cs->call.stream = (void *)s;
  cs->dlpack_stream = PyLong_FromUnsignedLongLong(s ? (unsigned long long)s : 1ULL);
  if (!cs->dlpack_stream) return -1;
  cs->stream_known = 1;
  return 0;
}

int apxpy_call_setup(apxpy_call *cs, ContextObject *self, const char *op, PyObject **slots,
                     int n) {
  memset(cs, 0, offsetof(apxpy_call, held));
  cs->self = self;
  cs->op = op;
  cs->call.backend = NULL;
  cs->call.stream = NULL;
  if (!apxpy_context_usable(self)) return -1;
  apxpy_calls_enter(&self->calls);
  cs->entered = 1;
  PyObject *stream = slots[n], *backend = slots[n + 1], *validate = slots[n + 2];
  if (stream && stream != Py_None && stream_given(cs, stream) < 0) return -1;
  if (backend && backend != Py_None) {
    if (!PyUnicode_Check(backend)) {
      PyErr_Format(PyExc_TypeError, "%s: backend must be a str", op);
      return -1;
    }
    cs->call.backend = PyUnicode_AsUTF8(backend); /* lives as long as the args */
    if (!cs->call.backend) return -1;
  }
  if (validate && validate != Py_None) {
    const char *v = PyUnicode_Check(validate) ? PyUnicode_AsUTF8(validate) : NULL;
    if (v && strcmp(v, "eager") == 0) cs->eager = 1;
    else if (!v || strcmp(v, "device") != 0) {
      apxpy_raise_invalid("%s: validate must be None, \"device\" or \"eager\"", op);
      return -1;
    }
  }
  return 0;
}

int apxpy_hold_handle(apxpy_call *cs, PyObject *obj, int *calls) {
  if (cs->nhandles >= APXPY_MAX_HANDLES) {
    PyErr_SetString(PyExc_RuntimeError, "apexx: too many handles in one call");
    return -1;
  }
  apxpy_calls_enter(calls); /* its close() waits for the call */
  Py_INCREF(obj);
  cs->handles[cs->nhandles].obj = obj;
  cs->handles[cs->nhandles].calls = calls;
  cs->nhandles++;
  return 0;
}

void apxpy_call_release(apxpy_call *cs) {
  for (int i = 0; i < cs->nheld; i++) {
    apxpy_held_tensor *h = &cs->held[i];
    if (h->has_view) PyBuffer_Release(&h->view);
    PyMem_RawFree(h->packed);
    Py_XDECREF(h->capsule);
    Py_XDECREF(h->obj);
  }
  cs->nheld = 0;
  Py_CLEAR(cs->dlpack_stream);
  Py_CLEAR(cs->torch_device);
  for (int i = 0; i < cs->nhandles; i++) {
    apxpy_calls_leave(cs->handles[i].calls);
    Py_CLEAR(cs->handles[i].obj);
  }
  cs->nhandles = 0;
  if (cs->entered) {
    cs->entered = 0;
    apxpy_calls_leave(&cs->self->calls);
  }
}

/* ---- scalar arguments ------------------------------------------------------ */
int apxpy_int_arg(apxpy_call *cs, PyObject *o, const char *name, int64_t *out) {
  if (!o) return 0;
  if (PyBool_Check(o) || !PyIndex_Check(o)) {
    PyErr_Format(PyExc_TypeError, "%s: %s must be an int, not %.100s", cs->op, name,
                 Py_TYPE(o)->tp_name);
    return -1;
  }
  long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) return -1;
  *out = v;
  return 0;
}

int apxpy_dim_arg(apxpy_call *cs, PyObject *o, const char *name, int *out) {
  int64_t v = *out;
  if (apxpy_int_arg(cs, o, name, &v) < 0) return -1;
  if (v < INT32_MIN || v > INT32_MAX) {
    apxpy_raise_invalid("%s: %s = [%lld] is out of range", cs->op, name, (long long)v);
    return -1;
  }
  *out = (int)v;
  return 0;
}

int apxpy_float_arg(apxpy_call *cs, PyObject *o, const char *name, double *out) {
  if (!o) return 0;
  double v = PyFloat_AsDouble(o);
  if (v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s: %s must be a float, not %.100s", cs->op, name,
                 Py_TYPE(o)->tp_name);
    return -1;
  }
  *out = v;
  return 0;
}

int apxpy_bool_arg(PyObject *o, int *out) {
  if (!o) return 0;
  int v = PyObject_IsTrue(o);
  if (v < 0) return -1;
  *out = v;
  return 0;
}

int apxpy_enum_arg(apxpy_call *cs, PyObject *o, const char *name, const char *const *names,
                   int count, int *out) {
  if (!o) return 0;
  if (PyUnicode_Check(o)) {
    const char *s = PyUnicode_AsUTF8(o);
    if (!s) return -1;
    for (int i = 0; i < count; i++)
      if (strcasecmp(s, names[i]) == 0) {
        *out = i;
        return 0;
      }
  } else if (PyLong_Check(o) && !PyBool_Check(o)) {
    long v = PyLong_AsLong(o);
    if (v >= 0 && v < count) {
      *out = (int)v;
      return 0;
    }
    PyErr_Clear();
  }
  PyObject *r = PyObject_Repr(o);
  char list[256] = "";
  for (int i = 0; i < count; i++) {
    strncat(list, names[i], sizeof list - strlen(list) - 1);
    if (i + 1 < count) strncat(list, ", ", sizeof list - strlen(list) - 1);
  }
  apxpy_raise_invalid("%s: %s = [%s] is not one of %s", cs->op, name,
                      r ? PyUnicode_AsUTF8(r) : "?", list);
  Py_XDECREF(r);
  return -1;
}

int apxpy_shape_arg(apxpy_call *cs, PyObject *o, const char *name, int *ndim, int64_t *shape) {
  PyObject *seq = PySequence_Fast(o, "");
  if (!seq) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s: %s must be a sequence of ints", cs->op, name);
    return -1;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n > APX_MAX_DIMS) {
    Py_DECREF(seq);
    apxpy_raise_invalid("%s: %s has [%zd] dimensions, more than %d", cs->op, name, n,
                        APX_MAX_DIMS);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return -1;
    }
    if (v < 0) {
      Py_DECREF(seq);
      apxpy_raise_invalid("%s: %s[%zd] = [%lld] is negative", cs->op, name, i, v);
      return -1;
    }
    shape[i] = v;
  }
  *ndim = (int)n;
  Py_DECREF(seq);
  return 0;
}

/* ---- running -------------------------------------------------------------- */
int apxpy_validate_early(apxpy_call *cs) {
  apx_explanation ex;
  memset(&ex, 0, sizeof ex);
  apx_status st = apx_explain(cs->self->ctx, cs->op_id, cs->args, &cs->call, &ex);
  if (st == APX_ERR_INVALID_ARG) {
    apxpy_raise_apx(st);
    return -1;
  }
  return 0;
}

PyObject *apxpy_explanation_dict(const apx_explanation *ex) {
  PyObject *list = PyList_New(0);
  if (!list) return NULL;
  for (int i = 0; i < ex->passed_over_count && i < APX_MAX_BACKENDS; i++) {
    const apx_pass_over *p = &ex->passed_over[i];
    const char *code = apx_pass_over_name(p->code);
    PyObject *d = Py_BuildValue("{s:N,s:s,s:N}", "backend", apxpy_text_of(p->backend), "code",
                                code ? code : "?", "reason", apxpy_text_of(p->reason));
    if (!d || PyList_Append(list, d) < 0) {
      Py_XDECREF(d);
      Py_DECREF(list);
      return NULL;
    }
    Py_DECREF(d);
  }
  PyObject *backend = ex->backend ? apxpy_text_of(ex->backend) : (Py_INCREF(Py_None), Py_None);
  if (!backend) {
    Py_DECREF(list);
    return NULL;
  }
  return Py_BuildValue("{s:N,s:N}", "backend", backend, "passed_over", list);
}

int apxpy_run_op(apxpy_call *cs, PyObject **explained) {
  apx_status st;
  if (explained) {
    apx_explanation ex;
    memset(&ex, 0, sizeof ex);
    st = apx_explain(cs->self->ctx, cs->op_id, cs->args, &cs->call, &ex);
    if (st == APX_OK || st == APX_ERR_UNSUPPORTED) {
      *explained = apxpy_explanation_dict(&ex);
      return *explained ? 0 : -1;
    }
    apxpy_raise_apx(st);
    return -1;
  }
  apx_context *ctx = cs->self->ctx;
  if (cs->time_n > 0) {
    /* ctx._time_c: one call, then time_n more looped here (a device call
     * synced once at the end), the GIL released throughout */
    struct timespec t0, t1;
    Py_BEGIN_ALLOW_THREADS st = apx_op_run(ctx, cs->op_id, cs->args, &cs->call);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int64_t i = 0; i < cs->time_n && st == APX_OK; i++)
      st = apx_op_run(ctx, cs->op_id, cs->args, &cs->call);
    if (st == APX_OK) st = apx_sync(ctx, &cs->call);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    Py_END_ALLOW_THREADS
    cs->time_s = ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec)) /
                 (double)cs->time_n;
    if (st != APX_OK) {
      apxpy_raise_apx(st);
      return -1;
    }
    return 0;
  }
  int release = cs->host_bytes >= APXPY_RELEASE_GIL_BYTES || cs->eager;
  if (release) {
    Py_BEGIN_ALLOW_THREADS st = apx_op_run(ctx, cs->op_id, cs->args, &cs->call);
    if (st == APX_OK && cs->eager) st = apx_sync(ctx, &cs->call);
    Py_END_ALLOW_THREADS
  } else {
    st = apx_op_run(ctx, cs->op_id, cs->args, &cs->call);
  }
  if (st != APX_OK) {
    apxpy_raise_apx(st);
    return -1;
  }
  return 0;
}
