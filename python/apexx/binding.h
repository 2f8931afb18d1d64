/* SPDX-License-Identifier: Apache-2.0 */
/* apexx._apexx, the CPython binding of libapexx: what its files share.
 *
 * A Context wraps one apx_context. Every op is a METH_FASTCALL method that
 * parses its arguments by the names of the op's descriptor
 * (apx_op_describe: docs/architecture.md, The op table), turns each tensor
 * argument into an apx_tensor (buffer protocol for host buffers such as
 * NumPy, a plain host torch.Tensor's own attributes, DLPack for everything
 * else: torch on CUDA, CuPy, JAX), allocates missing
 * outputs with the input's library (a hook in apexx/__init__.py) in the
 * shape the descriptor gives, runs the op through apx_op_run and returns
 * the outputs. Tensors are borrowed for the call only: the DLPack capsules
 * and buffer views are released before the method returns, and the
 * caller's objects keep the memory alive. Nothing is copied: an input that
 * is not dense row-major is rejected. Errors are the exception classes that
 * apexx/__init__.py registers (ApexxError and one subclass per status).
 *
 * The files, by job:
 *   _apexx.c   the module: its functions, the hooks, init
 *   errors.c   library text as str, exceptions by status
 *   call.c     one call's state: arguments by name, options, calls in
 *              flight, running an op
 *   tensors.c  tensors: buffer protocol, DLPack, streams, outputs
 *   ops.c      the op methods, derived from the descriptors; tile_order
 *   context.c  the Context type
 *   ff.c       FFWeights and ff_infer's own arguments (weights, stats)
 * Names shared between files start with apxpy_. */
#ifndef APEXX_PY_BINDING_H
#define APEXX_PY_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <apexx/apexx.h>
#include <stddef.h>
#include <stdint.h>

/* ---- hooks and exception classes set by apexx/__init__.py ---------------- */
#define APXPY_COUNT_STATUS_(name, value, text) +1
enum { APXPY_STATUS_COUNT = 0 APX_STATUS_MAP(APXPY_COUNT_STATUS_) };
#undef APXPY_COUNT_STATUS_
extern PyObject *apxpy_error_classes[APXPY_STATUS_COUNT]; /* index = status */
extern PyObject *apxpy_alloc_hook;  /* _alloc(like, shape, dtype_name) -> tensor */
extern PyObject *apxpy_stream_hook; /* _current_stream(obj, device_id) -> int */
extern PyObject *apxpy_default_context_hook; /* default_context() -> Context */
/* interned attribute names */
extern PyObject *apxpy_str_dlpack, *apxpy_str_dlpack_device, *apxpy_str_stream,
    *apxpy_str_requires_grad, *apxpy_str_detach, *apxpy_str_device, *apxpy_str_data_ptr;

extern const char *const apxpy_dtype_names[]; /* by apx_dtype: "float32", ... */

/* A host call whose tensors hold more bytes than this releases the GIL. */
#define APXPY_RELEASE_GIL_BYTES (256 * 1024)
#define APXPY_MAX_HELD 16   /* tensors in one call */
#define APXPY_MAX_HANDLES 4 /* handle objects in one call */
#define APXPY_MAX_ARGS 32   /* an op's arguments, its extra keywords and the common ones */
#define APXPY_COMMON_OPTS 3 /* stream, backend, validate */

/* ---- errors.c ------------------------------------------------------------ */
/* A str of library text: UTF-8, any other byte as a \xNN escape; NULL
 * reads as "". */
PyObject *apxpy_text_of(const char *s);
/* Raise the class of status st with message; NULL. */
PyObject *apxpy_raise_status(apx_status st, const char *message);
/* Raise st with apx_last_error(); NULL. */
PyObject *apxpy_raise_apx(apx_status st);
/* apexx.InvalidArgument (a ValueError) with a formatted message; NULL. */
PyObject *apxpy_raise_invalid(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define apxpy_invalid_tensor(...) (apxpy_raise_invalid(__VA_ARGS__), (const apx_tensor *)NULL)

/* ---- objects ----------------------------------------------------------- */
typedef struct {
  PyObject_HEAD apx_context *ctx;
  int live_weights; /* FFWeights handles not yet freed */
  int closing;      /* close() asked: new calls are refused; the context is
                       freed once its calls and its weights are gone */
  int calls;        /* calls in flight (GIL held to change it) */
} ContextObject;

typedef struct {
  PyObject_HEAD ContextObject *owner;
  apx_ff_weights *weights;
  int closing; /* close() waits for calls: new ones are refused */
  int calls;   /* ff_infer calls in flight with these weights */
} WeightsObject;

extern PyTypeObject apxpy_ContextType;
extern PyTypeObject apxpy_WeightsType;

/* ---- one call's state: borrowed tensors, handles, stream ----------------- */
typedef struct {
  apx_tensor t;
  PyObject *obj;     /* owned: the tensor object the data belongs to */
  PyObject *capsule; /* owned DLPack capsule, or NULL */
  Py_buffer view;
  int has_view;
  void *packed; /* PyMem_Raw: an index's contiguous copy (APXPY_INDEX), or NULL */
} apxpy_held_tensor;

typedef struct {
  PyObject *obj; /* owned */
  int *calls;    /* the object's count of calls in flight, counted in */
} apxpy_held_handle;

typedef struct {
  ContextObject *self;
  const char *op;
  int entered;     /* counted in self->calls */
  int explaining;  /* ctx.explain: nothing runs */
  int64_t time_n;  /* ctx._time_c: the op runs time_n more times in C, timed */
  double time_s;   /* ... their seconds per call */
  apx_op_id op_id; /* with args: the call to validate early */
  const void *args;
  PyObject *stream_obj;    /* stream= as given (borrowed) or NULL */
  int stream_known;        /* call.stream resolved */
  PyObject *dlpack_stream; /* owned int for __dlpack__(stream=) */
  PyObject *torch_device;  /* owned: the device of the outputs torch.empty makes */
  apx_call call;
  int eager;
  size_t host_bytes;
  int nhandles;
  apxpy_held_handle handles[APXPY_MAX_HANDLES];
  int nheld;
  apxpy_held_tensor held[APXPY_MAX_HELD];
} apxpy_call;

/* ---- call.c -------------------------------------------------------------- */
/* Calls in flight on an object (a Context, an FFWeights): counted in and
 * out with the GIL held; close() waits for 0. */
void apxpy_calls_enter(int *count);
void apxpy_calls_leave(int *count);
/* Wait until *count is 0 (the GIL released meanwhile); -1 with
 * InvalidArgument raised when this thread has a call in flight itself. */
int apxpy_calls_wait(const int *count, const char *who);
/* 1 when the context takes calls, else 0 with InvalidArgument raised. */
int apxpy_context_usable(ContextObject *self);

/* A method's keywords: its argument names, then stream, backend, validate,
 * as str objects interned once, so that the keywords of a call (which
 * CPython interns at the call site) are found by identity, by value
 * otherwise. */
typedef struct {
  int n; /* the method's own names, before the common ones */
  const char *const *names;
  PyObject *keys[APXPY_MAX_ARGS];
} apxpy_keywords;
/* names (NULL-terminated, static) into kw; 0, or -1 with an exception. */
int apxpy_keywords_init(apxpy_keywords *kw, const char *op, const char *const *names);
/* Sort FASTCALL arguments into slots by kw's names (absent slots NULL);
 * *nslots = kw->n. */
int apxpy_parse_args(const char *op, const apxpy_keywords *kw, PyObject *const *args,
                     Py_ssize_t nargs, PyObject *kwnames, PyObject **slots, int *nslots);
/* Start a call of op on self: counts it in, reads slots[n..n+2] (stream,
 * backend, validate). apxpy_call_release undoes it, also after a failure. */
int apxpy_call_setup(apxpy_call *cs, ContextObject *self, const char *op, PyObject **slots,
                     int n);
void apxpy_call_release(apxpy_call *cs);
/* Hold a handle object for the call: *calls counted in until release. */
int apxpy_hold_handle(apxpy_call *cs, PyObject *obj, int *calls);

/* Scalar arguments: o NULL (absent) leaves *out as it is. */
int apxpy_int_arg(apxpy_call *cs, PyObject *o, const char *name, int64_t *out);
int apxpy_dim_arg(apxpy_call *cs, PyObject *o, const char *name, int *out);
int apxpy_float_arg(apxpy_call *cs, PyObject *o, const char *name, double *out);
int apxpy_bool_arg(PyObject *o, int *out);
/* An enum given as its name (case-insensitive) or its integer value. */
int apxpy_enum_arg(apxpy_call *cs, PyObject *o, const char *name, const char *const *names,
                   int count, int *out);
/* A shape given as a sequence of ints >= 0. */
int apxpy_shape_arg(apxpy_call *cs, PyObject *o, const char *name, int *ndim, int64_t *shape);

/* The core's verdict on cs->args before anything is allocated: its
 * APX_ERR_INVALID_ARG raised and -1; 0 when it accepts them. */
int apxpy_validate_early(apxpy_call *cs);
/* Run cs->op_id on cs->args (or explain it into *explained). */
int apxpy_run_op(apxpy_call *cs, PyObject **explained);
/* ctx.explain's dict: {'backend', 'passed_over': [{backend, code, reason}]}. */
PyObject *apxpy_explanation_dict(const apx_explanation *ex);

/* ---- tensors.c ----------------------------------------------------------- */
/* An integer stream pointer from an int or a stream object. */
int apxpy_stream_from_object(PyObject *o, uintptr_t *out);
/* Resolve the call's stream (stream=, else the hook's current stream). */
int apxpy_resolve_stream(apxpy_call *cs, PyObject *obj, int device_id);
/* How apxpy_acquire reads a tensor: an input; an output (written: a
 * read-only one is rejected); an index input, only read, which may be
 * strided (an expanded index, stride 0): a host one is passed as a
 * contiguous copy the call owns, a CUDA torch tensor as its .contiguous(),
 * never a copy of a data tensor. */
enum { APXPY_INPUT = 0, APXPY_OUTPUT = 1, APXPY_INDEX = 2 };
/* Describe obj (argument name of cs->op) as an apx_tensor held for the
 * call, read as mode says (APXPY_INPUT, _OUTPUT or _INDEX). */
const apx_tensor *apxpy_acquire(apxpy_call *cs, PyObject *obj, const char *name, int mode);
/* A required tensor (TypeError when absent or None). */
const apx_tensor *apxpy_req_tensor(apxpy_call *cs, PyObject *o, const char *name);
/* The output name: the caller's tensor o, or a new one of ndim/shape/dtype
 * made by the library of like (its tensor like_t; Py_None and NULL when
 * the call has no input) on its device, stored in *slot; *result receives
 * a new reference to the object. */
const apx_tensor *apxpy_out_tensor(apxpy_call *cs, const apx_tensor **slot, PyObject *o,
                                   const char *name, PyObject *like, const apx_tensor *like_t,
                                   int ndim, const int64_t *shape, apx_dtype dtype,
                                   PyObject **result);

/* ---- ops.c ---------------------------------------------------------------- */
/* Op-specific parts of an op's Python method, beyond its descriptor. */
typedef struct apxpy_op_extra {
  const char *op;
  /* Python-only keywords after the descriptor's arguments (NULL-terminated;
   * NULL: none); their slots follow the descriptor's. */
  const char *const *keywords;
  /* Text appended to the generated docstring, or NULL. */
  const char *doc;
  /* After the options are set: Python defaults of the op (NULL: none). */
  int (*options_given)(apxpy_call *cs, PyObject *const *slots, void *args);
  /* A handle argument's object (NULL: handles are refused). */
  int (*handle)(apxpy_call *cs, const apx_op_arg *arg, PyObject *obj, void *field);
  /* The shape of an output the descriptor leaves to the caller (NULL: the
   * caller must pass the output). */
  int (*output_shape)(apxpy_call *cs, PyObject *const *slots, int arg, int *ndim,
                      int64_t shape[APX_MAX_DIMS]);
  /* RESULT arguments: wanted[i] set for the flags given true; point args'
   * fields at storage in *state (freed by free_results). */
  int (*prepare_results)(apxpy_call *cs, void *args, const int *wanted, void **state);
  PyObject *(*result_value)(const void *args, int arg, void *state);
  void (*free_results)(void *state);
} apxpy_op_extra;

/* ff.c's op extras for ff_infer. */
extern const apxpy_op_extra apxpy_ff_infer_extra;

/* The op methods of Context (every descriptor's op and tile_order) into
 * methods[0..max); returns how many, -1 with an exception. */
int apxpy_op_methods(PyMethodDef *methods, int max);
/* The module functions apexx.NAME (ctx.NAME on apexx.default_context(),
 * the same names and signatures) added to module; after apxpy_op_methods.
 * 0, or -1 with an exception. */
int apxpy_add_op_functions(PyObject *module);
/* A tuple of the op method names, in id order, tile_order last. */
PyObject *apxpy_op_names(void);
/* ctx._time_c(op, n, *args, **kwargs): op looped n times in C, timed. */
PyObject *apxpy_time_c(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                       PyObject *kwnames);
/* ctx.explain(op, *args, **kwargs). */
PyObject *apxpy_explain(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames);

/* ---- context.c, ff.c --------------------------------------------------------- */
/* Fill apxpy_ContextType's methods (the context's own and the ops'). */
int apxpy_context_type_init(void);
void apxpy_context_free_now(ContextObject *self);
/* apexx.default_context() (a new reference), NULL with an exception. */
ContextObject *apxpy_default_context(void);
PyObject *apxpy_weights_new(ContextObject *self, apx_ff_weights *w);
PyObject *apxpy_ff_weights_load(ContextObject *self, PyObject *arg);
PyObject *apxpy_ff_weights_seeded(ContextObject *self, PyObject *args, PyObject *kw);

#endif
