/* SPDX-License-Identifier: Apache-2.0 */
/* apexx._apexx: tensors borrowed for a call. A host buffer (NumPy) through
 * the buffer protocol, a plain host torch.Tensor through its attributes,
 * anything else through DLPack (torch on CUDA, CuPy, JAX),
 * the call's CUDA stream, and outputs: the caller's tensor or a new one of
 * the input's library. */
#include "binding.h"

#include <dlpack/dlpack.h>
#include <string.h>

#if !defined(DLPACK_MAJOR_VERSION) || DLPACK_MAJOR_VERSION < 1
/* DLPack 1.0's versioned managed tensor (its dlpack.h: DLPackVersion,
 * DLManagedTensorVersioned, the flag bits), declared around the installed
 * header's DLTensor, whose layout 1.x keeps: Debian 12's libdlpack-dev is
 * 0.6, which predates them. A 1.x header is used as it is. */
typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
#endif
/* The newest DLPack major version the binding reads (asked as max_version). */
#define APXPY_DLPACK_MAJOR 1

const char *const apxpy_dtype_names[] = {"float32", "float16", "bfloat16", "int32", "int64"};
PyObject *apxpy_alloc_hook, *apxpy_stream_hook;
PyObject *apxpy_str_dlpack, *apxpy_str_dlpack_device, *apxpy_str_stream,
    *apxpy_str_requires_grad, *apxpy_str_detach, *apxpy_str_device, *apxpy_str_data_ptr;
/* torch, found lazily in sys.modules: Tensor type, torch._C._to_dlpack,
 * and for outputs torch.empty and the dtypes by apx_dtype */
static PyTypeObject *g_torch_tensor;
static PyObject *g_torch_to_dlpack, *g_torch_empty, *g_torch_dtypes[5];
/* torch.strided and the attribute names a host tensor is read by */
static PyObject *g_torch_strided, *g_str_is_cpu, *g_str_layout, *g_str_dtype, *g_str_shape,
    *g_str_stride;
/* "is_neg": a tensor with torch's negative bit is refused (its memory
 * holds the values unnegated) */
static PyObject *g_str_is_neg;
/* NumPy, found the same way when an output is made like an ndarray */
static PyTypeObject *g_numpy_ndarray;
static PyObject *g_numpy_empty, *g_numpy_dtypes[5];

/* An integer stream pointer from an int, or an object with .cuda_stream
 * (torch.cuda.Stream) or .ptr (cupy.cuda.Stream). */
int apxpy_stream_from_object(PyObject *o, uintptr_t *out) {
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
int apxpy_resolve_stream(apxpy_call *cs, PyObject *obj, int device_id) {
  if (cs->stream_known) return 0;
  uintptr_t s = 0;
  if (cs->stream_obj) {
    if (apxpy_stream_from_object(cs->stream_obj, &s) < 0) return -1;
  } else if (apxpy_stream_hook) {
    PyObject *r = PyObject_CallFunction(apxpy_stream_hook, "Oi", obj, device_id);
    if (!r) return -1;
    if (r != Py_None) {
      int rc = apxpy_stream_from_object(r, &s);
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
    /* missing ones (NULL): outputs through the allocation hook */
    g_torch_empty = PyObject_GetAttrString(t, "empty");
    for (int i = 0; g_torch_empty && i < 5; i++)
      if (!(g_torch_dtypes[i] = PyObject_GetAttrString(t, apxpy_dtype_names[i])))
        Py_CLEAR(g_torch_empty);
    g_str_is_cpu = PyUnicode_InternFromString("is_cpu");
    g_str_layout = PyUnicode_InternFromString("layout");
    g_str_dtype = PyUnicode_InternFromString("dtype");
    g_str_shape = PyUnicode_InternFromString("shape");
    g_str_stride = PyUnicode_InternFromString("stride");
    g_str_is_neg = PyUnicode_InternFromString("is_neg");
    if (g_str_is_cpu && g_str_layout && g_str_dtype && g_str_shape && g_str_stride)
      g_torch_strided = PyObject_GetAttrString(t, "strided"); /* NULL: DLPack always */
    PyErr_Clear();
  }
  return PyObject_TypeCheck(o, g_torch_tensor);
}

/* A strided host array (strides in bytes, any sign, 0 for an expanded
 * dimension) copied into h->packed, row-major: how an index that is only
 * read reaches the core (APXPY_INDEX). 0, or -1 with MemoryError. */
static int pack_host(apxpy_call *cs, apxpy_held_tensor *h, const char *src, int ndim,
                     const int64_t *shape, const int64_t *stride_bytes, size_t itemsize) {
  size_t n = 1;
  for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
  h->packed = PyMem_RawMalloc(n ? n * itemsize : 1);
  if (!h->packed) {
    PyErr_NoMemory();
    return -1;
  }
  int64_t coord[APX_MAX_DIMS] = {0};
  int64_t off = 0; /* of coord, kept in step with it */
  char *dst = h->packed;
  for (size_t k = 0; k < n; k++) {
    memcpy(dst + k * itemsize, src + off, itemsize);
    for (int d = ndim - 1; d >= 0; d--) {
      off += stride_bytes[d];
      if (++coord[d] < shape[d]) break;
      off -= coord[d] * stride_bytes[d];
      coord[d] = 0;
    }
  }
  cs->host_bytes += n * itemsize;
  h->t.data = h->packed;
  return 0;
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

/* A host buffer (NumPy ...) through the buffer protocol, into h (counted
 * in cs->nheld once its view is held). Returns 1 done (t or an error in
 * *out), 0 when obj is to be read through DLPack instead. */
static int from_buffer(apxpy_call *cs, apxpy_held_tensor *h, PyObject *obj, const char *name,
                       int mode, const apx_tensor **out) {
  apx_tensor *t = &h->t;
  const int writable = mode == APXPY_OUTPUT;
  *out = NULL;
  int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj, &h->view, flags) < 0) {
    if (writable && (PyErr_ExceptionMatches(PyExc_BufferError) ||
                     PyErr_ExceptionMatches(PyExc_ValueError))) {
      PyErr_Clear();
      apxpy_raise_invalid("%s: %s is read-only", cs->op, name);
      return 1;
    }
    /* a device array that refuses host buffers (CuPy) goes through DLPack
     * (the error is cleared first: no attribute lookup with one pending) */
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) return 1;
    PyErr_Clear();
    if (!PyObject_HasAttr(obj, apxpy_str_dlpack)) {
      PyErr_Format(PyExc_TypeError,
                   "%s: %s refuses the buffer protocol and has no __dlpack__ (%.100s)", cs->op,
                   name, Py_TYPE(obj)->tp_name);
      return 1;
    }
    return 0;
  }
  h->has_view = 1;
  h->obj = obj;
  Py_INCREF(obj);
  cs->nheld++; /* released by apxpy_call_release from here on */
  if (buffer_foreign_order(&h->view)) {
    apxpy_raise_invalid("%s: %s is stored %s-endian (buffer format [%s]); apexx reads the "
                        "machine's byte order: pass a native copy, e.g. "
                        "a.astype(a.dtype.newbyteorder('='))",
                        cs->op, name, *h->view.format == '<' ? "little" : "big",
                        h->view.format);
    return 1;
  }
  if (!buffer_dtype(&h->view, &t->dtype)) {
    apxpy_raise_invalid("%s: %s dtype [%s] is not one of float32, float16, bfloat16, int32, "
                        "int64",
                        cs->op, name, buffer_format_text(&h->view));
    return 1;
  }
  if (h->view.ndim > APX_MAX_DIMS) {
    apxpy_raise_invalid("%s: %s has [%d] dimensions, more than %d", cs->op, name, h->view.ndim,
                        APX_MAX_DIMS);
    return 1;
  }
  t->data = h->view.buf;
  if (!PyBuffer_IsContiguous(&h->view, 'C')) {
    if (mode != APXPY_INDEX) {
      apxpy_raise_invalid("%s: %s is not contiguous (row-major, dense); pass a contiguous copy",
                          cs->op, name);
      return 1;
    }
    int64_t shape[APX_MAX_DIMS], strides[APX_MAX_DIMS];
    for (int i = 0; i < h->view.ndim; i++) {
      shape[i] = h->view.shape[i];
      strides[i] = h->view.strides[i];
    }
    if (pack_host(cs, h, h->view.buf, h->view.ndim, shape, strides,
                  (size_t)h->view.itemsize) < 0)
      return 1;
  }
  t->device = APX_DEVICE_HOST;
  t->device_index = 0;
  t->ndim = h->view.ndim;
  for (int i = 0; i < t->ndim; i++) t->shape[i] = h->view.shape[i];
  if (!h->packed) cs->host_bytes += (size_t)h->view.len;
  *out = t;
  return 1;
}

/* Keyword names and values for __dlpack__, made once (with the GIL). */
static PyObject *g_kw_version, *g_kw_stream_version, *g_kw_stream, *g_max_version;
/* Types whose __dlpack__ refused max_version (DLPack 0.x producers). */
static PyObject *g_dlpack_0x_types;

static int dlpack_names_ready(void) {
  if (g_dlpack_0x_types) return 0;
  PyObject *max_version = PyUnicode_InternFromString("max_version");
  if (!max_version) return -1;
  g_kw_version = PyTuple_Pack(1, max_version);
  g_kw_stream_version = PyTuple_Pack(2, apxpy_str_stream, max_version);
  g_kw_stream = PyTuple_Pack(1, apxpy_str_stream);
  g_max_version = Py_BuildValue("(ii)", APXPY_DLPACK_MAJOR, 0);
  Py_DECREF(max_version);
  if (!g_kw_version || !g_kw_stream_version || !g_kw_stream || !g_max_version) return -1;
  g_dlpack_0x_types = PySet_New(NULL);
  return g_dlpack_0x_types ? 0 : -1;
}

/* obj.__dlpack__(max_version=(1, 0)[, stream=stream]): a "dltensor_versioned"
 * capsule from a DLPack 1.x producer (or a "dltensor" one from a producer
 * that reads max_version and stays on 0.x). A producer that does not take
 * max_version (TypeError: torch 1.13, NumPy < 2.1, older CuPy and JAX) is
 * asked again without it, and its type is remembered, so later calls ask it
 * plainly. A new reference or NULL with an exception. */
static PyObject *call_dlpack(PyObject *obj, PyObject *stream) {
  if (dlpack_names_ready() < 0) return NULL;
  PyObject *fn = PyObject_GetAttr(obj, apxpy_str_dlpack);
  if (!fn) return NULL;
  PyObject *capsule = NULL, *vargs[3] = {NULL, stream, g_max_version};
  const size_t offset = PY_VECTORCALL_ARGUMENTS_OFFSET;
  int known_0x = PySet_Contains(g_dlpack_0x_types, (PyObject *)Py_TYPE(obj));
  if (known_0x < 0) goto done;
  if (!known_0x) {
    capsule = stream ? PyObject_Vectorcall(fn, vargs + 1, 0 | offset, g_kw_stream_version)
                     : PyObject_Vectorcall(fn, vargs + 2, 0 | offset, g_kw_version);
    if (capsule || !PyErr_ExceptionMatches(PyExc_TypeError)) goto done;
    PyErr_Clear();
  }
  capsule = stream ? PyObject_Vectorcall(fn, vargs + 1, 0 | offset, g_kw_stream)
                   : PyObject_CallNoArgs(fn);
  if (capsule && !known_0x && PySet_Add(g_dlpack_0x_types, (PyObject *)Py_TYPE(obj)) < 0)
    Py_CLEAR(capsule);
done:
  Py_DECREF(fn);
  return capsule;
}

/* obj's DLPack capsule (a new reference) or NULL with an exception: torch
 * on its current stream through torch._C._to_dlpack, a CUDA tensor with
 * the call's stream (the DLPack handshake), a host one plainly. */
static PyObject *dlpack_capsule(apxpy_call *cs, PyObject *obj, int torch, const char *name) {
  if (torch && !cs->stream_obj && g_torch_to_dlpack)
    /* no handshake needed: skip __dlpack__'s Python-level checks */
    return PyObject_CallOneArg(g_torch_to_dlpack, obj);
  PyObject *devt = PyObject_CallMethodNoArgs(obj, apxpy_str_dlpack_device);
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
  if (dev_type == kDLCPU || dev_type == kDLCUDAHost) return call_dlpack(obj, NULL);
  if (dev_type != kDLCUDA) {
    apxpy_raise_invalid("%s: %s is on DLPack device [type %ld, id %ld]; apexx serves host "
                        "(kDLCPU) and CUDA (kDLCUDA) memory",
                        cs->op, name, dev_type, dev_id);
    return NULL;
  }
  if (apxpy_resolve_stream(cs, obj, (int)dev_id) < 0) return NULL;
  return call_dlpack(obj, cs->dlpack_stream);
}

/* Fill h->t from the DLTensor dl (obj's), checking device, dtype, rank and
 * contiguity (a strided host index is packed: APXPY_INDEX). */
static const apx_tensor *from_dltensor(apxpy_call *cs, apxpy_held_tensor *h, const DLTensor *dl,
                                       PyObject *obj, const char *name, int mode) {
  apx_tensor *t = &h->t;
  if (dl->device.device_type == kDLCPU || dl->device.device_type == kDLCUDAHost) {
    t->device = APX_DEVICE_HOST;
    t->device_index = 0;
  } else if (dl->device.device_type == kDLCUDA) {
    t->device = APX_DEVICE_CUDA;
    t->device_index = dl->device.device_id;
    if (apxpy_resolve_stream(cs, obj, t->device_index) < 0) return NULL;
  } else {
    return apxpy_invalid_tensor("%s: %s is on DLPack device [type %d, id %d]; apexx serves "
                                "host (kDLCPU) and CUDA (kDLCUDA) memory",
                                cs->op, name, (int)dl->device.device_type,
                                (int)dl->device.device_id);
  }
  if (!dl_dtype(dl->dtype, &t->dtype)) {
    char dt[32];
    dl_dtype_text(dl->dtype, dt, sizeof dt);
    return apxpy_invalid_tensor("%s: %s dtype [%s] is not one of float32, float16, bfloat16, "
                                "int32, int64",
                                cs->op, name, dt);
  }
  if (dl->ndim > APX_MAX_DIMS || dl->ndim < 0)
    return apxpy_invalid_tensor("%s: %s has [%d] dimensions, more than %d", cs->op, name,
                                dl->ndim, APX_MAX_DIMS);
  t->data = (char *)dl->data + dl->byte_offset;
  t->ndim = dl->ndim;
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++) {
    t->shape[i] = dl->shape[i];
    n *= (size_t)dl->shape[i];
  }
  if (!dl_contiguous(dl)) {
    if (mode != APXPY_INDEX || t->device != APX_DEVICE_HOST)
      return apxpy_invalid_tensor("%s: %s is not contiguous (row-major, dense); pass a "
                                  "contiguous copy",
                                  cs->op, name);
    const size_t itemsize = apx_dtype_size(t->dtype);
    int64_t strides[APX_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) strides[i] = dl->strides[i] * (int64_t)itemsize;
    if (pack_host(cs, h, t->data, t->ndim, t->shape, strides, itemsize) < 0) return NULL;
    return t;
  }
  if (t->device == APX_DEVICE_HOST) cs->host_bytes += n * apx_dtype_size(t->dtype);
  return t;
}

/* obj's DLTensor through its capsule, kept in h->capsule (unconsumed: its
 * destructor frees the tensor when the call releases it), and the capsule's
 * DLPack flags (0 for a 0.x one); NULL with an exception. */
static const DLTensor *export_dltensor(apxpy_call *cs, apxpy_held_tensor *h, PyObject *obj,
                                       int torch, const char *name, uint64_t *flags) {
  PyObject *capsule = dlpack_capsule(cs, obj, torch, name);
  if (!capsule) return NULL;
  h->capsule = capsule;
  *flags = 0;
  if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
    DLManagedTensorVersioned *mv =
        (DLManagedTensorVersioned *)PyCapsule_GetPointer(capsule, "dltensor_versioned");
    if (!mv) return NULL;
    if (mv->version.major != APXPY_DLPACK_MAJOR) {
      apxpy_raise_invalid("%s: %s: __dlpack__ gave DLPack version [%u.%u]; apexx reads 0.x and "
                          "1.x",
                          cs->op, name, (unsigned)mv->version.major, (unsigned)mv->version.minor);
      return NULL;
    }
    *flags = mv->flags;
    return &mv->dl_tensor;
  }
  DLManagedTensor *m = PyCapsule_IsValid(capsule, "dltensor")
                           ? (DLManagedTensor *)PyCapsule_GetPointer(capsule, "dltensor")
                           : NULL;
  if (!m) {
    PyErr_Clear();
    apxpy_raise_invalid("%s: %s: __dlpack__ did not return an unconsumed \"dltensor\" or "
                        "\"dltensor_versioned\" capsule",
                        cs->op, name);
    return NULL;
  }
  return &m->dl_tensor;
}

/* A plain torch.Tensor in host memory read from its own attributes
 * (is_cpu, layout, dtype, shape, stride(), data_ptr()) instead of a DLPack
 * export, which costs torch an as_strided view and a capsule: 1 with h->t
 * filled; 0 when it is not a dense row-major strided host tensor of a
 * dtype apexx takes, or an attribute fails (the DLPack path then reads it
 * or refuses it with its message). */
static int from_torch_host(apxpy_call *cs, apxpy_held_tensor *h, PyObject *obj) {
  apx_tensor *t = &h->t;
  PyObject *shape = NULL, *stride = NULL, *v;
  int ok = 0, dtype = -1;
  if (!g_torch_strided) return 0;
  if (!(v = PyObject_GetAttr(obj, g_str_is_cpu))) goto done;
  ok = v == Py_True;
  Py_DECREF(v);
  if (!ok || !(v = PyObject_GetAttr(obj, g_str_layout))) goto done;
  ok = v == g_torch_strided;
  Py_DECREF(v);
  if (!ok || !(v = PyObject_GetAttr(obj, g_str_dtype))) goto done;
  for (int i = 0; i < 5; i++)
    if (g_torch_dtypes[i] == v) dtype = i;
  Py_DECREF(v);
  ok = 0;
  if (dtype < 0 || !(shape = PyObject_GetAttr(obj, g_str_shape)) || !PyTuple_Check(shape) ||
      !(stride = PyObject_CallMethodNoArgs(obj, g_str_stride)) || !PyTuple_Check(stride))
    goto done;
  const Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
  if (ndim > APX_MAX_DIMS || PyTuple_GET_SIZE(stride) != ndim) goto done;
  int64_t expected = 1; /* row-major, as dl_contiguous */
  size_t n = 1;
  for (Py_ssize_t i = ndim - 1; i >= 0; i--) {
    long long dim = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    long long step = PyLong_AsLongLong(PyTuple_GET_ITEM(stride, i));
    if (PyErr_Occurred() || dim < 0) goto done;
    if (dim > 1 && step != expected) goto done; /* strided (or empty): DLPack's rule */
    t->shape[i] = dim;
    expected *= dim;
    n *= (size_t)dim;
  }
  if (!(v = PyObject_CallMethodNoArgs(obj, apxpy_str_data_ptr))) goto done;
  t->data = PyLong_AsVoidPtr(v);
  Py_DECREF(v);
  if (PyErr_Occurred()) goto done;
  t->dtype = (apx_dtype)dtype;
  t->device = APX_DEVICE_HOST;
  t->device_index = 0;
  t->ndim = (int)ndim;
  cs->host_bytes += n * apx_dtype_size(t->dtype);
  ok = 1;
done:
  Py_XDECREF(shape);
  Py_XDECREF(stride);
  if (!ok) PyErr_Clear();
  return ok;
}

/* A torch tensor whose negative bit is set (torch._neg_view, the
 * imaginary part of a conjugate view) keeps its values unnegated in
 * memory, which apexx would read as they are: refused with the way out.
 * 0, or -1 with the exception (an is_neg that fails; torch without
 * is_neg: 0). */
static int torch_neg_refused(apxpy_call *cs, PyObject *obj, const char *name) {
  if (!g_str_is_neg) return 0;
  PyObject *v = PyObject_CallMethodNoArgs(obj, g_str_is_neg);
  if (!v) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    return 0;
  }
  const int neg = v == Py_True;
  Py_DECREF(v);
  if (!neg) return 0;
  apxpy_raise_invalid("%s: %s has torch's negative bit set (a lazy negation, e.g. from "
                       "torch._neg_view): its memory holds the values unnegated; pass "
                       "%s.resolve_neg()",
                       cs->op, name, name);
  return -1;
}

/* obj through DLPack, into h (held from the start: apxpy_call_release
 * cleans up on error). */
static const apx_tensor *from_dlpack(apxpy_call *cs, apxpy_held_tensor *h, PyObject *obj,
                                     const char *name, int mode) {
  h->obj = obj;
  Py_INCREF(obj);
  cs->nheld++;
  int torch = is_torch_tensor(obj);
  if (torch && torch_neg_refused(cs, obj, name)) return NULL;
  if (torch && Py_TYPE(obj) == g_torch_tensor && !cs->stream_obj && from_torch_host(cs, h, obj))
    return &h->t;
  if (torch) {
    /* an autograd tensor is read through a detached alias (same memory) */
    PyObject *rg = PyObject_GetAttr(obj, apxpy_str_requires_grad);
    if (!rg) return NULL;
    int needs_detach = PyObject_IsTrue(rg);
    Py_DECREF(rg);
    if (needs_detach < 0) return NULL;
    if (needs_detach) {
      PyObject *detached = PyObject_CallMethodNoArgs(obj, apxpy_str_detach);
      if (!detached) return NULL;
      Py_SETREF(h->obj, detached);
      obj = detached;
    }
  }
  uint64_t flags;
  const DLTensor *dl = export_dltensor(cs, h, obj, torch, name, &flags);
  if (!dl) return NULL;
  if (mode == APXPY_OUTPUT && (flags & DLPACK_FLAG_BITMASK_READ_ONLY))
    return apxpy_invalid_tensor("%s: %s is read-only (its DLPack capsule says so); pass a "
                                "writable tensor",
                                cs->op, name);
  if (mode == APXPY_OUTPUT && (flags & DLPACK_FLAG_BITMASK_IS_COPIED))
    return apxpy_invalid_tensor("%s: %s was exported as a copy (DLPack flag is_copied): the "
                                "results would not reach it; pass a tensor whose own memory "
                                "is exported",
                                cs->op, name);
  if (mode == APXPY_INDEX && torch && dl->device.device_type == kDLCUDA && !dl_contiguous(dl)) {
    /* a strided CUDA index: torch's own copy, on the current stream the call runs on */
    PyObject *dense = PyObject_CallMethod(obj, "contiguous", NULL);
    if (!dense) return NULL;
    Py_SETREF(h->obj, dense);
    obj = dense;
    Py_CLEAR(h->capsule);
    if (!(dl = export_dltensor(cs, h, obj, torch, name, &flags))) return NULL;
  }
  return from_dltensor(cs, h, dl, obj, name, mode);
}

const apx_tensor *apxpy_acquire(apxpy_call *cs, PyObject *obj, const char *name, int mode) {
  if (cs->nheld >= APXPY_MAX_HELD) {
    PyErr_SetString(PyExc_RuntimeError, "apexx: too many tensors in one call");
    return NULL;
  }
  apxpy_held_tensor *h = &cs->held[cs->nheld];
  memset(h, 0, sizeof *h);
  /* torch tensors have no buffer protocol */
  if (PyObject_CheckBuffer(obj)) {
    const apx_tensor *t;
    if (from_buffer(cs, h, obj, name, mode, &t)) return t;
  }
  return from_dlpack(cs, h, obj, name, mode);
}

const apx_tensor *apxpy_req_tensor(apxpy_call *cs, PyObject *o, const char *name) {
  if (!o || o == Py_None) {
    PyErr_Format(PyExc_TypeError, "%s: missing required tensor argument '%s'", cs->op, name);
    return NULL;
  }
  return apxpy_acquire(cs, o, name, APXPY_INPUT);
}

/* An output shape NumPy or torch can allocate: no negative dimension, a
 * byte size that fits Py_ssize_t. */
static int allocatable(int ndim, const int64_t *shape, apx_dtype dtype) {
  uint64_t bytes = apx_dtype_size(dtype);
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0 || __builtin_mul_overflow(bytes, (uint64_t)shape[i], &bytes)) return 0;
  return bytes <= (uint64_t)PY_SSIZE_T_MAX;
}

/* An output whose derived shape cannot be allocated (a negative tile, a
 * tile of 2^31): the core validates the call with an empty output of that
 * rank in its place, so the message names the argument at fault; when the
 * core finds nothing, the shape itself is named. Always NULL. */
static const apx_tensor *unallocatable(apxpy_call *cs, const apx_tensor **slot,
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
    int rejected = apxpy_validate_early(cs) < 0;
    *slot = NULL;
    if (rejected) return NULL;
  }
  char text[256] = "";
  size_t used = 0;
  for (int i = 0; i < ndim && used < sizeof text; i++)
    used += (size_t)snprintf(text + used, sizeof text - used, "%s%lld", i ? ", " : "",
                             (long long)shape[i]);
  return apxpy_invalid_tensor("%s: %s would have shape [%s] of %s, which cannot be allocated",
                              cs->op, name, text, apxpy_dtype_names[dtype]);
}

/* ---- outputs the binding makes ------------------------------------------------
 * An output not given is made by the library of the call's first input,
 * on its device, as apexx/__init__.py's _alloc hook says. For a plain
 * torch.Tensor and a NumPy ndarray the binding calls what _alloc would,
 * torch.empty(shape, dtype=, device=like.device) and numpy.empty(shape,
 * dtype=), itself (the callables and dtypes found once, like.device read
 * once a call), without the hook's Python frame per output; a tensor made
 * by torch.empty here is described from what was asked and its
 * data_ptr(), without a DLPack export. Anything else (a subclass, CuPy,
 * JAX, a NumPy bfloat16) goes through the hook. */

/* NumPy's ndarray type, empty and dtypes (bfloat16: none), found once
 * numpy is imported; 1 when found. */
static int numpy_ready(void) {
  if (g_numpy_ndarray) return 1;
  PyObject *modules = PyImport_GetModuleDict(); /* borrowed */
  PyObject *np = modules ? PyDict_GetItemString(modules, "numpy") : NULL;
  if (!np) return 0;
  PyObject *ndarray = PyObject_GetAttrString(np, "ndarray");
  PyObject *empty = ndarray ? PyObject_GetAttrString(np, "empty") : NULL;
  PyObject *dtype = empty ? PyObject_GetAttrString(np, "dtype") : NULL;
  PyObject *dtypes[5] = {NULL};
  int ok = dtype && PyType_Check(ndarray);
  for (int i = 0; ok && i < 5; i++)
    if (i != APX_DTYPE_BF16)
      ok = (dtypes[i] = PyObject_CallFunction(dtype, "s", apxpy_dtype_names[i])) != NULL;
  PyErr_Clear();
  Py_XDECREF(dtype);
  if (!ok) {
    Py_XDECREF(ndarray);
    Py_XDECREF(empty);
    for (int i = 0; i < 5; i++) Py_XDECREF(dtypes[i]);
    return 0;
  }
  g_numpy_empty = empty;
  for (int i = 0; i < 5; i++) g_numpy_dtypes[i] = dtypes[i];
  g_numpy_ndarray = (PyTypeObject *)ndarray;
  return 1;
}

enum { MADE_BY_HOOK, MADE_BY_TORCH, MADE_BY_NUMPY };

/* Who makes an output like `like` of dtype. */
static int maker_of(PyObject *like, const apx_tensor *like_t, apx_dtype dtype) {
  if (!like_t) return MADE_BY_HOOK;
  if (is_torch_tensor(like) && Py_TYPE(like) == g_torch_tensor && g_torch_empty)
    return MADE_BY_TORCH;
  if (dtype != APX_DTYPE_BF16 && numpy_ready() && Py_TYPE(like) == g_numpy_ndarray)
    return MADE_BY_NUMPY;
  return MADE_BY_HOOK;
}

/* torch.empty(shape, dtype=, device=like.device), numpy.empty(shape,
 * dtype=) or the hook's _alloc(like, shape, dtype name): a new reference. */
static PyObject *make_output(apxpy_call *cs, int maker, PyObject *like, PyObject *shape,
                             apx_dtype dtype) {
  static PyObject *dtype_device, *dtype_only; /* keyword names */
  if (!dtype_device) {
    dtype_device = Py_BuildValue("(ss)", "dtype", "device");
    dtype_only = Py_BuildValue("(s)", "dtype");
    if (!dtype_device || !dtype_only) {
      Py_CLEAR(dtype_device);
      Py_CLEAR(dtype_only);
      return NULL;
    }
  }
  if (maker == MADE_BY_TORCH) {
    if (!cs->torch_device && !(cs->torch_device = PyObject_GetAttr(like, apxpy_str_device)))
      return NULL;
    PyObject *args[3] = {shape, g_torch_dtypes[dtype], cs->torch_device};
    return PyObject_Vectorcall(g_torch_empty, args, 1, dtype_device);
  }
  if (maker == MADE_BY_NUMPY) {
    PyObject *args[2] = {shape, g_numpy_dtypes[dtype]};
    return PyObject_Vectorcall(g_numpy_empty, args, 1, dtype_only);
  }
  return PyObject_CallFunction(apxpy_alloc_hook, "OOs", like, shape, apxpy_dtype_names[dtype]);
}

/* made, a contiguous tensor that torch.empty made on like_t's device,
 * held for the call as an output of ndim/shape/dtype at its data_ptr(). */
static const apx_tensor *hold_made_torch(apxpy_call *cs, PyObject *made,
                                         const apx_tensor *like_t, int ndim,
                                         const int64_t *shape, apx_dtype dtype) {
  if (cs->nheld >= APXPY_MAX_HELD) {
    PyErr_SetString(PyExc_RuntimeError, "apexx: too many tensors in one call");
    return NULL;
  }
  PyObject *ptr = PyObject_CallMethodNoArgs(made, apxpy_str_data_ptr);
  if (!ptr) return NULL;
  void *data = PyLong_AsVoidPtr(ptr);
  Py_DECREF(ptr);
  if (!data && PyErr_Occurred()) return NULL;
  apxpy_held_tensor *h = &cs->held[cs->nheld++];
  memset(h, 0, sizeof *h);
  Py_INCREF(made);
  h->obj = made;
  apx_tensor *t = &h->t;
  t->data = data;
  t->dtype = dtype;
  t->device = like_t->device;
  t->device_index = like_t->device_index;
  t->ndim = ndim;
  size_t n = 1;
  for (int i = 0; i < ndim; i++) {
    t->shape[i] = shape[i];
    n *= (size_t)shape[i];
  }
  if (t->device == APX_DEVICE_HOST) cs->host_bytes += n * apx_dtype_size(dtype);
  return t;
}

const apx_tensor *apxpy_out_tensor(apxpy_call *cs, const apx_tensor **slot, PyObject *o,
                                   const char *name, PyObject *like, const apx_tensor *like_t,
                                   int ndim, const int64_t *shape, apx_dtype dtype,
                                   PyObject **result) {
  if (o && o != Py_None) {
    const apx_tensor *t = apxpy_acquire(cs, o, name, APXPY_OUTPUT);
    if (!t) return NULL;
    Py_INCREF(o);
    *result = o;
    return *slot = t;
  }
  if (!apxpy_alloc_hook) {
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
  const int maker = maker_of(like, like_t, dtype);
  PyObject *made = make_output(cs, maker, like, shp, dtype);
  Py_DECREF(shp);
  if (!made) return NULL;
  const apx_tensor *t = maker == MADE_BY_TORCH
                            ? hold_made_torch(cs, made, like_t, ndim, shape, dtype)
                            : apxpy_acquire(cs, made, name, APXPY_OUTPUT);
  if (!t) {
    Py_DECREF(made);
    return NULL;
  }
  *result = made;
  return *slot = t;
}
