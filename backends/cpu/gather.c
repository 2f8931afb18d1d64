/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: gather (docs/ops.md, gather; Indexing ops for the rules the
 * four indexing ops share). out[..., k, ...] = src[..., index[..., k, ...],
 * ...] along `dim`, over the index viewed as [outer, steps, inner]
 * (cpu_axis_view). Whole rows are copied for expanded index rows (every
 * column the same value, torch's idx[:, None].expand). */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "scan_index_simd.h"

/* Rows [r0, r1) of the index (row = (o, k), inner values each). Element
 * copies are specialised on element size and index width. */
static inline __attribute__((always_inline)) void
gather_rows_impl(const cpu_axis_view *v, const char *src, const void *index,
                 char *out, int64_t r0, int64_t r1, si_isa isa, int stream,
                 const size_t es, const int idx64) {
  const int64_t inner = v->inner, steps = v->steps;
  const int64_t dim_stride = v->stride[v->dim];
  const size_t row_bytes = (size_t)inner * es;
  if (r0 >= r1 || inner == 0) return;
  int64_t o = r0 / steps;
  int64_t base = cpu_axis_view_base(v, o);
  int64_t k = r0 % steps;
  const int row_copies = inner >= 8 && v->inner_contiguous;
  for (int64_t r = r0; r < r1; r++) {
    char *dst = out + (size_t)(r * inner) * es;
    if (row_copies && r + CPU_PREFETCH_ROWS_AHEAD < r1) {
      /* the source row an expanded index will ask for a few rows on (a
       * guess: the row's first value, the current outer block) */
      int64_t ahead = cpu_index_at(index, idx64, (r + CPU_PREFETCH_ROWS_AHEAD) * inner);
      cpu_prefetch_bytes(src + (size_t)(base + ahead * dim_stride) * es, row_bytes);
    }
    if (row_copies && si_index_row_uniform(index, idx64, r, inner, isa)) {
      /* an expanded index (every column of the row the same source row):
       * one contiguous copy */
      int64_t i0 = cpu_index_at(index, idx64, r * inner);
      si_copy_block(isa, stream, dst, src + (size_t)(base + i0 * dim_stride) * es, row_bytes);
    } else {
      for (int64_t j = 0; j < inner; j++) {
        int64_t i = cpu_index_at(index, idx64, r * inner + j);
        memcpy(dst + (size_t)j * es,
               src + (size_t)(base + i * dim_stride + cpu_inner_off(v, j)) * es, es);
      }
    }
    if (++k == steps) {
      k = 0;
      base = cpu_axis_view_base(v, ++o);
    }
  }
}

#define GATHER_VARIANT_(es, idx64)                                             \
  static void gather_rows_##es##_##idx64(const cpu_axis_view *v, const char *src, \
                                         const void *index, char *out,         \
                                         int64_t r0, int64_t r1, si_isa isa,   \
                                         int stream) {                         \
    gather_rows_impl(v, src, index, out, r0, r1, isa, stream, es, idx64);      \
  }
GATHER_VARIANT_(2, 0)
GATHER_VARIANT_(2, 1)
GATHER_VARIANT_(4, 0)
GATHER_VARIANT_(4, 1)
GATHER_VARIANT_(8, 0)
GATHER_VARIANT_(8, 1)
#undef GATHER_VARIANT_

typedef void (*gather_rows_fn)(const cpu_axis_view *, const char *, const void *,
                               char *, int64_t, int64_t, si_isa, int);

static gather_rows_fn gather_variant(size_t es, int idx64) {
  switch (es) {
  case 2: return idx64 ? gather_rows_2_1 : gather_rows_2_0;
  case 4: return idx64 ? gather_rows_4_1 : gather_rows_4_0;
  default: return idx64 ? gather_rows_8_1 : gather_rows_8_0;
  }
}

apx_status cpu_gather(void *state, const apx_gather_args *args,
                      const apx_call *call) {
  (void)call;
  cpu_state *st = state;
  const apx_tensor *index = args->index;
  int dim = cpu_normalize_dim(args->dim, index->ndim);
  cpu_axis_view v;
  if (!cpu_axis_view_init(&v, index, dim, args->src))
    return st->svc->set_error(APX_ERR_NO_MEMORY, "gather: cannot allocate an offset table");
  const int64_t rows = v.outer * v.steps;
  gather_rows_fn fn = gather_variant(apx_backend_dtype_size(args->src->dtype),
                                     index->dtype == APX_DTYPE_I64);
  int team = cpu_team_size(st, rows * v.inner);
  const si_isa isa = si_isa_level();
  const int stream =
      (size_t)apx_backend_numel(args->out) * apx_backend_dtype_size(args->out->dtype) >=
      SI_STREAM_MIN_BYTES;
  /* a team of one runs here: entering a parallel region costs a team's
   * setup even when its if clause is false */
  if (team <= 1) {
    fn(&v, args->src->data, index->data, args->out->data, 0, rows, isa, stream);
    if (stream) cpu_stream_fence();
    cpu_axis_view_free(&v);
    return APX_OK;
  }
#ifdef _OPENMP
#pragma omp parallel num_threads(team)
#endif
  {
    int64_t r0, r1;
    cpu_thread_range(rows, &r0, &r1);
    fn(&v, args->src->data, index->data, args->out->data, r0, r1, isa, stream);
    if (stream) cpu_stream_fence();
  }
  cpu_axis_view_free(&v);
  return APX_OK;
}
