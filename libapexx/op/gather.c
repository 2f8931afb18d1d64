/* SPDX-License-Identifier: Apache-2.0 */
/* gather (docs/ops.md, gather), torch.gather: out[..i..] = src[..index[..i..]
 * along dim..]. */
#include "config.h"

#include "op_table.h"

enum { SRC, DIM, INDEX, OUT };

typedef apx_gather_args args_t;

static const apx_op_arg args_of[] = {
    APX__TENSOR(args_t, src, APX_ARG_INPUT, 0, 0, APX_DTYPES_ANY, -1, -1, "any shape"),
    APX__OPTION(args_t, dim, APX_ARG_DIM),
    APX__TENSOR(args_t, index, APX_ARG_INDEX, 0, 0, APX_DTYPES_INDEX, -1, -1, "src's rank"),
    APX__TENSOR(args_t, out, APX_ARG_OUTPUT, 0, 0, APX_DTYPES_ANY, SRC, -1, "the shape of index"),
};

static const args_t init = APX_GATHER_ARGS_INIT;

static const char *output_shape(const void *args, int arg, int *ndim, int64_t shape[APX_MAX_DIMS]) {
  if (arg != OUT)
    return NULL;
  apx__shape_of(((const args_t *)args)->index, ndim, shape);
  return "the shape of index";
}

static int index_range(const void *args, int arg, int64_t *lo, int64_t *hi, char *why,
                       size_t why_size) {
  const args_t *a = args;
  return arg == INDEX && apx__index_dim_range(a->src, "src", a->dim, lo, hi, why, why_size);
}

static apx_status check(apx__vstate *v, const void *args) {
  const args_t *a = args;
  int dim;
  APX__TRY(apx__vrequire_same_ndim(v, "index", a->index, "src", a->src));
  APX__TRY(apx__vwrap_dim(v, a->dim, "src", a->src, &dim));
  return apx__vrequire_index_fits(v, a->index, "src", a->src, dim, 0);
}

const apx__op apx__op_gather = {
    .desc = {APX__OP_DESC(GATHER, gather, args_t, init, args_of,
                          APX_OP_CAP_INDEX_TENSORS | APX_OP_CAP_DEVICE_CHECKS,
                          "torch.gather: out[..i..] = src[..index[..i..] along dim..]"),
             .output_shape = output_shape, .index_range = index_range},
    .check = check,
};
