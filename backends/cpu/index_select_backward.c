/* SPDX-License-Identifier: Apache-2.0 */
/* cpu index_select_backward, docs/ops.md, index_select_backward: grad_src =
 * zeros, then grad_src[..,index[i],..] += grad_out[..,i,..] along dim for i =
 * 0 .. N-1, over grad_src viewed as [outer, M, inner] and grad_out as
 * [outer, N, inner] (rows of inner elements).
 *
 * Each destination row (o, m) is owned by the work item of its range of
 * rows: it sums the rows (o, i) of grad_out whose index[i] = m, in
 * ascending i (a list per m built first), in fp32 from zero for floats (a
 * row at a time, 8 lanes on AVX2; exactly, wrapping, for integers), and
 * stores once; a run of consecutive rows no index names is zeroed by one
 * memset. Rows are disjoint, so the result is the same for any thread
 * count. */
#include <stdlib.h>
#include <string.h>

#include "scan_index_simd.h"

/* Columns of an f16/bf16 row summed at once: an fp32 block in L1. */
#define COLUMN_BLOCK 1024
/* Destination rows per work item. */
#define ROWS_PER_ITEM 64

/* One call's rows. */
typedef struct {
  const apx_tensor *g;
  char *grad_src;
  const int64_t *head, *next;
  int64_t rows, n, width;
  size_t row_bytes;
  int is_float;
  si_isa isa;
} sum_rows;

/* grad_out's rows row0 + i for the i of the list from head, summed into dst. */
static void sum_float_row(const sum_rows *c, void *dst, int64_t row0, int64_t head) {
  const apx_dtype dt = c->g->dtype;
  const int64_t width = c->width;
  const char *g = c->g->data;
  const size_t es = apx_backend_dtype_size(dt);
  if (dt == APX_DTYPE_F32) { /* the fp32 sum in place, from +0 */
    memset(dst, 0, c->row_bytes);
    for (int64_t i = head; i >= 0; i = c->next[i])
      si_row_accumulate(c->isa, dt, g + (size_t)((row0 + i) * width) * es, dst, width);
    return;
  }
  float acc[COLUMN_BLOCK];
  for (int64_t j0 = 0; j0 < width; j0 += COLUMN_BLOCK) {
    const int64_t n = width - j0 < COLUMN_BLOCK ? width - j0 : COLUMN_BLOCK;
    memset(acc, 0, (size_t)n * sizeof(float));
    for (int64_t i = head; i >= 0; i = c->next[i])
      si_row_accumulate(c->isa, dt, g + (size_t)((row0 + i) * width + j0) * es, acc, n);
    si_row_from_f32(c->isa, dt, acc, (char *)dst + (size_t)j0 * es, n);
  }
}

static void sum_int_row(const sum_rows *c, void *dst, int64_t row0, int64_t head) {
  const int64_t width = c->width;
  memset(dst, 0, c->row_bytes);
  if (c->g->dtype == APX_DTYPE_I64) {
    uint64_t *d = dst;
    const uint64_t *s = c->g->data;
    for (int64_t i = head; i >= 0; i = c->next[i])
      for (int64_t j = 0; j < width; j++)
        d[j] += s[(row0 + i) * width + j];
  } else {
    uint32_t *d = dst;
    const uint32_t *s = c->g->data;
    for (int64_t i = head; i >= 0; i = c->next[i])
      for (int64_t j = 0; j < width; j++)
        d[j] += s[(row0 + i) * width + j];
  }
}

/* Destination rows [r0, r1) of the [outer * M] rows. */
static void sum_range(const sum_rows *c, int64_t r0, int64_t r1) {
  int64_t zeros = r0; /* the first row of the current run no index names */
  for (int64_t r = r0; r < r1; r++) {
    const int64_t o = r / c->rows, m = r - o * c->rows;
    if (c->head[m] < 0)
      continue;
    if (zeros < r) /* all zero bits are +0 in every dtype */
      memset(c->grad_src + (size_t)zeros * c->row_bytes, 0, (size_t)(r - zeros) * c->row_bytes);
    zeros = r + 1;
    char *dst = c->grad_src + (size_t)r * c->row_bytes;
    if (c->is_float)
      sum_float_row(c, dst, o * c->n, c->head[m]);
    else
      sum_int_row(c, dst, o * c->n, c->head[m]);
  }
  if (zeros < r1)
    memset(c->grad_src + (size_t)zeros * c->row_bytes, 0, (size_t)(r1 - zeros) * c->row_bytes);
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
  const sum_rows c = {g,     gs->data, head, next, rows,
                      n,     width,    (size_t)width * apx_backend_dtype_size(g->dtype),
                      si_is_float(g->dtype), si_isa_level()};
  const int64_t total = outer * rows, items = (total + ROWS_PER_ITEM - 1) / ROWS_PER_ITEM;
  const int team = cpu_team_size(st, outer * (n > rows ? n : rows) * width);
  /* a team of one runs here: entering a parallel region costs a team's
   * setup even when its if clause is false */
  if (team <= 1 || items == 1) {
    sum_range(&c, 0, total);
  } else {
    CPU_OMP_FOR(team, outer * rows * width)
    for (int64_t item = 0; item < items; item++)
      sum_range(&c, item * ROWS_PER_ITEM,
                (item + 1) * ROWS_PER_ITEM < total ? (item + 1) * ROWS_PER_ITEM : total);
  }
  free(head);
  free(next);
  return APX_OK;
}
