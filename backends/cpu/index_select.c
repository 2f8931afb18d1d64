/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: index_select (docs/ops.md, index_select): out[r, :] =
 * src[index[r], :], one row copy per index entry (streamed when large). */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "scan_index_simd.h"

apx_status cpu_index_select(void *state, const apx_index_select_args *args,
                            const apx_call *call) {
  (void)call;
  cpu_state *st = state;
  const int64_t rows = args->index->shape[0], width = args->src->shape[1];
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
    for (int64_t r = r0; r < r1; r++) {
      if (r + CPU_PREFETCH_ROWS_AHEAD < r1)
        cpu_prefetch_bytes(src + (size_t)cpu_index_at(index, idx64, r + CPU_PREFETCH_ROWS_AHEAD) *
                                     row_bytes,
                           row_bytes);
      si_copy_block(isa, stream, out + (size_t)r * row_bytes,
                    src + (size_t)cpu_index_at(index, idx64, r) * row_bytes, row_bytes);
    }
    if (stream) cpu_stream_fence();
  }
  return APX_OK;
}
