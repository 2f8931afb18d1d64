/* SPDX-License-Identifier: Apache-2.0 */
/* index_select_backward (docs/ops.md, index_select_backward): grad_src =
 * zeros, then grad_src[..,index[i],..] += grad_out[..,i,..] along dim (an
 * index_add). */
#include "config.h"

#include "op_table.h"

enum { GRAD_OUT, INDEX, GRAD_SRC, DIM };

typedef apx_index_select_backward_args args_t;

static const apx_op_arg args_of[] = {
    APX__TENSOR(args_t, grad_out, APX_ARG_INPUT, 0, 0, APX_DTYPES_ANY, -1, -1,
                "index_select's out: N at dim"),
    APX__TENSOR(args_t, index, APX_ARG_INDEX, 0, 1, APX_DTYPES_INDEX, -1, -1, "[N] (a vector)"),
    APX__TENSOR(args_t, grad_src, APX_ARG_OUTPUT, 0, 0, APX_DTYPES_ANY, GRAD_OUT, -1,
                "index_select's src shape (the caller's): M at dim, grad_out's extents elsewhere"),
    APX__OPTION(args_t, dim, APX_ARG_DIM),
};

static const args_t init = APX_INDEX_SELECT_BACKWARD_ARGS_INIT;

static int index_range(const void *args, int arg, int64_t *lo, int64_t *hi, char *why,
                       size_t why_size) {
  const args_t *a = args;
  return arg == INDEX &&
         apx__index_dim_range(a->grad_src, "grad_src", a->dim, lo, hi, why, why_size);
}

/* docs/ops.md, index_select_backward: index [N] against grad_out's extent at
 * dim, and grad_src's other extents (its shape is the caller's: checked
 * here). */
static apx_status check(apx__vstate *v, const void *args) {
  const args_t *a = args;
  int dim;
  APX__TRY(apx__vwrap_dim(v, a->dim, "grad_out", a->grad_out, &dim));
  APX__TRY(apx__vrequire_dim_match(v, "index", a->index, 0, "grad_out", a->grad_out, dim,
                                   "N, the extent at dim"));
  APX__TRY(apx__vrequire_same_ndim(v, "grad_src", a->grad_src, "grad_out", a->grad_out));
  for (int d = 0; d < a->grad_out->ndim; d++)
    if (d != dim)
      APX__TRY(apx__vrequire_dim_match(v, "grad_src", a->grad_src, d, "grad_out", a->grad_out, d,
                                       "extent off dim"));
  return APX_OK;
}

const apx__op apx__op_index_select_backward = {
    .desc = {APX__OP_DESC(INDEX_SELECT_BACKWARD, index_select_backward, args_t, init, args_of,
                          APX_OP_CAP_INDEX_TENSORS | APX_OP_CAP_DEVICE_CHECKS,
                          "index_select's gradient: grad_out's slices along dim added into "
                          "zeros of grad_src at index"),
             .index_range = index_range},
    .check = check,
};
