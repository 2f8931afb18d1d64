/* SPDX-License-Identifier: Apache-2.0 */
/* fused_pack_op_unpack (docs/ops.md, fused_pack_op_unpack): out = features,
 * except every pixel x of a tile idx names becomes
 * (x*value_scale + value_bias) * max(x*gate_scale + gate_bias, 0). */
#include "config.h"

#include <apexx/op_rules.h>
#include <stdlib.h>

#include "internal.h"
#include "op_table.h"

enum { FEATURES, IDX, TILE, VALUE_SCALE, VALUE_BIAS, GATE_SCALE, GATE_BIAS, REQUIRE_UNIQUE, OUT };

typedef apx_fused_pack_op_unpack_args args_t;

static const apx_op_arg args_of[] = {
    APX__TENSOR(args_t, features, APX_ARG_INPUT, 0, 4, APX_DTYPES_FLOAT, -1, -1, "[B,C,H,W]"),
    APX__TENSOR(args_t, idx, APX_ARG_INDEX, 0, 2, APX_DTYPES_INDEX, -1, -1, "[B,K]"),
    APX__OPTION(args_t, tile, APX_ARG_INT64),
    APX__OPTION(args_t, value_scale, APX_ARG_DOUBLE),
    APX__OPTION(args_t, value_bias, APX_ARG_DOUBLE),
    APX__OPTION(args_t, gate_scale, APX_ARG_DOUBLE),
    APX__OPTION(args_t, gate_bias, APX_ARG_DOUBLE),
    APX__OPTION(args_t, require_unique, APX_ARG_FLAG),
    APX__TENSOR(args_t, out, APX_ARG_OUTPUT, 0, 4, APX_DTYPES_ANY, FEATURES, FEATURES,
                "the shape of features"),
};

static const args_t init = APX_FUSED_PACK_OP_UNPACK_ARGS_INIT;

static const char *output_shape(const void *args, int arg, int *ndim, int64_t shape[APX_MAX_DIMS]) {
  if (arg != OUT)
    return NULL;
  apx__shape_of(((const args_t *)args)->features, ndim, shape);
  return "the shape of features";
}

static int index_range(const void *args, int arg, int64_t *lo, int64_t *hi, char *why,
                       size_t why_size) {
  const args_t *a = args;
  (void)why;
  (void)why_size;
  if (arg != IDX)
    return 0;
  *lo = 0;
  *hi = apx_tile_id_max(a->features, a->tile);
  return 1;
}

/* The scalars are not checked: the reference computes with whatever values
 * it is given (a NaN scale gives NaN tiles), it never raises. */
static apx_status check(apx__vstate *v, const void *args) {
  const args_t *a = args;
  APX__TRY(apx__vrequire_dim_match(v, "idx", a->idx, 0, "features", a->features, 0, "batch B"));
  return apx__vrequire_tile_grid(v, "tile", a->tile, "features", a->features);
}

typedef struct id_at {
  int64_t id;
  int64_t k;
} id_at;

static int compare_id_at(const void *pa, const void *pb) {
  const id_at *a = pa, *b = pb;
  if (a->id != b->id)
    return a->id < b->id ? -1 : 1;
  return a->k < b->k ? -1 : a->k > b->k;
}

/* docs/ops.md, fused_pack_op_unpack: with require_unique every batch row of
 * idx [B,K] holds distinct ids (shared with fused_pack_op_unpack_backward). Sorting a copy of each row keeps this
 * O(K log K); the repeat reported is the first one in reading order. */
apx_status apx__require_unique_rows(const apx__vstate *v, const char *name,
                                    const apx_tensor *idx) {
  int64_t rows = idx->shape[0], k_count = idx->shape[1];
  if (rows == 0 || k_count < 2)
    return APX_OK;
  id_at *row = malloc((size_t)k_count * sizeof *row);
  if (!row)
    return apx__error(APX_ERR_NO_MEMORY,
                      "%s: no memory for the uniqueness check of %s ([%lld] ids)", v->op, name,
                      (long long)k_count);
  for (int64_t b = 0; b < rows; b++) {
    for (int64_t k = 0; k < k_count; k++) {
      row[k].id = apx__vindex_at(idx, b * k_count + k);
      row[k].k = k;
    }
    qsort(row, (size_t)k_count, sizeof *row, compare_id_at);
    int64_t best_first = -1, best_second = INT64_MAX, best_id = 0;
    for (int64_t i = 1; i < k_count; i++) {
      /* Within a run of equal ids the first two entries are its two
       * earliest positions. */
      if (row[i].id == row[i - 1].id && (i == 1 || row[i - 2].id != row[i].id) &&
          row[i].k < best_second) {
        best_first = row[i - 1].k;
        best_second = row[i].k;
        best_id = row[i].id;
      }
    }
    if (best_first >= 0) {
      free(row);
      return apx__vfail(v,
                        "%s[%lld] repeats tile id [%lld] at k=[%lld] and k=[%lld] "
                        "(require_unique)",
                        name, (long long)b, (long long)best_id, (long long)best_first,
                        (long long)best_second);
    }
  }
  free(row);
  return APX_OK;
}

static apx_status check_values(apx__vstate *v, const void *args) {
  const args_t *a = args;
  return a->require_unique ? apx__require_unique_rows(v, "idx", a->idx) : APX_OK;
}

const apx__op apx__op_fused_pack_op_unpack = {
    .desc = {APX__OP_DESC(FUSED_PACK_OP_UNPACK, fused_pack_op_unpack, args_t, init, args_of,
                          APX_OP_CAP_INDEX_TENSORS | APX_OP_CAP_DEVICE_CHECKS,
                          "apply a gated affine map to the pixels of the tiles idx names, in place "
                          "of a pack, op and unpack"),
             .output_shape = output_shape, .index_range = index_range},
    .check = check,
    .check_values = check_values,
};
