/* SPDX-License-Identifier: Apache-2.0 */
/* fusiongate_alpha (docs/ops.md, fusiongate_alpha): out [B,1,H,W] =
 * sigmoid(softplus(blw)*b + softplus(ulw)*u + bias) of the sanitised
 * boundary and uncertainty proxies. */
#include "config.h"

#include <string.h>

#include "op_table.h"

enum { BOUNDARY, UNCERTAINTY, BOUNDARY_LOG_WEIGHT, UNCERTAINTY_LOG_WEIGHT, BIAS, OUT };

typedef apx_fusiongate_alpha_args args_t;

static const apx_op_arg args_of[] = {
    APX__TENSOR(args_t, boundary, APX_ARG_INPUT, 0, 0, APX_DTYPES_FLOAT, -1, -1,
                "[B,1,H,W] or [B,H,W]"),
    APX__TENSOR(args_t, uncertainty, APX_ARG_INPUT, 0, 0, APX_DTYPES_FLOAT, BOUNDARY, -1,
                "[B,1,H,W] or [B,H,W]"),
    APX__OPTION(args_t, boundary_log_weight, APX_ARG_DOUBLE),
    APX__OPTION(args_t, uncertainty_log_weight, APX_ARG_DOUBLE),
    APX__OPTION(args_t, bias, APX_ARG_DOUBLE),
    APX__TENSOR(args_t, out, APX_ARG_OUTPUT, 0, 4, APX_DTYPES_FLOAT, -1, -1, "[B,1,H,W]"),
};

static const args_t init = APX_FUSIONGATE_ALPHA_ARGS_INIT;

/* [B,1,H,W] of a proxy map given as [B,1,H,W] or [B,H,W]. */
static const char *output_shape(const void *args, int arg, int *ndim, int64_t shape[APX_MAX_DIMS]) {
  const apx_tensor *b = ((const args_t *)args)->boundary;
  if (arg != OUT)
    return NULL;
  int three = b && b->ndim == 3;
  *ndim = 4;
  shape[0] = apx__dim_or_0(b, 0);
  shape[1] = 1;
  shape[2] = apx__dim_or_0(b, three ? 1 : 2);
  shape[3] = apx__dim_or_0(b, three ? 2 : 3);
  return "[B,1,H,W]";
}

static apx_status check(apx__vstate *v, const void *args) {
  const args_t *a = args;
  int64_t b_bhw[3], u_bhw[3];
  APX__TRY(apx__vrequire_gate_map(v, "boundary", a->boundary, b_bhw));
  APX__TRY(apx__vrequire_gate_map(v, "uncertainty", a->uncertainty, u_bhw));
  if (memcmp(b_bhw, u_bhw, sizeof b_bhw) != 0) {
    char bs[160], us[160];
    return apx__vfail(v,
                      "boundary [B,H,W] = %s and uncertainty [B,H,W] = %s must "
                      "match in shape",
                      apx__vshape_text(bs, sizeof bs, 3, b_bhw),
                      apx__vshape_text(us, sizeof us, 3, u_bhw));
  }
  return APX_OK;
}

const apx__op apx__op_fusiongate_alpha = {
    .desc = {APX__OP_DESC(FUSIONGATE_ALPHA, fusiongate_alpha, args_t, init, args_of,
                          APX_OP_CAP_EAGER_CAPTURE,
                          "the fusion gate's alpha map from the boundary and uncertainty proxies"),
             .output_shape = output_shape},
    .check = check,
};
