/* SPDX-License-Identifier: Apache-2.0 */
/* cpu index_select_backward, docs/ops.md, index_select_backward: grad_src =
 * zeros, then grad_src[..,index[i],..] += grad_out[..,i,..] along dim for i =
 * 0 .. N-1, over grad_src viewed as [outer, M, inner] and grad_out as
 * [outer, N, inner] (rows of inner elements).
 *
 * Each destination row (o, m) is one work item that owns it: it sums the
 * rows (o, i) of grad_out whose index[i] = m, in ascending i (a list per m
 * built first), in
 * fp32 from zero for floats (exactly, wrapping, for integers), a block of
 * columns at a time, and stores once. Rows are disjoint, so the result is
 * the same for any thread count. */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* Columns of a float row summed at once: an fp32 block in L1. */
#define COLUMN_BLOCK 1024

/* grad_out's rows row0 + i for the i of the list from head, summed into dst. */
static void sum_float_row(const apx_tensor *g, void *dst, int64_t width, int64_t row0,
                          int64_t head, const int64_t *next) {
  const apx_dtype dt = g->dtype;
  float acc[COLUMN_BLOCK];
  for (int64_t j0 = 0; j0 < width; j0 += COLUMN_BLOCK) {
    const int64_t n = width - j0 < COLUMN_BLOCK ? width - j0 : COLUMN_BLOCK;
    for (int64_t j = 0; j < n; j++)
      acc[j] = 0.0f;
    for (int64_t i = head; i >= 0; i = next[i])
      for (int64_t j = 0; j < n; j++)
        acc[j] += cpu_load_float(dt, g->data, (row0 + i) * width + j0 + j);
    for (int64_t j = 0; j < n; j++)
      cpu_store_float(dt, dst, j0 + j, acc[j]);
  }
}

static void sum_int_row(const apx_tensor *g, void *dst, int64_t width, int64_t row0,
                        int64_t head, const int64_t *next) {
  if (g->dtype == APX_DTYPE_I64) {
    uint64_t *d = dst;
    const uint64_t *s = g->data;
    memset(d, 0, (size_t)width * sizeof *d);
    for (int64_t i = head; i >= 0; i = next[i])
      for (int64_t j = 0; j < width; j++)
        d[j] += s[(row0 + i) * width + j];
  } else {
    uint32_t *d = dst;
    const uint32_t *s = g->data;
    memset(d, 0, (size_t)width * sizeof *d);
    for (int64_t i = head; i >= 0; i = next[i])
      for (int64_t j = 0; j < width; j++)
        d[j] += s[(row0 + i) * width + j];
  }
}

apx_status cpu_index_select_backward(void *state, const apx_index_select_backward_args *args,
                                     const apx_call *call) {
  (void)call;
  cpu_state *st = state;
  const apx_tensor *g = args->grad_out, *gs = args->grad_src;
  int64_t outer, rows, width;
  apx_index_select_view(gs, args->dim, &outer, &rows, &width);
  const int64_t n = args->index->shape[0];
  if (apx_backend_numel(gs) == 0)
    return APX_OK;
  int64_t *head = malloc((size_t)rows * sizeof(int64_t));
  int64_t *next = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
  if (!head || !next) {
    free(head);
    free(next);
    return st->svc->set_error(APX_ERR_NO_MEMORY,
                              "index_select_backward: out of host memory for the row lists "
                              "(M + N = [%lld])",
                              (long long)(rows + n));
  }
  for (int64_t r = 0; r < rows; r++)
    head[r] = -1;
  /* pushed from the last i down, so each list runs in ascending i */
  const int i64 = args->index->dtype == APX_DTYPE_I64;
  for (int64_t i = n - 1; i >= 0; i--) {
    const int64_t r = cpu_index_at(args->index->data, i64, i);
    next[i] = head[r];
    head[r] = i;
  }
  const int is_float = g->dtype == APX_DTYPE_F32 || g->dtype == APX_DTYPE_F16 ||
                       g->dtype == APX_DTYPE_BF16;
  const size_t row_bytes = (size_t)width * apx_backend_dtype_size(g->dtype);
  const int team = cpu_team_size(st, outer * (n > rows ? n : rows) * width);
  (void)team;
  CPU_OMP_FOR_CHUNKED(team, outer * rows * width, 16)
  for (int64_t r = 0; r < outer * rows; r++) {
    const int64_t o = r / rows, m = r - o * rows;
    char *dst = (char *)gs->data + (size_t)r * row_bytes;
    if (head[m] < 0) /* no index names it: zeros (all zero bits in every dtype) */
      memset(dst, 0, row_bytes);
    else if (is_float)
      sum_float_row(g, dst, width, o * n, head[m], next);
    else
      sum_int_row(g, dst, width, o * n, head[m], next);
  }
  free(head);
  free(next);
  return APX_OK;
}
