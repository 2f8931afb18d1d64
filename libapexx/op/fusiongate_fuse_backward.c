/* SPDX-License-Identifier: Apache-2.0 */
/* fusiongate_fuse_backward (docs/ops.md, fusiongate_fuse_backward): the
 * gradients of out = base + alpha*(detail - base) with respect to base,
 * detail and alpha (alpha's summed over the channels). */
#include "config.h"

#include "op_table.h"

enum { GRAD_OUT, BASE, DETAIL, ALPHA, GRAD_BASE, GRAD_DETAIL, GRAD_ALPHA };

typedef apx_fusiongate_fuse_backward_args args_t;

static const apx_op_arg args_of[] = {
    APX__TENSOR(args_t, grad_out, APX_ARG_INPUT, 0, 4, APX_DTYPES_ANY, BASE, -1,
                "the shape of base"),
    APX__TENSOR(args_t, base, APX_ARG_INPUT, 0, 4, APX_DTYPES_FLOAT, -1, -1, "[B,C,H,W]"),
    APX__TENSOR(args_t, detail, APX_ARG_INPUT, 0, 0, APX_DTYPES_ANY, BASE, -1, "the shape of base"),
    APX__TENSOR(args_t, alpha, APX_ARG_INPUT, 0, 0, APX_DTYPES_ANY, BASE, -1,
                "[B,1,H,W] or [B,H,W]"),
    APX__TENSOR(args_t, grad_base, APX_ARG_OUTPUT, 1, 4, APX_DTYPES_ANY, BASE, -1,
                "the shape of base"),
    APX__TENSOR(args_t, grad_detail, APX_ARG_OUTPUT, 1, 4, APX_DTYPES_ANY, BASE, -1,
                "the shape of base"),
    APX__TENSOR(args_t, grad_alpha, APX_ARG_OUTPUT, 1, 0, APX_DTYPES_ANY, BASE, -1,
                "the shape of alpha"),
};

static const args_t init = APX_FUSIONGATE_FUSE_BACKWARD_ARGS_INIT;

static const char *output_shape(const void *args, int arg, int *ndim, int64_t shape[APX_MAX_DIMS]) {
  const args_t *a = args;
  if (arg == GRAD_BASE || arg == GRAD_DETAIL) {
    apx__shape_of(a->base, ndim, shape);
    return "the shape of base";
  }
  if (arg != GRAD_ALPHA)
    return NULL;
  apx__shape_of(a->alpha, ndim, shape);
  return "the shape of alpha";
}

/* The forward's rules on base, detail and alpha, then grad_out's shape. */
static apx_status check(apx__vstate *v, const void *args) {
  const args_t *a = args;
  const apx_fusiongate_fuse_args forward = {a->base, a->detail, a->alpha, NULL};
  APX__TRY(apx__op_fusiongate_fuse.check(v, &forward));
  return apx__vrequire_shape(v, "grad_out", a->grad_out, 4, a->base->shape, "the shape of base");
}

const apx__op apx__op_fusiongate_fuse_backward = {
    .desc = {APX__OP_DESC(FUSIONGATE_FUSE_BACKWARD, fusiongate_fuse_backward, args_t, init,
                          args_of, APX_OP_CAP_EAGER_CAPTURE,
                          "the gradients of fusiongate_fuse: grad_base = g*(1 - alpha), "
                          "grad_detail = g*alpha, grad_alpha = sum over C of g*(detail - base)"),
             .output_shape = output_shape},
    .check = check,
};
