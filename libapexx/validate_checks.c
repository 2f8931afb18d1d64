/* SPDX-License-Identifier: Apache-2.0 */
/* The checks every op validator uses (validate.h): one tensor's
 * well-formedness and device, shapes, dtypes, the tile grid, aliasing and
 * the values of host index tensors. Every failure is APX_ERR_INVALID_ARG
 * with "op: what is wrong [bad value]" (docs/ops.md, Errors). Nothing here
 * writes memory a caller passed. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "validate.h"

static const char *dtype_label(apx_dtype dtype) {
  const char *name = apx_dtype_name(dtype);
  return name ? name : "?";
}

typedef apx__vstate vstate;

apx_status apx__vfail(const vstate *v, const char *fmt, ...) {
  char text[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  return apx__error(APX_ERR_INVALID_ARG, "%s: %s", v->op, text);
}

/* "[2,3,8,8]" ("[]" for ndim 0). */
const char *apx__vshape_text(char *buf, size_t size, int ndim, const int64_t *shape) {
  size_t used = 0;
  buf[0] = '\0';
  used += (size_t)snprintf(buf + used, size - used, "[");
  for (int d = 0; d < ndim && used < size; d++)
    used += (size_t)snprintf(buf + used, size - used, "%s%lld", d ? "," : "", (long long)shape[d]);
  if (used < size)
    snprintf(buf + used, size - used, "]");
  return buf;
}

/* "[0][3]": the multi-index of flat element `flat` of t. */
const char *apx__vposition_text(char *buf, size_t size, const apx_tensor *t, int64_t flat) {
  int64_t coord[APX_MAX_DIMS];
  for (int d = t->ndim - 1; d >= 0; d--) {
    int64_t extent = t->shape[d] > 0 ? t->shape[d] : 1;
    coord[d] = flat % extent;
    flat /= extent;
  }
  size_t used = 0;
  buf[0] = '\0';
  for (int d = 0; d < t->ndim && used < size; d++)
    used += (size_t)snprintf(buf + used, size - used, "[%lld]", (long long)coord[d]);
  return buf;
}

/* A double as "%g" when that reads back exactly, else with 17 digits, so
 * a message never shows 1.0000001 as [1]. */
const char *apx__vdouble_text(char *buf, size_t size, double x) {
  snprintf(buf, size, "%g", x);
  if (isfinite(x) && strtod(buf, NULL) != x)
    snprintf(buf, size, "%.17g", x);
  return buf;
}

/* Only called on tensors apx__vcheck_tensor accepted (count and bytes fit), so
 * the checked product never saturates there. */
int64_t apx__vnumel(const apx_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++)
    if (__builtin_mul_overflow(n, t->shape[d], &n))
      return INT64_MAX;
  return n;
}

static size_t bytes_of(const apx_tensor *t) {
  return (size_t)apx__vnumel(t) * apx_backend_dtype_size(t->dtype);
}

static int is_float(apx_dtype dtype) {
  return dtype == APX_DTYPE_F32 || dtype == APX_DTYPE_F16 || dtype == APX_DTYPE_BF16;
}

static int is_index(apx_dtype dtype) { return dtype == APX_DTYPE_I32 || dtype == APX_DTYPE_I64; }

/* Element i of an i32|i64 tensor. */
int64_t apx__vindex_at(const apx_tensor *t, int64_t i) {
  if (t->dtype == APX_DTYPE_I32)
    return ((const int32_t *)t->data)[i];
  return ((const int64_t *)t->data)[i];
}

/* ---- one tensor's well-formedness and its device ---- */

/* t may be NULL only when !required (then there is nothing to check). */
apx_status apx__vcheck_tensor(vstate *v, const char *name, const apx_tensor *t, int required) {
  char shape_buf[160];
  if (!t) {
    if (required)
      return apx__vfail(v, "%s is required, got [NULL]", name);
    return APX_OK;
  }
  if (t->ndim < 0 || t->ndim > APX_MAX_DIMS)
    return apx__vfail(v, "%s has ndim [%d], outside [0, %d]", name, t->ndim, APX_MAX_DIMS);
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] < 0)
      return apx__vfail(v, "%s.shape[%d] = [%lld] is negative", name, d, (long long)t->shape[d]);
  if ((unsigned)t->dtype >= (unsigned)APX_DTYPE_COUNT)
    return apx__vfail(v, "%s has unknown dtype [%d]", name, (int)t->dtype);
  if (t->device != APX_DEVICE_HOST && t->device != APX_DEVICE_CUDA)
    return apx__vfail(v, "%s has unknown device kind [%d]", name, (int)t->device);
  if (t->device_index < 0)
    return apx__vfail(v, "%s.device_index = [%d] is negative", name, t->device_index);
  if (t->device == APX_DEVICE_HOST && t->device_index != 0)
    return apx__vfail(v, "%s is a host tensor with device_index [%d] (must be 0)", name,
                      t->device_index);

  /* The byte size must be representable: backends compute offsets in
   * int64 and sizes in size_t. */
  int64_t numel = 1;
  for (int d = 0; d < t->ndim; d++)
    if (__builtin_mul_overflow(numel, t->shape[d], &numel))
      return apx__vfail(v, "%s shape %s is too large (element count overflows)", name,
                        apx__vshape_text(shape_buf, sizeof shape_buf, t->ndim, t->shape));
  int64_t bytes;
  if (__builtin_mul_overflow(numel, (int64_t)apx_backend_dtype_size(t->dtype), &bytes) ||
      (uint64_t)bytes > (uint64_t)SIZE_MAX)
    return apx__vfail(v, "%s shape %s is too large (byte size overflows)", name,
                      apx__vshape_text(shape_buf, sizeof shape_buf, t->ndim, t->shape));
  if (numel > 0 && !t->data)
    return apx__vfail(v, "%s.data is [NULL] with [%lld] elements", name, (long long)numel);
  /* C (and CUDA) need elements at their natural alignment. */
  if ((uintptr_t)t->data % apx_backend_dtype_size(t->dtype) != 0)
    return apx__vfail(v, "%s.data = [%p] is not aligned to its element size [%zu] (%s)", name,
                      t->data, apx_backend_dtype_size(t->dtype), dtype_label(t->dtype));

  if (!v->have_site) {
    v->site.device = t->device;
    v->site.device_index = t->device_index;
    v->site_name = name;
    v->have_site = 1;
  } else if (t->device != v->site.device || t->device_index != v->site.device_index) {
    return apx__vfail(v,
                      "%s is on [%s:%d] but %s is on [%s:%d] (all tensors of a call "
                      "must be on one device)",
                      name, t->device == APX_DEVICE_HOST ? "host" : "cuda", t->device_index,
                      v->site_name, v->site.device == APX_DEVICE_HOST ? "host" : "cuda",
                      v->site.device_index);
  }
  return APX_OK;
}

/* ---- shape and dtype rules ---- */

apx_status apx__vrequire_ndim(const vstate *v, const char *name, const apx_tensor *t, int ndim,
                              const char *layout) {
  if (t->ndim != ndim)
    return apx__vfail(v, "%s must be %s, got ndim [%d]", name, layout, t->ndim);
  return APX_OK;
}

apx_status apx__vrequire_shape(const vstate *v, const char *name, const apx_tensor *t, int ndim,
                               const int64_t *shape, const char *layout) {
  int same = t->ndim == ndim;
  for (int d = 0; same && d < ndim; d++)
    same = t->shape[d] == shape[d];
  if (!same) {
    char got[160], want[160];
    return apx__vfail(v, "%s has shape %s, expected %s (%s)", name,
                      apx__vshape_text(got, sizeof got, t->ndim, t->shape),
                      apx__vshape_text(want, sizeof want, ndim, shape), layout);
  }
  return APX_OK;
}

apx_status apx__vrequire_dim_match(const vstate *v, const char *name_a, const apx_tensor *a, int da,
                                   const char *name_b, const apx_tensor *b, int db,
                                   const char *what) {
  if (a->shape[da] != b->shape[db])
    return apx__vfail(v, "%s.shape[%d] = [%lld] does not match %s.shape[%d] = [%lld] (%s)", name_a,
                      da, (long long)a->shape[da], name_b, db, (long long)b->shape[db], what);
  return APX_OK;
}

apx_status apx__vrequire_dtypes(const vstate *v, const char *name, const apx_tensor *t,
                                apx_dtype_class dtypes) {
  if (dtypes == APX_DTYPES_FLOAT && !is_float(t->dtype))
    return apx__vfail(v, "%s dtype [%s] must be f32, f16 or bf16", name, dtype_label(t->dtype));
  if (dtypes == APX_DTYPES_INDEX && !is_index(t->dtype))
    return apx__vfail(v, "%s dtype [%s] must be i32 or i64", name, dtype_label(t->dtype));
  return APX_OK;
}

apx_status apx__vrequire_same_dtype(const vstate *v, const char *name, const apx_tensor *t,
                                    const char *ref_name, const apx_tensor *ref) {
  if (t->dtype != ref->dtype)
    return apx__vfail(v, "%s dtype [%s] must equal %s dtype [%s]", name, dtype_label(t->dtype),
                      ref_name, dtype_label(ref->dtype));
  return APX_OK;
}

apx_status apx__vrequire_same_ndim(const vstate *v, const char *name, const apx_tensor *t,
                                   const char *ref_name, const apx_tensor *ref) {
  if (t->ndim != ref->ndim)
    return apx__vfail(v, "%s has ndim [%d] but %s has ndim [%d]", name, t->ndim, ref_name,
                      ref->ndim);
  return APX_OK;
}

apx_status apx__vrequire_gate_map(const vstate *v, const char *name, const apx_tensor *t,
                                  int64_t bhw[3]) {
  if (t->ndim != 3 && t->ndim != 4)
    return apx__vfail(v, "%s must be [B,1,H,W] or [B,H,W], got ndim [%d]", name, t->ndim);
  if (t->ndim == 4 && t->shape[1] != 1)
    return apx__vfail(v, "%s channel dimension %s.shape[1] = [%lld] must be 1", name, name,
                      (long long)t->shape[1]);
  bhw[0] = t->shape[0];
  bhw[1] = t->shape[t->ndim - 2];
  bhw[2] = t->shape[t->ndim - 1];
  return APX_OK;
}

apx_status apx__vrequire_tile_grid(const vstate *v, const char *tile_what, int64_t tile,
                                   const char *map_name, const apx_tensor *map) {
  if (tile <= 0)
    return apx__vfail(v, "%s = [%lld] must be > 0", tile_what, (long long)tile);
  int64_t h = map->shape[2], w = map->shape[3];
  if (h % tile != 0 || w % tile != 0)
    return apx__vfail(v, "%s H, W = [%lld, %lld] are not divisible by tile [%lld]", map_name,
                      (long long)h, (long long)w, (long long)tile);
  return APX_OK;
}

/* ---- aliasing ---- */

static int bytes_overlap(const apx_tensor *a, const apx_tensor *b) {
  size_t na = bytes_of(a), nb = bytes_of(b);
  if (na == 0 || nb == 0)
    return 0;
  uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data;
  return a0 < b0 + nb && b0 < a0 + na;
}

static int exact_alias(const apx_tensor *a, const apx_tensor *b) {
  if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim)
    return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d])
      return 0;
  return 1;
}

/* An output may share memory with an input only where the API allows it
 * (allow_exact) and then exactly: same data pointer, shape and dtype. */
apx_status apx__vrequire_no_overlap(const vstate *v, const char *out_name, const apx_tensor *out,
                                    const char *in_name, const apx_tensor *in, int allow_exact) {
  if (!out || !in || !bytes_overlap(out, in))
    return APX_OK;
  if (allow_exact && exact_alias(out, in))
    return APX_OK;
  char a[160], b[160];
  if (allow_exact)
    return apx__vfail(v,
                      "%s [%p, %s %s] overlaps %s [%p, %s %s] but is not an exact "
                      "alias (same data, shape and dtype)",
                      out_name, out->data, dtype_label(out->dtype),
                      apx__vshape_text(a, sizeof a, out->ndim, out->shape), in_name, in->data,
                      dtype_label(in->dtype), apx__vshape_text(b, sizeof b, in->ndim, in->shape));
  return apx__vfail(v,
                    "%s [%p, %zu bytes] overlaps %s [%p, %zu bytes] (this output "
                    "may not alias that argument)",
                    out_name, out->data, bytes_of(out), in_name, in->data, bytes_of(in));
}

/* ---- values of host index tensors ---- */

/* Index of the first element outside [lo, lo + span] (unsigned distance
 * from lo), or -1. Large tensors are checked in blocks with a branch-free
 * reduction that the compiler vectorises, spread over the cores: the check
 * reads the whole index tensor once more, so it must run at memory speed
 * (docs/ops.md, Errors: every host index checked before any output
 * is written). */
#define RANGE_BLOCK 8192
#define RANGE_PARALLEL_MIN (1 << 20)
#ifdef _OPENMP
#define OMP_(directive) _Pragma(directive)
#else
#define OMP_(directive) /* built without OpenMP (--disable-openmp) */
#endif

/* Blocks of RANGE_BLOCK values, each or-reduced without a branch; below
 * RANGE_PARALLEL_MIN values on the calling thread without entering a
 * parallel region (a region whose if clause is false still sets up a team
 * of one in libgomp: most of a small call's validation). */
#define FIRST_OUT_OF_RANGE_(name, type, utype)                                                     \
  /* whether block blk of p holds a value outside the range (no branch: it vectorises) */         \
  static int name##_block(const type *p, int64_t n, int64_t lo, uint64_t span, int64_t blk) {      \
    int64_t begin = blk * RANGE_BLOCK, end = begin + RANGE_BLOCK < n ? begin + RANGE_BLOCK : n;    \
    utype bad = 0;                                                                                 \
    for (int64_t i = begin; i < end; i++)                                                          \
      bad |= (utype)((utype)p[i] - (utype)lo) > (utype)span;                                       \
    return bad != 0;                                                                               \
  }                                                                                                \
  static int64_t name(const type *p, int64_t n, int64_t lo, uint64_t span) {                       \
    int64_t blocks = (n + RANGE_BLOCK - 1) / RANGE_BLOCK, first_bad_block = -1;                    \
    if (n < RANGE_PARALLEL_MIN) {                                                                  \
      for (int64_t blk = 0; blk < blocks && first_bad_block < 0; blk++)                            \
        if (name##_block(p, n, lo, span, blk))                                                     \
          first_bad_block = blk;                                                                   \
    } else {                                                                                       \
      OMP_("omp parallel for schedule(static)")                                                    \
      for (int64_t blk = 0; blk < blocks; blk++) {                                                 \
        if (name##_block(p, n, lo, span, blk)) {                                                   \
          OMP_("omp critical(apx_range)")                                                          \
          if (first_bad_block < 0 || blk < first_bad_block)                                        \
            first_bad_block = blk;                                                                 \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
    if (first_bad_block < 0)                                                                       \
      return -1;                                                                                   \
    for (int64_t i = first_bad_block * RANGE_BLOCK; i < n; i++)                                    \
      if ((utype)((utype)p[i] - (utype)lo) > (utype)span)                                          \
        return i;                                                                                  \
    return -1;                                                                                     \
  }
FIRST_OUT_OF_RANGE_(first_out_of_range_i64, int64_t, uint64_t)
FIRST_OUT_OF_RANGE_(first_out_of_range_i32, int32_t, uint32_t)
#undef FIRST_OUT_OF_RANGE_

/* The first element of t outside [lo, hi], or -1 (an empty range: 0). */
static int64_t first_outside(const apx_tensor *t, int64_t n, int64_t lo, int64_t hi) {
  if (hi < lo)
    return 0;
  if (t->dtype == APX_DTYPE_I32) {
    /* the range seen by an i32 tensor: [lo, hi] clipped to int32 */
    int64_t lo32 = lo < INT32_MIN ? INT32_MIN : lo, hi32 = hi > INT32_MAX ? INT32_MAX : hi;
    return lo32 > hi32 ? 0 : first_out_of_range_i32(t->data, n, lo32, (uint64_t)(hi32 - lo32));
  }
  return first_out_of_range_i64(t->data, n, lo, (uint64_t)hi - (uint64_t)lo);
}

int apx__values_in(const apx_tensor *t, int64_t lo, int64_t hi) {
  int64_t n = apx__vnumel(t);
  return n == 0 || first_outside(t, n, lo, hi) < 0;
}

/* Every element of t in [lo, hi]; `note` (may be NULL) is appended. */
apx_status apx__vrequire_values_in(const vstate *v, const char *name, const apx_tensor *t,
                                   int64_t lo, int64_t hi, const char *note) {
  int64_t n = apx__vnumel(t);
  if (n == 0)
    return APX_OK;
  int64_t bad = first_outside(t, n, lo, hi);
  if (bad < 0)
    return APX_OK;
  char pos[160];
  return apx__vfail(v, "%s%s = [%lld] is outside [%lld, %lld]%s%s", name,
                    apx__vposition_text(pos, sizeof pos, t, bad), (long long)apx__vindex_at(t, bad),
                    (long long)lo, (long long)hi, note ? " " : "", note ? note : "");
}

/* ---- the indexing ops (docs/ops.md, Indexing ops) ---- */

apx_status apx__vwrap_dim(const vstate *v, int dim, const char *name, const apx_tensor *t,
                          int *wrapped) {
  if (t->ndim < 1)
    return apx__vfail(v, "%s must have at least 1 dimension, got ndim [0]", name);
  if (dim < -t->ndim || dim >= t->ndim)
    return apx__vfail(v, "dim = [%d] is outside [%d, %d] for ndim [%d]", dim, -t->ndim, t->ndim - 1,
                      t->ndim);
  *wrapped = dim < 0 ? dim + t->ndim : dim;
  return APX_OK;
}

apx_status apx__vrequire_index_fits(const vstate *v, const apx_tensor *index, const char *ref_name,
                                    const apx_tensor *ref, int dim, int include_dim) {
  for (int d = 0; d < index->ndim; d++) {
    if (d == dim && !include_dim)
      continue;
    if (index->shape[d] > ref->shape[d])
      return apx__vfail(v, "index.shape[%d] = [%lld] is larger than %s.shape[%d] = [%lld]%s", d,
                        (long long)index->shape[d], ref_name, d, (long long)ref->shape[d],
                        include_dim ? "" : " (only dim may be larger)");
  }
  return APX_OK;
}

int apx__index_dim_range(const apx_tensor *ref, const char *ref_name, int dim, int64_t *lo,
                         int64_t *hi, char *why, size_t why_size) {
  int wrapped = dim < 0 ? dim + ref->ndim : dim;
  *lo = 0;
  *hi = ref->shape[wrapped] - 1;
  if (why_size > 0)
    snprintf(why, why_size, "%s.shape[%d] = [%lld]", ref_name, wrapped,
             (long long)ref->shape[wrapped]);
  return 1;
}
