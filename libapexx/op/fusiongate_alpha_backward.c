/* SPDX-License-Identifier: Apache-2.0 */
/* fusiongate_alpha_backward (docs/ops.md, fusiongate_alpha_backward): the
 * gradients of alpha = sigmoid(softplus(blw)*b + softplus(ulw)*u + bias)
 * with respect to the proxies and the three scalars. */
#include "config.h"

#include "op_table.h"

enum {
  GRAD_OUT,
  BOUNDARY,
  UNCERTAINTY,
  BOUNDARY_LOG_WEIGHT,
  UNCERTAINTY_LOG_WEIGHT,
  BIAS,
  GRAD_BOUNDARY,
  GRAD_UNCERTAINTY,
  GRAD_BOUNDARY_LOG_WEIGHT,
  GRAD_UNCERTAINTY_LOG_WEIGHT,
  GRAD_BIAS
};

typedef apx_fusiongate_alpha_backward_args args_t;

static const apx_op_arg args_of[] = {
    APX__TENSOR(args_t, grad_out, APX_ARG_INPUT, 0, 4, APX_DTYPES_FLOAT, -1, -1, "[B,1,H,W]"),
    APX__TENSOR(args_t, boundary, APX_ARG_INPUT, 0, 0, APX_DTYPES_FLOAT, -1, -1,
                "[B,1,H,W] or [B,H,W]"),
    APX__TENSOR(args_t, uncertainty, APX_ARG_INPUT, 0, 0, APX_DTYPES_FLOAT, BOUNDARY, -1,
                "[B,1,H,W] or [B,H,W]"),
    APX__OPTION(args_t, boundary_log_weight, APX_ARG_DOUBLE),
    APX__OPTION(args_t, uncertainty_log_weight, APX_ARG_DOUBLE),
    APX__OPTION(args_t, bias, APX_ARG_DOUBLE),
    APX__TENSOR(args_t, grad_boundary, APX_ARG_OUTPUT, 1, 0, APX_DTYPES_ANY, BOUNDARY, -1,
                "the shape of boundary"),
    APX__TENSOR(args_t, grad_uncertainty, APX_ARG_OUTPUT, 1, 0, APX_DTYPES_ANY, BOUNDARY, -1,
                "the shape of uncertainty"),
    APX__TENSOR(args_t, grad_boundary_log_weight, APX_ARG_OUTPUT, 1, 0, APX_DTYPES_FLOAT, -1, -1,
                "[] (0-d)"),
    APX__TENSOR(args_t, grad_uncertainty_log_weight, APX_ARG_OUTPUT, 1, 0, APX_DTYPES_FLOAT, -1,
                -1, "[] (0-d)"),
    APX__TENSOR(args_t, grad_bias, APX_ARG_OUTPUT, 1, 0, APX_DTYPES_FLOAT, -1, -1, "[] (0-d)"),
};

static const args_t init = APX_FUSIONGATE_ALPHA_BACKWARD_ARGS_INIT;

static const char *output_shape(const void *args, int arg, int *ndim, int64_t shape[APX_MAX_DIMS]) {
  const args_t *a = args;
  switch (arg) {
  case GRAD_BOUNDARY:
    apx__shape_of(a->boundary, ndim, shape);
    return "the shape of boundary";
  case GRAD_UNCERTAINTY:
    apx__shape_of(a->uncertainty, ndim, shape);
    return "the shape of uncertainty";
  case GRAD_BOUNDARY_LOG_WEIGHT:
  case GRAD_UNCERTAINTY_LOG_WEIGHT:
  case GRAD_BIAS:
    *ndim = 0;
    return "[] (0-d)";
  default:
    return NULL;
  }
}

/* The forward's rules on the proxies, then grad_out as the forward's out. */
static apx_status check(apx__vstate *v, const void *args) {
  const args_t *a = args;
  const apx_fusiongate_alpha_args forward = {a->boundary, a->uncertainty, a->boundary_log_weight,
                                             a->uncertainty_log_weight, a->bias, NULL};
  APX__TRY(apx__op_fusiongate_alpha.check(v, &forward));
  const apx_tensor *b = a->boundary;
  int three = b->ndim == 3;
  int64_t want[4] = {b->shape[0], 1, b->shape[three ? 1 : 2], b->shape[three ? 2 : 3]};
  return apx__vrequire_shape(v, "grad_out", a->grad_out, 4, want, "[B,1,H,W] of boundary");
}

const apx__op apx__op_fusiongate_alpha_backward = {
    .desc = {APX__OP_DESC(FUSIONGATE_ALPHA_BACKWARD, fusiongate_alpha_backward, args_t, init,
                          args_of, APX_OP_CAP_EAGER_CAPTURE,
                          "the gradients of fusiongate_alpha: of the proxies, and of the three "
                          "scalars as 0-d sums"),
             .output_shape = output_shape},
    .check = check,
};
