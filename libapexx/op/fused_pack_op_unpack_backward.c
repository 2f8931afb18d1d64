/* SPDX-License-Identifier: Apache-2.0 */
/* fused_pack_op_unpack_backward (docs/ops.md, fused_pack_op_unpack_backward):
 * grad_features = grad_out times the forward's derivative at features, and
 * optionally the gradients of its four scalars. */
#include "config.h"

#include <apexx/op_rules.h>

#include "op_table.h"

enum {
  GRAD_OUT,
  FEATURES,
  IDX,
  TILE,
  VALUE_SCALE,
  VALUE_BIAS,
  GATE_SCALE,
  GATE_BIAS,
  REQUIRE_UNIQUE,
  GRAD_FEATURES,
  GRAD_SCALARS
};

typedef apx_fused_pack_op_unpack_backward_args args_t;

static const apx_op_arg args_of[] = {
    APX__TENSOR(args_t, grad_out, APX_ARG_INPUT, 0, 4, APX_DTYPES_FLOAT, -1, -1, "[B,C,H,W]"),
    APX__TENSOR(args_t, features, APX_ARG_INPUT, 0, 4, APX_DTYPES_ANY, GRAD_OUT, -1,
                "the shape of grad_out"),
    APX__TENSOR(args_t, idx, APX_ARG_INDEX, 0, 2, APX_DTYPES_INDEX, -1, -1, "[B,K]"),
    APX__OPTION(args_t, tile, APX_ARG_INT64),
    APX__OPTION(args_t, value_scale, APX_ARG_DOUBLE),
    APX__OPTION(args_t, value_bias, APX_ARG_DOUBLE),
    APX__OPTION(args_t, gate_scale, APX_ARG_DOUBLE),
    APX__OPTION(args_t, gate_bias, APX_ARG_DOUBLE),
    APX__OPTION(args_t, require_unique, APX_ARG_FLAG),
    APX__TENSOR(args_t, grad_features, APX_ARG_OUTPUT, 0, 4, APX_DTYPES_ANY, GRAD_OUT, GRAD_OUT,
                "the shape of grad_out"),
    APX__TENSOR(args_t, grad_scalars, APX_ARG_OUTPUT, 1, 1, APX_DTYPES_FLOAT, -1, -1,
                "[4]: value_scale, value_bias, gate_scale, gate_bias"),
};

static const args_t init = APX_FUSED_PACK_OP_UNPACK_BACKWARD_ARGS_INIT;

static const char *output_shape(const void *args, int arg, int *ndim, int64_t shape[APX_MAX_DIMS]) {
  if (arg == GRAD_FEATURES) {
    apx__shape_of(((const args_t *)args)->grad_out, ndim, shape);
    return "the shape of grad_out";
  }
  if (arg != GRAD_SCALARS)
    return NULL;
  *ndim = 1;
  shape[0] = 4;
  return "[4]";
}

static int index_range(const void *args, int arg, int64_t *lo, int64_t *hi, char *why,
                       size_t why_size) {
  const args_t *a = args;
  (void)why;
  (void)why_size;
  if (arg != IDX)
    return 0;
  *lo = 0;
  *hi = apx_tile_id_max(a->grad_out, a->tile);
  return 1;
}

/* docs/ops.md, fused_pack_op_unpack_backward: features of grad_out's shape,
 * then fused_pack_op_unpack's rules. */
static apx_status check(apx__vstate *v, const void *args) {
  const args_t *a = args;
  APX__TRY(apx__vrequire_shape(v, "features", a->features, a->grad_out->ndim, a->grad_out->shape,
                               "the shape of grad_out"));
  APX__TRY(apx__vrequire_dim_match(v, "idx", a->idx, 0, "grad_out", a->grad_out, 0, "batch B"));
  return apx__vrequire_tile_grid(v, "tile", a->tile, "grad_out", a->grad_out);
}

static apx_status check_values(apx__vstate *v, const void *args) {
  const args_t *a = args;
  return a->require_unique ? apx__require_unique_rows(v, "idx", a->idx) : APX_OK;
}

const apx__op apx__op_fused_pack_op_unpack_backward = {
    .desc = {APX__OP_DESC(FUSED_PACK_OP_UNPACK_BACKWARD, fused_pack_op_unpack_backward, args_t,
                          init, args_of, APX_OP_CAP_INDEX_TENSORS | APX_OP_CAP_DEVICE_CHECKS,
                          "fused_pack_op_unpack's gradients: of features, and of its four "
                          "scalars when grad_scalars is given"),
             .output_shape = output_shape, .index_range = index_range},
    .check = check,
    .check_values = check_values,
};
