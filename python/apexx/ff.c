/* SPDX-License-Identifier: Apache-2.0 */
/* apexx._apexx: the FF model's objects. FFWeights (a handle of its
 * context, freed by close() once no call uses it) and what ff_infer's
 * method has of its own beyond its descriptor: the weights handle, the
 * tile_l1 default that follows tile_l0, and the stats (apx_ff_stats)
 * returned as a dict. */
#include "binding.h"

#include <string.h>

/* ---- FFWeights ----------------------------------------------------------- */
static void weights_release(WeightsObject *self) {
  if (self->weights) {
    ContextObject *c = self->owner;
    if (c->ctx) apx_ff_weights_free(c->ctx, self->weights);
    self->weights = NULL;
    /* a closed context goes with its last weights (its close() frees it
     * itself when it still waits for calls) */
    if (--c->live_weights == 0 && c->closing && c->calls == 0) apxpy_context_free_now(c);
  }
}

static void weights_dealloc(WeightsObject *self) {
  weights_release(self);
  Py_XDECREF(self->owner);
  PyObject_Free(self);
}

static PyObject *w_close(WeightsObject *self, PyObject *unused) {
  (void)unused;
  if (!self->weights) Py_RETURN_NONE;
  int was_closing = self->closing;
  self->closing = 1; /* ff_infer refuses the weights from here */
  if (apxpy_calls_wait(&self->calls, "FFWeights.close") < 0) {
    self->closing = was_closing;
    return NULL;
  }
  weights_release(self);
  Py_RETURN_NONE;
}

static PyObject *w_save(WeightsObject *self, PyObject *arg) {
  PyObject *bytes = NULL;
  if (!PyUnicode_FSConverter(arg, &bytes)) return NULL; /* __fspath__ first */
  if (!self->weights || self->closing) {
    Py_DECREF(bytes);
    return apxpy_raise_invalid("FFWeights.save: the weights are freed");
  }
  apx_status st = apx_ff_weights_save(self->owner->ctx, self->weights, PyBytes_AS_STRING(bytes));
  Py_DECREF(bytes);
  if (st != APX_OK) return apxpy_raise_apx(st);
  Py_RETURN_NONE;
}

static PyObject *w_channels(WeightsObject *self, void *unused) {
  (void)unused;
  return PyLong_FromLongLong(apx_ff_weights_channels(self->weights));
}

static PyMethodDef weights_methods[] = {
    {"close", (PyCFunction)w_close, METH_NOARGS,
     "close($self, /)\n--\n\nFrees the weights now."},
    {"save", (PyCFunction)w_save, METH_O,
     "save($self, path, /)\n--\n\nWrites a float32 safetensors file."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef weights_getset[] = {
    {"channels", (getter)w_channels, NULL, "channel count C (0 when freed)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject apxpy_WeightsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "apexx.FFWeights",
    .tp_basicsize = sizeof(WeightsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Learned weights of the FF module (ctx.ff_weights_load / ctx.ff_weights_seeded); "
              "they belong to their context.",
    .tp_dealloc = (destructor)weights_dealloc,
    .tp_methods = weights_methods,
    .tp_getset = weights_getset,
};

PyObject *apxpy_weights_new(ContextObject *self, apx_ff_weights *w) {
  WeightsObject *o = PyObject_New(WeightsObject, &apxpy_WeightsType);
  if (!o) {
    apx_ff_weights_free(self->ctx, w);
    return NULL;
  }
  o->owner = self;
  Py_INCREF(self);
  o->weights = w;
  o->closing = 0;
  o->calls = 0;
  self->live_weights++;
  return (PyObject *)o;
}

PyObject *apxpy_ff_weights_load(ContextObject *self, PyObject *arg) {
  if (!apxpy_context_usable(self)) return NULL;
  apxpy_calls_enter(&self->calls); /* a path's __fspath__ runs inside the call */
  PyObject *bytes = NULL, *result = NULL;
  if (PyUnicode_FSConverter(arg, &bytes)) {
    apx_ff_weights *w = NULL;
    apx_status st;
    const char *path = PyBytes_AS_STRING(bytes);
    Py_BEGIN_ALLOW_THREADS st = apx_ff_weights_load(self->ctx, path, &w);
    Py_END_ALLOW_THREADS Py_DECREF(bytes);
    result = st == APX_OK ? apxpy_weights_new(self, w) : apxpy_raise_apx(st);
  }
  apxpy_calls_leave(&self->calls);
  return result;
}

PyObject *apxpy_ff_weights_seeded(ContextObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"channels", "seed", NULL};
  long long channels;
  unsigned long long seed = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "L|K:ff_weights_seeded", kwlist, &channels, &seed))
    return NULL;
  if (!apxpy_context_usable(self)) return NULL;
  apx_ff_weights *w = NULL;
  apx_status st = apx_ff_weights_seeded(self->ctx, channels, seed, &w);
  if (st != APX_OK) return apxpy_raise_apx(st);
  return apxpy_weights_new(self, w);
}

/* ---- ff_infer's own arguments ------------------------------------------------ */
static int arg_index(const apx_op_desc *d, const char *name) {
  for (int i = 0; i < d->arg_count; i++)
    if (strcmp(d->args[i].name, name) == 0) return i;
  return -1;
}

/* weights: an FFWeights of this context that is not being closed, held
 * for the call (FFWeights.close waits for it). */
static int weights_handle(apxpy_call *cs, const apx_op_arg *arg, PyObject *obj, void *field) {
  if (!obj || !PyObject_TypeCheck(obj, &apxpy_WeightsType)) {
    PyErr_Format(PyExc_TypeError,
                 "%s: %s must be an apexx.FFWeights (ctx.ff_weights_load / "
                 "ctx.ff_weights_seeded)",
                 cs->op, arg->name);
    return -1;
  }
  WeightsObject *w = (WeightsObject *)obj;
  if (!w->weights || w->closing || w->owner != cs->self) {
    apxpy_raise_invalid("%s: %s are %s", cs->op, arg->name,
                        w->owner != cs->self ? "of another context"
                        : w->weights         ? "being closed"
                                             : "freed");
    return -1;
  }
  if (apxpy_hold_handle(cs, obj, &w->calls) < 0) return -1;
  *(apx_ff_weights **)field = w->weights;
  return 0;
}

/* tile_l0 given without tile_l1: tile_l1 = tile_l0 / 2 (the only valid
 * value, docs/ops.md, ff_infer). */
static int tile_l1_default(apxpy_call *cs, PyObject *const *slots, void *args) {
  static int l0 = -2, l1 = -2; /* their slots, found on the first call */
  if (l0 == -2) {
    const apx_op_desc *d = apx_op_describe(cs->op_id);
    l0 = arg_index(d, "tile_l0");
    l1 = arg_index(d, "tile_l1");
  }
  apx_ff_infer_args *a = args;
  if (l0 >= 0 && l1 >= 0 && slots[l1] == NULL && slots[l0] != NULL) a->tile_l1 = a->tile_l0 / 2;
  return 0;
}

/* The stats of B frames in one block: selected_l0, selected_l1 [B], the two
 * budgets spent [B] (doubles), the ids [B,kmax_l0] and [B,kmax_l1]. */
typedef struct {
  apx_ff_stats stats;
  int64_t data[];
} stats_block;

static int stats_prepare(apxpy_call *cs, void *args, const int *wanted, void **state) {
  apx_ff_infer_args *a = args;
  (void)wanted; /* stats is the op's one result */
  int64_t rows = a->dense && a->dense->ndim > 0 ? a->dense->shape[0] : 0;
  int64_t k0 = a->kmax_l0 > 0 ? a->kmax_l0 : 0, k1 = a->kmax_l1 > 0 ? a->kmax_l1 : 0;
  if (rows <= 0) return 0;
  /* the stats are sized by kmax: the core checks it against the tiles
   * first (kmax_l0 = 2^40 is its message, not a MemoryError) */
  if (apxpy_validate_early(cs) < 0) return -1;
  size_t per_row = 4, n = 0;
  if (__builtin_add_overflow(per_row, (size_t)k0, &per_row) ||
      __builtin_add_overflow(per_row, (size_t)k1, &per_row) ||
      __builtin_mul_overflow((size_t)rows, per_row, &n) || n > (size_t)PY_SSIZE_T_MAX / 16) {
    apxpy_raise_status(APX_ERR_NO_MEMORY, "ff_infer: the stats of kmax_l0, kmax_l1 do not fit "
                                          "memory");
    return -1;
  }
  stats_block *block = PyMem_Calloc(1, sizeof(stats_block) + n * sizeof(int64_t));
  if (!block) {
    PyErr_NoMemory();
    return -1;
  }
  size_t b = (size_t)rows;
  apx_ff_stats *st = &block->stats;
  st->selected_l0 = block->data;
  st->selected_l1 = block->data + b;
  st->budget_b1_spent = (double *)(block->data + 2 * b);
  st->budget_b2_spent = (double *)(block->data + 3 * b);
  st->l0_ids = block->data + 4 * b;
  st->l1_ids = block->data + 4 * b + b * (size_t)k0;
  a->stats = st;
  *state = block;
  return 0;
}

/* The ids of a row up to the first -1. */
static PyObject *id_list(const int64_t *ids, int64_t count) {
  PyObject *v = PyList_New(0);
  for (int64_t j = 0; v && j < count && ids[j] >= 0; j++) {
    PyObject *x = PyLong_FromLongLong(ids[j]);
    if (!x || PyList_Append(v, x) < 0) Py_CLEAR(v);
    Py_XDECREF(x);
  }
  return v;
}

/* stats: {selected_l0, selected_l1, budget_b1_spent, budget_b2_spent:
 * [B], l0_ids, l1_ids: [B] lists}; empty lists for B = 0. */
static PyObject *stats_value(const void *args, int arg, void *state) {
  static const char *const keys[6] = {"selected_l0",     "selected_l1", "budget_b1_spent",
                                      "budget_b2_spent", "l0_ids",      "l1_ids"};
  const apx_ff_infer_args *a = args;
  const apx_ff_stats *st = state ? &((const stats_block *)state)->stats : NULL;
  int64_t rows = st ? a->dense->shape[0] : 0;
  int64_t k0 = a->kmax_l0 > 0 ? a->kmax_l0 : 0, k1 = a->kmax_l1 > 0 ? a->kmax_l1 : 0;
  (void)arg;
  PyObject *stats = PyDict_New();
  for (int k = 0; stats && k < 6; k++) {
    PyObject *l = PyList_New(rows);
    for (int64_t b = 0; l && b < rows; b++) {
      PyObject *v = k == 0   ? PyLong_FromLongLong(st->selected_l0[b])
                    : k == 1 ? PyLong_FromLongLong(st->selected_l1[b])
                    : k == 2 ? PyFloat_FromDouble(st->budget_b1_spent[b])
                    : k == 3 ? PyFloat_FromDouble(st->budget_b2_spent[b])
                    : k == 4 ? id_list(st->l0_ids + b * k0, k0)
                             : id_list(st->l1_ids + b * k1, k1);
      if (!v) Py_CLEAR(l);
      else PyList_SET_ITEM(l, b, v);
    }
    if (!l || PyDict_SetItemString(stats, keys[k], l) < 0) Py_CLEAR(stats);
    Py_XDECREF(l);
  }
  return stats;
}

const apxpy_op_extra apxpy_ff_infer_extra = {
    .op = "ff_infer",
    .doc = "weights: an apexx.FFWeights (ctx.ff_weights_load / ctx.ff_weights_seeded); "
           "tile_l1 defaults to tile_l0 / 2; stats=True adds a dict of the routing "
           "(docs/ff_infer.md).",
    .options_given = tile_l1_default,
    .handle = weights_handle,
    .prepare_results = stats_prepare,
    .result_value = stats_value,
    .free_results = PyMem_Free,
};
