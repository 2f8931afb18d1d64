/* SPDX-License-Identifier: Apache-2.0 */
/* fusiongate_fuse (docs/ops.md, fusiongate_fuse): out = base + alpha *
 * (detail - base), alpha broadcast over the channels. */
#include "config.h"

#include <string.h>

#include "op_table.h"

enum { BASE, DETAIL, ALPHA, OUT };

typedef apx_fusiongate_fuse_args args_t;

static const apx_op_arg args_of[] = {
    APX__TENSOR(args_t, base, APX_ARG_INPUT, 0, 4, APX_DTYPES_FLOAT, -1, -1, "[B,C,H,W]"),
    APX__TENSOR(args_t, detail, APX_ARG_INPUT, 0, 0, APX_DTYPES_ANY, BASE, -1, "the shape of base"),
    APX__TENSOR(args_t, alpha, APX_ARG_INPUT, 0, 0, APX_DTYPES_ANY, BASE, -1,
                "[B,1,H,W] or [B,H,W]"),
    APX__TENSOR(args_t, out, APX_ARG_OUTPUT, 0, 4, APX_DTYPES_ANY, BASE, BASE, "the shape of base"),
};

static const args_t init = APX_FUSIONGATE_FUSE_ARGS_INIT;

static const char *output_shape(const void *args, int arg, int *ndim, int64_t shape[APX_MAX_DIMS]) {
  if (arg != OUT)
    return NULL;
  apx__shape_of(((const args_t *)args)->base, ndim, shape);
  return "the shape of base";
}

static apx_status check(apx__vstate *v, const void *args) {
  const args_t *a = args;
  const apx_tensor *base = a->base;
  APX__TRY(apx__vrequire_shape(v, "detail", a->detail, 4, base->shape, "the shape of base"));
  int64_t alpha_bhw[3];
  APX__TRY(apx__vrequire_gate_map(v, "alpha", a->alpha, alpha_bhw));
  int64_t want_bhw[3] = {base->shape[0], base->shape[2], base->shape[3]};
  if (memcmp(alpha_bhw, want_bhw, sizeof want_bhw) != 0) {
    char as[160], bs[160];
    return apx__vfail(v,
                      "alpha [B,H,W] = %s must match base batch and spatial "
                      "shape %s",
                      apx__vshape_text(as, sizeof as, 3, alpha_bhw),
                      apx__vshape_text(bs, sizeof bs, 3, want_bhw));
  }
  return APX_OK;
}

const apx__op apx__op_fusiongate_fuse = {
    .desc = {APX__OP_DESC(FUSIONGATE_FUSE, fusiongate_fuse, args_t, init, args_of,
                          APX_OP_CAP_EAGER_CAPTURE,
                          "out = base + alpha*(detail - base), alpha broadcast over the channels"),
             .output_shape = output_shape},
    .check = check,
};
