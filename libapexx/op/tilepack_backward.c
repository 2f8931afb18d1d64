/* SPDX-License-Identifier: Apache-2.0 */
/* tilepack_backward (docs/ops.md, tilepack_backward): grad_features = zeros,
 * then grad_out[b,k] added onto tile idx[b,k] in K order. */
#include "config.h"

#include <apexx/op_rules.h>

#include "op_table.h"

enum { GRAD_OUT, IDX, GRAD_FEATURES };

typedef apx_tilepack_backward_args args_t;

static const apx_op_arg args_of[] = {
    APX__TENSOR(args_t, grad_out, APX_ARG_INPUT, 0, 5, APX_DTYPES_FLOAT, -1, -1, "[B,K,C,t,t]"),
    APX__TENSOR(args_t, idx, APX_ARG_INDEX, 0, 2, APX_DTYPES_INDEX, -1, -1, "[B,K]"),
    APX__TENSOR(args_t, grad_features, APX_ARG_OUTPUT, 0, 4, APX_DTYPES_ANY, GRAD_OUT, -1,
                "[B,C,H,W], the shape of tilepack's features (the caller's)"),
};

static const args_t init = APX_TILEPACK_BACKWARD_ARGS_INIT;

static int index_range(const void *args, int arg, int64_t *lo, int64_t *hi, char *why,
                       size_t why_size) {
  const args_t *a = args;
  (void)why;
  (void)why_size;
  if (arg != IDX)
    return 0;
  *lo = 0;
  *hi = apx_tile_id_max(a->grad_features, a->grad_out->shape[3]);
  return 1;
}

/* docs/ops.md, tilepack_backward: grad_out [B,K,C,t,t] of square tiles, idx
 * [B,K], grad_features [B,C,H,W] with t dividing H and W. The output's shape
 * is the caller's, so its rules are checked here, before the dtype rules. */
static apx_status check(apx__vstate *v, const void *args) {
  const args_t *a = args;
  const apx_tensor *g = a->grad_out, *gf = a->grad_features;
  if (g->shape[3] != g->shape[4])
    return apx__vfail(v, "grad_out tiles must be square, got grad_out.shape[3], [4] = [%lld, %lld]",
                      (long long)g->shape[3], (long long)g->shape[4]);
  APX__TRY(apx__vrequire_dim_match(v, "idx", a->idx, 0, "grad_out", g, 0, "batch B"));
  APX__TRY(apx__vrequire_dim_match(v, "idx", a->idx, 1, "grad_out", g, 1, "tiles K"));
  APX__TRY(apx__vrequire_dim_match(v, "grad_features", gf, 0, "grad_out", g, 0, "batch B"));
  APX__TRY(apx__vrequire_dim_match(v, "grad_features", gf, 1, "grad_out", g, 2, "channels C"));
  return apx__vrequire_tile_grid(v, "tile size inferred from grad_out.shape[3]", g->shape[3],
                                 "grad_features", gf);
}

const apx__op apx__op_tilepack_backward = {
    .desc = {APX__OP_DESC(TILEPACK_BACKWARD, tilepack_backward, args_t, init, args_of,
                          APX_OP_CAP_INDEX_TENSORS | APX_OP_CAP_DEVICE_CHECKS,
                          "tilepack's gradient: grad_out's tiles added into zeros of "
                          "grad_features at idx, in K order"),
             .index_range = index_range},
    .check = check,
};
