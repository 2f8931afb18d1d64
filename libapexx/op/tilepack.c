/* SPDX-License-Identifier: Apache-2.0 */
/* tilepack (docs/ops.md, tilepack): out[b,k,c,dy,dx] =
 * features[b,c,ty*t+dy,tx*t+dx] for the ids of idx, in their order. */
#include "config.h"

#include <apexx/op_rules.h>

#include "op_table.h"

enum { FEATURES, IDX, TILE, OUT };

static const apx_op_arg args_of[] = {
    APX__TENSOR(apx_tilepack_args, features, APX_ARG_INPUT, 0, 4, APX_DTYPES_FLOAT, -1, -1,
                "[B,C,H,W]"),
    APX__TENSOR(apx_tilepack_args, idx, APX_ARG_INDEX, 0, 2, APX_DTYPES_INDEX, -1, -1, "[B,K]"),
    APX__OPTION(apx_tilepack_args, tile, APX_ARG_INT64),
    APX__TENSOR(apx_tilepack_args, out, APX_ARG_OUTPUT, 0, 5, APX_DTYPES_ANY, FEATURES, -1,
                "[B,K,C,t,t]"),
};

static const apx_tilepack_args init = APX_TILEPACK_ARGS_INIT;

static const char *output_shape(const void *args, int arg, int *ndim, int64_t shape[APX_MAX_DIMS]) {
  const apx_tilepack_args *a = args;
  if (arg != OUT)
    return NULL;
  *ndim = 5;
  shape[0] = apx__dim_or_0(a->features, 0);
  shape[1] = apx__dim_or_0(a->idx, 1);
  shape[2] = apx__dim_or_0(a->features, 1);
  shape[3] = shape[4] = a->tile;
  return "[B,K,C,t,t]";
}

static int index_range(const void *args, int arg, int64_t *lo, int64_t *hi, char *why,
                       size_t why_size) {
  const apx_tilepack_args *a = args;
  (void)why;
  (void)why_size;
  if (arg != IDX)
    return 0;
  *lo = 0;
  *hi = apx_tile_id_max(a->features, a->tile);
  return 1;
}

/* docs/ops.md, tilepack: idx's batch is features', the tile divides H and W. */
static apx_status check(apx__vstate *v, const void *args) {
  const apx_tilepack_args *a = args;
  APX__TRY(apx__vrequire_dim_match(v, "idx", a->idx, 0, "features", a->features, 0, "batch B"));
  return apx__vrequire_tile_grid(v, "tile", a->tile, "features", a->features);
}

const apx__op apx__op_tilepack = {
    .desc = {APX__OP_DESC(TILEPACK, tilepack, apx_tilepack_args, init, args_of,
                          APX_OP_CAP_INDEX_TENSORS | APX_OP_CAP_DEVICE_CHECKS,
                          "gather the tiles idx names from features into out [B,K,C,t,t]"),
             .output_shape = output_shape, .index_range = index_range},
    .check = check,
};
