/* SPDX-License-Identifier: Apache-2.0 */
/* tilessm_scan_backward (docs/ops.md, tilessm_scan_backward): the gradients
 * of tilessm_scan, the reverse-time adjoint of each stream's recurrence. */
#include "config.h"

#include "op_table.h"

enum {
  GRAD_OUT,
  TOKENS,
  DECAY,
  INPUT_GAIN,
  OUTPUT_GAIN,
  STATE_BIAS,
  INIT_STATE,
  MERGE_GATE,
  GRAD_FINAL_STATE,
  CLAMP_VALUE,
  DIRECTION,
  MERGE,
  GRAD_TOKENS,
  GRAD_DECAY,
  GRAD_INPUT_GAIN,
  GRAD_OUTPUT_GAIN,
  GRAD_STATE_BIAS,
  GRAD_INIT_STATE,
  GRAD_MERGE_GATE
};

typedef apx_tilessm_scan_backward_args args_t;

static const char *const direction_names[] = {"forward", "backward", "bidirectional"};
static const char *const merge_names[] = {"sum", "avg", "gated"};

static const apx_op_arg args_of[] = {
    APX__TENSOR(args_t, grad_out, APX_ARG_INPUT, 0, 3, APX_DTYPES_ANY, TOKENS, -1,
                "[B,K,C] of tokens"),
    APX__TENSOR(args_t, tokens, APX_ARG_INPUT, 0, 3, APX_DTYPES_FLOAT, -1, -1, "[B,K,C]"),
    APX__TENSOR(args_t, decay, APX_ARG_INPUT, 0, 0, APX_DTYPES_FLOAT, -1, -1, "[C]"),
    APX__TENSOR(args_t, input_gain, APX_ARG_INPUT, 0, 0, APX_DTYPES_FLOAT, -1, -1, "[C]"),
    APX__TENSOR(args_t, output_gain, APX_ARG_INPUT, 0, 0, APX_DTYPES_FLOAT, -1, -1, "[C]"),
    APX__TENSOR(args_t, state_bias, APX_ARG_INPUT, 0, 0, APX_DTYPES_FLOAT, -1, -1, "[C]"),
    APX__TENSOR(args_t, init_state, APX_ARG_INPUT, 1, 0, APX_DTYPES_FLOAT, -1, -1,
                "[B,C] or [B,2,C]"),
    APX__TENSOR(args_t, merge_gate, APX_ARG_INPUT, 1, 0, APX_DTYPES_FLOAT, -1, -1,
                "[C] or [B,1,C]"),
    APX__TENSOR(args_t, grad_final_state, APX_ARG_INPUT, 1, 0, APX_DTYPES_ANY, TOKENS, -1,
                "[B,C], or [B,2,C] for a bidirectional scan"),
    APX__OPTION(args_t, clamp_value, APX_ARG_DOUBLE),
    APX__ENUM(args_t, direction, direction_names),
    APX__ENUM(args_t, merge, merge_names),
    APX__TENSOR(args_t, grad_tokens, APX_ARG_OUTPUT, 1, 3, APX_DTYPES_ANY, TOKENS, -1,
                "[B,K,C] of tokens"),
    APX__TENSOR(args_t, grad_decay, APX_ARG_OUTPUT, 1, 0, APX_DTYPES_ANY, DECAY, -1, "[C]"),
    APX__TENSOR(args_t, grad_input_gain, APX_ARG_OUTPUT, 1, 0, APX_DTYPES_ANY, INPUT_GAIN, -1,
                "[C]"),
    APX__TENSOR(args_t, grad_output_gain, APX_ARG_OUTPUT, 1, 0, APX_DTYPES_ANY, OUTPUT_GAIN, -1,
                "[C]"),
    APX__TENSOR(args_t, grad_state_bias, APX_ARG_OUTPUT, 1, 0, APX_DTYPES_ANY, STATE_BIAS, -1,
                "[C]"),
    APX__TENSOR(args_t, grad_init_state, APX_ARG_OUTPUT, 1, 0, APX_DTYPES_FLOAT, INIT_STATE, -1,
                "the shape of init_state, else of final_state"),
    APX__TENSOR(args_t, grad_merge_gate, APX_ARG_OUTPUT, 1, 0, APX_DTYPES_FLOAT, MERGE_GATE, -1,
                "the shape of merge_gate when the gated merge reads it, else [C]"),
};

static const args_t init = APX_TILESSM_SCAN_BACKWARD_ARGS_INIT;

static int reads_gate(const args_t *a) {
  return a->direction == APX_SCAN_BIDIRECTIONAL && a->merge == APX_MERGE_GATED;
}

/* docs/ops.md, tilessm_scan: merge_gate is read (and validated) only by the
 * gated bidirectional merge. */
static int ignores(const void *args, int arg) {
  return arg == MERGE_GATE && !reads_gate(args);
}

/* final_state's shape: [B,2,C] bidirectional, else [B,C]. */
static const char *final_state_shape(const args_t *a, int *ndim, int64_t shape[APX_MAX_DIMS]) {
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

static const char *output_shape(const void *args, int arg, int *ndim, int64_t shape[APX_MAX_DIMS]) {
  const args_t *a = args;
  switch (arg) {
  case GRAD_TOKENS:
    apx__shape_of(a->tokens, ndim, shape);
    return "[B,K,C] of tokens";
  case GRAD_DECAY:
  case GRAD_INPUT_GAIN:
  case GRAD_OUTPUT_GAIN:
  case GRAD_STATE_BIAS:
    *ndim = 1;
    shape[0] = apx__dim_or_0(a->tokens, 2);
    return "[C]";
  case GRAD_INIT_STATE:
    if (a->init_state) {
      apx__shape_of(a->init_state, ndim, shape);
      return "the shape of init_state";
    }
    final_state_shape(a, ndim, shape);
    return "the shape of final_state (no init_state)";
  case GRAD_MERGE_GATE:
    if (reads_gate(a) && a->merge_gate) {
      apx__shape_of(a->merge_gate, ndim, shape);
      return "the shape of merge_gate";
    }
    *ndim = 1;
    shape[0] = apx__dim_or_0(a->tokens, 2);
    return "[C] (no merge_gate read)";
  default:
    return NULL;
  }
}

/* The forward's rules on the forward's arguments, then the incoming
 * gradients in the shapes of the forward's outputs. */
static apx_status check(apx__vstate *v, const void *args) {
  const args_t *a = args;
  const apx_tilessm_scan_args forward = {a->tokens,     a->decay,       a->input_gain,
                                         a->output_gain, a->state_bias, a->init_state,
                                         a->merge_gate,  a->clamp_value, a->direction,
                                         a->merge,       NULL,           NULL};
  APX__TRY(apx__op_tilessm_scan.check(v, &forward));
  APX__TRY(apx__vrequire_shape(v, "grad_out", a->grad_out, 3, a->tokens->shape,
                               "[B,K,C] of tokens"));
  if (a->grad_final_state) {
    int ndim;
    int64_t shape[APX_MAX_DIMS];
    const char *rule = final_state_shape(a, &ndim, shape);
    APX__TRY(apx__vrequire_shape(v, "grad_final_state", a->grad_final_state, ndim, shape, rule));
  }
  return APX_OK;
}

const apx__op apx__op_tilessm_scan_backward = {
    .desc = {APX__OP_DESC(TILESSM_SCAN_BACKWARD, tilessm_scan_backward, args_t, init, args_of,
                          APX_OP_CAP_EAGER_CAPTURE,
                          "the gradients of tilessm_scan: the reverse-time adjoint scan of each "
                          "(b, c) stream"),
             .output_shape = output_shape},
    .ignores = ignores,
    .check = check,
};
