/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: scatter_add (docs/ops.md, scatter_add) and the accumulation
 * gather_backward shares (gather_backward.c: self = zeros).
 *
 * Every destination accumulates in fp32 (floats)
 * or exactly with wrap-around (integers), in ascending linear order of the
 * index positions, starting from self's value, and is rounded once. Each
 * destination is owned by exactly one thread, so results are bit-identical
 * for any thread count. Two algorithms:
 * - rows: when every index row (o, k, :) of more than one element holds
 *   one value (torch's idx[:, None].expand), destination rows are summed
 *   from linked lists of source rows (ascending k), so self, src and index
 *   are each read once and out written once (streamed when large);
 * - elements: the general case, accumulating element by element into out
 *   (fp32 and integers) or into an fp32 copy of self (fp16/bf16), with
 *   destinations split among threads by column block and value range.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "scan_index_simd.h"

typedef struct scatter_job {
  const apx_tensor *self; /* NULL: zeros (gather_backward) */
  const apx_tensor *index, *src, *out;
  int dim;
  int in_place; /* out->data == self->data */
  si_isa isa;
  int stream; /* out is large: write it with non-temporal stores */
  int team;
} scatter_job;

/* Integer adds wrap (two's complement), as PyTorch's do in practice. */
static inline void add_int_row(apx_dtype dt, void *dst, const void *src, int64_t n) {
  if (dt == APX_DTYPE_I64) {
    uint64_t *d = dst;
    const uint64_t *s = src;
    for (int64_t j = 0; j < n; j++) d[j] += s[j];
  } else {
    uint32_t *d = dst;
    const uint32_t *s = src;
    for (int64_t j = 0; j < n; j++) d[j] += s[j];
  }
}

static inline void add_f32_row(float *dst, const float *src, int64_t n) {
  for (int64_t j = 0; j < n; j++) dst[j] += src[j];
}

/* Elements of a float row to accumulate at once: an fp32 block in L1. */
#define ACC_BLOCK 1024

/* Destination row r of outer block o in the rows algorithm: self's row plus
 * the source rows of its chain (ascending k), rounded once. */
static void scatter_one_row(const scatter_job *jb, const cpu_axis_view *vself,
                            const cpu_axis_view *vsrc, int64_t self_base,
                            int64_t src_base, int64_t r, int64_t first_k,
                            const int64_t *next) {
  const apx_dtype dt = jb->out->dtype;
  const size_t es = apx_backend_dtype_size(dt);
  const int64_t inner = vself->inner;
  const size_t row_bytes = (size_t)inner * es;
  const int64_t dest_off = self_base + r * vself->stride[vself->dim];
  char *dst = (char *)jb->out->data + (size_t)dest_off * es;
  const char *self_row = jb->self ? (const char *)jb->self->data + (size_t)dest_off * es : NULL;
  const char *src = jb->src->data;
  const int64_t src_step = vsrc->stride[vsrc->dim];

  if (first_k < 0) { /* nothing lands here */
    if (!jb->in_place) si_copy_block(jb->isa, jb->stream, dst, self_row, row_bytes);
    return;
  }
  if (!si_is_float(dt) || (dt == APX_DTYPE_F32 && !jb->stream)) {
    /* fp32: out's own storage is the fp32 accumulator; ints: exact */
    if (!self_row)
      memset(dst, 0, row_bytes);
    else if (!jb->in_place)
      memcpy(dst, self_row, row_bytes);
    for (int64_t k = first_k; k >= 0; k = next[k]) {
      const char *s = src + (size_t)(src_base + k * src_step) * es;
      if (dt == APX_DTYPE_F32)
        add_f32_row((float *)dst, (const float *)s, inner);
      else
        add_int_row(dt, dst, s, inner);
    }
    return;
  }
  /* floats through an fp32 block: rounded once, then stored (streamed
   * when out is large) */
  float acc[ACC_BLOCK];
  _Alignas(64) char rounded[ACC_BLOCK * sizeof(float)];
  for (int64_t j0 = 0; j0 < inner; j0 += ACC_BLOCK) {
    int64_t n = inner - j0 < ACC_BLOCK ? inner - j0 : ACC_BLOCK;
    if (self_row)
      si_row_to_f32(jb->isa, dt, self_row + (size_t)j0 * es, acc, n);
    else
      memset(acc, 0, (size_t)n * sizeof(float));
    for (int64_t k = first_k; k >= 0; k = next[k])
      si_row_accumulate(jb->isa, dt, src + (size_t)(src_base + k * src_step + j0) * es,
                        acc, n);
    if (jb->stream) {
      si_row_from_f32(jb->isa, dt, acc, rounded, n);
      si_copy_block(jb->isa, 1, dst + (size_t)j0 * es, rounded, (size_t)n * es);
    } else {
      si_row_from_f32(jb->isa, dt, acc, dst + (size_t)j0 * es, n);
    }
  }
}

/* Link the index rows of outer block o by destination: head[r] is the
 * first k landing on row r, next[k] the following one (ascending k).
 * row_values holds each index row's value. */
static void link_rows(const int64_t *row_values, int64_t o, int64_t steps,
                      int64_t dest_rows, int64_t *head, int64_t *next) {
  for (int64_t r = 0; r < dest_rows; r++) head[r] = -1;
  for (int64_t k = steps - 1; k >= 0; k--) {
    int64_t r = row_values[o * steps + k];
    next[k] = head[r];
    head[r] = k;
  }
}

/* Prefetch the first source row landing on destination row r (if any):
 * source rows arrive in random order. */
static inline void prefetch_chain_head(const scatter_job *jb, const cpu_axis_view *vsrc,
                                       int64_t src_base, const int64_t *head, int64_t r,
                                       int64_t end) {
  if (r >= end || head[r] < 0) return;
  const size_t es = apx_backend_dtype_size(jb->src->dtype);
  cpu_prefetch_bytes((const char *)jb->src->data +
                         (size_t)(src_base + head[r] * vsrc->stride[vsrc->dim]) * es,
                     (size_t)vsrc->inner * es);
}

static apx_status scatter_rows(const scatter_job *jb, const cpu_axis_view *vself,
                               const cpu_axis_view *vsrc, const int64_t *row_values) {
  const int64_t outer = vself->outer, steps = vself->steps;
  const int64_t dest_rows = jb->out->shape[vself->dim];
  const int per_outer_team = outer >= 2 * jb->team;
  const int slots = per_outer_team ? jb->team : 1;
  int64_t *links = malloc((size_t)slots * (size_t)(dest_rows + steps + 1) * sizeof(int64_t));
  if (!links) return APX_ERR_NO_MEMORY;
  if (per_outer_team) {
    /* many outer blocks: each thread takes whole blocks */
#ifdef _OPENMP
#pragma omp parallel num_threads(jb->team)
#endif
    {
      int me = 0;
#ifdef _OPENMP
      me = omp_get_thread_num();
#endif
      int64_t *head = links + (size_t)me * (size_t)(dest_rows + steps + 1);
      int64_t *next = head + dest_rows;
      int64_t o0, o1;
      cpu_thread_range(outer, &o0, &o1);
      for (int64_t o = o0; o < o1; o++) {
        link_rows(row_values, o, steps, dest_rows, head, next);
        int64_t self_base = cpu_axis_view_base(vself, o), src_base = cpu_axis_view_base(vsrc, o);
        for (int64_t r = 0; r < dest_rows; r++) {
          prefetch_chain_head(jb, vsrc, src_base, head, r + CPU_PREFETCH_ROWS_AHEAD, dest_rows);
          scatter_one_row(jb, vself, vsrc, self_base, src_base, r, head[r], next);
        }
      }
      if (jb->stream) cpu_stream_fence();
    }
  } else {
    /* few outer blocks: link on one thread (cheap: one value per row),
     * then split the destination rows */
    int64_t *head = links, *next = links + dest_rows;
    for (int64_t o = 0; o < outer; o++) {
      link_rows(row_values, o, steps, dest_rows, head, next);
      int64_t self_base = cpu_axis_view_base(vself, o), src_base = cpu_axis_view_base(vsrc, o);
#ifdef _OPENMP
#pragma omp parallel num_threads(jb->team) if (jb->team > 1)
#endif
      {
        int64_t r0, r1;
        cpu_thread_range(dest_rows, &r0, &r1);
        for (int64_t r = r0; r < r1; r++) {
          prefetch_chain_head(jb, vsrc, src_base, head, r + CPU_PREFETCH_ROWS_AHEAD, r1);
          scatter_one_row(jb, vself, vsrc, self_base, src_base, r, head[r], next);
        }
        if (jb->stream) cpu_stream_fence();
      }
    }
  }
  free(links);
  return APX_OK;
}

/* Columns of one job in the elements algorithm (at most). */
#define SCATTER_COLUMN_BLOCK 256

/* The general case. acc is out's storage (fp32, ints) or an fp32 image of
 * out (fp16/bf16); each job owns the destinations whose inner position lies
 * in its column block and whose index value lies in its value range. */
static inline __attribute__((always_inline)) void
scatter_elements_job(const scatter_job *jb, const cpu_axis_view *vself,
                     const cpu_axis_view *vsrc, char *acc, int64_t o, int64_t j0,
                     int64_t j1, int64_t v0, int64_t v1, const apx_dtype src_dt,
                     const int idx64) {
  /* floats accumulate in fp32, integers in their own width */
  const apx_dtype acc_dtype = si_is_float(src_dt) ? APX_DTYPE_F32 : src_dt;
  const int64_t steps = vself->steps, inner = vself->inner;
  const int64_t self_base = cpu_axis_view_base(vself, o), src_base = cpu_axis_view_base(vsrc, o);
  const int64_t dim_stride = vself->stride[vself->dim];
  const int64_t src_step = vsrc->stride[vsrc->dim];
  const int full_range = v0 == 0 && v1 == jb->out->shape[vself->dim];
  for (int64_t k = 0; k < steps; k++) {
    const int64_t index_row = (o * steps + k) * inner;
    const int64_t src_row = src_base + k * src_step;
    for (int64_t j = j0; j < j1; j++) {
      int64_t r = cpu_index_at(jb->index->data, idx64, index_row + j);
      if (!full_range && (r < v0 || r >= v1)) continue;
      int64_t d = self_base + r * dim_stride + cpu_inner_off(vself, j);
      int64_t s = src_row + cpu_inner_off(vsrc, j);
      switch (acc_dtype) {
      case APX_DTYPE_F32:
        ((float *)acc)[d] += si_load_f32(src_dt, jb->src->data, s);
        break;
      case APX_DTYPE_I32: ((uint32_t *)acc)[d] += ((const uint32_t *)jb->src->data)[s]; break;
      default: ((uint64_t *)acc)[d] += ((const uint64_t *)jb->src->data)[s]; break;
      }
    }
  }
}

/* One copy of the loop per (data dtype, index width): the per-element
 * switches then fold away. */
typedef void (*scatter_elements_fn)(const scatter_job *, const cpu_axis_view *,
                                    const cpu_axis_view *, char *, int64_t, int64_t, int64_t,
                                    int64_t, int64_t);
#define SCATTER_VARIANT_(upper, idx64)                                         \
  static void scatter_elements_##upper##_##idx64(                             \
      const scatter_job *jb, const cpu_axis_view *vs, const cpu_axis_view *vr, \
      char *acc, int64_t o, int64_t j0, int64_t j1, int64_t v0, int64_t v1) {  \
    scatter_elements_job(jb, vs, vr, acc, o, j0, j1, v0, v1, APX_DTYPE_##upper, \
                         idx64);                                               \
  }
#define SCATTER_VARIANTS_(upper, lower, size)                                  \
  SCATTER_VARIANT_(upper, 0) SCATTER_VARIANT_(upper, 1)
APX_DTYPE_MAP(SCATTER_VARIANTS_)
#undef SCATTER_VARIANTS_
#undef SCATTER_VARIANT_

static scatter_elements_fn scatter_elements_variant(apx_dtype dt, int idx64) {
  switch (dt) {
#define SCATTER_CASE_(upper, lower, size)                                      \
  case APX_DTYPE_##upper:                                                      \
    return idx64 ? scatter_elements_##upper##_1 : scatter_elements_##upper##_0;
    APX_DTYPE_MAP(SCATTER_CASE_)
#undef SCATTER_CASE_
  default: return NULL;
  }
}

static apx_status scatter_elements(const scatter_job *jb, const cpu_axis_view *vself,
                                   const cpu_axis_view *vsrc) {
  const apx_dtype dt = jb->out->dtype;
  const int64_t numel = apx_backend_numel(jb->out);
  const size_t es = apx_backend_dtype_size(dt);
  const int narrow_float = dt == APX_DTYPE_F16 || dt == APX_DTYPE_BF16;
  char *acc = jb->out->data; /* fp32 and integers accumulate in place */
  if (narrow_float) {
    acc = malloc((size_t)(numel ? numel : 1) * sizeof(float));
    if (!acc) return APX_ERR_NO_MEMORY;
  }
  /* start from self (or zeros) */
#ifdef _OPENMP
#pragma omp parallel num_threads(jb->team) if (jb->team > 1)
#endif
  {
    int64_t e0, e1;
    cpu_thread_range(numel, &e0, &e1);
    if (narrow_float) {
      if (jb->self)
        si_row_to_f32(jb->isa, dt, (const char *)jb->self->data + (size_t)e0 * es,
                      (float *)acc + e0, e1 - e0);
      else
        memset((float *)acc + e0, 0, (size_t)(e1 - e0) * sizeof(float));
    } else if (!jb->self) {
      memset(acc + (size_t)e0 * es, 0, (size_t)(e1 - e0) * es);
    } else if (!jb->in_place) {
      memcpy(acc + (size_t)e0 * es, (const char *)jb->self->data + (size_t)e0 * es,
             (size_t)(e1 - e0) * es);
    }
  }
  /* jobs: outer block x column block x value range */
  const int64_t inner = vself->inner, dest_rows = jb->out->shape[vself->dim];
  /* narrower column blocks before value ranges: a value range makes its
   * job read the whole unit's index, a column block only its columns */
  int64_t col_block = SCATTER_COLUMN_BLOCK;
  if (vself->outer > 0 && vself->outer < 2 * jb->team) {
    int64_t wanted = (2 * jb->team + vself->outer - 1) / vself->outer;
    int64_t narrow = (inner + wanted - 1) / wanted;
    if (narrow < col_block) col_block = narrow < 16 ? 16 : narrow;
  }
  const int64_t col_blocks = inner > 0 ? (inner + col_block - 1) / col_block : 0;
  const int64_t units = vself->outer * col_blocks;
  int64_t slices = 1;
  if (units > 0 && units < 2 * jb->team) slices = (2 * jb->team + units - 1) / units;
  if (slices > dest_rows) slices = dest_rows > 0 ? dest_rows : 1;
  const int64_t jobs = units * slices;
  const scatter_elements_fn fn =
      scatter_elements_variant(dt, jb->index->dtype == APX_DTYPE_I64);
#ifdef _OPENMP
#pragma omp parallel for num_threads(jb->team) schedule(dynamic, 1) if (jb->team > 1 && jobs > 1)
#endif
  for (int64_t job = 0; job < jobs; job++) {
    int64_t unit = job / slices, slice = job % slices;
    int64_t o = unit / col_blocks, cb = unit % col_blocks;
    int64_t j0 = cb * col_block;
    int64_t j1 = j0 + col_block < inner ? j0 + col_block : inner;
    int64_t v0 = dest_rows * slice / slices, v1 = dest_rows * (slice + 1) / slices;
    fn(jb, vself, vsrc, acc, o, j0, j1, v0, v1);
  }
  if (narrow_float) {
#ifdef _OPENMP
#pragma omp parallel num_threads(jb->team) if (jb->team > 1)
#endif
    {
      int64_t e0, e1;
      cpu_thread_range(numel, &e0, &e1);
      si_row_from_f32(jb->isa, dt, (const float *)acc + e0,
                      (char *)jb->out->data + (size_t)e0 * es, e1 - e0);
    }
    free(acc);
  }
  return APX_OK;
}

/* Can the rows algorithm serve this call: the index covers out's dims
 * before and after `dim` exactly, src's dims after `dim` match, and each
 * index row holds one value? */
static int rows_algorithm_fits(const scatter_job *jb, const cpu_axis_view *vself,
                               const cpu_axis_view *vsrc, int64_t **row_values) {
  const apx_tensor *index = jb->index;
  for (int d = 0; d < vself->dim; d++)
    if (index->shape[d] != jb->out->shape[d]) return 0;
  if (!vself->inner_contiguous || !vsrc->inner_contiguous) return 0;
  /* one element per row: linking rows buys nothing over accumulating
   * element by element */
  if (vself->inner <= 1) return 0;
  const int idx64 = index->dtype == APX_DTYPE_I64;
  const int64_t rows = vself->outer * vself->steps;
  /* each row's value, kept while the rows stream by: linking them later
   * from the index itself would miss the cache once per row */
  int64_t *values = malloc((size_t)(rows ? rows : 1) * sizeof(int64_t));
  if (!values) return 0;
  int uniform = 1;
#ifdef _OPENMP
#pragma omp parallel num_threads(jb->team) if (jb->team > 1) reduction(&& : uniform)
#endif
  {
    int64_t r0, r1;
    cpu_thread_range(rows, &r0, &r1);
    for (int64_t r = r0; r < r1 && uniform; r++) {
      uniform = si_index_row_uniform(index->data, idx64, r, vself->inner, jb->isa);
      values[r] = cpu_index_at(index->data, idx64, r * vself->inner);
    }
  }
  if (!uniform) {
    free(values);
    return 0;
  }
  *row_values = values;
  return 1;
}

static apx_status scatter_add_common(cpu_state *st, const char *op, scatter_job *jb) {
  /* nothing to write, or nothing to add: the job loops below are counted
   * over the outer dims, which may be huge beside an empty one */
  const int64_t out_numel = apx_backend_numel(jb->out);
  if (out_numel == 0) return APX_OK;
  if (apx_backend_numel(jb->index) == 0) {
    const size_t bytes = (size_t)out_numel * apx_backend_dtype_size(jb->out->dtype);
    if (!jb->self)
      memset(jb->out->data, 0, bytes);
    else if (jb->self->data != jb->out->data)
      memcpy(jb->out->data, jb->self->data, bytes);
    return APX_OK;
  }
  jb->isa = si_isa_level();
  jb->dim = cpu_normalize_dim(jb->dim, jb->index->ndim);
  jb->in_place = jb->self && jb->self->data == jb->out->data;
  jb->stream = !jb->in_place &&
               (size_t)apx_backend_numel(jb->out) * apx_backend_dtype_size(jb->out->dtype) >=
                   SI_STREAM_MIN_BYTES;
  jb->team = cpu_team_size(st, apx_backend_numel(jb->out) + apx_backend_numel(jb->index));
  cpu_axis_view vself, vsrc;
  int ok_self = cpu_axis_view_init(&vself, jb->index, jb->dim, jb->out);
  int ok_src = cpu_axis_view_init(&vsrc, jb->index, jb->dim, jb->src);
  apx_status status = APX_ERR_NO_MEMORY;
  int64_t *row_values = NULL;
  if (ok_self && ok_src) {
    if (rows_algorithm_fits(jb, &vself, &vsrc, &row_values))
      status = scatter_rows(jb, &vself, &vsrc, row_values);
    else
      status = scatter_elements(jb, &vself, &vsrc);
  }
  free(row_values);
  cpu_axis_view_free(&vself);
  cpu_axis_view_free(&vsrc);
  if (status == APX_ERR_NO_MEMORY)
    return st->svc->set_error(status, "%s: cannot allocate accumulation scratch", op);
  return status;
}

apx_status cpu_scatter_accumulate(cpu_state *st, const char *op, const apx_tensor *self,
                                  const apx_tensor *index, const apx_tensor *src,
                                  const apx_tensor *out, int dim) {
  scatter_job jb = {.self = self, .index = index, .src = src, .out = out, .dim = dim};
  return scatter_add_common(st, op, &jb);
}

apx_status cpu_scatter_add(void *state, const apx_scatter_add_args *args,
                           const apx_call *call) {
  (void)call;
  return cpu_scatter_accumulate(state, "scatter_add", args->self, args->index, args->src,
                                args->out, args->dim);
}
