/* SPDX-License-Identifier: Apache-2.0 */
/* index_select_backward (docs/ops.md, index_select_backward): grad_src =
 * zeros, then grad_src[index[i], :] += grad_out[i, :] (an index_add). */
#include "config.h"

#include "op_table.h"

enum { GRAD_OUT, INDEX, GRAD_SRC };

typedef apx_index_select_backward_args args_t;

static const apx_op_arg args_of[] = {
    APX__TENSOR(args_t, grad_out, APX_ARG_INPUT, 0, 2, APX_DTYPES_ANY, -1, -1, "[N,D]"),
    APX__TENSOR(args_t, index, APX_ARG_INDEX, 0, 1, APX_DTYPES_INDEX, -1, -1, "[N] (a vector)"),
    APX__TENSOR(args_t, grad_src, APX_ARG_OUTPUT, 0, 2, APX_DTYPES_ANY, GRAD_OUT, -1,
                "[M,D], the shape of index_select's src (the caller's)"),
};

static const args_t init = APX_INDEX_SELECT_BACKWARD_ARGS_INIT;

static int index_range(const void *args, int arg, int64_t *lo, int64_t *hi, char *why,
                       size_t why_size) {
  const args_t *a = args;
  return arg == INDEX && apx__index_dim_range(a->grad_src, "grad_src", 0, lo, hi, why, why_size);
}

/* docs/ops.md, index_select_backward: index [N] against grad_out [N,D], and
 * grad_src's D (its shape is the caller's: checked here). */
static apx_status check(apx__vstate *v, const void *args) {
  const args_t *a = args;
  APX__TRY(apx__vrequire_dim_match(v, "index", a->index, 0, "grad_out", a->grad_out, 0, "rows N"));
  return apx__vrequire_dim_match(v, "grad_src", a->grad_src, 1, "grad_out", a->grad_out, 1,
                                 "row length D");
}

const apx__op apx__op_index_select_backward = {
    .desc = {APX__OP_DESC(INDEX_SELECT_BACKWARD, index_select_backward, args_t, init, args_of,
                          APX_OP_CAP_INDEX_TENSORS | APX_OP_CAP_DEVICE_CHECKS,
                          "index_select's gradient: grad_out's rows added into zeros of "
                          "grad_src at index"),
             .index_range = index_range},
    .check = check,
};
