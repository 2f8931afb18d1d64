/* SPDX-License-Identifier: Apache-2.0 */
/* apexx._apexx: the op methods of Context, derived from the op descriptors
 * (apx_op_describe; docs/architecture.md, The op table). One method per op
 * id of APX_OP_MAP, named and documented from its descriptor: its
 * arguments are the descriptor's, by name and in order (then the op's
 * Python-only keywords, then stream, backend, validate); options are read
 * by kind, tensors as inputs or outputs, missing outputs allocated in the
 * shape the descriptor's output_shape gives with the dtype its rules give,
 * and the op runs through apx_op_run. What is truly one op's own (a
 * keyword only Python has, a result struct to turn into Python objects) is
 * in its apxpy_op_extra. tile_order, a host op of the core without an op
 * id, has a method of its own. */
#include "binding.h"

#include <stdarg.h>
#include <string.h>

/* ---- op-specific parts ---------------------------------------------------- */
/* The backward ops whose output shape is the caller's (gather_backward's
 * grad_src, tilepack_backward's grad_features, index_select_backward's
 * grad_src): given as the output or as a shape keyword, the extra's one. */
static const apxpy_op_extra *extra_of(const char *op);

static int caller_shape(apxpy_call *cs, PyObject *const *slots, int arg, int *ndim,
                        int64_t shape[APX_MAX_DIMS]) {
  const apx_op_desc *d = apx_op_describe(cs->op_id);
  const char *keyword = extra_of(cs->op)->keywords[0];
  PyObject *given = slots[d->arg_count];
  if (!given || given == Py_None) {
    apxpy_raise_invalid("%s: give %s (the output) or %s", cs->op, d->args[arg].name, keyword);
    return -1;
  }
  return apxpy_shape_arg(cs, given, keyword, ndim, shape);
}

static const char *const src_shape_keywords[] = {"src_shape", NULL};
static const char *const features_shape_keywords[] = {"features_shape", NULL};

static const apxpy_op_extra gather_backward_extra = {
    .op = "gather_backward",
    .keywords = src_shape_keywords,
    .doc = "Give grad_src or src_shape.",
    .output_shape = caller_shape,
};

static const apxpy_op_extra tilepack_backward_extra = {
    .op = "tilepack_backward",
    .keywords = features_shape_keywords,
    .doc = "Give grad_features or features_shape.",
    .output_shape = caller_shape,
};

static const apxpy_op_extra index_select_backward_extra = {
    .op = "index_select_backward",
    .keywords = src_shape_keywords,
    .doc = "Give grad_src or src_shape.",
    .output_shape = caller_shape,
};

static const apxpy_op_extra *const op_extras[] = {&gather_backward_extra,
                                                  &tilepack_backward_extra,
                                                  &index_select_backward_extra,
                                                  &apxpy_ff_infer_extra};

static const apxpy_op_extra *extra_of(const char *op) {
  for (size_t i = 0; i < sizeof op_extras / sizeof op_extras[0]; i++)
    if (strcmp(op_extras[i]->op, op) == 0) return op_extras[i];
  return NULL;
}

/* Each op's descriptor, extra and argument names (the descriptor's, then
 * the extra's keywords), found once when the methods are made. */
typedef struct {
  const apx_op_desc *d;
  const apxpy_op_extra *x;
  const char *names[APXPY_MAX_ARGS - APXPY_COMMON_OPTS + 1];
  apxpy_keywords keywords; /* names as interned str */
} op_entry;

static op_entry op_entries[APX_OP_COUNT];

static int op_entry_init(op_entry *e, const apx_op_desc *d) {
  const int max = APXPY_MAX_ARGS - APXPY_COMMON_OPTS;
  int n = 0;
  e->d = d;
  e->x = extra_of(d->name);
  for (int i = 0; i < d->arg_count && n < max; i++) e->names[n++] = d->args[i].name;
  for (int i = 0; e->x && e->x->keywords && e->x->keywords[i] && n < max; i++)
    e->names[n++] = e->x->keywords[i];
  if (n == max) {
    PyErr_Format(PyExc_RuntimeError, "apexx: op %s has more arguments than the binding's %d",
                 d->name, max - 1);
    return -1;
  }
  e->names[n] = NULL;
  return apxpy_keywords_init(&e->keywords, d->name, e->names);
}

/* ---- one op call ------------------------------------------------------------ */
typedef struct {
  const apx_op_desc *d;
  const apxpy_op_extra *x;
  PyObject *slots[APXPY_MAX_ARGS];
  void *args;                        /* d->args_size bytes (PyMem) */
  PyObject *like;                    /* the first input given (borrowed) */
  const apx_tensor *like_t;          /* its tensor */
  PyObject *outputs[APXPY_MAX_ARGS]; /* new references, by argument */
  int wanted[APXPY_MAX_ARGS];        /* RESULT flags given true */
  void *results;                     /* the extra's storage for them */
  apxpy_call cs;                     /* last: apxpy_call_setup clears it */
} op_call;

static void *field_of(const op_call *oc, int arg) {
  return (char *)oc->args + oc->d->args[arg].offset;
}

static int is_tensor(apx_arg_kind kind) {
  return kind == APX_ARG_INPUT || kind == APX_ARG_INDEX || kind == APX_ARG_OUTPUT;
}

/* Options, enums and RESULT flags, by kind; absent ones keep ARGS_INIT's. */
static int set_option(op_call *oc, int arg) {
  const apx_op_arg *a = &oc->d->args[arg];
  PyObject *o = oc->slots[arg];
  void *f = field_of(oc, arg);
  switch (a->kind) {
  case APX_ARG_INT64:
    return apxpy_int_arg(&oc->cs, o, a->name, (int64_t *)f);
  case APX_ARG_DIM:
    return apxpy_dim_arg(&oc->cs, o, a->name, (int *)f);
  case APX_ARG_DOUBLE:
    return apxpy_float_arg(&oc->cs, o, a->name, (double *)f);
  case APX_ARG_FLAG:
    return apxpy_bool_arg(o, (int *)f);
  case APX_ARG_ENUM:
    return apxpy_enum_arg(&oc->cs, o, a->name, a->enum_names, a->enum_count, (int *)f);
  case APX_ARG_RESULT:
    return apxpy_bool_arg(o, &oc->wanted[arg]);
  default:
    return 0;
  }
}

static int set_handle(op_call *oc, int arg) {
  const apx_op_arg *a = &oc->d->args[arg];
  if (!oc->x || !oc->x->handle) {
    PyErr_Format(PyExc_TypeError, "%s: the binding cannot pass %s (a %s)", oc->cs.op, a->name,
                 a->type_name ? a->type_name : "handle");
    return -1;
  }
  return oc->x->handle(&oc->cs, a, oc->slots[arg], field_of(oc, arg));
}

static int set_input(op_call *oc, int arg) {
  const apx_op_arg *a = &oc->d->args[arg];
  PyObject *o = oc->slots[arg];
  const apx_tensor *t = NULL;
  const int mode = a->kind == APX_ARG_INDEX ? APXPY_INDEX : APXPY_INPUT;
  if (!a->optional && (!o || o == Py_None)) {
    PyErr_Format(PyExc_TypeError, "%s: missing required tensor argument '%s'", oc->cs.op,
                 a->name);
    return -1;
  }
  if (o && o != Py_None && !(t = apxpy_acquire(&oc->cs, o, a->name, mode))) return -1;
  *(const apx_tensor **)field_of(oc, arg) = t;
  if (t && !oc->like) {
    oc->like = o;
    oc->like_t = t;
  }
  return 0;
}

/* An output's dtype: that of the argument its rules name, else the first
 * input's. */
static apx_dtype output_dtype(const op_call *oc, int arg) {
  int same = oc->d->args[arg].same_dtype_as;
  if (same >= 0 && same < oc->d->arg_count && is_tensor(oc->d->args[same].kind)) {
    const apx_tensor *t = *(const apx_tensor *const *)field_of(oc, same);
    if (t) return t->dtype;
  }
  return oc->like ? oc->like_t->dtype : APX_DTYPE_F32;
}

static int set_output(op_call *oc, int arg) {
  const apx_op_arg *a = &oc->d->args[arg];
  PyObject *o = oc->slots[arg];
  int ndim = 0;
  int64_t shape[APX_MAX_DIMS] = {0};
  if (!o || o == Py_None) {
    if (!oc->d->output_shape || !oc->d->output_shape(oc->args, arg, &ndim, shape)) {
      if (!oc->x || !oc->x->output_shape) {
        apxpy_raise_invalid("%s: pass %s (its shape is the caller's: %s)", oc->cs.op, a->name,
                            a->layout ? a->layout : "");
        return -1;
      }
      if (oc->x->output_shape(&oc->cs, oc->slots, arg, &ndim, shape) < 0) return -1;
    }
  }
  const apx_tensor **slot = (const apx_tensor **)field_of(oc, arg);
  return apxpy_out_tensor(&oc->cs, slot, o, a->name, oc->like ? oc->like : Py_None, oc->like_t,
                          ndim, shape, output_dtype(oc, arg), &oc->outputs[arg])
             ? 0
             : -1;
}

/* The arguments in the order their errors are reported: options, handles,
 * inputs, outputs, then the results asked for. */
static int set_arguments(op_call *oc) {
  const apx_op_desc *d = oc->d;
  int any_result = 0;
  for (int i = 0; i < d->arg_count; i++)
    if (!is_tensor(d->args[i].kind) && d->args[i].kind != APX_ARG_HANDLE &&
        set_option(oc, i) < 0)
      return -1;
  if (oc->x && oc->x->options_given && oc->x->options_given(&oc->cs, oc->slots, oc->args) < 0)
    return -1;
  for (int i = 0; i < d->arg_count; i++)
    if (d->args[i].kind == APX_ARG_HANDLE && set_handle(oc, i) < 0) return -1;
  for (int i = 0; i < d->arg_count; i++)
    if ((d->args[i].kind == APX_ARG_INPUT || d->args[i].kind == APX_ARG_INDEX) &&
        set_input(oc, i) < 0)
      return -1;
  for (int i = 0; i < d->arg_count; i++)
    if (d->args[i].kind == APX_ARG_OUTPUT && set_output(oc, i) < 0) return -1;
  for (int i = 0; i < d->arg_count; i++) any_result |= oc->wanted[i];
  if (!any_result || oc->cs.explaining) return 0;
  if (!oc->x || !oc->x->prepare_results) {
    apxpy_raise_invalid("%s: the binding cannot return the op's results", oc->cs.op);
    return -1;
  }
  return oc->x->prepare_results(&oc->cs, oc->args, oc->wanted, &oc->results);
}

/* The outputs in argument order, then the results asked for: one object
 * alone, else a tuple. Takes the references of oc->outputs. */
static PyObject *returned(op_call *oc) {
  PyObject *items[APXPY_MAX_ARGS];
  int n = 0;
  for (int i = 0; i < oc->d->arg_count; i++)
    if (oc->outputs[i]) {
      items[n++] = oc->outputs[i];
      oc->outputs[i] = NULL;
    }
  int failed = 0;
  for (int i = 0; i < oc->d->arg_count && !failed; i++)
    if (oc->wanted[i] && !(items[n++] = oc->x->result_value(oc->args, i, oc->results)))
      n--, failed = 1;
  PyObject *r = NULL;
  if (!failed) r = n == 1 ? (Py_INCREF(items[0]), items[0]) : PyTuple_New(n);
  for (int i = 0; r && n > 1 && i < n; i++) {
    Py_INCREF(items[i]);
    PyTuple_SET_ITEM(r, i, items[i]);
  }
  for (int i = 0; i < n; i++) Py_DECREF(items[i]);
  return r;
}

static PyObject *op_call_run(op_call *oc, PyObject **explained) {
  if (set_arguments(oc) < 0) return NULL;
  if (apxpy_run_op(&oc->cs, explained) < 0) return NULL;
  apxpy_call_release(&oc->cs); /* before the results are read: no tensor is held past the op */
  return explained ? *explained : returned(oc);
}

/* The method of op `op`: ctx.NAME(*args, **kwargs); with explained, the
 * call is explained instead (ctx.explain); with time_n > 0 it runs
 * 1 + time_n times in C and *time_s is the seconds a call of the last
 * time_n (ctx._time_c). */
static PyObject *op_method_timed(ContextObject *self, apx_op_id op, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames, PyObject **explained,
                                 int64_t time_n, double *time_s) {
  op_call oc;
  const op_entry *e = &op_entries[op]; /* op: an id with a method */
  oc.d = e->d;
  oc.x = e->x;
  oc.args = oc.results = NULL;
  oc.like = NULL;
  oc.like_t = NULL;
  /* the arguments' entries only (the call state: apxpy_call_setup) */
  memset(oc.outputs, 0, (size_t)oc.d->arg_count * sizeof oc.outputs[0]);
  memset(oc.wanted, 0, (size_t)oc.d->arg_count * sizeof oc.wanted[0]);
  int nslots;
  if (apxpy_parse_args(oc.d->name, &e->keywords, args, nargs, kwnames, oc.slots, &nslots) < 0)
    return NULL;
  PyObject *r = NULL;
  if (apxpy_call_setup(&oc.cs, self, oc.d->name, oc.slots, nslots) == 0) {
    oc.args = PyMem_Malloc(oc.d->args_size ? oc.d->args_size : 1);
    if (!oc.args) {
      PyErr_NoMemory();
    } else {
      memcpy(oc.args, oc.d->args_init, oc.d->args_size);
      oc.cs.op_id = op;
      oc.cs.args = oc.args;
      oc.cs.explaining = explained != NULL;
      oc.cs.time_n = time_n;
      r = op_call_run(&oc, explained);
      if (r && time_n > 0) *time_s = oc.cs.time_s;
    }
  }
  apxpy_call_release(&oc.cs);
  for (int i = 0; i < oc.d->arg_count; i++) Py_XDECREF(oc.outputs[i]);
  if (oc.results) oc.x->free_results(oc.results);
  PyMem_Free(oc.args);
  return r;
}

static PyObject *op_method(ContextObject *self, apx_op_id op, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames, PyObject **explained) {
  return op_method_timed(self, op, args, nargs, kwnames, explained, 0, NULL);
}

/* ---- tile_order: a host op of the core, no op id, no dispatch ------------ */
static int tile_order_mode(apxpy_call *cs, PyObject *o, apx_order_mode *mode) {
  if (PyUnicode_Check(o)) {
    const char *m = PyUnicode_AsUTF8(o);
    if (!m) return -1;
    int v = apx_order_mode_from_name(m);
    if (v < 0) {
      apxpy_raise_invalid("tile_order: mode = [%s] is not one of hilbert, l2r, r2l, u2d, d2u, "
                          "multi_direction",
                          m);
      return -1;
    }
    *mode = (apx_order_mode)v;
    return 0;
  }
  int64_t v = 0;
  if (apxpy_int_arg(cs, o, "mode", &v) < 0) return -1;
  if (v < APX_ORDER_HILBERT || v > APX_ORDER_MULTI_DIRECTION) { /* before it is an int */
    apxpy_raise_invalid("tile_order: mode = [%lld] is not an apx_order_mode (0..5: hilbert, "
                        "l2r, r2l, u2d, d2u, multi_direction)",
                        (long long)v);
    return -1;
  }
  *mode = (apx_order_mode)v;
  return 0;
}

static PyObject *tile_order_run(apxpy_call *cs, PyObject **s, PyObject **out) {
  apx_tile_order_args a = APX_TILE_ORDER_ARGS_INIT;
  if (!s[1] || !s[2]) {
    PyErr_SetString(PyExc_TypeError, "tile_order: grid_h and grid_w are required");
    return NULL;
  }
  if (apxpy_int_arg(cs, s[1], "grid_h", &a.grid_h) < 0 ||
      apxpy_int_arg(cs, s[2], "grid_w", &a.grid_w) < 0)
    return NULL;
  if (s[3] && tile_order_mode(cs, s[3], &a.mode) < 0) return NULL;
  if (!(a.ids = apxpy_req_tensor(cs, s[0], "ids"))) return NULL;
  if (!apxpy_out_tensor(cs, &a.out, s[4], "out", s[0], a.ids, a.ids->ndim, a.ids->shape,
                        a.ids->dtype, out))
    return NULL;
  apx_status st = apx_tile_order(cs->self->ctx, &a);
  if (st != APX_OK) return apxpy_raise_apx(st);
  Py_INCREF(*out);
  return *out;
}

static PyObject *tile_order_method(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames, PyObject **explained) {
  static const char *const names[] = {"ids", "grid_h", "grid_w", "mode", "out", NULL};
  static apxpy_keywords keywords;
  PyObject *s[APXPY_MAX_ARGS], *out = NULL, *r = NULL;
  int n;
  apxpy_call cs;
  if (!keywords.names && apxpy_keywords_init(&keywords, "tile_order", names) < 0) return NULL;
  if (apxpy_parse_args("tile_order", &keywords, args, nargs, kwnames, s, &n) < 0) return NULL;
  if (apxpy_call_setup(&cs, self, "tile_order", s, n) == 0) {
    if (explained)
      apxpy_raise_invalid("explain: tile_order is a host op of the core (no dispatch to "
                          "explain)");
    else
      r = tile_order_run(&cs, s, &out);
  }
  apxpy_call_release(&cs);
  Py_XDECREF(out);
  return r;
}

static PyObject *m_tile_order(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames) {
  return tile_order_method(self, args, nargs, kwnames, NULL);
}

#define TILE_ORDER_DOC_(bound, tail)                                                              \
  "tile_order(" bound ", /, ids, grid_h, grid_w, mode='hilbert', out=None, *, stream=None, "       \
  "backend=None, validate=None)\n--\n\n"                                                          \
  "Returns out.\nout = ids stably sorted by the mode's key (hilbert, l2r, r2l, u2d, d2u, "         \
  "multi_direction); host tensors; out may be ids itself (docs/ops.md, tile_order)." tail
static const char tile_order_doc[] = TILE_ORDER_DOC_("$self", "");

/* ---- the methods -------------------------------------------------------------- */
/* One C function per op id of APX_OP_MAP: a new op gets its method from the
 * map and its descriptor. */
#define OP_FUNCTION_(upper, lower)                                                                \
  static PyObject *m_op_##lower(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,   \
                                PyObject *kwnames) {                                            \
    return op_method(self, APX_OP_##upper, args, nargs, kwnames, NULL);                         \
  }
APX_OP_MAP(OP_FUNCTION_)
#undef OP_FUNCTION_

static const PyCFunction op_method_functions[APX_OP_COUNT] = {
#define OP_ENTRY_(upper, lower) [APX_OP_##upper] = (PyCFunction)(void (*)(void))m_op_##lower,
    APX_OP_MAP(OP_ENTRY_)
#undef OP_ENTRY_
};

/* The module functions: apexx.NAME(...) is ctx.NAME(...) on
 * apexx.default_context(), one C function per op id as for the methods. */
#define MODULE_FUNCTION_(upper, lower)                                                            \
  static PyObject *f_op_##lower(PyObject *module, PyObject *const *args, Py_ssize_t nargs,      \
                                PyObject *kwnames) {                                            \
    (void)module;                                                                               \
    ContextObject *ctx = apxpy_default_context();                                               \
    PyObject *r = ctx ? op_method(ctx, APX_OP_##upper, args, nargs, kwnames, NULL) : NULL;      \
    Py_XDECREF(ctx);                                                                            \
    return r;                                                                                   \
  }
APX_OP_MAP(MODULE_FUNCTION_)
#undef MODULE_FUNCTION_

static const PyCFunction op_module_functions[APX_OP_COUNT] = {
#define OP_ENTRY_(upper, lower) [APX_OP_##upper] = (PyCFunction)(void (*)(void))f_op_##lower,
    APX_OP_MAP(OP_ENTRY_)
#undef OP_ENTRY_
};

static PyObject *f_tile_order(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames) {
  (void)module;
  ContextObject *ctx = apxpy_default_context();
  PyObject *r = ctx ? tile_order_method(ctx, args, nargs, kwnames, NULL) : NULL;
  Py_XDECREF(ctx);
  return r;
}

static const char tile_order_function_doc[] =
    TILE_ORDER_DOC_("$module", "\n(On apexx.default_context().)");

/* ctx._time_c(op, n, *args, **kwargs): the seconds a call of op with those
 * arguments takes looped n times in C (the binding's work done once): the
 * baseline of a Python call's cost (bench/python_percall.py). */
PyObject *apxpy_time_c(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                       PyObject *kwnames) {
  if (nargs < 2 || !PyUnicode_Check(args[0]) || !PyLong_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "_time_c(op, n, *args, **kwargs): op an op name, n an int");
    return NULL;
  }
  const char *name = PyUnicode_AsUTF8(args[0]);
  if (!name) return NULL;
  const long long n = PyLong_AsLongLong(args[1]);
  if (n == -1 && PyErr_Occurred()) return NULL;
  if (n < 1) return apxpy_raise_invalid("_time_c: n = [%lld] is not a positive count", n);
  const int op = apx_op_from_name(name);
  if (op < 0 || op >= APX_OP_COUNT || !op_entries[op].d)
    return apxpy_raise_invalid("_time_c: op = [%s] is not an apexx op", name);
  double secs = 0.0;
  PyObject *r = op_method_timed(self, (apx_op_id)op, args + 2, nargs - 2, kwnames, NULL,
                                (int64_t)n, &secs);
  if (!r) return NULL;
  Py_DECREF(r);
  return PyFloat_FromDouble(secs);
}

PyObject *apxpy_explain(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames) {
  if (nargs < 1 || !PyUnicode_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "explain(op, *args, **kwargs): op must be an op name");
    return NULL;
  }
  const char *name = PyUnicode_AsUTF8(args[0]);
  if (!name) return NULL;
  PyObject *explained = NULL;
  int op = apx_op_from_name(name);
  if (op >= 0 && op < APX_OP_COUNT && op_entries[op].d)
    return op_method(self, (apx_op_id)op, args + 1, nargs - 1, kwnames, &explained);
  if (strcmp(name, "tile_order") == 0)
    return tile_order_method(self, args + 1, nargs - 1, kwnames, &explained);
  return apxpy_raise_invalid("explain: op = [%s] is not an apexx op", name);
}

/* ---- docstrings from the descriptors ------------------------------------------ */
typedef struct {
  char *buf;
  size_t len, cap;
} text;

static void appendf(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void appendf(text *t, const char *fmt, ...) {
  if (!t->buf) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    char *grown = PyMem_RawRealloc(t->buf, t->cap * 2 + (size_t)n);
    if (!grown) {
      PyMem_RawFree(t->buf);
      t->buf = NULL;
      return;
    }
    t->buf = grown;
    t->cap = t->cap * 2 + (size_t)n;
  }
}

/* An argument in the signature, with its ARGS_INIT default. A Python
 * signature has no required parameter after one with a default: a required
 * tensor or handle after one shows its ARGS_INIT (None), and a call
 * without it is refused naming it. *defaulted: whether one came before. */
static void signature_arg(text *t, const apx_op_desc *d, const apx_op_arg *a, int *defaulted) {
  const char *init = (const char *)d->args_init + a->offset;
  int i;
  double x;
  int64_t v;
  appendf(t, "%s", a->name);
  if (a->kind == APX_ARG_INPUT || a->kind == APX_ARG_INDEX || a->kind == APX_ARG_HANDLE) {
    if (a->optional || *defaulted) appendf(t, "=None");
    *defaulted |= a->optional;
    return;
  }
  *defaulted = 1;
  switch (a->kind) {
  case APX_ARG_OUTPUT:
    appendf(t, "=None");
    break;
  case APX_ARG_INT64:
    memcpy(&v, init, sizeof v);
    appendf(t, "=%lld", (long long)v);
    break;
  case APX_ARG_DIM:
    memcpy(&i, init, sizeof i);
    appendf(t, "=%d", i);
    break;
  case APX_ARG_DOUBLE: {
    memcpy(&x, init, sizeof x);
    char *repr = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    appendf(t, "=%s", repr ? repr : "?");
    PyMem_Free(repr);
    break;
  }
  case APX_ARG_FLAG:
    memcpy(&i, init, sizeof i);
    appendf(t, "=%s", i ? "True" : "False");
    break;
  case APX_ARG_ENUM:
    memcpy(&i, init, sizeof i);
    appendf(t, "='%s'", i >= 0 && i < a->enum_count ? a->enum_names[i] : "?");
    break;
  case APX_ARG_RESULT:
    appendf(t, "=False");
    break;
  default:
    break;
  }
}

static const char *const dtype_class_text[] = {"any dtype", "float32|float16|bfloat16",
                                               "int32|int64"};

/* One line per tensor: its layout, dtype rule, aliasing; one per enum. */
static void argument_lines(text *t, const apx_op_desc *d) {
  for (int i = 0; i < d->arg_count; i++) {
    const apx_op_arg *a = &d->args[i];
    if (a->kind == APX_ARG_ENUM) {
      appendf(t, "\n  %s: ", a->name);
      for (int k = 0; k < a->enum_count; k++) appendf(t, "%s%s", k ? "|" : "", a->enum_names[k]);
      continue;
    }
    if (!is_tensor(a->kind)) continue;
    appendf(t, "\n  %s: %s", a->name, a->layout ? a->layout : "");
    if (a->same_dtype_as >= 0 && a->same_dtype_as < d->arg_count)
      appendf(t, ", dtype of %s", d->args[a->same_dtype_as].name);
    else if ((unsigned)a->dtypes < 3)
      appendf(t, ", %s", dtype_class_text[a->dtypes]);
    if (a->kind == APX_ARG_OUTPUT && a->alias_of >= 0 && a->alias_of < d->arg_count)
      appendf(t, "; may be %s itself", d->args[a->alias_of].name);
    if (a->optional && a->kind != APX_ARG_OUTPUT) appendf(t, "; optional");
  }
}

/* The name of the bound first parameter of a signature: preferred unless
 * the op has an argument of that name (scatter_add's self). */
static const char *bound_name(const apx_op_desc *d, const char *preferred, const char *other) {
  for (int i = 0; i < d->arg_count; i++)
    if (strcmp(d->args[i].name, preferred) == 0) return other;
  return preferred;
}

/* The docstring: "NAME($BOUND, /, args..., *, stream=None, backend=None,
 * validate=None)\n--\n\n" (CPython's __text_signature__, which
 * inspect.signature reads), what it returns, the summary, the tensors,
 * then tail; NULL when out of memory. Lives as long as the process (the
 * method table's). */
static char *op_doc(const apx_op_desc *d, const apxpy_op_extra *x, const char *bound,
                    const char *tail) {
  text t = {PyMem_RawMalloc(512), 0, 512};
  int outputs = 0, results = 0, defaulted = 0;
  appendf(&t, "%s($%s, /", d->name, bound);
  for (int i = 0; i < d->arg_count; i++) {
    appendf(&t, ", ");
    signature_arg(&t, d, &d->args[i], &defaulted);
    outputs += d->args[i].kind == APX_ARG_OUTPUT;
    results += d->args[i].kind == APX_ARG_RESULT;
  }
  for (int i = 0; x && x->keywords && x->keywords[i]; i++) appendf(&t, ", %s=None", x->keywords[i]);
  appendf(&t, ", *, stream=None, backend=None, validate=None)\n--\n\nReturns %s",
          outputs + results > 1 ? "(" : "");
  for (int i = 0, k = 0; i < d->arg_count; i++) {
    if (d->args[i].kind == APX_ARG_OUTPUT) appendf(&t, "%s%s", k++ ? ", " : "", d->args[i].name);
    if (d->args[i].kind == APX_ARG_RESULT) appendf(&t, "[, %s]", d->args[i].name);
  }
  appendf(&t, "%s.\n%s (docs/ops.md, %s).", outputs + results > 1 ? ")" : "", d->summary,
          d->name);
  argument_lines(&t, d);
  if (x && x->doc) appendf(&t, "\n%s", x->doc);
  appendf(&t, "%s", tail);
  return t.buf;
}

/* defs[0..max): one entry per op with an entry (functions[op], its
 * docstring binding preferred or other, then tail), tile_order's last;
 * returns how many, -1 with an exception. */
static int op_defs(PyMethodDef *defs, int max, const PyCFunction *functions,
                   const char *preferred, const char *other, const char *tail,
                   PyMethodDef tile_order) {
  int n = 0;
  for (int op = 0; op < APX_OP_COUNT; op++) {
    const apx_op_desc *d = op_entries[op].d;
    if (!d) continue; /* a library older than the header */
    if (n + 2 >= max) { /* room for tile_order and the sentinel */
      PyErr_SetString(PyExc_RuntimeError, "apexx: more ops than the method table holds");
      return -1;
    }
    char *doc = op_doc(d, op_entries[op].x, bound_name(d, preferred, other), tail);
    if (!doc) {
      PyErr_NoMemory();
      return -1;
    }
    defs[n++] = (PyMethodDef){d->name, functions[op], METH_FASTCALL | METH_KEYWORDS, doc};
  }
  defs[n++] = tile_order;
  return n;
}

int apxpy_op_methods(PyMethodDef *methods, int max) {
  for (int op = 0; op < APX_OP_COUNT; op++) {
    const apx_op_desc *d = apx_op_describe((apx_op_id)op);
    if (d && op_entry_init(&op_entries[op], d) < 0) return -1;
  }
  return op_defs(methods, max, op_method_functions, "self", "this", "",
                 (PyMethodDef){"tile_order", (PyCFunction)(void (*)(void))m_tile_order,
                               METH_FASTCALL | METH_KEYWORDS, tile_order_doc});
}

int apxpy_add_op_functions(PyObject *module) {
  /* PyCFunction keeps a pointer to its PyMethodDef: one per op, static */
  static PyMethodDef defs[APX_OP_COUNT + 2];
  int n = op_defs(defs, APX_OP_COUNT + 2, op_module_functions, "module", "mod",
                  "\n(On apexx.default_context().)",
                  (PyMethodDef){"tile_order", (PyCFunction)(void (*)(void))f_tile_order,
                                METH_FASTCALL | METH_KEYWORDS, tile_order_function_doc});
  if (n < 0) return -1;
  /* their __module__ is the package's: apexx.tilepack, pickled by that name */
  PyObject *package = PyUnicode_FromString("apexx");
  if (!package) return -1;
  for (int i = 0; i < n; i++) {
    PyObject *f = PyCFunction_NewEx(&defs[i], module, package);
    if (!f || PyModule_AddObject(module, defs[i].ml_name, f) < 0) {
      Py_XDECREF(f);
      Py_DECREF(package);
      return -1;
    }
  }
  Py_DECREF(package);
  return 0;
}

PyObject *apxpy_op_names(void) {
  PyObject *names = PyList_New(0);
  if (!names) return NULL;
  for (int op = 0; op < APX_OP_COUNT; op++) {
    const apx_op_desc *d = apx_op_describe((apx_op_id)op);
    PyObject *s = d ? PyUnicode_FromString(d->name) : NULL;
    if (d && (!s || PyList_Append(names, s) < 0)) {
      Py_XDECREF(s);
      Py_DECREF(names);
      return NULL;
    }
    Py_XDECREF(s);
  }
  PyObject *host = PyUnicode_FromString("tile_order");
  if (!host || PyList_Append(names, host) < 0) {
    Py_XDECREF(host);
    Py_DECREF(names);
    return NULL;
  }
  Py_DECREF(host);
  PyObject *tuple = PyList_AsTuple(names);
  Py_DECREF(names);
  return tuple;
}
