/* SPDX-License-Identifier: Apache-2.0 */
/* tileunpack_backward (docs/ops.md, tileunpack_backward): the gradients of
 * tileunpack's base and packed from grad_out, with the forward's placement,
 * priority and mode. */
#include "config.h"

#include <apexx/op_rules.h>

#include "op_table.h"

enum {
  GRAD_OUT,
  IDX,
  ORIGINS,
  LEVELS,
  MODE,
  BLEND_ALPHA,
  ASSUME_SORTED,
  TILE,
  GRAD_BASE,
  GRAD_PACKED
};

typedef apx_tileunpack_backward_args args_t;

static const char *const mode_names[] = {"override", "blend"};

static const apx_op_arg args_of[] = {
    APX__TENSOR(args_t, grad_out, APX_ARG_INPUT, 0, 4, APX_DTYPES_FLOAT, -1, -1, "[B,C,H,W]"),
    APX__TENSOR(args_t, idx, APX_ARG_INDEX, 1, 2, APX_DTYPES_INDEX, -1, -1, "[B,K]"),
    APX__TENSOR(args_t, origins, APX_ARG_INDEX, 1, 3, APX_DTYPES_INDEX, -1, -1, "[B,K,2]"),
    APX__TENSOR(args_t, levels, APX_ARG_INDEX, 1, 0, APX_DTYPES_INDEX, -1, -1, "[B,K]"),
    APX__ENUM(args_t, mode, mode_names),
    APX__OPTION(args_t, blend_alpha, APX_ARG_DOUBLE),
    APX__OPTION(args_t, assume_priority_sorted, APX_ARG_FLAG),
    APX__OPTION(args_t, tile, APX_ARG_INT64),
    APX__TENSOR(args_t, grad_base, APX_ARG_OUTPUT, 0, 4, APX_DTYPES_ANY, GRAD_OUT, -1,
                "the shape of grad_out"),
    APX__TENSOR(args_t, grad_packed, APX_ARG_OUTPUT, 0, 5, APX_DTYPES_ANY, GRAD_OUT, -1,
                "[B,K,C,t,t]"),
};

static const args_t init = APX_TILEUNPACK_BACKWARD_ARGS_INIT;

static const char *output_shape(const void *args, int arg, int *ndim, int64_t shape[APX_MAX_DIMS]) {
  const args_t *a = args;
  if (arg == GRAD_BASE) {
    apx__shape_of(a->grad_out, ndim, shape);
    return "the shape of grad_out";
  }
  if (arg != GRAD_PACKED)
    return NULL;
  *ndim = 5;
  shape[0] = apx__dim_or_0(a->grad_out, 0);
  shape[1] = apx__dim_or_0(a->idx ? a->idx : a->origins, 1);
  shape[2] = apx__dim_or_0(a->grad_out, 1);
  shape[3] = shape[4] = a->tile;
  return "[B,K,C,t,t]";
}

static int index_range(const void *args, int arg, int64_t *lo, int64_t *hi, char *why,
                       size_t why_size) {
  const args_t *a = args;
  (void)why;
  (void)why_size;
  if (arg != IDX)
    return 0; /* origins and levels: check_values */
  *lo = 0;
  *hi = apx_tile_id_max(a->grad_out, a->tile);
  return 1;
}

/* docs/ops.md, tileunpack_backward: tileunpack's rules with grad_out for
 * base, the tile given, K from idx or origins. */
static apx_status check(apx__vstate *v, const void *args) {
  const args_t *a = args;
  APX__TRY(apx__vrequire_tile_grid(v, "tile", a->tile, "grad_out", a->grad_out));
  return apx__tileunpack_check_placement(v, a->grad_out, -1, NULL, a->idx, a->origins, a->levels,
                                         (int)a->mode, a->blend_alpha,
                                         a->assume_priority_sorted);
}

static apx_status check_values(apx__vstate *v, const void *args) {
  const args_t *a = args;
  return apx__tileunpack_check_values(v, a->grad_out, a->tile, a->origins, a->levels);
}

const apx__op apx__op_tileunpack_backward = {
    .desc = {APX__OP_DESC(TILEUNPACK_BACKWARD, tileunpack_backward, args_t, init, args_of,
                          APX_OP_CAP_INDEX_TENSORS | APX_OP_CAP_DEVICE_CHECKS,
                          "tileunpack's gradients: grad_out split into grad_base and grad_packed "
                          "by the forward's priority order"),
             .output_shape = output_shape, .index_range = index_range},
    .check = check,
    .check_values = check_values,
};
