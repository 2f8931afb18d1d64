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

apx_status cpu_index_select(void *state, const apx_index_select_args *args,
                            const apx_call *call) {
  (void)call;
  cpu_state *st = state;
  int64_t outer, M, width;
  apx_index_select_view(args->src, args->dim, &outer, &M, &width);
  const int64_t N = args->index->shape[0], rows = outer * N;
  const size_t row_bytes = (size_t)width * apx_backend_dtype_size(args->src->dtype);
  const int idx64 = args->index->dtype == APX_DTYPE_I64;
  const char *src = args->src->data;
  char *out = args->out->data;
  const void *index = args->index->data;
  int team = cpu_team_size(st, rows * width);
  const si_isa isa = si_isa_level();
  const int stream = (size_t)rows * row_bytes >= SI_STREAM_MIN_BYTES;
  (void)team;
#ifdef _OPENMP
#pragma omp parallel num_threads(team) if (team > 1)
#endif
  {
    int64_t r0, r1;
    cpu_thread_range(rows, &r0, &r1);
    if (r0 < r1) {
      row_pos at = row_pos_at(r0, N), ahead = row_pos_at(r0 + CPU_PREFETCH_ROWS_AHEAD, N);
      for (int64_t r = r0; r < r1; r++) {
        if (r + CPU_PREFETCH_ROWS_AHEAD < r1)
          cpu_prefetch_bytes(src + (size_t)source_row(ahead, index, idx64, M) * row_bytes,
                             row_bytes);
        si_copy_block(isa, stream, out + (size_t)r * row_bytes,
                      src + (size_t)source_row(at, index, idx64, M) * row_bytes, row_bytes);
        row_pos_next(&at, N);
        row_pos_next(&ahead, N);
      }
    }
    if (stream) cpu_stream_fence();
  }
  return APX_OK;
}
