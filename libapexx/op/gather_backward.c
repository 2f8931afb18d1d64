/* SPDX-License-Identifier: Apache-2.0 */
/* gather_backward (docs/ops.md, gather_backward): grad_src = zeros scatter_add
 * grad_out along dim at index; grad_out has index's shape. */
#include "config.h"

#include "op_table.h"

enum { GRAD_OUT, DIM, INDEX, GRAD_SRC };

typedef apx_gather_backward_args args_t;

static const apx_op_arg args_of[] = {
    APX__TENSOR(args_t, grad_out, APX_ARG_INPUT, 0, 0, APX_DTYPES_ANY, -1, -1,
                "the shape of index"),
    APX__OPTION(args_t, dim, APX_ARG_DIM),
    APX__TENSOR(args_t, index, APX_ARG_INDEX, 0, 0, APX_DTYPES_INDEX, -1, -1, "grad_src's rank"),
    APX__TENSOR(args_t, grad_src, APX_ARG_OUTPUT, 0, 0, APX_DTYPES_ANY, GRAD_OUT, -1,
                "the shape of gather's src (the caller's)"),
};

static const args_t init = APX_GATHER_BACKWARD_ARGS_INIT;

static int index_range(const void *args, int arg, int64_t *lo, int64_t *hi, char *why,
                       size_t why_size) {
  const args_t *a = args;
  return arg == INDEX &&
         apx__index_dim_range(a->grad_src, "grad_src", a->dim, lo, hi, why, why_size);
}

static apx_status check(apx__vstate *v, const void *args) {
  const args_t *a = args;
  int dim;
  APX__TRY(apx__vrequire_same_ndim(v, "index", a->index, "grad_src", a->grad_src));
  APX__TRY(apx__vwrap_dim(v, a->dim, "grad_src", a->grad_src, &dim));
  APX__TRY(apx__vrequire_index_fits(v, a->index, "grad_src", a->grad_src, dim, 0));
  return apx__vrequire_shape(v, "grad_out", a->grad_out, a->index->ndim, a->index->shape,
                             "the shape of index");
}

const apx__op apx__op_gather_backward = {
    .desc = {APX__OP_DESC(
                 GATHER_BACKWARD, gather_backward, args_t, init, args_of,
                 APX_OP_CAP_INDEX_TENSORS | APX_OP_CAP_DEVICE_CHECKS,
                 "gather's gradient: grad_out scatter-added into zeros of grad_src's shape"),
             .index_range = index_range},
    .check = check,
};
