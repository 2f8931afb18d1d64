/* SPDX-License-Identifier: Apache-2.0 */
/* index_select (docs/ops.md, index_select), torch.index_select: out[..,i,..]
 * = src[..,index[i],..] along dim. */
#include "config.h"

#include "op_table.h"

enum { SRC, INDEX, OUT, DIM };

typedef apx_index_select_args args_t;

static const apx_op_arg args_of[] = {
    APX__TENSOR(args_t, src, APX_ARG_INPUT, 0, 0, APX_DTYPES_ANY, -1, -1, "any shape"),
    APX__TENSOR(args_t, index, APX_ARG_INDEX, 0, 1, APX_DTYPES_INDEX, -1, -1, "[N] (a vector)"),
    APX__TENSOR(args_t, out, APX_ARG_OUTPUT, 0, 0, APX_DTYPES_ANY, SRC, -1,
                "src's shape with N at dim"),
    APX__OPTION(args_t, dim, APX_ARG_DIM),
};

static const args_t init = APX_INDEX_SELECT_ARGS_INIT;

static const char *output_shape(const void *args, int arg, int *ndim, int64_t shape[APX_MAX_DIMS]) {
  const args_t *a = args;
  if (arg != OUT)
    return NULL;
  apx__shape_of(a->src, ndim, shape);
  const int dim = a->dim < 0 ? a->dim + *ndim : a->dim;
  if (dim >= 0 && dim < *ndim)
    shape[dim] = apx__dim_or_0(a->index, 0);
  return "src's shape with N at dim";
}

static int index_range(const void *args, int arg, int64_t *lo, int64_t *hi, char *why,
                       size_t why_size) {
  const args_t *a = args;
  return arg == INDEX && apx__index_dim_range(a->src, "src", a->dim, lo, hi, why, why_size);
}

static apx_status check(apx__vstate *v, const void *args) {
  const args_t *a = args;
  int dim;
  return apx__vwrap_dim(v, a->dim, "src", a->src, &dim);
}

const apx__op apx__op_index_select = {
    .desc = {APX__OP_DESC(INDEX_SELECT, index_select, args_t, init, args_of,
                          APX_OP_CAP_INDEX_TENSORS | APX_OP_CAP_DEVICE_CHECKS,
                          "torch.index_select: out[..,i,..] = src[..,index[i],..] along dim"),
             .output_shape = output_shape, .index_range = index_range},
    .check = check,
};
