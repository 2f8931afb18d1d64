/* apexx._apexx: the CPython binding of libapexx.
 *
 * A Context wraps one apx_context. Every op is a METH_FASTCALL method that
 * parses its arguments by the C API's names, turns each tensor argument
 * into an apx_tensor (buffer protocol for host buffers such as NumPy,
 * DLPack for everything else: torch, CuPy, JAX), allocates missing outputs
 * with the input's library (a hook in apexx/__init__.py), calls the op and
 * returns the outputs. Tensors are borrowed for the call only: the DLPack
 * capsules and buffer views are released before the method returns, and
 * the caller's objects keep the memory alive. Nothing is copied: an input
 * that is not dense row-major is rejected. Errors are the exception classes
 * that apexx/__init__.py registers (ApexxError and one subclass per status).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <apexx/apexx.h>
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

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* ---- hooks and exception classes set by apexx/__init__.py ---------------- */
#define COUNT_STATUS_(name, value, text) +1
enum { STATUS_COUNT = 0 APX_STATUS_MAP(COUNT_STATUS_) };
#undef COUNT_STATUS_
static PyObject *g_error_classes[STATUS_COUNT]; /* index = status */
static PyObject *g_alloc_hook;  /* _alloc(like, shape, dtype_name) -> tensor */
static PyObject *g_stream_hook; /* _current_stream(obj, device_id) -> int */
static PyObject *g_str_dlpack, *g_str_dlpack_device, *g_str_stream, *g_str_requires_grad,
    *g_str_detach;
/* torch, found lazily in sys.modules: Tensor type and torch._C._to_dlpack */
static PyTypeObject *g_torch_tensor;
static PyObject *g_torch_to_dlpack;

/* A host call whose tensors hold more bytes than this releases the GIL. */
#define RELEASE_GIL_BYTES (256 * 1024)
#define MAX_HELD 16

static const char *const dtype_names[] = {"float32", "float16", "bfloat16", "int32", "int64"};

/* ---- text from the library ------------------------------------------------- */
/* A str of library text (messages, paths, names from files): UTF-8, with
 * any other byte as a \xNN escape, so that no text raises
 * UnicodeDecodeError (a Latin-1 path, a tensor name from a file, a message
 * cut inside a character). NULL reads as "". */
static PyObject *text_of(const char *s) {
  if (!s) s = "";
  return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "backslashreplace");
}

/* ---- errors ---------------------------------------------------------------- */
static PyObject *raise_status(apx_status st, const char *message) {
  PyObject *cls = ((int)st > 0 && (int)st < STATUS_COUNT && g_error_classes[st])
                      ? g_error_classes[st]
                      : (g_error_classes[0] ? g_error_classes[0] : PyExc_RuntimeError);
  PyObject *text = text_of(message);
  if (!text) return NULL;
  PyObject *exc = PyObject_CallFunction(cls, "iO", (int)st, text);
  Py_DECREF(text);
  if (exc) {
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
  return NULL;
}

static PyObject *raise_apx(apx_status st) { return raise_status(st, apx_last_error()); }

/* apexx.InvalidArgument (a ValueError) with a formatted message. */
static PyObject *raise_invalid(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (!g_error_classes[APX_ERR_INVALID_ARG]) {
    PyErr_SetString(PyExc_ValueError, buf);
    return NULL;
  }
  return raise_status(APX_ERR_INVALID_ARG, buf);
}

/* raise_invalid for functions that return a tensor pointer */
#define invalid_tensor(...) (raise_invalid(__VA_ARGS__), (const apx_tensor *)NULL)

/* ---- objects ------------------------------------------------------------- */
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

static PyTypeObject ContextType;
static PyTypeObject WeightsType;

static int context_usable(ContextObject *self) {
  if (self->ctx && !self->closing) return 1;
  raise_invalid("apexx: the context is closed");
  return 0;
}

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

static void calls_enter(int *count) {
  (*count)++;
  g_thread_calls++;
}

static void calls_leave(int *count) {
  g_thread_calls--;
  if (--*count == 0) {
    pthread_mutex_lock(&g_calls_mutex);
    g_calls_generation++;
    pthread_cond_broadcast(&g_calls_ended);
    pthread_mutex_unlock(&g_calls_mutex);
  }
}

/* Wait until *count is 0 (the GIL released meanwhile); -1 with
 * InvalidArgument raised when this thread has a call in flight itself. */
static int calls_wait(const int *count, const char *who) {
  while (*count > 0) {
    if (g_thread_calls > 0) {
      raise_invalid("%s: called inside an apexx call on this thread (a callback) while [%d] "
                    "call(s) use the object: close it after the call returns",
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

/* ---- one call's state: borrowed tensors, stream ---------------------------- */
typedef struct {
  apx_tensor t;
  PyObject *obj;     /* owned: the tensor object the data belongs to */
  PyObject *capsule; /* owned DLPack capsule, or NULL */
  Py_buffer view;
  int has_view;
} held_tensor;

typedef struct {
  ContextObject *self;
  const char *op;
  int entered;                /* counted in self->calls */
  WeightsObject *weights_obj; /* owned, counted in its calls (ff_infer) */
  apx_op_id op_id;            /* with args: the call to validate early */
  const void *args;
  PyObject *stream_obj; /* stream= as given (borrowed) or NULL */
  int stream_known;     /* call.stream resolved */
  PyObject *dlpack_stream; /* owned int for __dlpack__(stream=) */
  apx_call call;
  int eager;
  size_t host_bytes;
  int nheld;
  held_tensor held[MAX_HELD];
} call_state;

static void call_release(call_state *cs) {
  for (int i = 0; i < cs->nheld; i++) {
    held_tensor *h = &cs->held[i];
    if (h->has_view) PyBuffer_Release(&h->view);
    Py_XDECREF(h->capsule);
    Py_XDECREF(h->obj);
  }
  cs->nheld = 0;
  Py_CLEAR(cs->dlpack_stream);
  if (cs->weights_obj) {
    calls_leave(&cs->weights_obj->calls);
    Py_CLEAR(cs->weights_obj);
  }
  if (cs->entered) {
    cs->entered = 0;
    calls_leave(&cs->self->calls);
  }
}

/* An integer stream pointer from an int, or an object with .cuda_stream
 * (torch.cuda.Stream) or .ptr (cupy.cuda.Stream). */
static int stream_from_object(PyObject *o, uintptr_t *out) {
  PyObject *v = NULL;
  if (PyLong_Check(o)) {
    v = o;
    Py_INCREF(v);
  } else if (PyObject_HasAttrString(o, "cuda_stream")) {
    v = PyObject_GetAttrString(o, "cuda_stream");
  } else if (PyObject_HasAttrString(o, "ptr")) {
    v = PyObject_GetAttrString(o, "ptr");
  } else {
    PyErr_Format(PyExc_TypeError,
                 "stream must be an int (cudaStream_t), a torch.cuda.Stream or a "
                 "cupy.cuda.Stream, not %.100s",
                 Py_TYPE(o)->tp_name);
    return -1;
  }
  if (!v) return -1;
  unsigned long long p = PyLong_AsUnsignedLongLong(v);
  Py_DECREF(v);
  if (p == (unsigned long long)-1 && PyErr_Occurred()) return -1;
  *out = (uintptr_t)p;
  return 0;
}

/* Resolve the call's stream the first time a CUDA tensor is seen: stream=
 * if given, else the current stream of the tensor's library (hook). */
static int resolve_stream(call_state *cs, PyObject *obj, int device_id) {
  if (cs->stream_known) return 0;
  uintptr_t s = 0;
  if (cs->stream_obj) {
    if (stream_from_object(cs->stream_obj, &s) < 0) return -1;
  } else if (g_stream_hook) {
    PyObject *r = PyObject_CallFunction(g_stream_hook, "Oi", obj, device_id);
    if (!r) return -1;
    if (r != Py_None) {
      int rc = stream_from_object(r, &s);
      Py_DECREF(r);
      if (rc < 0) return -1;
    } else {
      Py_DECREF(r);
    }
  }
  cs->call.stream = (void *)s;
  /* DLPack: 0 is ambiguous for CUDA; 1 names the legacy default stream */
  cs->dlpack_stream = PyLong_FromUnsignedLongLong(s ? (unsigned long long)s : 1ULL);
  if (!cs->dlpack_stream) return -1;
  cs->stream_known = 1;
  return 0;
}

static int is_torch_tensor(PyObject *o) {
  if (!g_torch_tensor) {
    PyObject *modules = PyImport_GetModuleDict(); /* borrowed */
    PyObject *t = modules ? PyDict_GetItemString(modules, "torch") : NULL;
    if (!t) return 0;
    PyObject *tensor = PyObject_GetAttrString(t, "Tensor");
    PyObject *c = PyObject_GetAttrString(t, "_C");
    PyObject *fn = c ? PyObject_GetAttrString(c, "_to_dlpack") : NULL;
    Py_XDECREF(c);
    PyErr_Clear();
    if (!tensor || !PyType_Check(tensor)) {
      Py_XDECREF(tensor);
      Py_XDECREF(fn);
      return 0;
    }
    g_torch_tensor = (PyTypeObject *)tensor;
    g_torch_to_dlpack = fn; /* may be NULL: __dlpack__ then */
  }
  return PyObject_TypeCheck(o, g_torch_tensor);
}

/* Row-major contiguity of a DLTensor (NULL strides = contiguous; dims of
 * size 1 may carry any stride). */
static int dl_contiguous(const DLTensor *dl) {
  if (!dl->strides) return 1;
  int64_t expected = 1;
  for (int i = dl->ndim - 1; i >= 0; i--) {
    if (dl->shape[i] == 0) return 1;
    if (dl->shape[i] != 1 && dl->strides[i] != expected) return 0;
    expected *= dl->shape[i];
  }
  return 1;
}

static int dl_dtype(DLDataType t, apx_dtype *out) {
  if (t.lanes != 1) return 0;
  if (t.code == kDLFloat && t.bits == 32) *out = APX_DTYPE_F32;
  else if (t.code == kDLFloat && t.bits == 16) *out = APX_DTYPE_F16;
  else if (t.code == kDLBfloat && t.bits == 16) *out = APX_DTYPE_BF16;
  else if (t.code == kDLInt && t.bits == 32) *out = APX_DTYPE_I32;
  else if (t.code == kDLInt && t.bits == 64) *out = APX_DTYPE_I64;
  else return 0;
  return 1;
}

static void dl_dtype_text(DLDataType t, char *buf, size_t n) {
  const char *code = t.code == kDLInt     ? "int"
                     : t.code == kDLUInt  ? "uint"
                     : t.code == kDLFloat ? "float"
                     : t.code == kDLBfloat ? "bfloat"
                                           : "code";
  if (t.lanes != 1)
    snprintf(buf, n, "%s%u x%u", code, (unsigned)t.bits, (unsigned)t.lanes);
  else
    snprintf(buf, n, "%s%u", code, (unsigned)t.bits);
}

/* The buffer protocol's format of a host array: f32, f16, i32, i64. */
static int buffer_dtype(const Py_buffer *v, apx_dtype *out) {
  const char *f = v->format ? v->format : "B";
  if (*f == '<' || *f == '=' || *f == '@') f++;
  if (f[0] == '\0' || f[1] != '\0') return 0;
  switch (f[0]) {
  case 'f': if (v->itemsize == 4) { *out = APX_DTYPE_F32; return 1; } return 0;
  case 'e': if (v->itemsize == 2) { *out = APX_DTYPE_F16; return 1; } return 0;
  case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
    if (v->itemsize == 4) { *out = APX_DTYPE_I32; return 1; }
    if (v->itemsize == 8) { *out = APX_DTYPE_I64; return 1; }
    return 0;
  default: return 0;
  }
}

/* A multi-byte format in the other byte order than the machine's ('>f' on
 * a little-endian host). */
static int buffer_foreign_order(const Py_buffer *v) {
  const char *f = v->format;
  if (!f || v->itemsize < 2) return 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return *f == '<';
#else
  return *f == '>' || *f == '!';
#endif
}

/* NumPy's name of a buffer format, for messages. */
static const char *buffer_format_text(const Py_buffer *v) {
  const char *f = v->format ? v->format : "B";
  if (*f == '<' || *f == '=' || *f == '@' || *f == '>' || *f == '!') f++;
  if (f[0] && !f[1]) switch (f[0]) {
    case 'd': return "float64";
    case 'g': return "float128";
    case '?': return "bool";
    case 'b': return "int8";
    case 'B': return "uint8";
    case 'h': return "int16";
    case 'H': return "uint16";
    case 'I': return v->itemsize == 4 ? "uint32" : "uint";
    case 'L': case 'Q': case 'N': return v->itemsize == 8 ? "uint64" : "uint";
    case 'e': return "float16";
    case 'f': return "float32";
    case 'Z': return "complex";
    default: break;
    }
  return v->format ? v->format : "B";
}

/* Describe `obj` (argument `name` of cs->op) as an apx_tensor held for the
 * call. writable: an output (a read-only host buffer is rejected). */
static const apx_tensor *acquire(call_state *cs, PyObject *obj, const char *name, int writable) {
  if (cs->nheld >= MAX_HELD) {
    PyErr_SetString(PyExc_RuntimeError, "apexx: too many tensors in one call");
    return NULL;
  }
  held_tensor *h = &cs->held[cs->nheld];
  memset(h, 0, sizeof *h);
  apx_tensor *t = &h->t;
  int torch = 0;

  /* host buffers (NumPy ...): the buffer protocol, no capsule */
  if (PyObject_CheckBuffer(obj)) { /* torch tensors have no buffer protocol */
    int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &h->view, flags) < 0) {
      if (writable && (PyErr_ExceptionMatches(PyExc_BufferError) ||
                       PyErr_ExceptionMatches(PyExc_ValueError))) {
        PyErr_Clear();
        return invalid_tensor("%s: %s is read-only", cs->op, name);
      }
      /* a device array that refuses host buffers (CuPy) goes through DLPack
       * (the error is cleared first: no attribute lookup with one pending) */
      if (!PyErr_ExceptionMatches(PyExc_TypeError)) return NULL;
      PyErr_Clear();
      if (!PyObject_HasAttr(obj, g_str_dlpack)) {
        PyErr_Format(PyExc_TypeError,
                     "%s: %s refuses the buffer protocol and has no __dlpack__ (%.100s)",
                     cs->op, name, Py_TYPE(obj)->tp_name);
        return NULL;
      }
      goto dlpack;
    }
    h->has_view = 1;
    h->obj = obj;
    Py_INCREF(obj);
    cs->nheld++; /* released by call_release from here on */
    if (buffer_foreign_order(&h->view))
      return invalid_tensor("%s: %s is stored %s-endian (buffer format [%s]); apexx reads the "
                            "machine's byte order: pass a native copy, e.g. "
                            "a.astype(a.dtype.newbyteorder('='))",
                            cs->op, name, *h->view.format == '<' ? "little" : "big",
                            h->view.format);
    if (!buffer_dtype(&h->view, &t->dtype))
      return invalid_tensor("%s: %s dtype [%s] is not one of float32, float16, bfloat16, "
                           "int32, int64",
                           cs->op, name, buffer_format_text(&h->view));
    if (h->view.ndim > APX_MAX_DIMS)
      return invalid_tensor("%s: %s has [%d] dimensions, more than %d", cs->op, name,
                           h->view.ndim, APX_MAX_DIMS);
    if (!PyBuffer_IsContiguous(&h->view, 'C'))
      return invalid_tensor("%s: %s is not contiguous (row-major, dense); pass a "
                           "contiguous copy",
                           cs->op, name);
    t->data = h->view.buf;
    t->device = APX_DEVICE_HOST;
    t->device_index = 0;
    t->ndim = h->view.ndim;
    for (int i = 0; i < t->ndim; i++) t->shape[i] = h->view.shape[i];
    cs->host_bytes += (size_t)h->view.len;
    return t;
  }

  /* DLPack */
dlpack:;
  PyObject *capsule = NULL, *detached = NULL;
  h->obj = obj; /* held from here on: call_release cleans up on error */
  Py_INCREF(obj);
  cs->nheld++;
  torch = is_torch_tensor(obj);
  if (torch) {
    /* an autograd tensor is read through a detached alias (same memory) */
    PyObject *rg = PyObject_GetAttr(obj, g_str_requires_grad);
    if (!rg) return NULL;
    int needs_detach = PyObject_IsTrue(rg);
    Py_DECREF(rg);
    if (needs_detach < 0) return NULL;
    if (needs_detach) {
      detached = PyObject_CallMethodNoArgs(obj, g_str_detach);
      if (!detached) return NULL;
      Py_SETREF(h->obj, detached);
      obj = detached;
    }
  }
  if (torch && !cs->stream_obj && g_torch_to_dlpack) {
    /* torch on its current stream: no handshake needed, skip __dlpack__'s
     * Python-level checks */
    capsule = PyObject_CallOneArg(g_torch_to_dlpack, obj);
    if (!capsule) return NULL;
  } else {
    PyObject *devt = PyObject_CallMethodNoArgs(obj, g_str_dlpack_device);
    if (!devt) {
      if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "%s: %s must be a tensor (an object with __dlpack__ or the buffer "
                     "protocol), not %.100s",
                     cs->op, name, Py_TYPE(obj)->tp_name);
      }
      return NULL;
    }
    long dev_type = -1, dev_id = 0;
    if (PyTuple_Check(devt) && PyTuple_GET_SIZE(devt) == 2) {
      dev_type = PyLong_AsLong(PyTuple_GET_ITEM(devt, 0));
      dev_id = PyLong_AsLong(PyTuple_GET_ITEM(devt, 1));
    }
    Py_DECREF(devt);
    if (PyErr_Occurred()) return NULL;
    if (dev_type == kDLCUDA) {
      if (resolve_stream(cs, obj, (int)dev_id) < 0) return NULL;
      PyObject *kwn = PyTuple_Pack(1, g_str_stream);
      if (!kwn) return NULL;
      PyObject *fn = PyObject_GetAttr(obj, g_str_dlpack);
      if (fn) {
        PyObject *vargs[2] = {NULL, cs->dlpack_stream};
        capsule = PyObject_Vectorcall(fn, vargs + 1, 0 | PY_VECTORCALL_ARGUMENTS_OFFSET, kwn);
        Py_DECREF(fn);
      }
      Py_DECREF(kwn);
    } else if (dev_type == kDLCPU || dev_type == kDLCUDAHost) {
      capsule = PyObject_CallMethodNoArgs(obj, g_str_dlpack);
    } else {
      return invalid_tensor("%s: %s is on DLPack device [type %ld, id %ld]; apexx serves "
                           "host (kDLCPU) and CUDA (kDLCUDA) memory",
                           cs->op, name, dev_type, dev_id);
    }
    if (!capsule) return NULL;
  }
  h->capsule = capsule;
  DLManagedTensor *m = PyCapsule_IsValid(capsule, "dltensor")
                           ? (DLManagedTensor *)PyCapsule_GetPointer(capsule, "dltensor")
                           : NULL;
  if (!m) {
    PyErr_Clear();
    return invalid_tensor("%s: %s: __dlpack__ did not return an unconsumed \"dltensor\" "
                         "capsule",
                         cs->op, name);
  }
  const DLTensor *dl = &m->dl_tensor;
  if (dl->device.device_type == kDLCPU || dl->device.device_type == kDLCUDAHost) {
    t->device = APX_DEVICE_HOST;
    t->device_index = 0;
  } else if (dl->device.device_type == kDLCUDA) {
    t->device = APX_DEVICE_CUDA;
    t->device_index = dl->device.device_id;
    if (resolve_stream(cs, obj, t->device_index) < 0) return NULL;
  } else {
    return invalid_tensor("%s: %s is on DLPack device [type %d, id %d]; apexx serves host "
                         "(kDLCPU) and CUDA (kDLCUDA) memory",
                         cs->op, name, (int)dl->device.device_type, (int)dl->device.device_id);
  }
  if (!dl_dtype(dl->dtype, &t->dtype)) {
    char dt[32];
    dl_dtype_text(dl->dtype, dt, sizeof dt);
    return invalid_tensor("%s: %s dtype [%s] is not one of float32, float16, bfloat16, int32, "
                         "int64",
                         cs->op, name, dt);
  }
  if (dl->ndim > APX_MAX_DIMS || dl->ndim < 0)
    return invalid_tensor("%s: %s has [%d] dimensions, more than %d", cs->op, name, dl->ndim,
                         APX_MAX_DIMS);
  if (!dl_contiguous(dl))
    return invalid_tensor("%s: %s is not contiguous (row-major, dense); pass a contiguous "
                         "copy",
                         cs->op, name);
  t->data = (char *)dl->data + dl->byte_offset;
  t->ndim = dl->ndim;
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++) {
    t->shape[i] = dl->shape[i];
    n *= (size_t)dl->shape[i];
  }
  if (t->device == APX_DEVICE_HOST) cs->host_bytes += n * apx_dtype_size(t->dtype);
  return t;
}

/* An optional tensor argument: NULL for None or absent. *err set on error. */
static const apx_tensor *opt_tensor(call_state *cs, PyObject *o, const char *name, int *err) {
  if (!o || o == Py_None) return NULL;
  const apx_tensor *t = acquire(cs, o, name, 0);
  if (!t) *err = 1;
  return t;
}

static const apx_tensor *req_tensor(call_state *cs, PyObject *o, const char *name) {
  if (!o || o == Py_None) {
    PyErr_Format(PyExc_TypeError, "%s: missing required tensor argument '%s'", cs->op, name);
    return NULL;
  }
  return acquire(cs, o, name, 0);
}

/* An output shape NumPy or torch can allocate: no negative dimension, a
 * byte size that fits Py_ssize_t. */
static int allocatable(int ndim, const int64_t *shape, apx_dtype dtype) {
  uint64_t bytes = apx_dtype_size(dtype);
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0 || __builtin_mul_overflow(bytes, (uint64_t)shape[i], &bytes)) return 0;
  return bytes <= (uint64_t)PY_SSIZE_T_MAX;
}

/* The core's verdict on the call before anything is allocated: its
 * APX_ERR_INVALID_ARG raised; 0 when it accepts the arguments. */
static int validate_early(call_state *cs) {
  apx_explanation ex;
  memset(&ex, 0, sizeof ex);
  apx_status st = apx_explain(cs->self->ctx, cs->op_id, cs->args, &cs->call, &ex);
  if (st == APX_ERR_INVALID_ARG) {
    raise_apx(st);
    return -1;
  }
  return 0;
}

/* An output whose derived shape cannot be allocated (a negative tile, a
 * tile of 2^31): the core validates the call with an empty output of that
 * rank in its place, so the message names the argument at fault; when the
 * core finds nothing, the shape itself is named. Always NULL. */
static const apx_tensor *unallocatable(call_state *cs, const apx_tensor **slot,
                                       const char *name, int ndim, const int64_t *shape,
                                       apx_dtype dtype) {
  if (cs->args) {
    apx_tensor empty;
    memset(&empty, 0, sizeof empty);
    empty.dtype = dtype;
    empty.device = cs->nheld ? cs->held[0].t.device : APX_DEVICE_HOST;
    empty.device_index = cs->nheld ? cs->held[0].t.device_index : 0;
    empty.ndim = ndim;
    *slot = &empty;
    int rejected = validate_early(cs) < 0;
    *slot = NULL;
    if (rejected) return NULL;
  }
  char text[256] = "";
  size_t used = 0;
  for (int i = 0; i < ndim && used < sizeof text; i++)
    used += (size_t)snprintf(text + used, sizeof text - used, "%s%lld", i ? ", " : "",
                             (long long)shape[i]);
  return invalid_tensor("%s: %s would have shape [%s] of %s, which cannot be allocated", cs->op,
                        name, text, dtype_names[dtype]);
}

/* The output `name`: the caller's tensor, or a new one of `shape`/`dtype`
 * made by the library of `like` on its device. *result receives a new
 * reference to the object. */
static const apx_tensor *out_tensor(call_state *cs, const apx_tensor **slot, PyObject *o,
                                    const char *name, PyObject *like, int ndim,
                                    const int64_t *shape, apx_dtype dtype, PyObject **result) {
  if (o && o != Py_None) {
    const apx_tensor *t = acquire(cs, o, name, 1);
    if (!t) return NULL;
    Py_INCREF(o);
    *result = o;
    return *slot = t;
  }
  if (!g_alloc_hook) {
    PyErr_SetString(PyExc_RuntimeError, "apexx: allocation hook not set (import apexx)");
    return NULL;
  }
  if (!allocatable(ndim, shape, dtype)) return unallocatable(cs, slot, name, ndim, shape, dtype);
  PyObject *shp = PyTuple_New(ndim);
  if (!shp) return NULL;
  for (int i = 0; i < ndim; i++) {
    PyObject *v = PyLong_FromLongLong(shape[i]);
    if (!v) {
      Py_DECREF(shp);
      return NULL;
    }
    PyTuple_SET_ITEM(shp, i, v);
  }
  PyObject *made = PyObject_CallFunction(g_alloc_hook, "OOs", like, shp, dtype_names[dtype]);
  Py_DECREF(shp);
  if (!made) return NULL;
  const apx_tensor *t = acquire(cs, made, name, 1);
  if (!t) {
    Py_DECREF(made);
    return NULL;
  }
  *result = made;
  return *slot = t;
}

/* ---- scalar arguments ------------------------------------------------------ */
static int int_arg(call_state *cs, PyObject *o, const char *name, int64_t *out) {
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

static int dim_arg(call_state *cs, PyObject *o, const char *name, int *out) {
  int64_t v = *out;
  if (int_arg(cs, o, name, &v) < 0) return -1;
  if (v < INT32_MIN || v > INT32_MAX) {
    raise_invalid("%s: %s = [%lld] is out of range", cs->op, name, (long long)v);
    return -1;
  }
  *out = (int)v;
  return 0;
}

static int float_arg(call_state *cs, PyObject *o, const char *name, double *out) {
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

static int bool_arg(PyObject *o, int *out) {
  if (!o) return 0;
  int v = PyObject_IsTrue(o);
  if (v < 0) return -1;
  *out = v;
  return 0;
}

/* An enum given as its name (case-insensitive) or its integer value. */
static int enum_arg(call_state *cs, PyObject *o, const char *name, const char *const *names,
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
  raise_invalid("%s: %s = [%s] is not one of %s", cs->op, name,
                r ? PyUnicode_AsUTF8(r) : "?", list);
  Py_XDECREF(r);
  return -1;
}

/* ---- argument parsing (METH_FASTCALL | METH_KEYWORDS) ---------------------- */
/* Names end with NULL; the common keyword-only options follow the op's own
 * names: stream, backend, validate. */
#define COMMON_OPTS 3
static const char *const common_names[COMMON_OPTS] = {"stream", "backend", "validate"};
#define MAX_ARGS 28

static int parse_args(const char *op, const char *const *names, PyObject *const *args,
                      Py_ssize_t nargs, PyObject *kwnames, PyObject **slots, int *nslots) {
  int n = 0;
  while (names[n]) n++;
  int total = n + COMMON_OPTS;
  for (int i = 0; i < total; i++) slots[i] = NULL;
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
    int found = -1;
    for (int i = 0; i < total && found < 0; i++) {
      const char *nm = i < n ? names[i] : common_names[i - n];
      if (PyUnicode_CompareWithASCIIString(key, nm) == 0) found = i;
    }
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

static int call_setup(call_state *cs, ContextObject *self, const char *op, PyObject **slots,
                      int n) {
  memset(cs, 0, offsetof(call_state, held));
  cs->self = self;
  cs->op = op;
  cs->call.backend = NULL;
  cs->call.stream = NULL;
  if (!context_usable(self)) return -1;
  calls_enter(&self->calls);
  cs->entered = 1;
  PyObject *stream = slots[n], *backend = slots[n + 1], *validate = slots[n + 2];
  if (stream && stream != Py_None) {
    cs->stream_obj = stream;
    /* resolve now so that host-only calls with stream= still pass it */
    uintptr_t s;
    if (stream_from_object(stream, &s) < 0) return -1;
    cs->call.stream = (void *)s;
    cs->dlpack_stream = PyLong_FromUnsignedLongLong(s ? (unsigned long long)s : 1ULL);
    if (!cs->dlpack_stream) return -1;
    cs->stream_known = 1;
  }
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
      raise_invalid("%s: validate must be None, \"device\" or \"eager\"", op);
      return -1;
    }
  }
  return 0;
}

/* Run the op (or explain it) and release the borrowed tensors. */
typedef apx_status (*op_fn)(apx_context *, const void *, const apx_call *);

static PyObject *explanation_dict(ContextObject *self, const apx_explanation *ex);

static int run_op(call_state *cs, op_fn fn, apx_op_id op_id, const void *args,
                  PyObject **explained) {
  apx_status st;
  if (explained) {
    apx_explanation ex;
    memset(&ex, 0, sizeof ex);
    st = apx_explain(cs->self->ctx, op_id, args, &cs->call, &ex);
    if (st == APX_OK || st == APX_ERR_UNSUPPORTED) {
      *explained = explanation_dict(cs->self, &ex);
      return *explained ? 0 : -1;
    }
    raise_apx(st);
    return -1;
  }
  int release = cs->host_bytes >= RELEASE_GIL_BYTES || cs->eager;
  if (release) {
    Py_BEGIN_ALLOW_THREADS st = fn(cs->self->ctx, args, &cs->call);
    if (st == APX_OK && cs->eager) st = apx_sync(cs->self->ctx, &cs->call);
    Py_END_ALLOW_THREADS
  } else {
    st = fn(cs->self->ctx, args, &cs->call);
  }
  if (st != APX_OK) {
    raise_apx(st);
    return -1;
  }
  return 0;
}

#define OP_WRAP(name, argtype)                                                               \
  static apx_status call_##name(apx_context *c, const void *a, const apx_call *k) {        \
    return apx_##name(c, (const argtype *)a, k);                                          \
  }
OP_WRAP(tilepack, apx_tilepack_args)
OP_WRAP(tileunpack, apx_tileunpack_args)
OP_WRAP(fused_pack_op_unpack, apx_fused_pack_op_unpack_args)
OP_WRAP(fusiongate_alpha, apx_fusiongate_alpha_args)
OP_WRAP(fusiongate_fuse, apx_fusiongate_fuse_args)
OP_WRAP(tilessm_scan, apx_tilessm_scan_args)
OP_WRAP(gather, apx_gather_args)
OP_WRAP(index_select, apx_index_select_args)
OP_WRAP(scatter_add, apx_scatter_add_args)
OP_WRAP(gather_backward, apx_gather_backward_args)
OP_WRAP(ff_infer, apx_ff_infer_args)

/* Common prologue of an op method. */
#define OP_BEGIN(opname, ...)                                                                \
  static const char *const names_[] = {__VA_ARGS__, NULL};                                 \
  PyObject *s[MAX_ARGS];                                                                     \
  int ns_;                                                                                   \
  call_state cs;                                                                             \
  if (parse_args(opname, names_, args, nargs, kwnames, s, &ns_) < 0) return NULL;          \
  if (call_setup(&cs, self, opname, s, ns_) < 0) goto fail;

static int64_t dim_or(const apx_tensor *t, int i) { return t && i < t->ndim ? t->shape[i] : 0; }

/* ---- ops ------------------------------------------------------------------- */
static PyObject *op_tilepack(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames, PyObject **explained) {
  PyObject *out = NULL;
  OP_BEGIN("tilepack", "features", "idx", "tile", "out")
  apx_tilepack_args a = APX_TILEPACK_ARGS_INIT;
  cs.op_id = APX_OP_TILEPACK;
  cs.args = &a;
  if (int_arg(&cs, s[2], "tile", &a.tile) < 0) goto fail;
  if (!(a.features = req_tensor(&cs, s[0], "features"))) goto fail;
  if (!(a.idx = req_tensor(&cs, s[1], "idx"))) goto fail;
  {
    int64_t shp[5] = {dim_or(a.features, 0), dim_or(a.idx, 1), dim_or(a.features, 1), a.tile,
                      a.tile};
    if (!(out_tensor(&cs, &a.out, s[3], "out", s[0], 5, shp, a.features->dtype, &out)))
      goto fail;
  }
  if (run_op(&cs, call_tilepack, APX_OP_TILEPACK, &a, explained) < 0) goto fail;
  call_release(&cs);
  if (explained) Py_CLEAR(out);
  return explained ? *explained : out;
fail:
  call_release(&cs);
  Py_XDECREF(out);
  return NULL;
}

static const char *const overlap_names[] = {"override", "blend"};
static const char *const direction_names[] = {"forward", "backward", "bidirectional"};
static const char *const merge_names[] = {"sum", "avg", "gated"};

static PyObject *op_tileunpack(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames, PyObject **explained) {
  PyObject *out = NULL;
  int err = 0;
  OP_BEGIN("tileunpack", "base", "packed", "idx", "origins", "levels", "mode", "blend_alpha",
           "assume_priority_sorted", "out")
  apx_tileunpack_args a = APX_TILEUNPACK_ARGS_INIT;
  cs.op_id = APX_OP_TILEUNPACK;
  cs.args = &a;
  int mode = (int)a.mode;
  if (enum_arg(&cs, s[5], "mode", overlap_names, 2, &mode) < 0) goto fail;
  a.mode = (apx_overlap_mode)mode;
  if (float_arg(&cs, s[6], "blend_alpha", &a.blend_alpha) < 0) goto fail;
  if (bool_arg(s[7], &a.assume_priority_sorted) < 0) goto fail;
  if (!(a.base = req_tensor(&cs, s[0], "base"))) goto fail;
  if (!(a.packed = req_tensor(&cs, s[1], "packed"))) goto fail;
  a.idx = opt_tensor(&cs, s[2], "idx", &err);
  a.origins = opt_tensor(&cs, s[3], "origins", &err);
  a.levels = opt_tensor(&cs, s[4], "levels", &err);
  if (err) goto fail;
  if (!(out_tensor(&cs, &a.out, s[8], "out", s[0], a.base->ndim, a.base->shape, a.base->dtype,
                           &out)))
    goto fail;
  if (run_op(&cs, call_tileunpack, APX_OP_TILEUNPACK, &a, explained) < 0) goto fail;
  call_release(&cs);
  if (explained) Py_CLEAR(out);
  return explained ? *explained : out;
fail:
  call_release(&cs);
  Py_XDECREF(out);
  return NULL;
}

static PyObject *op_fused(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames, PyObject **explained) {
  PyObject *out = NULL;
  OP_BEGIN("fused_pack_op_unpack", "features", "idx", "tile", "value_scale", "value_bias",
           "gate_scale", "gate_bias", "require_unique", "out")
  apx_fused_pack_op_unpack_args a = APX_FUSED_PACK_OP_UNPACK_ARGS_INIT;
  cs.op_id = APX_OP_FUSED_PACK_OP_UNPACK;
  cs.args = &a;
  if (int_arg(&cs, s[2], "tile", &a.tile) < 0 ||
      float_arg(&cs, s[3], "value_scale", &a.value_scale) < 0 ||
      float_arg(&cs, s[4], "value_bias", &a.value_bias) < 0 ||
      float_arg(&cs, s[5], "gate_scale", &a.gate_scale) < 0 ||
      float_arg(&cs, s[6], "gate_bias", &a.gate_bias) < 0 || bool_arg(s[7], &a.require_unique) < 0)
    goto fail;
  if (!(a.features = req_tensor(&cs, s[0], "features"))) goto fail;
  if (!(a.idx = req_tensor(&cs, s[1], "idx"))) goto fail;
  if (!(out_tensor(&cs, &a.out, s[8], "out", s[0], a.features->ndim, a.features->shape,
                           a.features->dtype, &out)))
    goto fail;
  if (run_op(&cs, call_fused_pack_op_unpack, APX_OP_FUSED_PACK_OP_UNPACK, &a, explained) < 0)
    goto fail;
  call_release(&cs);
  if (explained) Py_CLEAR(out);
  return explained ? *explained : out;
fail:
  call_release(&cs);
  Py_XDECREF(out);
  return NULL;
}

static PyObject *op_alpha(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames, PyObject **explained) {
  PyObject *out = NULL;
  OP_BEGIN("fusiongate_alpha", "boundary", "uncertainty", "boundary_log_weight",
           "uncertainty_log_weight", "bias", "out")
  apx_fusiongate_alpha_args a = APX_FUSIONGATE_ALPHA_ARGS_INIT;
  cs.op_id = APX_OP_FUSIONGATE_ALPHA;
  cs.args = &a;
  if (float_arg(&cs, s[2], "boundary_log_weight", &a.boundary_log_weight) < 0 ||
      float_arg(&cs, s[3], "uncertainty_log_weight", &a.uncertainty_log_weight) < 0 ||
      float_arg(&cs, s[4], "bias", &a.bias) < 0)
    goto fail;
  if (!(a.boundary = req_tensor(&cs, s[0], "boundary"))) goto fail;
  if (!(a.uncertainty = req_tensor(&cs, s[1], "uncertainty"))) goto fail;
  {
    const apx_tensor *b = a.boundary;
    int64_t shp[4] = {dim_or(b, 0), 1, b->ndim == 3 ? dim_or(b, 1) : dim_or(b, 2),
                      b->ndim == 3 ? dim_or(b, 2) : dim_or(b, 3)};
    if (!(out_tensor(&cs, &a.out, s[5], "out", s[0], 4, shp, b->dtype, &out))) goto fail;
  }
  if (run_op(&cs, call_fusiongate_alpha, APX_OP_FUSIONGATE_ALPHA, &a, explained) < 0) goto fail;
  call_release(&cs);
  if (explained) Py_CLEAR(out);
  return explained ? *explained : out;
fail:
  call_release(&cs);
  Py_XDECREF(out);
  return NULL;
}

static PyObject *op_fuse(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames, PyObject **explained) {
  PyObject *out = NULL;
  OP_BEGIN("fusiongate_fuse", "base", "detail", "alpha", "out")
  apx_fusiongate_fuse_args a = APX_FUSIONGATE_FUSE_ARGS_INIT;
  cs.op_id = APX_OP_FUSIONGATE_FUSE;
  cs.args = &a;
  if (!(a.base = req_tensor(&cs, s[0], "base"))) goto fail;
  if (!(a.detail = req_tensor(&cs, s[1], "detail"))) goto fail;
  if (!(a.alpha = req_tensor(&cs, s[2], "alpha"))) goto fail;
  if (!(out_tensor(&cs, &a.out, s[3], "out", s[0], a.base->ndim, a.base->shape, a.base->dtype,
                           &out)))
    goto fail;
  if (run_op(&cs, call_fusiongate_fuse, APX_OP_FUSIONGATE_FUSE, &a, explained) < 0) goto fail;
  call_release(&cs);
  if (explained) Py_CLEAR(out);
  return explained ? *explained : out;
fail:
  call_release(&cs);
  Py_XDECREF(out);
  return NULL;
}

static PyObject *op_scan(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames, PyObject **explained) {
  PyObject *out = NULL, *fin = NULL;
  int err = 0;
  OP_BEGIN("tilessm_scan", "tokens", "decay", "input_gain", "output_gain", "state_bias",
           "init_state", "merge_gate", "clamp_value", "direction", "merge", "out",
           "final_state")
  apx_tilessm_scan_args a = APX_TILESSM_SCAN_ARGS_INIT;
  cs.op_id = APX_OP_TILESSM_SCAN;
  cs.args = &a;
  int direction = (int)a.direction, merge = (int)a.merge;
  if (float_arg(&cs, s[7], "clamp_value", &a.clamp_value) < 0 ||
      enum_arg(&cs, s[8], "direction", direction_names, 3, &direction) < 0 ||
      enum_arg(&cs, s[9], "merge", merge_names, 3, &merge) < 0)
    goto fail;
  a.direction = (apx_scan_direction)direction;
  a.merge = (apx_scan_merge)merge;
  if (!(a.tokens = req_tensor(&cs, s[0], "tokens"))) goto fail;
  if (!(a.decay = req_tensor(&cs, s[1], "decay"))) goto fail;
  if (!(a.input_gain = req_tensor(&cs, s[2], "input_gain"))) goto fail;
  if (!(a.output_gain = req_tensor(&cs, s[3], "output_gain"))) goto fail;
  if (!(a.state_bias = req_tensor(&cs, s[4], "state_bias"))) goto fail;
  a.init_state = opt_tensor(&cs, s[5], "init_state", &err);
  a.merge_gate = opt_tensor(&cs, s[6], "merge_gate", &err);
  if (err) goto fail;
  {
    const apx_tensor *t = a.tokens;
    if (!(out_tensor(&cs, &a.out, s[10], "out", s[0], t->ndim, t->shape, t->dtype, &out)))
      goto fail;
    int bi = a.direction == APX_SCAN_BIDIRECTIONAL;
    int64_t fs[3] = {dim_or(t, 0), bi ? 2 : dim_or(t, 2), dim_or(t, 2)};
    if (!(out_tensor(&cs, &a.final_state, s[11], "final_state", s[0], bi ? 3 : 2, fs,
                                     t->dtype, &fin)))
      goto fail;
  }
  if (run_op(&cs, call_tilessm_scan, APX_OP_TILESSM_SCAN, &a, explained) < 0) goto fail;
  call_release(&cs);
  if (explained) {
    Py_CLEAR(out);
    Py_CLEAR(fin);
    return *explained;
  }
  {
    PyObject *r = PyTuple_Pack(2, out, fin);
    Py_DECREF(out);
    Py_DECREF(fin);
    return r;
  }
fail:
  call_release(&cs);
  Py_XDECREF(out);
  Py_XDECREF(fin);
  return NULL;
}

static PyObject *op_gather(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames, PyObject **explained) {
  PyObject *out = NULL;
  OP_BEGIN("gather", "src", "dim", "index", "out")
  apx_gather_args a = APX_GATHER_ARGS_INIT;
  cs.op_id = APX_OP_GATHER;
  cs.args = &a;
  if (dim_arg(&cs, s[1], "dim", &a.dim) < 0) goto fail;
  if (!(a.src = req_tensor(&cs, s[0], "src"))) goto fail;
  if (!(a.index = req_tensor(&cs, s[2], "index"))) goto fail;
  if (!(out_tensor(&cs, &a.out, s[3], "out", s[0], a.index->ndim, a.index->shape, a.src->dtype,
                           &out)))
    goto fail;
  if (run_op(&cs, call_gather, APX_OP_GATHER, &a, explained) < 0) goto fail;
  call_release(&cs);
  if (explained) Py_CLEAR(out);
  return explained ? *explained : out;
fail:
  call_release(&cs);
  Py_XDECREF(out);
  return NULL;
}

static PyObject *op_index_select(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames, PyObject **explained) {
  PyObject *out = NULL;
  OP_BEGIN("index_select", "src", "index", "out")
  apx_index_select_args a = APX_INDEX_SELECT_ARGS_INIT;
  cs.op_id = APX_OP_INDEX_SELECT;
  cs.args = &a;
  if (!(a.src = req_tensor(&cs, s[0], "src"))) goto fail;
  if (!(a.index = req_tensor(&cs, s[1], "index"))) goto fail;
  {
    int64_t shp[2] = {dim_or(a.index, 0), dim_or(a.src, 1)};
    if (!(out_tensor(&cs, &a.out, s[2], "out", s[0], 2, shp, a.src->dtype, &out))) goto fail;
  }
  if (run_op(&cs, call_index_select, APX_OP_INDEX_SELECT, &a, explained) < 0) goto fail;
  call_release(&cs);
  if (explained) Py_CLEAR(out);
  return explained ? *explained : out;
fail:
  call_release(&cs);
  Py_XDECREF(out);
  return NULL;
}

static PyObject *op_scatter_add(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames, PyObject **explained) {
  PyObject *out = NULL;
  OP_BEGIN("scatter_add", "self", "dim", "index", "src", "out")
  apx_scatter_add_args a = APX_SCATTER_ADD_ARGS_INIT;
  cs.op_id = APX_OP_SCATTER_ADD;
  cs.args = &a;
  if (dim_arg(&cs, s[1], "dim", &a.dim) < 0) goto fail;
  if (!(a.self = req_tensor(&cs, s[0], "self"))) goto fail;
  if (!(a.index = req_tensor(&cs, s[2], "index"))) goto fail;
  if (!(a.src = req_tensor(&cs, s[3], "src"))) goto fail;
  if (!(out_tensor(&cs, &a.out, s[4], "out", s[0], a.self->ndim, a.self->shape, a.self->dtype,
                           &out)))
    goto fail;
  if (run_op(&cs, call_scatter_add, APX_OP_SCATTER_ADD, &a, explained) < 0) goto fail;
  call_release(&cs);
  if (explained) Py_CLEAR(out);
  return explained ? *explained : out;
fail:
  call_release(&cs);
  Py_XDECREF(out);
  return NULL;
}

/* A shape given as a sequence of ints (gather_backward's src_shape). */
static int shape_arg(call_state *cs, PyObject *o, const char *name, int *ndim, int64_t *shape) {
  PyObject *seq = PySequence_Fast(o, "");
  if (!seq) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s: %s must be a sequence of ints", cs->op, name);
    return -1;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n > APX_MAX_DIMS) {
    Py_DECREF(seq);
    raise_invalid("%s: %s has [%zd] dimensions, more than %d", cs->op, name, n, APX_MAX_DIMS);
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
      raise_invalid("%s: %s[%zd] = [%lld] is negative", cs->op, name, i, v);
      return -1;
    }
    shape[i] = v;
  }
  *ndim = (int)n;
  Py_DECREF(seq);
  return 0;
}

static PyObject *op_gather_backward(ContextObject *self, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames, PyObject **explained) {
  PyObject *out = NULL;
  OP_BEGIN("gather_backward", "grad_out", "dim", "index", "grad_src", "src_shape")
  apx_gather_backward_args a = APX_GATHER_BACKWARD_ARGS_INIT;
  cs.op_id = APX_OP_GATHER_BACKWARD;
  cs.args = &a;
  if (dim_arg(&cs, s[1], "dim", &a.dim) < 0) goto fail;
  if (!(a.grad_out = req_tensor(&cs, s[0], "grad_out"))) goto fail;
  if (!(a.index = req_tensor(&cs, s[2], "index"))) goto fail;
  {
    int ndim = 0;
    int64_t shp[APX_MAX_DIMS];
    if (!s[3] || s[3] == Py_None) {
      if (!s[4] || s[4] == Py_None) {
        raise_invalid("gather_backward: give grad_src (the output) or src_shape");
        goto fail;
      }
      if (shape_arg(&cs, s[4], "src_shape", &ndim, shp) < 0) goto fail;
    }
    if (!(out_tensor(&cs, &a.grad_src, s[3], "grad_src", s[0], ndim, shp, a.grad_out->dtype,
                                  &out)))
      goto fail;
  }
  if (run_op(&cs, call_gather_backward, APX_OP_GATHER_BACKWARD, &a, explained) < 0) goto fail;
  call_release(&cs);
  if (explained) Py_CLEAR(out);
  return explained ? *explained : out;
fail:
  call_release(&cs);
  Py_XDECREF(out);
  return NULL;
}

static PyObject *op_ff_infer(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames, PyObject **explained) {
  PyObject *heavy = NULL, *detail = NULL, *alpha = NULL, *stats = NULL;
  int err = 0, want_stats = 0;
  int64_t *stat_buf = NULL;
  OP_BEGIN("ff_infer", "dense", "utilities", "split_utilities", "boundary", "uncertainty",
           "weights", "tile_l0", "tile_l1", "kmax_l0", "kmax_l1", "budget_b1", "budget_b2",
           "cost_heavy", "cost_cheap", "enable_nesting", "graph_replay", "heavy", "detail",
           "alpha", "stats")
  apx_ff_infer_args a = APX_FF_INFER_ARGS_INIT;
  cs.op_id = APX_OP_FF_INFER;
  cs.args = &a;
  if (int_arg(&cs, s[6], "tile_l0", &a.tile_l0) < 0 || int_arg(&cs, s[7], "tile_l1", &a.tile_l1) < 0 ||
      int_arg(&cs, s[8], "kmax_l0", &a.kmax_l0) < 0 || int_arg(&cs, s[9], "kmax_l1", &a.kmax_l1) < 0 ||
      float_arg(&cs, s[10], "budget_b1", &a.budget_b1) < 0 ||
      float_arg(&cs, s[11], "budget_b2", &a.budget_b2) < 0 ||
      float_arg(&cs, s[12], "cost_heavy", &a.cost_heavy) < 0 ||
      float_arg(&cs, s[13], "cost_cheap", &a.cost_cheap) < 0 ||
      bool_arg(s[14], &a.enable_nesting) < 0 || bool_arg(s[15], &a.graph_replay) < 0 ||
      bool_arg(s[19], &want_stats) < 0)
    goto fail;
  if (s[7] == NULL && s[6] != NULL) a.tile_l1 = a.tile_l0 / 2;
  if (!s[5] || !PyObject_TypeCheck(s[5], &WeightsType)) {
    PyErr_SetString(PyExc_TypeError, "ff_infer: weights must be an apexx.FFWeights "
                                     "(ctx.ff_weights_load / ctx.ff_weights_seeded)");
    goto fail;
  }
  {
    WeightsObject *w = (WeightsObject *)s[5];
    if (!w->weights || w->closing || w->owner != self) {
      raise_invalid("ff_infer: weights are %s", w->owner != self ? "of another context"
                                                : w->weights       ? "being closed"
                                                                   : "freed");
      goto fail;
    }
    calls_enter(&w->calls); /* FFWeights.close waits for the call */
    Py_INCREF(w);
    cs.weights_obj = w;
    a.weights = w->weights;
  }
  if (!(a.dense = req_tensor(&cs, s[0], "dense"))) goto fail;
  if (!(a.utilities = req_tensor(&cs, s[1], "utilities"))) goto fail;
  a.split_utilities = opt_tensor(&cs, s[2], "split_utilities", &err);
  a.boundary = opt_tensor(&cs, s[3], "boundary", &err);
  a.uncertainty = opt_tensor(&cs, s[4], "uncertainty", &err);
  if (err) goto fail;
  {
    const apx_tensor *d = a.dense;
    int64_t ash[4] = {dim_or(d, 0), 1, dim_or(d, 2), dim_or(d, 3)};
    if (!(out_tensor(&cs, &a.heavy, s[16], "heavy", s[0], d->ndim, d->shape, d->dtype, &heavy)) ||
        !(out_tensor(&cs, &a.detail, s[17], "detail", s[0], d->ndim, d->shape, d->dtype, &detail)) ||
        !(out_tensor(&cs, &a.alpha, s[18], "alpha", s[0], 4, ash, d->dtype, &alpha)))
      goto fail;
  }
  apx_ff_stats st_c;
  memset(&st_c, 0, sizeof st_c);
  int64_t B = dim_or(a.dense, 0);
  int64_t k0 = a.kmax_l0 > 0 ? a.kmax_l0 : 0, k1 = a.kmax_l1 > 0 ? a.kmax_l1 : 0;
  if (want_stats && !explained && B > 0) {
    /* the stats are sized by kmax: the core checks it against the tiles
     * first (kmax_l0 = 2^40 is its message, not a MemoryError) */
    if (validate_early(&cs) < 0) goto fail;
    /* one block: selected_l0, selected_l1 [B], two double arrays [B], ids */
    size_t per_row = 4, n = 0;
    if (__builtin_add_overflow(per_row, (size_t)k0, &per_row) ||
        __builtin_add_overflow(per_row, (size_t)k1, &per_row) ||
        __builtin_mul_overflow((size_t)B, per_row, &n) || n > (size_t)PY_SSIZE_T_MAX / 8) {
      raise_status(APX_ERR_NO_MEMORY, "ff_infer: the stats of kmax_l0, kmax_l1 do not fit memory");
      goto fail;
    }
    stat_buf = PyMem_Calloc(n, sizeof(int64_t));
    if (!stat_buf) {
      PyErr_NoMemory();
      goto fail;
    }
    size_t rows = (size_t)B;
    st_c.selected_l0 = stat_buf;
    st_c.selected_l1 = stat_buf + rows;
    st_c.budget_b1_spent = (double *)(stat_buf + 2 * rows);
    st_c.budget_b2_spent = (double *)(stat_buf + 3 * rows);
    st_c.l0_ids = stat_buf + 4 * rows;
    st_c.l1_ids = stat_buf + 4 * rows + rows * (size_t)k0;
    a.stats = &st_c;
  }
  if (run_op(&cs, call_ff_infer, APX_OP_FF_INFER, &a, explained) < 0) goto fail;
  call_release(&cs);
  if (explained) {
    Py_CLEAR(heavy);
    Py_CLEAR(detail);
    Py_CLEAR(alpha);
    PyMem_Free(stat_buf);
    return *explained;
  }
  if (a.stats) {
    stats = PyDict_New();
    PyObject *l = NULL;
    const char *keys[6] = {"selected_l0", "selected_l1", "budget_b1_spent", "budget_b2_spent",
                           "l0_ids", "l1_ids"};
    for (int k = 0; stats && k < 6; k++) {
      l = PyList_New(B);
      if (!l) break;
      for (int64_t b = 0; b < B; b++) {
        PyObject *v;
        if (k == 0) v = PyLong_FromLongLong(st_c.selected_l0[b]);
        else if (k == 1) v = PyLong_FromLongLong(st_c.selected_l1[b]);
        else if (k == 2) v = PyFloat_FromDouble(st_c.budget_b1_spent[b]);
        else if (k == 3) v = PyFloat_FromDouble(st_c.budget_b2_spent[b]);
        else {
          int64_t kk = k == 4 ? k0 : k1;
          const int64_t *ids = (k == 4 ? st_c.l0_ids : st_c.l1_ids) + b * kk;
          v = PyList_New(0);
          for (int64_t j = 0; v && j < kk && ids[j] >= 0; j++) {
            PyObject *x = PyLong_FromLongLong(ids[j]);
            if (!x || PyList_Append(v, x) < 0) Py_CLEAR(v);
            Py_XDECREF(x);
          }
        }
        if (!v) break;
        PyList_SET_ITEM(l, b, v);
      }
      if (PyErr_Occurred() || PyDict_SetItemString(stats, keys[k], l) < 0) Py_CLEAR(stats);
      Py_CLEAR(l);
    }
    if (PyErr_Occurred()) Py_CLEAR(stats);
    PyMem_Free(stat_buf);
    stat_buf = NULL;
    if (!stats) goto fail_out;
  }
  {
    PyObject *r = stats ? PyTuple_Pack(4, heavy, detail, alpha, stats)
                        : PyTuple_Pack(3, heavy, detail, alpha);
    Py_DECREF(heavy);
    Py_DECREF(detail);
    Py_DECREF(alpha);
    Py_XDECREF(stats);
    return r;
  }
fail:
  call_release(&cs);
fail_out:
  PyMem_Free(stat_buf);
  Py_XDECREF(heavy);
  Py_XDECREF(detail);
  Py_XDECREF(alpha);
  return NULL;
}

/* tile_order: a host op in core, no dispatch (no stream, backend or explain) */
static PyObject *op_tile_order(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames, PyObject **explained) {
  PyObject *out = NULL;
  OP_BEGIN("tile_order", "ids", "grid_h", "grid_w", "mode", "out")
  apx_tile_order_args a = APX_TILE_ORDER_ARGS_INIT;
  if (explained) {
    raise_invalid("explain: tile_order is a host op of the core (no dispatch to explain)");
    goto fail;
  }
  if (!s[1] || !s[2]) {
    PyErr_SetString(PyExc_TypeError, "tile_order: grid_h and grid_w are required");
    goto fail;
  }
  if (int_arg(&cs, s[1], "grid_h", &a.grid_h) < 0 || int_arg(&cs, s[2], "grid_w", &a.grid_w) < 0)
    goto fail;
  if (s[3]) {
    if (PyUnicode_Check(s[3])) {
      const char *m = PyUnicode_AsUTF8(s[3]);
      int v = m ? apx_order_mode_from_name(m) : -1;
      if (!m) goto fail;
      if (v < 0) {
        raise_invalid("tile_order: mode = [%s] is not one of hilbert, l2r, r2l, u2d, d2u, "
                      "multi_direction",
                      m);
        goto fail;
      }
      a.mode = (apx_order_mode)v;
    } else {
      int64_t v = 0;
      if (int_arg(&cs, s[3], "mode", &v) < 0) goto fail;
      if (v < APX_ORDER_HILBERT || v > APX_ORDER_MULTI_DIRECTION) { /* before it is an int */
        raise_invalid("tile_order: mode = [%lld] is not an apx_order_mode (0..5: hilbert, l2r, "
                      "r2l, u2d, d2u, multi_direction)",
                      (long long)v);
        goto fail;
      }
      a.mode = (apx_order_mode)v;
    }
  }
  if (!(a.ids = req_tensor(&cs, s[0], "ids"))) goto fail;
  if (!(out_tensor(&cs, &a.out, s[4], "out", s[0], a.ids->ndim, a.ids->shape, a.ids->dtype,
                           &out)))
    goto fail;
  {
    apx_status st = apx_tile_order(self->ctx, &a);
    if (st != APX_OK) {
      raise_apx(st);
      goto fail;
    }
  }
  call_release(&cs);
  return out;
fail:
  call_release(&cs);
  Py_XDECREF(out);
  return NULL;
}

typedef PyObject *(*op_method)(ContextObject *, PyObject *const *, Py_ssize_t, PyObject *,
                               PyObject **);

#define OP_METHOD(pyname, impl)                                                              \
  static PyObject *m_##pyname(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,  \
                              PyObject *kwnames) {                                          \
    return impl(self, args, nargs, kwnames, NULL);                                          \
  }
OP_METHOD(tilepack, op_tilepack)
OP_METHOD(tileunpack, op_tileunpack)
OP_METHOD(fused_pack_op_unpack, op_fused)
OP_METHOD(fusiongate_alpha, op_alpha)
OP_METHOD(fusiongate_fuse, op_fuse)
OP_METHOD(tilessm_scan, op_scan)
OP_METHOD(gather, op_gather)
OP_METHOD(index_select, op_index_select)
OP_METHOD(scatter_add, op_scatter_add)
OP_METHOD(gather_backward, op_gather_backward)
OP_METHOD(ff_infer, op_ff_infer)
OP_METHOD(tile_order, op_tile_order)

static const struct {
  const char *name;
  op_method fn;
} op_table[] = {
    {"tilepack", op_tilepack},
    {"tileunpack", op_tileunpack},
    {"fused_pack_op_unpack", op_fused},
    {"fusiongate_alpha", op_alpha},
    {"fusiongate_fuse", op_fuse},
    {"tilessm_scan", op_scan},
    {"gather", op_gather},
    {"index_select", op_index_select},
    {"scatter_add", op_scatter_add},
    {"gather_backward", op_gather_backward},
    {"ff_infer", op_ff_infer},
    {"tile_order", op_tile_order},
};

static PyObject *explanation_dict(ContextObject *self, const apx_explanation *ex) {
  (void)self;
  PyObject *list = PyList_New(0);
  if (!list) return NULL;
  for (int i = 0; i < ex->passed_over_count && i < APX_MAX_BACKENDS; i++) {
    const apx_pass_over *p = &ex->passed_over[i];
    const char *code = apx_pass_over_name(p->code);
    PyObject *d = Py_BuildValue("{s:N,s:s,s:N}", "backend", text_of(p->backend), "code",
                                code ? code : "?", "reason", text_of(p->reason));
    if (!d || PyList_Append(list, d) < 0) {
      Py_XDECREF(d);
      Py_DECREF(list);
      return NULL;
    }
    Py_DECREF(d);
  }
  PyObject *backend = ex->backend ? text_of(ex->backend) : (Py_INCREF(Py_None), Py_None);
  if (!backend) {
    Py_DECREF(list);
    return NULL;
  }
  return Py_BuildValue("{s:N,s:N}", "backend", backend, "passed_over", list);
}

/* ctx.explain(op, *args, **kwargs) */
static PyObject *m_explain(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
  if (nargs < 1 || !PyUnicode_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "explain(op, *args, **kwargs): op must be an op name");
    return NULL;
  }
  const char *name = PyUnicode_AsUTF8(args[0]);
  if (!name) return NULL;
  for (size_t i = 0; i < sizeof op_table / sizeof op_table[0]; i++)
    if (strcmp(name, op_table[i].name) == 0) {
      PyObject *explained = NULL;
      PyObject *r = op_table[i].fn(self, args + 1, nargs - 1, kwnames, &explained);
      return r;
    }
  return raise_invalid("explain: op = [%s] is not an apexx op", name);
}

/* ---- context methods ---------------------------------------------------------- */
static PyObject *m_backends(ContextObject *self, PyObject *unused) {
  (void)unused;
  if (!context_usable(self)) return NULL;
  int n = apx_backend_count(self->ctx);
  PyObject *list = PyList_New(0);
  if (!list) return NULL;
  for (int i = 0; i < n; i++) {
    struct apx_backend_info info;
    if (apx_backend_info(self->ctx, i, &info) != APX_OK) {
      Py_DECREF(list);
      return raise_apx(APX_ERR_BACKEND);
    }
    PyObject *d = Py_BuildValue(
        "{s:N,s:s,s:N,s:s,s:N,s:N,s:N}", "name", text_of(info.name), "state",
        apx_backend_state_name(info.state) ? apx_backend_state_name(info.state) : "?", "reason",
        text_of(info.reason), "device",
        apx_device_name(info.device) ? apx_device_name(info.device) : "?", "device_name",
        text_of(info.device_name), "version", text_of(info.version), "library",
        text_of(info.library));
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
  PyObject *s[MAX_ARGS];
  int n;
  call_state cs;
  if (parse_args("sync", names, args, nargs, kwnames, s, &n) < 0) return NULL;
  if (call_setup(&cs, self, "sync", s, n) < 0) {
    call_release(&cs);
    return NULL;
  }
  if (!cs.stream_known && g_stream_hook) {
    /* the current stream of torch / CuPy where either is in use */
    if (resolve_stream(&cs, Py_None, -1) < 0) {
      call_release(&cs);
      return NULL;
    }
  }
  apx_status st;
  Py_BEGIN_ALLOW_THREADS st = apx_sync(self->ctx, &cs.call);
  Py_END_ALLOW_THREADS call_release(&cs);
  if (st != APX_OK) return raise_apx(st);
  Py_RETURN_NONE;
}

static void context_free_now(ContextObject *self) {
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
  if (calls_wait(&self->calls, "Context.close") < 0) {
    self->closing = was_closing;
    return NULL;
  }
  if (self->live_weights == 0) context_free_now(self); /* else when the last one goes */
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
  if (!context_usable(self)) return NULL;
  return Py_BuildValue("{s:N,s:N,s:N}", "files", text_of(apx_config_source(self->ctx)),
                       "overrides", text_of(apx_config_overrides(self->ctx)), "warnings",
                       text_of(apx_config_warnings(self->ctx)));
}

static PyObject *weights_new(ContextObject *self, apx_ff_weights *w) {
  WeightsObject *o = PyObject_New(WeightsObject, &WeightsType);
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

static PyObject *m_ff_weights_load(ContextObject *self, PyObject *arg) {
  if (!context_usable(self)) return NULL;
  calls_enter(&self->calls); /* a path's __fspath__ runs inside the call */
  PyObject *bytes = NULL, *result = NULL;
  if (PyUnicode_FSConverter(arg, &bytes)) {
    apx_ff_weights *w = NULL;
    apx_status st;
    const char *path = PyBytes_AS_STRING(bytes);
    Py_BEGIN_ALLOW_THREADS st = apx_ff_weights_load(self->ctx, path, &w);
    Py_END_ALLOW_THREADS Py_DECREF(bytes);
    result = st == APX_OK ? weights_new(self, w) : raise_apx(st);
  }
  calls_leave(&self->calls);
  return result;
}

static PyObject *m_ff_weights_seeded(ContextObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"channels", "seed", NULL};
  long long channels;
  unsigned long long seed = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "L|K:ff_weights_seeded", kwlist, &channels, &seed))
    return NULL;
  if (!context_usable(self)) return NULL;
  apx_ff_weights *w = NULL;
  apx_status st = apx_ff_weights_seeded(self->ctx, channels, seed, &w);
  if (st != APX_OK) return raise_apx(st);
  return weights_new(self, w);
}

/* _time_c_tilepack(features, idx, out, tile=8, n=1000): seconds per
 * apx_tilepack call looping in C over the same tensors (the bench's
 * baseline for the binding's overhead); a device call syncs once at the
 * end. */
static PyObject *m_time_c_tilepack(ContextObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
  static const char *const names[] = {"features", "idx", "out", "tile", "n", NULL};
  PyObject *s[MAX_ARGS];
  int ns;
  call_state cs;
  if (parse_args("_time_c_tilepack", names, args, nargs, kwnames, s, &ns) < 0) return NULL;
  if (call_setup(&cs, self, "_time_c_tilepack", s, ns) < 0) goto fail;
  apx_tilepack_args a = APX_TILEPACK_ARGS_INIT;
  cs.op_id = APX_OP_TILEPACK;
  cs.args = &a;
  int64_t n = 1000;
  if (int_arg(&cs, s[3], "tile", &a.tile) < 0 || int_arg(&cs, s[4], "n", &n) < 0) goto fail;
  if (!(a.features = req_tensor(&cs, s[0], "features")) || !(a.idx = req_tensor(&cs, s[1], "idx")))
    goto fail;
  if (!s[2] || !(a.out = acquire(&cs, s[2], "out", 1))) goto fail;
  struct timespec t0, t1;
  apx_status st = APX_OK;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int64_t i = 0; i < n && st == APX_OK; i++) st = apx_tilepack(self->ctx, &a, &cs.call);
  if (st == APX_OK && a.features->device != APX_DEVICE_HOST) st = apx_sync(self->ctx, &cs.call);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (st != APX_OK) {
    raise_apx(st);
    goto fail;
  }
  call_release(&cs);
  return PyFloat_FromDouble(((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec)) /
                            (double)(n > 0 ? n : 1));
fail:
  call_release(&cs);
  return NULL;
}

#define FC (METH_FASTCALL | METH_KEYWORDS)
static PyMethodDef context_methods[] = {
    {"backends", (PyCFunction)m_backends, METH_NOARGS,
     "backends() -> list of dicts: name, state, reason, device, device_name, version, "
     "library (configuration order)."},
    {"explain", (PyCFunction)(void (*)(void))m_explain, FC,
     "explain(op, *args, **kwargs) -> {'backend': name or None, 'passed_over': [{backend, "
     "code, reason}]}: which backend the call would run on and why each other was passed "
     "over. Takes the op's own arguments; validates them as the op would."},
    {"sync", (PyCFunction)(void (*)(void))m_sync, FC,
     "sync(*, stream=None, backend=None): wait for the stream (default: the current torch or "
     "CuPy stream) on every device backend and raise a deferred device error "
     "(apexx.DeviceError), e.g. an out-of-range index found on the device."},
    {"close", (PyCFunction)m_close, METH_NOARGS,
     "close(): unload the backends (after the last FFWeights of this context is freed)."},
    {"__enter__", (PyCFunction)m_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)m_exit, METH_VARARGS, NULL},
    {"config_source", (PyCFunction)m_config_source, METH_NOARGS,
     "config_source() -> {'files', 'overrides', 'warnings'} of the configuration in use."},
    {"ff_weights_load", (PyCFunction)m_ff_weights_load, METH_O,
     "ff_weights_load(path) -> FFWeights from a safetensors file with FFModule's state_dict "
     "names (docs/ff_weights.md)."},
    {"ff_weights_seeded", (PyCFunction)(void (*)(void))m_ff_weights_seeded,
     METH_VARARGS | METH_KEYWORDS,
     "ff_weights_seeded(channels, seed=0) -> FFWeights from the documented generator."},
    {"_time_c_tilepack", (PyCFunction)(void (*)(void))m_time_c_tilepack, FC,
     "_time_c_tilepack(features, idx, out, tile=8, n=1000, *, stream=None, backend=None) -> "
     "seconds per apx_tilepack call looped in C over the same tensors (bench baseline)."},
    {"tilepack", (PyCFunction)(void (*)(void))m_tilepack, FC,
     "tilepack(features, idx, tile=8, out=None, *, stream=None, backend=None, validate=None)\n"
     "out[b,k,c,dy,dx] = features[b,c,ty*t+dy,tx*t+dx], (ty,tx) = divmod(idx[b,k], W/t).\n"
     "features [B,C,H,W] float32|float16|bfloat16; idx [B,K] int32|int64; returns out "
     "[B,K,C,t,t]."},
    {"tileunpack", (PyCFunction)(void (*)(void))m_tileunpack, FC,
     "tileunpack(base, packed, idx=None, origins=None, levels=None, mode='override', "
     "blend_alpha=0.5, assume_priority_sorted=True, out=None, *, stream=None, backend=None, "
     "validate=None)\n"
     "out = base with each packed tile written at its origin in key order (level, k): "
     "override keeps the highest key, blend sets out = (1-a)*out + a*tile in ascending key "
     "order. Exactly one of idx [B,K] / origins [B,K,2]. out may be base itself."},
    {"fused_pack_op_unpack", (PyCFunction)(void (*)(void))m_fused_pack_op_unpack, FC,
     "fused_pack_op_unpack(features, idx, tile=8, value_scale=1.0, value_bias=0.0, "
     "gate_scale=1.0, gate_bias=0.0, require_unique=True, out=None, *, stream=None, "
     "backend=None, validate=None)\n"
     "out = features, except selected-tile pixels x -> (x*value_scale + value_bias) * "
     "max(x*gate_scale + gate_bias, 0). out may be features itself."},
    {"fusiongate_alpha", (PyCFunction)(void (*)(void))m_fusiongate_alpha, FC,
     "fusiongate_alpha(boundary, uncertainty, boundary_log_weight=1.0, "
     "uncertainty_log_weight=1.0, bias=0.0, out=None, *, stream=None, backend=None, "
     "validate=None)\n"
     "out = sigmoid(softplus(boundary_log_weight)*b + softplus(uncertainty_log_weight)*u + "
     "bias), proxies sanitised (NaN->0, +inf->1, -inf->0); out [B,1,H,W]."},
    {"fusiongate_fuse", (PyCFunction)(void (*)(void))m_fusiongate_fuse, FC,
     "fusiongate_fuse(base, detail, alpha, out=None, *, stream=None, backend=None, "
     "validate=None)\n"
     "out = base + alpha*(detail - base), alpha [B,1,H,W] broadcast over C. out may be base "
     "itself."},
    {"tilessm_scan", (PyCFunction)(void (*)(void))m_tilessm_scan, FC,
     "tilessm_scan(tokens, decay, input_gain, output_gain, state_bias, init_state=None, "
     "merge_gate=None, clamp_value=1e4, direction='forward', merge='avg', out=None, "
     "final_state=None, *, stream=None, backend=None, validate=None) -> (out, final_state)\n"
     "per (b,c): s = d*s + (1-d)*(ig*clamp(x) + sb), y = og*s (fp32 state, d clamped to "
     "[1e-6, 1-1e-6]); bidirectional merges sum|avg|gated."},
    {"gather", (PyCFunction)(void (*)(void))m_gather, FC,
     "gather(src, dim, index, out=None, *, stream=None, backend=None, validate=None)\n"
     "out[..i..] = src[..index[..i..] along dim..] (torch.gather); out has index's shape."},
    {"index_select", (PyCFunction)(void (*)(void))m_index_select, FC,
     "index_select(src, index, out=None, *, stream=None, backend=None, validate=None)\n"
     "out[i,j] = src[index[i], j]; src [M,D], index [N], out [N,D]."},
    {"scatter_add", (PyCFunction)(void (*)(void))m_scatter_add, FC,
     "scatter_add(self, dim, index, src, out=None, *, stream=None, backend=None, "
     "validate=None)\n"
     "out = self; out[..index[i]..] += src[i] along dim (fp32 accumulation, deterministic). "
     "out may be self itself."},
    {"gather_backward", (PyCFunction)(void (*)(void))m_gather_backward, FC,
     "gather_backward(grad_out, dim, index, grad_src=None, src_shape=None, *, stream=None, "
     "backend=None, validate=None)\n"
     "grad_src = zeros(src_shape) scatter_add grad_out along dim at index; give grad_src or "
     "src_shape."},
    {"ff_infer", (PyCFunction)(void (*)(void))m_ff_infer, FC,
     "ff_infer(dense, utilities, split_utilities=None, boundary=None, uncertainty=None, "
     "weights=None, tile_l0=16, tile_l1=8, kmax_l0=32, kmax_l1=64, budget_b1=16.0, "
     "budget_b2=8.0, cost_heavy=1.0, cost_cheap=0.2, enable_nesting=True, graph_replay=False, "
     "heavy=None, detail=None, alpha=None, stats=False, *, stream=None, backend=None, "
     "validate=None) -> (heavy, detail, alpha[, stats])\n"
     "one frame of the FF heavy path (docs/ff_infer.md): route by utility under budgets, "
     "then pack, scan, FiLM, refine, unpack and fuse at two tile levels."},
    {"tile_order", (PyCFunction)(void (*)(void))m_tile_order, FC,
     "tile_order(ids, grid_h, grid_w, mode='hilbert', out=None)\n"
     "out = ids stably sorted by the mode's key (hilbert, l2r, r2l, u2d, d2u, "
     "multi_direction); host tensors; out may be ids itself."},
    {NULL, NULL, 0, NULL}};

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
    raise_apx(st);
    return -1;
  }
  self->ctx = ctx;
  return 0;
}

static void context_dealloc(ContextObject *self) {
  context_free_now(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject ContextType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "apexx.Context",
    .tp_basicsize = sizeof(ContextObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Context(config=None): an apexx context. Reads the INI configuration (the "
              "path, else $APEXX_CONFIG, else the installed apexx.ini, else built-in "
              "defaults), loads and probes the backends. One method per op.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)context_init,
    .tp_dealloc = (destructor)context_dealloc,
    .tp_methods = context_methods,
};

/* ---- FFWeights ----------------------------------------------------------- */
static void weights_release(WeightsObject *self) {
  if (self->weights) {
    ContextObject *c = self->owner;
    if (c->ctx) apx_ff_weights_free(c->ctx, self->weights);
    self->weights = NULL;
    /* a closed context goes with its last weights (its close() frees it
     * itself when it still waits for calls) */
    if (--c->live_weights == 0 && c->closing && c->calls == 0) context_free_now(c);
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
  if (calls_wait(&self->calls, "FFWeights.close") < 0) {
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
    return raise_invalid("FFWeights.save: the weights are freed");
  }
  apx_status st = apx_ff_weights_save(self->owner->ctx, self->weights, PyBytes_AS_STRING(bytes));
  Py_DECREF(bytes);
  if (st != APX_OK) return raise_apx(st);
  Py_RETURN_NONE;
}

static PyObject *w_channels(WeightsObject *self, void *unused) {
  (void)unused;
  return PyLong_FromLongLong(apx_ff_weights_channels(self->weights));
}

static PyMethodDef weights_methods[] = {
    {"close", (PyCFunction)w_close, METH_NOARGS, "close(): free the weights now."},
    {"save", (PyCFunction)w_save, METH_O, "save(path): write a float32 safetensors file."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef weights_getset[] = {
    {"channels", (getter)w_channels, NULL, "channel count C (0 when freed)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject WeightsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "apexx.FFWeights",
    .tp_basicsize = sizeof(WeightsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Learned weights of the FF module (ctx.ff_weights_load / ctx.ff_weights_seeded); "
              "they belong to their context.",
    .tp_dealloc = (destructor)weights_dealloc,
    .tp_methods = weights_methods,
    .tp_getset = weights_getset,
};

/* ---- module -------------------------------------------------------------- */
/* _set_hooks(errors, alloc, stream): errors is a sequence indexed by status
 * (0 = ApexxError). */
static PyObject *mod_set_hooks(PyObject *mod, PyObject *args) {
  (void)mod;
  PyObject *errors, *alloc, *stream;
  if (!PyArg_ParseTuple(args, "OOO:_set_hooks", &errors, &alloc, &stream)) return NULL;
  PyObject *seq = PySequence_Fast(errors, "errors must be a sequence");
  if (!seq) return NULL;
  if (PySequence_Fast_GET_SIZE(seq) != STATUS_COUNT) {
    Py_DECREF(seq);
    PyErr_SetString(PyExc_ValueError, "errors: one class per status");
    return NULL;
  }
  for (int i = 0; i < STATUS_COUNT; i++) {
    PyObject *c = PySequence_Fast_GET_ITEM(seq, i);
    Py_INCREF(c);
    Py_XSETREF(g_error_classes[i], c);
  }
  Py_DECREF(seq);
  Py_INCREF(alloc);
  Py_XSETREF(g_alloc_hook, alloc);
  Py_INCREF(stream);
  Py_XSETREF(g_stream_hook, stream);
  Py_RETURN_NONE;
}

static PyObject *mod_version(PyObject *mod, PyObject *unused) {
  (void)mod, (void)unused;
  return PyUnicode_FromString(apx_version());
}

static PyMethodDef module_methods[] = {
    {"_set_hooks", mod_set_hooks, METH_VARARGS, "internal: exception classes and hooks"},
    {"version", mod_version, METH_NOARGS, "version() -> libapexx's version string"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef apexx_module = {PyModuleDef_HEAD_INIT, "_apexx",
                                          "libapexx binding (use the apexx package)", -1,
                                          module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__apexx(void) {
  if (PyType_Ready(&ContextType) < 0 || PyType_Ready(&WeightsType) < 0) return NULL;
  g_str_dlpack = PyUnicode_InternFromString("__dlpack__");
  g_str_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
  g_str_stream = PyUnicode_InternFromString("stream");
  g_str_requires_grad = PyUnicode_InternFromString("requires_grad");
  g_str_detach = PyUnicode_InternFromString("detach");
  if (!g_str_dlpack || !g_str_dlpack_device || !g_str_stream || !g_str_requires_grad ||
      !g_str_detach)
    return NULL;
  PyObject *m = PyModule_Create(&apexx_module);
  if (!m) return NULL;
  Py_INCREF(&ContextType);
  Py_INCREF(&WeightsType);
  if (PyModule_AddObject(m, "Context", (PyObject *)&ContextType) < 0 ||
      PyModule_AddObject(m, "FFWeights", (PyObject *)&WeightsType) < 0 ||
      PyModule_AddStringConstant(m, "HEADER_VERSION", APEXX_VERSION_STRING) < 0 ||
      PyModule_AddIntConstant(m, "DLPACK_VERSION", APX_DLPACK_HEADER_VERSION) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
