/* Argument validation for every op, run in the core before any backend
 * (DESIGN.md "Dispatch and fallback"; docs/ops.md, Errors and
 * each op's section).
 *
 * Order of checks per op: the tensors' own well-formedness and device (so
 * that nothing below reads memory it may not), then the op's shape, dtype,
 * grid, enum and scalar rules in the spec's order, the outputs' shapes,
 * aliasing, and last the values of index tensors in host memory. The first
 * failure wins; its message names the op, the argument, the position and the
 * bad value in brackets. Nothing here reads or writes output memory. */
#include "validate.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- names (backend.h's ops, error.c's dtypes: no link dependency on
 * ops.c) ---- */

static const char *op_label(apx_op_id op) {
  const char *name = apx_backend_op_name(op);
  return name ? name : "apexx";
}

static const char *dtype_label(apx_dtype dtype) {
  const char *name = apx_dtype_name(dtype);
  return name ? name : "?";
}

/* ---- the validation state of one call ---- */

typedef apx__vstate vstate; /* validate.h */

static apx_status fail(const vstate *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static apx_status fail(const vstate *v, const char *fmt, ...) {
  char text[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  return apx__error(APX_ERR_INVALID_ARG, "%s: %s", v->op, text);
}

#define TRY(expr)                                                                                  \
  do {                                                                                             \
    apx_status try_status_ = (expr);                                                               \
    if (try_status_ != APX_OK)                                                                     \
      return try_status_;                                                                          \
  } while (0)

/* "[2,3,8,8]" ("[]" for ndim 0). */
static const char *shape_text(char *buf, size_t size, int ndim, const int64_t *shape) {
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
static const char *position_text(char *buf, size_t size, const apx_tensor *t, int64_t flat) {
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
static const char *double_text(char *buf, size_t size, double x) {
  snprintf(buf, size, "%g", x);
  if (isfinite(x) && strtod(buf, NULL) != x)
    snprintf(buf, size, "%.17g", x);
  return buf;
}

/* Only called on tensors check_tensor accepted (count and bytes fit), so
 * the checked product never saturates there. */
static int64_t numel_of(const apx_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++)
    if (__builtin_mul_overflow(n, t->shape[d], &n))
      return INT64_MAX;
  return n;
}

static size_t bytes_of(const apx_tensor *t) {
  return (size_t)numel_of(t) * apx_backend_dtype_size(t->dtype);
}

static int is_float(apx_dtype dtype) {
  return dtype == APX_DTYPE_F32 || dtype == APX_DTYPE_F16 || dtype == APX_DTYPE_BF16;
}

static int is_index(apx_dtype dtype) { return dtype == APX_DTYPE_I32 || dtype == APX_DTYPE_I64; }

/* Element i of an i32|i64 tensor. */
static int64_t index_at(const apx_tensor *t, int64_t i) {
  if (t->dtype == APX_DTYPE_I32)
    return ((const int32_t *)t->data)[i];
  return ((const int64_t *)t->data)[i];
}

static int on_host(const vstate *v) { return v->have_site && v->site.device == APX_DEVICE_HOST; }

/* ---- one tensor's well-formedness and its device ---- */

/* t may be NULL only when !required (then there is nothing to check). */
static apx_status check_tensor(vstate *v, const char *name, const apx_tensor *t, int required) {
  char shape_buf[160];
  if (!t) {
    if (required)
      return fail(v, "%s is required, got [NULL]", name);
    return APX_OK;
  }
  if (t->ndim < 0 || t->ndim > APX_MAX_DIMS)
    return fail(v, "%s has ndim [%d], outside [0, %d]", name, t->ndim, APX_MAX_DIMS);
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] < 0)
      return fail(v, "%s.shape[%d] = [%lld] is negative", name, d, (long long)t->shape[d]);
  if ((unsigned)t->dtype >= (unsigned)APX_DTYPE_COUNT)
    return fail(v, "%s has unknown dtype [%d]", name, (int)t->dtype);
  if (t->device != APX_DEVICE_HOST && t->device != APX_DEVICE_CUDA)
    return fail(v, "%s has unknown device kind [%d]", name, (int)t->device);
  if (t->device_index < 0)
    return fail(v, "%s.device_index = [%d] is negative", name, t->device_index);
  if (t->device == APX_DEVICE_HOST && t->device_index != 0)
    return fail(v, "%s is a host tensor with device_index [%d] (must be 0)", name, t->device_index);

  /* The byte size must be representable: backends compute offsets in
   * int64 and sizes in size_t. */
  int64_t numel = 1;
  for (int d = 0; d < t->ndim; d++)
    if (__builtin_mul_overflow(numel, t->shape[d], &numel))
      return fail(v, "%s shape %s is too large (element count overflows)", name,
                  shape_text(shape_buf, sizeof shape_buf, t->ndim, t->shape));
  int64_t bytes;
  if (__builtin_mul_overflow(numel, (int64_t)apx_backend_dtype_size(t->dtype), &bytes) ||
      (uint64_t)bytes > (uint64_t)SIZE_MAX)
    return fail(v, "%s shape %s is too large (byte size overflows)", name,
                shape_text(shape_buf, sizeof shape_buf, t->ndim, t->shape));
  if (numel > 0 && !t->data)
    return fail(v, "%s.data is [NULL] with [%lld] elements", name, (long long)numel);
  /* C (and CUDA) need elements at their natural alignment. */
  if ((uintptr_t)t->data % apx_backend_dtype_size(t->dtype) != 0)
    return fail(v, "%s.data = [%p] is not aligned to its element size [%zu] (%s)", name, t->data,
                apx_backend_dtype_size(t->dtype), dtype_label(t->dtype));

  if (!v->have_site) {
    v->site.device = t->device;
    v->site.device_index = t->device_index;
    v->site_name = name;
    v->have_site = 1;
  } else if (t->device != v->site.device || t->device_index != v->site.device_index) {
    return fail(v,
                "%s is on [%s:%d] but %s is on [%s:%d] (all tensors of a call "
                "must be on one device)",
                name, t->device == APX_DEVICE_HOST ? "host" : "cuda", t->device_index, v->site_name,
                v->site.device == APX_DEVICE_HOST ? "host" : "cuda", v->site.device_index);
  }
  return APX_OK;
}

/* ---- shape and dtype rules ---- */

static apx_status require_ndim(const vstate *v, const char *name, const apx_tensor *t, int ndim,
                               const char *layout) {
  if (t->ndim != ndim)
    return fail(v, "%s must be %s, got ndim [%d]", name, layout, t->ndim);
  return APX_OK;
}

static apx_status require_shape(const vstate *v, const char *name, const apx_tensor *t, int ndim,
                                const int64_t *shape, const char *layout) {
  int same = t->ndim == ndim;
  for (int d = 0; same && d < ndim; d++)
    same = t->shape[d] == shape[d];
  if (!same) {
    char got[160], want[160];
    return fail(v, "%s has shape %s, expected %s (%s)", name,
                shape_text(got, sizeof got, t->ndim, t->shape),
                shape_text(want, sizeof want, ndim, shape), layout);
  }
  return APX_OK;
}

/* a.shape[da] == b.shape[db], `what` saying which dimension this is. */
static apx_status require_dim_match(const vstate *v, const char *name_a, const apx_tensor *a,
                                    int da, const char *name_b, const apx_tensor *b, int db,
                                    const char *what) {
  if (a->shape[da] != b->shape[db])
    return fail(v, "%s.shape[%d] = [%lld] does not match %s.shape[%d] = [%lld] (%s)", name_a, da,
                (long long)a->shape[da], name_b, db, (long long)b->shape[db], what);
  return APX_OK;
}

static apx_status require_float(const vstate *v, const char *name, const apx_tensor *t) {
  if (!is_float(t->dtype))
    return fail(v, "%s dtype [%s] must be f32, f16 or bf16", name, dtype_label(t->dtype));
  return APX_OK;
}

static apx_status require_index_dtype(const vstate *v, const char *name, const apx_tensor *t) {
  if (!is_index(t->dtype))
    return fail(v, "%s dtype [%s] must be i32 or i64", name, dtype_label(t->dtype));
  return APX_OK;
}

static apx_status require_same_dtype(const vstate *v, const char *name, const apx_tensor *t,
                                     const char *ref_name, const apx_tensor *ref) {
  if (t->dtype != ref->dtype)
    return fail(v, "%s dtype [%s] must equal %s dtype [%s]", name, dtype_label(t->dtype), ref_name,
                dtype_label(ref->dtype));
  return APX_OK;
}

/* tile > 0 and H, W divisible by it (docs/ops.md, tilepack). */
static apx_status require_tile_grid(const vstate *v, const char *tile_what, int64_t tile,
                                    const char *map_name, const apx_tensor *map) {
  if (tile <= 0)
    return fail(v, "%s = [%lld] must be > 0", tile_what, (long long)tile);
  int64_t h = map->shape[2], w = map->shape[3];
  if (h % tile != 0 || w % tile != 0)
    return fail(v, "%s H, W = [%lld, %lld] are not divisible by tile [%lld]", map_name,
                (long long)h, (long long)w, (long long)tile);
  return APX_OK;
}

/* Largest valid tile id, gh*gw - 1 (saturating; -1 for an empty grid). */
static int64_t max_tile_id(const apx_tensor *map, int64_t tile) {
  int64_t tiles;
  if (__builtin_mul_overflow(map->shape[2] / tile, map->shape[3] / tile, &tiles))
    return INT64_MAX;
  return tiles - 1;
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
static apx_status require_no_overlap(const vstate *v, const char *out_name, const apx_tensor *out,
                                     const char *in_name, const apx_tensor *in, int allow_exact) {
  if (!out || !in || !bytes_overlap(out, in))
    return APX_OK;
  if (allow_exact && exact_alias(out, in))
    return APX_OK;
  char a[160], b[160];
  if (allow_exact)
    return fail(v,
                "%s [%p, %s %s] overlaps %s [%p, %s %s] but is not an exact "
                "alias (same data, shape and dtype)",
                out_name, out->data, dtype_label(out->dtype),
                shape_text(a, sizeof a, out->ndim, out->shape), in_name, in->data,
                dtype_label(in->dtype), shape_text(b, sizeof b, in->ndim, in->shape));
  return fail(v,
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

#define FIRST_OUT_OF_RANGE_(name, type, utype)                                 \
  static int64_t name(const type *p, int64_t n, int64_t lo, uint64_t span) {   \
    int64_t blocks = (n + RANGE_BLOCK - 1) / RANGE_BLOCK, first_bad_block = -1; \
    OMP_("omp parallel for schedule(static) if (n >= RANGE_PARALLEL_MIN)")     \
    for (int64_t blk = 0; blk < blocks; blk++) {                               \
      int64_t begin = blk * RANGE_BLOCK, end = begin + RANGE_BLOCK < n ? begin + RANGE_BLOCK : n; \
      utype bad = 0;                                                           \
      for (int64_t i = begin; i < end; i++)                                    \
        bad |= (utype)((utype)p[i] - (utype)lo) > (utype)span;                 \
      if (bad) {                                                               \
        OMP_("omp critical(apx_range)")                                        \
        if (first_bad_block < 0 || blk < first_bad_block) first_bad_block = blk; \
      }                                                                        \
    }                                                                          \
    if (first_bad_block < 0) return -1;                                        \
    for (int64_t i = first_bad_block * RANGE_BLOCK; i < n; i++)                \
      if ((utype)((utype)p[i] - (utype)lo) > (utype)span) return i;            \
    return -1;                                                                 \
  }
FIRST_OUT_OF_RANGE_(first_out_of_range_i64, int64_t, uint64_t)
FIRST_OUT_OF_RANGE_(first_out_of_range_i32, int32_t, uint32_t)
#undef FIRST_OUT_OF_RANGE_

/* Every element of t in [lo, hi]; `note` (may be NULL) is appended. */
static apx_status require_values_in(const vstate *v, const char *name, const apx_tensor *t,
                                    int64_t lo, int64_t hi, const char *note) {
  int64_t n = numel_of(t);
  if (n == 0) return APX_OK;
  int64_t bad;
  if (hi < lo) {
    bad = 0; /* an empty range: every element is out of it */
  } else if (t->dtype == APX_DTYPE_I32) {
    /* the range seen by an i32 tensor: [lo, hi] clipped to int32 */
    int64_t lo32 = lo < INT32_MIN ? INT32_MIN : lo, hi32 = hi > INT32_MAX ? INT32_MAX : hi;
    bad = lo32 > hi32 ? 0
                      : first_out_of_range_i32(t->data, n, lo32, (uint64_t)(hi32 - lo32));
  } else {
    bad = first_out_of_range_i64(t->data, n, lo, (uint64_t)hi - (uint64_t)lo);
  }
  if (bad < 0) return APX_OK;
  char pos[160];
  return fail(v, "%s%s = [%lld] is outside [%lld, %lld]%s%s", name,
              position_text(pos, sizeof pos, t, bad), (long long)index_at(t, bad), (long long)lo,
              (long long)hi, note ? " " : "", note ? note : "");
}

typedef struct id_at {
  int64_t id;
  int64_t k;
} id_at;

static int compare_id_at(const void *pa, const void *pb) {
  const id_at *a = pa, *b = pb;
  if (a->id != b->id)
    return a->id < b->id ? -1 : 1;
  return a->k < b->k ? -1 : a->k > b->k;
}

/* docs/ops.md, fused_pack_op_unpack: with require_unique every batch row of idx [B,K] holds
 * distinct ids. Sorting a copy of each row keeps this O(K log K); the
 * repeat reported is the first one in reading order. */
static apx_status require_unique_rows(const vstate *v, const char *name, const apx_tensor *idx) {
  int64_t rows = idx->shape[0], k_count = idx->shape[1];
  if (rows == 0 || k_count < 2)
    return APX_OK;
  id_at *row = malloc((size_t)k_count * sizeof *row);
  if (!row)
    return apx__error(APX_ERR_NO_MEMORY,
                      "%s: no memory for the uniqueness check of %s ([%lld] ids)", v->op, name,
                      (long long)k_count);
  for (int64_t b = 0; b < rows; b++) {
    for (int64_t k = 0; k < k_count; k++) {
      row[k].id = index_at(idx, b * k_count + k);
      row[k].k = k;
    }
    qsort(row, (size_t)k_count, sizeof *row, compare_id_at);
    int64_t best_first = -1, best_second = INT64_MAX, best_id = 0;
    for (int64_t i = 1; i < k_count; i++) {
      /* Within a run of equal ids the first two entries are its two
       * earliest positions. */
      if (row[i].id == row[i - 1].id && (i == 1 || row[i - 2].id != row[i].id) &&
          row[i].k < best_second) {
        best_first = row[i - 1].k;
        best_second = row[i].k;
        best_id = row[i].id;
      }
    }
    if (best_first >= 0) {
      free(row);
      return fail(v,
                  "%s[%lld] repeats tile id [%lld] at k=[%lld] and k=[%lld] "
                  "(require_unique)",
                  name, (long long)b, (long long)best_id, (long long)best_first,
                  (long long)best_second);
    }
  }
  free(row);
  return APX_OK;
}

/* docs/ops.md, tilepack: the input checks, shared with fused_pack_op_unpack. */
static apx_status check_pack_inputs(vstate *v, const apx_tensor *features, const apx_tensor *idx,
                                    int64_t tile, const apx_tensor *out) {
  TRY(check_tensor(v, "features", features, 1));
  TRY(check_tensor(v, "idx", idx, 1));
  TRY(check_tensor(v, "out", out, 1));
  TRY(require_ndim(v, "features", features, 4, "[B,C,H,W]"));
  TRY(require_ndim(v, "idx", idx, 2, "[B,K]"));
  TRY(require_dim_match(v, "idx", idx, 0, "features", features, 0, "batch B"));
  TRY(require_tile_grid(v, "tile", tile, "features", features));
  TRY(require_float(v, "features", features));
  TRY(require_index_dtype(v, "idx", idx));
  return APX_OK;
}

/* ---- tilepack (docs/ops.md, tilepack) ---- */

static apx_status check_tilepack(vstate *v, const apx_tilepack_args *a) {
  TRY(check_pack_inputs(v, a->features, a->idx, a->tile, a->out));
  const apx_tensor *features = a->features, *idx = a->idx, *out = a->out;
  int64_t t = a->tile;
  int64_t want[5] = {features->shape[0], idx->shape[1], features->shape[1], t, t};
  TRY(require_shape(v, "out", out, 5, want, "[B,K,C,t,t]"));
  TRY(require_same_dtype(v, "out", out, "features", features));
  TRY(require_no_overlap(v, "out", out, "features", features, 0));
  TRY(require_no_overlap(v, "out", out, "idx", idx, 0));
  if (on_host(v))
    TRY(require_values_in(v, "idx", idx, 0, max_tile_id(features, t), NULL));
  return APX_OK;
}

/* ---- tileunpack (docs/ops.md, tileunpack) ---- */

static int bit_length(int64_t x) {
  /* Python's int.bit_length: of |x|. */
  uint64_t u = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
  int n = 0;
  while (u) {
    n++;
    u >>= 1;
  }
  return n;
}

/* docs/ops.md, tileunpack (priority): key = ((level - lmin) << order_bits) + k must fit
 * int32; order_bits = max(1, bit_length(K-1)); lmin over the whole tensor. */
static apx_status require_priority_keys_fit(const vstate *v, const apx_tensor *levels) {
  int64_t n = numel_of(levels), k_count = levels->shape[1];
  if (n == 0)
    return APX_OK;
  int order_bits = bit_length(k_count - 1);
  if (order_bits < 1)
    order_bits = 1;
  int64_t lmin = INT64_MAX;
  for (int64_t i = 0; i < n; i++) {
    int64_t level = index_at(levels, i);
    if (level < lmin)
      lmin = level;
  }
  /* (level - lmin) fits uint64; a key fits int32 iff the shifted span plus
   * k does, and order_bits <= 63 so the shift bound is exact. */
  for (int64_t i = 0; i < n; i++) {
    int64_t level = index_at(levels, i);
    uint64_t span = (uint64_t)level - (uint64_t)lmin;
    int64_t k = i % k_count;
    int fits = span <= ((uint64_t)INT32_MAX >> order_bits) &&
               (span << order_bits) + (uint64_t)k <= (uint64_t)INT32_MAX;
    if (!fits) {
      char pos[160];
      return fail(v,
                  "levels%s = [%lld] makes priority key ((level - lmin) << %d) "
                  "+ k overflow int32 (lmin = [%lld], k = [%lld]); reduce the "
                  "level range or K",
                  position_text(pos, sizeof pos, levels, i), (long long)level, order_bits,
                  (long long)lmin, (long long)k);
    }
  }
  return APX_OK;
}

/* docs/ops.md, tileunpack (placement): y0 >= 0, x0 >= 0, y0 + t <= H, x0 + t <= W. */
static apx_status require_origins_in_bounds(const vstate *v, const apx_tensor *origins,
                                            int64_t tile, int64_t h, int64_t w) {
  int64_t tiles = numel_of(origins) / 2; /* [B, N, 2] */
  for (int64_t i = 0; i < tiles; i++) {
    int64_t y0 = index_at(origins, 2 * i), x0 = index_at(origins, 2 * i + 1);
    if (y0 < 0 || x0 < 0 || y0 > h - tile || x0 > w - tile) {
      char pos[160];
      apx_tensor rows = *origins;
      rows.ndim = 2; /* position of the (y0, x0) pair */
      return fail(v,
                  "origins%s = [%lld, %lld] is out of bounds: a tile [%lld] "
                  "in a [%lld x %lld] map needs 0 <= y0 <= %lld and "
                  "0 <= x0 <= %lld",
                  position_text(pos, sizeof pos, &rows, i), (long long)y0, (long long)x0,
                  (long long)tile, (long long)h, (long long)w, (long long)(h - tile),
                  (long long)(w - tile));
    }
  }
  return APX_OK;
}

static apx_status check_tileunpack(vstate *v, const apx_tileunpack_args *a) {
  TRY(check_tensor(v, "base", a->base, 1));
  TRY(check_tensor(v, "packed", a->packed, 1));
  TRY(check_tensor(v, "idx", a->idx, 0));
  TRY(check_tensor(v, "origins", a->origins, 0));
  TRY(check_tensor(v, "levels", a->levels, 0));
  TRY(check_tensor(v, "out", a->out, 1));
  const apx_tensor *base = a->base, *packed = a->packed, *out = a->out;
  TRY(require_ndim(v, "base", base, 4, "[B,C,H,W]"));
  TRY(require_ndim(v, "packed", packed, 5, "[B,K,C,t,t]"));
  TRY(require_dim_match(v, "packed", packed, 0, "base", base, 0, "batch B"));
  TRY(require_dim_match(v, "packed", packed, 2, "base", base, 1, "channels C"));
  if (packed->shape[3] != packed->shape[4])
    return fail(v, "packed tiles must be square, got packed.shape[3], [4] = [%lld, %lld]",
                (long long)packed->shape[3], (long long)packed->shape[4]);
  int64_t t = packed->shape[3];
  TRY(require_tile_grid(v, "tile size inferred from packed.shape[3]", t, "base", base));
  TRY(require_float(v, "base", base));
  TRY(require_same_dtype(v, "packed", packed, "base", base));

  if (a->mode != APX_OVERLAP_OVERRIDE && a->mode != APX_OVERLAP_BLEND)
    return fail(v,
                "mode = [%d] is not APX_OVERLAP_OVERRIDE (0) or "
                "APX_OVERLAP_BLEND (1)",
                (int)a->mode);
  if (!(a->blend_alpha >= 0.0 && a->blend_alpha <= 1.0)) { /* NaN fails too */
    char value[40];
    return fail(v, "blend_alpha = [%s] is outside [0, 1]",
                double_text(value, sizeof value, a->blend_alpha));
  }

  int64_t batch = base->shape[0], k_count = packed->shape[1];
  if (a->idx && a->origins)
    return fail(v, "exactly one of idx and origins must be given, got [both]");
  if (!a->idx && !a->origins)
    return fail(v, "exactly one of idx and origins must be given, got [neither]");
  if (a->idx) {
    int64_t want[2] = {batch, k_count};
    TRY(require_ndim(v, "idx", a->idx, 2, "[B,K]"));
    TRY(require_shape(v, "idx", a->idx, 2, want, "[B,K] with K = packed.shape[1]"));
    TRY(require_index_dtype(v, "idx", a->idx));
  } else {
    int64_t want[3] = {batch, k_count, 2};
    TRY(require_ndim(v, "origins", a->origins, 3, "[B,K,2]"));
    TRY(require_shape(v, "origins", a->origins, 3, want, "[B,K,2] with K = packed.shape[1]"));
    TRY(require_index_dtype(v, "origins", a->origins));
  }
  if (!a->levels && !a->assume_priority_sorted)
    return fail(v, "levels must be provided when assume_priority_sorted = [%d]",
                a->assume_priority_sorted);
  if (a->levels) {
    int64_t want[2] = {batch, k_count};
    TRY(require_shape(v, "levels", a->levels, 2, want, "[B,K]"));
    TRY(require_index_dtype(v, "levels", a->levels));
  }

  TRY(require_shape(v, "out", out, 4, base->shape, "the shape of base"));
  TRY(require_same_dtype(v, "out", out, "base", base));
  TRY(require_no_overlap(v, "out", out, "base", base, 1));
  TRY(require_no_overlap(v, "out", out, "packed", packed, 0));
  TRY(require_no_overlap(v, "out", out, "idx", a->idx, 0));
  TRY(require_no_overlap(v, "out", out, "origins", a->origins, 0));
  TRY(require_no_overlap(v, "out", out, "levels", a->levels, 0));

  if (on_host(v)) {
    if (a->idx)
      TRY(require_values_in(v, "idx", a->idx, 0, max_tile_id(base, t), NULL));
    else
      TRY(require_origins_in_bounds(v, a->origins, t, base->shape[2], base->shape[3]));
    if (a->levels)
      TRY(require_priority_keys_fit(v, a->levels));
  }
  return APX_OK;
}

/* ---- fused_pack_op_unpack (docs/ops.md, fused_pack_op_unpack) ---- */

static apx_status check_fused(vstate *v, const apx_fused_pack_op_unpack_args *a) {
  TRY(check_pack_inputs(v, a->features, a->idx, a->tile, a->out));
  const apx_tensor *features = a->features, *idx = a->idx, *out = a->out;
  /* The scalars are not checked: the reference computes with whatever
   * values it is given (a NaN scale gives NaN tiles), it never raises. */
  TRY(require_shape(v, "out", out, 4, features->shape, "the shape of features"));
  TRY(require_same_dtype(v, "out", out, "features", features));
  TRY(require_no_overlap(v, "out", out, "features", features, 1));
  TRY(require_no_overlap(v, "out", out, "idx", idx, 0));
  if (on_host(v)) {
    TRY(require_values_in(v, "idx", idx, 0, max_tile_id(features, a->tile), NULL));
    if (a->require_unique)
      TRY(require_unique_rows(v, "idx", idx));
  }
  return APX_OK;
}

/* ---- fusiongate (docs/ops.md, fusiongate_alpha and fusiongate_fuse) ---- */

/* A proxy or alpha map: [B,1,H,W] or [B,H,W]; its (B, H, W) in bhw. */
static apx_status require_gate_map(const vstate *v, const char *name, const apx_tensor *t,
                                   int64_t bhw[3]) {
  if (t->ndim != 3 && t->ndim != 4)
    return fail(v, "%s must be [B,1,H,W] or [B,H,W], got ndim [%d]", name, t->ndim);
  if (t->ndim == 4 && t->shape[1] != 1)
    return fail(v, "%s channel dimension %s.shape[1] = [%lld] must be 1", name, name,
                (long long)t->shape[1]);
  bhw[0] = t->shape[0];
  bhw[1] = t->shape[t->ndim - 2];
  bhw[2] = t->shape[t->ndim - 1];
  return APX_OK;
}

static apx_status check_fusiongate_alpha(vstate *v, const apx_fusiongate_alpha_args *a) {
  TRY(check_tensor(v, "boundary", a->boundary, 1));
  TRY(check_tensor(v, "uncertainty", a->uncertainty, 1));
  TRY(check_tensor(v, "out", a->out, 1));
  int64_t b_bhw[3], u_bhw[3];
  TRY(require_gate_map(v, "boundary", a->boundary, b_bhw));
  TRY(require_gate_map(v, "uncertainty", a->uncertainty, u_bhw));
  if (memcmp(b_bhw, u_bhw, sizeof b_bhw) != 0) {
    char bs[160], us[160];
    return fail(v,
                "boundary [B,H,W] = %s and uncertainty [B,H,W] = %s must "
                "match in shape",
                shape_text(bs, sizeof bs, 3, b_bhw), shape_text(us, sizeof us, 3, u_bhw));
  }
  TRY(require_float(v, "boundary", a->boundary));
  TRY(require_float(v, "uncertainty", a->uncertainty));
  TRY(require_same_dtype(v, "uncertainty", a->uncertainty, "boundary", a->boundary));
  int64_t want[4] = {b_bhw[0], 1, b_bhw[1], b_bhw[2]};
  TRY(require_shape(v, "out", a->out, 4, want, "[B,1,H,W]"));
  TRY(require_float(v, "out", a->out));
  TRY(require_no_overlap(v, "out", a->out, "boundary", a->boundary, 0));
  TRY(require_no_overlap(v, "out", a->out, "uncertainty", a->uncertainty, 0));
  return APX_OK;
}

static apx_status check_fusiongate_fuse(vstate *v, const apx_fusiongate_fuse_args *a) {
  TRY(check_tensor(v, "base", a->base, 1));
  TRY(check_tensor(v, "detail", a->detail, 1));
  TRY(check_tensor(v, "alpha", a->alpha, 1));
  TRY(check_tensor(v, "out", a->out, 1));
  const apx_tensor *base = a->base;
  TRY(require_ndim(v, "base", base, 4, "[B,C,H,W]"));
  TRY(require_shape(v, "detail", a->detail, 4, base->shape, "the shape of base"));
  int64_t alpha_bhw[3];
  TRY(require_gate_map(v, "alpha", a->alpha, alpha_bhw));
  int64_t want_bhw[3] = {base->shape[0], base->shape[2], base->shape[3]};
  if (memcmp(alpha_bhw, want_bhw, sizeof want_bhw) != 0) {
    char as[160], bs[160];
    return fail(v,
                "alpha [B,H,W] = %s must match base batch and spatial "
                "shape %s",
                shape_text(as, sizeof as, 3, alpha_bhw), shape_text(bs, sizeof bs, 3, want_bhw));
  }
  TRY(require_float(v, "base", base));
  TRY(require_same_dtype(v, "detail", a->detail, "base", base));
  TRY(require_same_dtype(v, "alpha", a->alpha, "base", base));
  TRY(require_shape(v, "out", a->out, 4, base->shape, "the shape of base"));
  TRY(require_same_dtype(v, "out", a->out, "base", base));
  TRY(require_no_overlap(v, "out", a->out, "base", base, 1));
  TRY(require_no_overlap(v, "out", a->out, "detail", a->detail, 0));
  TRY(require_no_overlap(v, "out", a->out, "alpha", a->alpha, 0));
  return APX_OK;
}

/* ---- tilessm_scan (docs/ops.md, tilessm_scan) ---- */

static apx_status check_tilessm_scan(vstate *v, const apx_tilessm_scan_args *a) {
  static const char *const vector_names[4] = {"decay", "input_gain", "output_gain", "state_bias"};
  const apx_tensor *vectors[4] = {a->decay, a->input_gain, a->output_gain, a->state_bias};
  if (a->direction != APX_SCAN_FORWARD && a->direction != APX_SCAN_BACKWARD &&
      a->direction != APX_SCAN_BIDIRECTIONAL)
    return fail(v,
                "direction = [%d] is not APX_SCAN_FORWARD (0), "
                "APX_SCAN_BACKWARD (1) or APX_SCAN_BIDIRECTIONAL (2)",
                (int)a->direction);
  if (a->merge != APX_MERGE_SUM && a->merge != APX_MERGE_AVG && a->merge != APX_MERGE_GATED)
    return fail(v,
                "merge = [%d] is not APX_MERGE_SUM (0), APX_MERGE_AVG (1) "
                "or APX_MERGE_GATED (2)",
                (int)a->merge);
  int bidirectional = a->direction == APX_SCAN_BIDIRECTIONAL;
  /* docs/ops.md, tilessm_scan: merge_gate is read (and validated) only by the gated
   * bidirectional merge; elsewhere it is ignored. */
  const apx_tensor *merge_gate =
      bidirectional && a->merge == APX_MERGE_GATED ? a->merge_gate : NULL;

  TRY(check_tensor(v, "tokens", a->tokens, 1));
  for (int i = 0; i < 4; i++)
    TRY(check_tensor(v, vector_names[i], vectors[i], 1));
  TRY(check_tensor(v, "init_state", a->init_state, 0));
  TRY(check_tensor(v, "merge_gate", merge_gate, 0));
  TRY(check_tensor(v, "out", a->out, 1));
  TRY(check_tensor(v, "final_state", a->final_state, 0));

  const apx_tensor *tokens = a->tokens;
  TRY(require_ndim(v, "tokens", tokens, 3, "[B,K,C]"));
  TRY(require_float(v, "tokens", tokens));
  int64_t batch = tokens->shape[0], channels = tokens->shape[2];
  for (int i = 0; i < 4; i++) {
    int64_t want[1] = {channels};
    TRY(require_shape(v, vector_names[i], vectors[i], 1, want, "[C] matching tokens channels"));
    TRY(require_float(v, vector_names[i], vectors[i]));
  }
  if (a->init_state) {
    const apx_tensor *init = a->init_state;
    int64_t want2[2] = {batch, channels}, want3[3] = {batch, 2, channels};
    if (init->ndim == 2)
      TRY(require_shape(v, "init_state", init, 2, want2, "[B,C]"));
    else if (init->ndim == 3)
      TRY(require_shape(v, "init_state", init, 3, want3, "[B,2,C]"));
    else
      return fail(v, "init_state must be [B,C] or [B,2,C], got ndim [%d]", init->ndim);
    TRY(require_float(v, "init_state", init));
  }
  /* docs/ops.md, tilessm_scan: |clamp_value| is the limit (inf: none); NaN has no
   * meaning as a limit. */
  if (isnan(a->clamp_value))
    return fail(v, "clamp_value = [%g] must not be NaN", a->clamp_value);
  if (merge_gate) {
    int64_t want1[1] = {channels}, want3[3] = {batch, 1, channels};
    if (merge_gate->ndim == 1)
      TRY(require_shape(v, "merge_gate", merge_gate, 1, want1, "[C]"));
    else if (merge_gate->ndim == 3)
      TRY(require_shape(v, "merge_gate", merge_gate, 3, want3, "[B,1,C]"));
    else
      return fail(v, "merge_gate must be [C] or [B,1,C], got ndim [%d]", merge_gate->ndim);
    TRY(require_float(v, "merge_gate", merge_gate));
  }

  TRY(require_shape(v, "out", a->out, 3, tokens->shape, "[B,K,C] of tokens"));
  TRY(require_same_dtype(v, "out", a->out, "tokens", tokens));
  if (a->final_state) {
    int64_t want2[2] = {batch, channels}, want3[3] = {batch, 2, channels};
    if (bidirectional)
      TRY(require_shape(v, "final_state", a->final_state, 3, want3,
                        "[B,2,C] for a bidirectional scan"));
    else
      TRY(require_shape(v, "final_state", a->final_state, 2, want2, "[B,C] for a one-way scan"));
    TRY(require_same_dtype(v, "final_state", a->final_state, "tokens", tokens));
  }

  const char *in_names[7] = {"tokens",        vector_names[0], vector_names[1], vector_names[2],
                             vector_names[3], "init_state",    "merge_gate"};
  const apx_tensor *ins[7] = {tokens,     vectors[0],    vectors[1], vectors[2],
                              vectors[3], a->init_state, merge_gate};
  for (int i = 0; i < 7; i++) {
    TRY(require_no_overlap(v, "out", a->out, in_names[i], ins[i], 0));
    TRY(require_no_overlap(v, "final_state", a->final_state, in_names[i], ins[i], 0));
  }
  TRY(require_no_overlap(v, "final_state", a->final_state, "out", a->out, 0));
  return APX_OK;
}

/* ---- indexing ops (docs/ops.md, Indexing ops) ---- */

/* Wrap a possibly negative dim into [0, ndim). Indexing ops need ndim >= 1:
 * a 0-d tensor has no dimension to index (torch would treat it as [1]). */
static apx_status wrap_dim(const vstate *v, int dim, const char *name, const apx_tensor *t,
                           int *wrapped) {
  if (t->ndim < 1)
    return fail(v, "%s must have at least 1 dimension, got ndim [0]", name);
  if (dim < -t->ndim || dim >= t->ndim)
    return fail(v, "dim = [%d] is outside [%d, %d] for ndim [%d]", dim, -t->ndim, t->ndim - 1,
                t->ndim);
  *wrapped = dim < 0 ? dim + t->ndim : dim;
  return APX_OK;
}

/* torch's gather rule: index.size(d) <= ref.size(d) for every d != dim. */
static apx_status require_index_fits(const vstate *v, const apx_tensor *index, const char *ref_name,
                                     const apx_tensor *ref, int dim, int include_dim) {
  for (int d = 0; d < index->ndim; d++) {
    if (d == dim && !include_dim)
      continue;
    if (index->shape[d] > ref->shape[d])
      return fail(v, "index.shape[%d] = [%lld] is larger than %s.shape[%d] = [%lld]%s", d,
                  (long long)index->shape[d], ref_name, d, (long long)ref->shape[d],
                  include_dim ? "" : " (only dim may be larger)");
  }
  return APX_OK;
}

static apx_status require_same_ndim(const vstate *v, const char *name, const apx_tensor *t,
                                    const char *ref_name, const apx_tensor *ref) {
  if (t->ndim != ref->ndim)
    return fail(v, "%s has ndim [%d] but %s has ndim [%d]", name, t->ndim, ref_name, ref->ndim);
  return APX_OK;
}

static apx_status require_index_values(const vstate *v, const apx_tensor *index,
                                       const char *ref_name, const apx_tensor *ref, int dim) {
  char note[96];
  snprintf(note, sizeof note, "(%s.shape[%d] = [%lld])", ref_name, dim, (long long)ref->shape[dim]);
  return require_values_in(v, "index", index, 0, ref->shape[dim] - 1, note);
}

static apx_status check_gather(vstate *v, const apx_gather_args *a) {
  TRY(check_tensor(v, "src", a->src, 1));
  TRY(check_tensor(v, "index", a->index, 1));
  TRY(check_tensor(v, "out", a->out, 1));
  TRY(require_same_ndim(v, "index", a->index, "src", a->src));
  int dim;
  TRY(wrap_dim(v, a->dim, "src", a->src, &dim));
  TRY(require_index_fits(v, a->index, "src", a->src, dim, 0));
  TRY(require_index_dtype(v, "index", a->index));
  TRY(require_shape(v, "out", a->out, a->index->ndim, a->index->shape, "the shape of index"));
  TRY(require_same_dtype(v, "out", a->out, "src", a->src));
  TRY(require_no_overlap(v, "out", a->out, "src", a->src, 0));
  TRY(require_no_overlap(v, "out", a->out, "index", a->index, 0));
  if (on_host(v))
    TRY(require_index_values(v, a->index, "src", a->src, dim));
  return APX_OK;
}

static apx_status check_index_select(vstate *v, const apx_index_select_args *a) {
  TRY(check_tensor(v, "src", a->src, 1));
  TRY(check_tensor(v, "index", a->index, 1));
  TRY(check_tensor(v, "out", a->out, 1));
  TRY(require_ndim(v, "src", a->src, 2, "[M,D]"));
  TRY(require_ndim(v, "index", a->index, 1, "[N] (a vector)"));
  TRY(require_index_dtype(v, "index", a->index));
  int64_t want[2] = {a->index->shape[0], a->src->shape[1]};
  TRY(require_shape(v, "out", a->out, 2, want, "[N,D]"));
  TRY(require_same_dtype(v, "out", a->out, "src", a->src));
  TRY(require_no_overlap(v, "out", a->out, "src", a->src, 0));
  TRY(require_no_overlap(v, "out", a->out, "index", a->index, 0));
  if (on_host(v))
    TRY(require_index_values(v, a->index, "src", a->src, 0));
  return APX_OK;
}

static apx_status check_scatter_add(vstate *v, const apx_scatter_add_args *a) {
  TRY(check_tensor(v, "self", a->self, 1));
  TRY(check_tensor(v, "index", a->index, 1));
  TRY(check_tensor(v, "src", a->src, 1));
  TRY(check_tensor(v, "out", a->out, 1));
  TRY(require_same_ndim(v, "index", a->index, "self", a->self));
  TRY(require_same_ndim(v, "src", a->src, "self", a->self));
  int dim;
  TRY(wrap_dim(v, a->dim, "self", a->self, &dim));
  TRY(require_index_fits(v, a->index, "src", a->src, dim, 1));
  TRY(require_index_fits(v, a->index, "self", a->self, dim, 0));
  TRY(require_same_dtype(v, "src", a->src, "self", a->self));
  TRY(require_index_dtype(v, "index", a->index));
  TRY(require_shape(v, "out", a->out, a->self->ndim, a->self->shape, "the shape of self"));
  TRY(require_same_dtype(v, "out", a->out, "self", a->self));
  TRY(require_no_overlap(v, "out", a->out, "self", a->self, 1));
  TRY(require_no_overlap(v, "out", a->out, "index", a->index, 0));
  TRY(require_no_overlap(v, "out", a->out, "src", a->src, 0));
  if (on_host(v))
    TRY(require_index_values(v, a->index, "self", a->self, dim));
  return APX_OK;
}

static apx_status check_gather_backward(vstate *v, const apx_gather_backward_args *a) {
  TRY(check_tensor(v, "grad_out", a->grad_out, 1));
  TRY(check_tensor(v, "index", a->index, 1));
  TRY(check_tensor(v, "grad_src", a->grad_src, 1));
  TRY(require_same_ndim(v, "index", a->index, "grad_src", a->grad_src));
  int dim;
  TRY(wrap_dim(v, a->dim, "grad_src", a->grad_src, &dim));
  TRY(require_index_fits(v, a->index, "grad_src", a->grad_src, dim, 0));
  TRY(require_index_dtype(v, "index", a->index));
  TRY(require_shape(v, "grad_out", a->grad_out, a->index->ndim, a->index->shape,
                    "the shape of index"));
  TRY(require_same_dtype(v, "grad_src", a->grad_src, "grad_out", a->grad_out));
  TRY(require_no_overlap(v, "grad_src", a->grad_src, "grad_out", a->grad_out, 0));
  TRY(require_no_overlap(v, "grad_src", a->grad_src, "index", a->index, 0));
  if (on_host(v))
    TRY(require_index_values(v, a->index, "grad_src", a->grad_src, dim));
  return APX_OK;
}

/* ---- entry points ---- */

apx_status apx__validate(apx_op_id op, const void *args, apx__site *site) {
  vstate v = {op_label(op), {APX_DEVICE_HOST, 0}, 0, NULL};
  if ((unsigned)op >= (unsigned)APX_OP_COUNT)
    return apx__error(APX_ERR_INVALID_ARG, "apexx: op id [%d] is not an op", (int)op);
  if (!args)
    return fail(&v, "args is [NULL]");
  apx_status st = APX_ERR_INVALID_ARG;
  switch (op) {
  case APX_OP_TILEPACK:
    st = check_tilepack(&v, args);
    break;
  case APX_OP_TILEUNPACK:
    st = check_tileunpack(&v, args);
    break;
  case APX_OP_FUSED_PACK_OP_UNPACK:
    st = check_fused(&v, args);
    break;
  case APX_OP_FUSIONGATE_ALPHA:
    st = check_fusiongate_alpha(&v, args);
    break;
  case APX_OP_FUSIONGATE_FUSE:
    st = check_fusiongate_fuse(&v, args);
    break;
  case APX_OP_TILESSM_SCAN:
    st = check_tilessm_scan(&v, args);
    break;
  case APX_OP_GATHER:
    st = check_gather(&v, args);
    break;
  case APX_OP_INDEX_SELECT:
    st = check_index_select(&v, args);
    break;
  case APX_OP_SCATTER_ADD:
    st = check_scatter_add(&v, args);
    break;
  case APX_OP_GATHER_BACKWARD:
    st = check_gather_backward(&v, args);
    break;
  case APX_OP_FF_INFER:
    return apx__validate_ff_infer(args, site);
  case APX_OP_COUNT:
    break;
  }
  if (st == APX_OK && site)
    *site = v.site;
  return st;
}

/* docs/ops.md, tile_order: ids and out [K] i32|i64 host tensors of one dtype (out may
 * alias ids exactly), grid > 0, a known mode, every id in [0, gh*gw). */
apx_status apx__validate_tile_order(const apx_tile_order_args *args) {
  vstate v = {"tile_order", {APX_DEVICE_HOST, 0}, 0, NULL};
  if (!args)
    return fail(&v, "args is [NULL]");
  TRY(check_tensor(&v, "ids", args->ids, 1));
  TRY(check_tensor(&v, "out", args->out, 1));
  if (v.site.device != APX_DEVICE_HOST)
    return fail(&v,
                "ids and out are on [cuda:%d]; tile_order is a host op "
                "and needs host tensors",
                v.site.device_index);
  TRY(require_ndim(&v, "ids", args->ids, 1, "[K]"));
  TRY(require_index_dtype(&v, "ids", args->ids));
  TRY(require_shape(&v, "out", args->out, 1, args->ids->shape, "[K] of ids"));
  TRY(require_same_dtype(&v, "out", args->out, "ids", args->ids));
  if (args->grid_h <= 0)
    return fail(&v, "grid_h = [%lld] must be > 0", (long long)args->grid_h);
  if (args->grid_w <= 0)
    return fail(&v, "grid_w = [%lld] must be > 0", (long long)args->grid_w);
  int64_t tiles;
  if (__builtin_mul_overflow(args->grid_h, args->grid_w, &tiles))
    return fail(&v, "grid_h * grid_w = [%lld * %lld] overflows int64", (long long)args->grid_h,
                (long long)args->grid_w);
  if ((unsigned)args->mode > (unsigned)APX_ORDER_MULTI_DIRECTION)
    return fail(&v, "mode = [%d] is not an apx_order_mode (0..5)", (int)args->mode);
  TRY(require_no_overlap(&v, "out", args->out, "ids", args->ids, 1));
  return require_values_in(&v, "ids", args->ids, 0, tiles - 1, NULL);
}

/* ---- the checks for validators in other files (validate.h) ---- */

apx_status apx__vcheck_tensor(apx__vstate *v, const char *name, const apx_tensor *t, int required) {
  return check_tensor(v, name, t, required);
}
apx_status apx__vrequire_ndim(const apx__vstate *v, const char *name, const apx_tensor *t, int ndim,
                              const char *layout) {
  return require_ndim(v, name, t, ndim, layout);
}
apx_status apx__vrequire_shape(const apx__vstate *v, const char *name, const apx_tensor *t,
                               int ndim, const int64_t *shape, const char *layout) {
  return require_shape(v, name, t, ndim, shape, layout);
}
apx_status apx__vrequire_float(const apx__vstate *v, const char *name, const apx_tensor *t) {
  return require_float(v, name, t);
}
apx_status apx__vrequire_same_dtype(const apx__vstate *v, const char *name, const apx_tensor *t,
                                    const char *ref_name, const apx_tensor *ref) {
  return require_same_dtype(v, name, t, ref_name, ref);
}
apx_status apx__vrequire_gate_map(const apx__vstate *v, const char *name, const apx_tensor *t,
                                  int64_t bhw[3]) {
  return require_gate_map(v, name, t, bhw);
}
apx_status apx__vrequire_no_overlap(const apx__vstate *v, const char *out_name,
                                    const apx_tensor *out, const char *in_name,
                                    const apx_tensor *in, int allow_exact) {
  return require_no_overlap(v, out_name, out, in_name, in, allow_exact);
}
