/* SPDX-License-Identifier: Apache-2.0 */
/* tilessm_scan (docs/ops.md, tilessm_scan): a linear recurrence per (b, c)
 * stream over K with fp32 state, forward, backward or both merged. */
#include "config.h"

#include <math.h>

#include "op_table.h"

enum {
  TOKENS,
  DECAY,
  INPUT_GAIN,
  OUTPUT_GAIN,
  STATE_BIAS,
  INIT_STATE,
  MERGE_GATE,
  CLAMP_VALUE,
  DIRECTION,
  MERGE,
  OUT,
  FINAL_STATE
};

typedef apx_tilessm_scan_args args_t;

static const char *const direction_names[] = {"forward", "backward", "bidirectional"};
static const char *const merge_names[] = {"sum", "avg", "gated"};

static const apx_op_arg args_of[] = {
    APX__TENSOR(args_t, tokens, APX_ARG_INPUT, 0, 3, APX_DTYPES_FLOAT, -1, -1, "[B,K,C]"),
    APX__TENSOR(args_t, decay, APX_ARG_INPUT, 0, 0, APX_DTYPES_FLOAT, -1, -1, "[C]"),
    APX__TENSOR(args_t, input_gain, APX_ARG_INPUT, 0, 0, APX_DTYPES_FLOAT, -1, -1, "[C]"),
    APX__TENSOR(args_t, output_gain, APX_ARG_INPUT, 0, 0, APX_DTYPES_FLOAT, -1, -1, "[C]"),
    APX__TENSOR(args_t, state_bias, APX_ARG_INPUT, 0, 0, APX_DTYPES_FLOAT, -1, -1, "[C]"),
    APX__TENSOR(args_t, init_state, APX_ARG_INPUT, 1, 0, APX_DTYPES_FLOAT, -1, -1,
                "[B,C] or [B,2,C]"),
    APX__TENSOR(args_t, merge_gate, APX_ARG_INPUT, 1, 0, APX_DTYPES_FLOAT, -1, -1,
                "[C] or [B,1,C]"),
    APX__OPTION(args_t, clamp_value, APX_ARG_DOUBLE),
    APX__ENUM(args_t, direction, direction_names),
    APX__ENUM(args_t, merge, merge_names),
    APX__TENSOR(args_t, out, APX_ARG_OUTPUT, 0, 3, APX_DTYPES_ANY, TOKENS, -1, "[B,K,C] of tokens"),
    APX__TENSOR(args_t, final_state, APX_ARG_OUTPUT, 1, 0, APX_DTYPES_ANY, TOKENS, -1,
                "[B,C], or [B,2,C] for a bidirectional scan"),
};

static const args_t init = APX_TILESSM_SCAN_ARGS_INIT;

/* docs/ops.md, tilessm_scan: merge_gate is read (and validated) only by the
 * gated bidirectional merge; elsewhere it is ignored. */
static int ignores(const void *args, int arg) {
  const args_t *a = args;
  return arg == MERGE_GATE &&
         !(a->direction == APX_SCAN_BIDIRECTIONAL && a->merge == APX_MERGE_GATED);
}

static const char *output_shape(const void *args, int arg, int *ndim, int64_t shape[APX_MAX_DIMS]) {
  const args_t *a = args;
  if (arg == OUT) {
    *ndim = 3;
    for (int d = 0; d < 3; d++)
      shape[d] = apx__dim_or_0(a->tokens, d);
    return "[B,K,C] of tokens";
  }
  if (arg != FINAL_STATE)
    return NULL;
  int64_t batch = apx__dim_or_0(a->tokens, 0), channels = apx__dim_or_0(a->tokens, 2);
  if (a->direction == APX_SCAN_BIDIRECTIONAL) {
    *ndim = 3;
    shape[0] = batch;
    shape[1] = 2;
    shape[2] = channels;
    return "[B,2,C] for a bidirectional scan";
  }
  *ndim = 2;
  shape[0] = batch;
  shape[1] = channels;
  return "[B,C] for a one-way scan";
}

static apx_status check(apx__vstate *v, const void *args) {
  const args_t *a = args;
  static const char *const vector_names[4] = {"decay", "input_gain", "output_gain", "state_bias"};
  const apx_tensor *vectors[4] = {a->decay, a->input_gain, a->output_gain, a->state_bias};
  if (a->direction != APX_SCAN_FORWARD && a->direction != APX_SCAN_BACKWARD &&
      a->direction != APX_SCAN_BIDIRECTIONAL)
    return apx__vfail(v,
                      "direction = [%d] is not APX_SCAN_FORWARD (0), "
                      "APX_SCAN_BACKWARD (1) or APX_SCAN_BIDIRECTIONAL (2)",
                      (int)a->direction);
  if (a->merge != APX_MERGE_SUM && a->merge != APX_MERGE_AVG && a->merge != APX_MERGE_GATED)
    return apx__vfail(v,
                      "merge = [%d] is not APX_MERGE_SUM (0), APX_MERGE_AVG (1) "
                      "or APX_MERGE_GATED (2)",
                      (int)a->merge);
  int64_t batch = a->tokens->shape[0], channels = a->tokens->shape[2];
  for (int i = 0; i < 4; i++) {
    int64_t want[1] = {channels};
    APX__TRY(apx__vrequire_shape(v, vector_names[i], vectors[i], 1, want,
                                 "[C] matching tokens channels"));
  }
  if (a->init_state) {
    const apx_tensor *init_state = a->init_state;
    int64_t want2[2] = {batch, channels}, want3[3] = {batch, 2, channels};
    if (init_state->ndim == 2)
      APX__TRY(apx__vrequire_shape(v, "init_state", init_state, 2, want2, "[B,C]"));
    else if (init_state->ndim == 3)
      APX__TRY(apx__vrequire_shape(v, "init_state", init_state, 3, want3, "[B,2,C]"));
    else
      return apx__vfail(v, "init_state must be [B,C] or [B,2,C], got ndim [%d]", init_state->ndim);
  }
  /* docs/ops.md, tilessm_scan: |clamp_value| is the limit (inf: none); NaN
   * has no meaning as a limit. */
  if (isnan(a->clamp_value))
    return apx__vfail(v, "clamp_value = [%g] must not be NaN", a->clamp_value);
  if (!ignores(args, MERGE_GATE) && a->merge_gate) {
    const apx_tensor *gate = a->merge_gate;
    int64_t want1[1] = {channels}, want3[3] = {batch, 1, channels};
    if (gate->ndim == 1)
      APX__TRY(apx__vrequire_shape(v, "merge_gate", gate, 1, want1, "[C]"));
    else if (gate->ndim == 3)
      APX__TRY(apx__vrequire_shape(v, "merge_gate", gate, 3, want3, "[B,1,C]"));
    else
      return apx__vfail(v, "merge_gate must be [C] or [B,1,C], got ndim [%d]", gate->ndim);
  }
  return APX_OK;
}

const apx__op apx__op_tilessm_scan = {
    .desc = {APX__OP_DESC(TILESSM_SCAN, tilessm_scan, args_t, init, args_of,
                          APX_OP_CAP_EAGER_CAPTURE,
                          "a linear recurrence over the tokens of each (b, c) stream, one way or "
                          "both merged"),
             .output_shape = output_shape},
    .ignores = ignores,
    .check = check,
};
