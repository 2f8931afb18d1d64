/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: index_select (docs/ops.md, index_select): src viewed as
 * [outer, M, inner] around dim, out as [outer, N, inner]; out row (o, r) =
 * src row (o, index[r]), one copy of inner elements per (o, r) (streamed when
 * large). */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "scan_index_simd.h"

/* A position in out's rows [outer, N] and the src row it copies. */
typedef struct {
  int64_t o, i;
} row_pos;

static inline row_pos row_pos_at(int64_t r, int64_t N) {
  row_pos p = {r / N, r % N};
  return p;
}

static inline void row_pos_next(row_pos *p, int64_t N) {
  if (++p->i == N) {
    p->i = 0;
    p->o++;
  }
}

static inline int64_t source_row(row_pos p, const void *index, int idx64, int64_t M) {
  return p.o * M + cpu_index_at(index, idx64, p.i);
}

/* One call's rows: out row r of the [outer * N] rows copies src row
 * source_row(r) (row_bytes each). */
typedef struct {
  const char *src;
  char *out;
  const void *index;
  int idx64, stream;
  int64_t N, M;
  size_t row_bytes;
  si_isa isa;
} row_copy;

static void copy_rows(const row_copy *c, int64_t r0, int64_t r1) {
  if (r0 < r1) {
    row_pos at = row_pos_at(r0, c->N), ahead = row_pos_at(r0 + CPU_PREFETCH_ROWS_AHEAD, c->N);
    for (int64_t r = r0; r < r1; r++) {
      if (r + CPU_PREFETCH_ROWS_AHEAD < r1)
        cpu_prefetch_bytes(c->src + (size_t)source_row(ahead, c->index, c->idx64, c->M) *
                                        c->row_bytes,
                           c->row_bytes);
      si_copy_block(c->isa, c->stream, c->out + (size_t)r * c->row_bytes,
                    c->src + (size_t)source_row(at, c->index, c->idx64, c->M) * c->row_bytes,
                    c->row_bytes);
      row_pos_next(&at, c->N);
      row_pos_next(&ahead, c->N);
    }
  }
  if (c->stream) cpu_stream_fence();
}

apx_status cpu_index_select(void *state, const apx_index_select_args *args,
                            const apx_call *call) {
  (void)call;
  cpu_state *st = state;
  int64_t outer, M, width;
  apx_index_select_view(args->src, args->dim, &outer, &M, &width);
  const int64_t N = args->index->shape[0], rows = outer * N;
  const size_t row_bytes = (size_t)width * apx_backend_dtype_size(args->src->dtype);
  const row_copy c = {args->src->data,
                      args->out->data,
                      args->index->data,
                      args->index->dtype == APX_DTYPE_I64,
                      (size_t)rows * row_bytes >= SI_STREAM_MIN_BYTES,
                      N,
                      M,
                      row_bytes,
                      si_isa_level()};
  const int team = cpu_team_size(st, rows * width);
  /* a team of one runs here: entering a parallel region costs a team's
   * setup even when its if clause is false */
  if (team <= 1) {
    copy_rows(&c, 0, rows);
    return APX_OK;
  }
#ifdef _OPENMP
#pragma omp parallel num_threads(team)
#endif
  {
    int64_t r0, r1;
    cpu_thread_range(rows, &r0, &r1);
    copy_rows(&c, r0, r1);
  }
  return APX_OK;
}
