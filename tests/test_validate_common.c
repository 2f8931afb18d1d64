/* SPDX-License-Identifier: Apache-2.0 */
#include "test_validate_common.h"

#include <stdarg.h>
#include <string.h>

apx_context *vt_ctx;

void vt_setup(void) { vt_ctx = tu_open(); }

void vt_teardown(void) {
  apx_close(vt_ctx);
  vt_ctx = NULL;
}

static tu_rng vt_rng_state;
static int vt_rng_ready;

static tu_rng *vt_rng(void) {
  if (!vt_rng_ready) {
    vt_rng_state.s = tu_seed();
    vt_rng_ready = 1;
  }
  return &vt_rng_state;
}

apx_tensor vt_tensor_like(apx_dtype dtype, int ndim, const int64_t *shape, int64_t lo, int64_t hi) {
  apx_tensor t = tu_host(dtype, ndim, shape);
  if (dtype == APX_DTYPE_I32 || dtype == APX_DTYPE_I64)
    tu_fill_int(vt_rng(), &t, lo, hi);
  else
    tu_fill_normal(vt_rng(), &t);
  return t;
}

/* Append slot `name`: a fresh tensor of `shape`, pointed at by *field. */
static int add_slot(vt_case *c, const char *name, const apx_tensor **field, apx_dtype dtype,
                    int ndim, const int64_t *shape, int64_t lo, int64_t hi, int is_output,
                    int required) {
  int i = c->count++;
  ck_assert_int_lt(i, VT_MAX_SLOTS);
  c->t[i] = vt_tensor_like(dtype, ndim, shape, lo, hi);
  if (is_output)
    tu_poison(&c->t[i]);
  c->names[i] = name;
  c->field[i] = field;
  c->is_output[i] = is_output;
  c->required[i] = required;
  c->alias_of[i] = -1;
  *field = &c->t[i];
  return i;
}

#define SHAPE(...)                                                                                 \
  (const int64_t[]) { __VA_ARGS__ }
#define NDIM(...) ((int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define IN(name, field, dtype, lo, hi, ...)                                                        \
  add_slot(c, name, field, dtype, NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__), lo, hi, 0, 1)
#define OPT(name, field, dtype, lo, hi, ...)                                                       \
  add_slot(c, name, field, dtype, NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__), lo, hi, 0, 0)
#define OUT(name, field, dtype, ...)                                                               \
  add_slot(c, name, field, dtype, NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__), 0, 0, 1, 1)
#define OPT_OUT(name, field, dtype, ...)                                                           \
  add_slot(c, name, field, dtype, NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__), 0, 0, 1, 0)

void vt_make(vt_case *c, apx_op_id op, apx_dtype fdt, apx_dtype idt) {
  memset(c, 0, sizeof *c);
  c->op = op;
  switch (op) {
  case APX_OP_TILEPACK: {
    apx_tilepack_args *a = &c->args.tilepack;
    *a = (apx_tilepack_args)APX_TILEPACK_ARGS_INIT;
    a->tile = 4;
    IN("features", &a->features, fdt, 0, 0, 2, 3, 8, 12);
    IN("idx", &a->idx, idt, 0, 5, 2, 3);
    OUT("out", &a->out, fdt, 2, 3, 3, 4, 4);
    break;
  }
  case APX_OP_TILEUNPACK: {
    apx_tileunpack_args *a = &c->args.tileunpack;
    *a = (apx_tileunpack_args)APX_TILEUNPACK_ARGS_INIT;
    int base = IN("base", &a->base, fdt, 0, 0, 2, 3, 8, 12);
    IN("packed", &a->packed, fdt, 0, 0, 2, 3, 3, 4, 4);
    OPT("idx", &a->idx, idt, 0, 5, 2, 3);
    OPT("levels", &a->levels, idt, 0, 2, 2, 3);
    int out = OUT("out", &a->out, fdt, 2, 3, 8, 12);
    c->alias_of[out] = base;
    break;
  }
  case APX_OP_FUSED_PACK_OP_UNPACK: {
    apx_fused_pack_op_unpack_args *a = &c->args.fused;
    *a = (apx_fused_pack_op_unpack_args)APX_FUSED_PACK_OP_UNPACK_ARGS_INIT;
    a->tile = 4;
    int features = IN("features", &a->features, fdt, 0, 0, 2, 3, 8, 12);
    int idx = IN("idx", &a->idx, idt, 0, 5, 2, 3);
    for (int64_t i = 0; i < 6; i++) /* rows {0,2,4} and {1,3,5}: unique */
      tu_set(&c->t[idx], i, (double)((i / 3) + 2 * (i % 3)));
    int out = OUT("out", &a->out, fdt, 2, 3, 8, 12);
    c->alias_of[out] = features;
    break;
  }
  case APX_OP_FUSIONGATE_ALPHA: {
    apx_fusiongate_alpha_args *a = &c->args.alpha;
    *a = (apx_fusiongate_alpha_args)APX_FUSIONGATE_ALPHA_ARGS_INIT;
    IN("boundary", &a->boundary, fdt, 0, 0, 2, 1, 8, 12);
    IN("uncertainty", &a->uncertainty, fdt, 0, 0, 2, 8, 12);
    OUT("out", &a->out, fdt, 2, 1, 8, 12);
    break;
  }
  case APX_OP_FUSIONGATE_FUSE: {
    apx_fusiongate_fuse_args *a = &c->args.fuse;
    *a = (apx_fusiongate_fuse_args)APX_FUSIONGATE_FUSE_ARGS_INIT;
    int base = IN("base", &a->base, fdt, 0, 0, 2, 3, 8, 12);
    IN("detail", &a->detail, fdt, 0, 0, 2, 3, 8, 12);
    IN("alpha", &a->alpha, fdt, 0, 0, 2, 1, 8, 12);
    int out = OUT("out", &a->out, fdt, 2, 3, 8, 12);
    c->alias_of[out] = base;
    break;
  }
  case APX_OP_TILESSM_SCAN: {
    apx_tilessm_scan_args *a = &c->args.scan;
    *a = (apx_tilessm_scan_args)APX_TILESSM_SCAN_ARGS_INIT;
    a->direction = APX_SCAN_BIDIRECTIONAL;
    a->merge = APX_MERGE_GATED;
    IN("tokens", &a->tokens, fdt, 0, 0, 2, 5, 3);
    IN("decay", &a->decay, fdt, 0, 0, 3);
    IN("input_gain", &a->input_gain, fdt, 0, 0, 3);
    IN("output_gain", &a->output_gain, fdt, 0, 0, 3);
    IN("state_bias", &a->state_bias, fdt, 0, 0, 3);
    OPT("init_state", &a->init_state, fdt, 0, 0, 2, 2, 3);
    OPT("merge_gate", &a->merge_gate, fdt, 0, 0, 2, 1, 3);
    OUT("out", &a->out, fdt, 2, 5, 3);
    OPT_OUT("final_state", &a->final_state, fdt, 2, 2, 3);
    break;
  }
  case APX_OP_GATHER: {
    apx_gather_args *a = &c->args.gather;
    *a = (apx_gather_args)APX_GATHER_ARGS_INIT;
    a->dim = 1;
    IN("src", &a->src, fdt, 0, 0, 3, 4, 5);
    IN("index", &a->index, idt, 0, 3, 2, 6, 5);
    OUT("out", &a->out, fdt, 2, 6, 5);
    break;
  }
  case APX_OP_INDEX_SELECT: {
    apx_index_select_args *a = &c->args.index_select;
    *a = (apx_index_select_args)APX_INDEX_SELECT_ARGS_INIT;
    IN("src", &a->src, fdt, 0, 0, 5, 4);
    IN("index", &a->index, idt, 0, 4, 7);
    OUT("out", &a->out, fdt, 7, 4);
    break;
  }
  case APX_OP_SCATTER_ADD: {
    apx_scatter_add_args *a = &c->args.scatter_add;
    *a = (apx_scatter_add_args)APX_SCATTER_ADD_ARGS_INIT;
    a->dim = 0;
    int self = IN("self", &a->self, fdt, 0, 0, 4, 5);
    IN("index", &a->index, idt, 0, 3, 6, 3);
    IN("src", &a->src, fdt, 0, 0, 6, 4);
    int out = OUT("out", &a->out, fdt, 4, 5);
    c->alias_of[out] = self;
    break;
  }
  case APX_OP_GATHER_BACKWARD: {
    apx_gather_backward_args *a = &c->args.gather_backward;
    *a = (apx_gather_backward_args)APX_GATHER_BACKWARD_ARGS_INIT;
    a->dim = 1;
    IN("grad_out", &a->grad_out, fdt, 0, 0, 2, 6, 5);
    IN("index", &a->index, idt, 0, 3, 2, 6, 5);
    OUT("grad_src", &a->grad_src, fdt, 3, 4, 5);
    break;
  }
  case APX_OP_FF_INFER: {
    apx_ff_infer_args *a = &c->args.ff_infer;
    *a = (apx_ff_infer_args)APX_FF_INFER_ARGS_INIT;
    a->tile_l0 = 4;
    a->tile_l1 = 2;
    a->kmax_l0 = 4;
    a->kmax_l1 = 8;
    IN("dense", &a->dense, fdt, 0, 0, 2, 3, 8, 12);
    IN("utilities", &a->utilities, fdt, 0, 0, 2, 6);
    OPT("split_utilities", &a->split_utilities, fdt, 0, 0, 2, 6);
    OPT("boundary", &a->boundary, fdt, 0, 0, 2, 1, 8, 12);
    OPT("uncertainty", &a->uncertainty, fdt, 0, 0, 2, 8, 12);
    OUT("heavy", &a->heavy, fdt, 2, 3, 8, 12);
    OUT("detail", &a->detail, fdt, 2, 3, 8, 12);
    OUT("alpha", &a->alpha, fdt, 2, 1, 8, 12);
    apx_status st = apx_ff_weights_seeded(vt_ctx, 3, 1, &c->weights);
    ck_assert_msg(st == APX_OK, "apx_ff_weights_seeded: %s", apx_last_error());
    a->weights = c->weights;
    break;
  }
  case APX_OP_FUSIONGATE_FUSE_BACKWARD: {
    apx_fusiongate_fuse_backward_args *a = &c->args.fuse_backward;
    *a = (apx_fusiongate_fuse_backward_args)APX_FUSIONGATE_FUSE_BACKWARD_ARGS_INIT;
    IN("grad_out", &a->grad_out, fdt, 0, 0, 2, 3, 8, 12);
    IN("base", &a->base, fdt, 0, 0, 2, 3, 8, 12);
    IN("detail", &a->detail, fdt, 0, 0, 2, 3, 8, 12);
    IN("alpha", &a->alpha, fdt, 0, 0, 2, 1, 8, 12);
    OPT_OUT("grad_base", &a->grad_base, fdt, 2, 3, 8, 12);
    OPT_OUT("grad_detail", &a->grad_detail, fdt, 2, 3, 8, 12);
    OPT_OUT("grad_alpha", &a->grad_alpha, fdt, 2, 1, 8, 12);
    break;
  }
  case APX_OP_FUSIONGATE_ALPHA_BACKWARD: {
    apx_fusiongate_alpha_backward_args *a = &c->args.alpha_backward;
    *a = (apx_fusiongate_alpha_backward_args)APX_FUSIONGATE_ALPHA_BACKWARD_ARGS_INIT;
    IN("grad_out", &a->grad_out, fdt, 0, 0, 2, 1, 8, 12);
    IN("boundary", &a->boundary, fdt, 0, 0, 2, 1, 8, 12);
    IN("uncertainty", &a->uncertainty, fdt, 0, 0, 2, 8, 12);
    OPT_OUT("grad_boundary", &a->grad_boundary, fdt, 2, 1, 8, 12);
    OPT_OUT("grad_uncertainty", &a->grad_uncertainty, fdt, 2, 8, 12);
    add_slot(c, "grad_boundary_log_weight", &a->grad_boundary_log_weight, fdt, 0, NULL, 0, 0, 1,
             0);
    add_slot(c, "grad_uncertainty_log_weight", &a->grad_uncertainty_log_weight, fdt, 0, NULL, 0,
             0, 1, 0);
    add_slot(c, "grad_bias", &a->grad_bias, fdt, 0, NULL, 0, 0, 1, 0);
    break;
  }
  case APX_OP_TILESSM_SCAN_BACKWARD: {
    apx_tilessm_scan_backward_args *a = &c->args.scan_backward;
    *a = (apx_tilessm_scan_backward_args)APX_TILESSM_SCAN_BACKWARD_ARGS_INIT;
    a->direction = APX_SCAN_BIDIRECTIONAL;
    a->merge = APX_MERGE_GATED;
    IN("grad_out", &a->grad_out, fdt, 0, 0, 2, 5, 3);
    IN("tokens", &a->tokens, fdt, 0, 0, 2, 5, 3);
    IN("decay", &a->decay, fdt, 0, 0, 3);
    IN("input_gain", &a->input_gain, fdt, 0, 0, 3);
    IN("output_gain", &a->output_gain, fdt, 0, 0, 3);
    IN("state_bias", &a->state_bias, fdt, 0, 0, 3);
    OPT("init_state", &a->init_state, fdt, 0, 0, 2, 2, 3);
    OPT("merge_gate", &a->merge_gate, fdt, 0, 0, 2, 1, 3);
    OPT("grad_final_state", &a->grad_final_state, fdt, 0, 0, 2, 2, 3);
    OPT_OUT("grad_tokens", &a->grad_tokens, fdt, 2, 5, 3);
    OPT_OUT("grad_decay", &a->grad_decay, fdt, 3);
    OPT_OUT("grad_input_gain", &a->grad_input_gain, fdt, 3);
    OPT_OUT("grad_output_gain", &a->grad_output_gain, fdt, 3);
    OPT_OUT("grad_state_bias", &a->grad_state_bias, fdt, 3);
    OPT_OUT("grad_init_state", &a->grad_init_state, fdt, 2, 2, 3);
    OPT_OUT("grad_merge_gate", &a->grad_merge_gate, fdt, 2, 1, 3);
    break;
  }
  case APX_OP_TILEPACK_BACKWARD: {
    apx_tilepack_backward_args *a = &c->args.tilepack_backward;
    *a = (apx_tilepack_backward_args)APX_TILEPACK_BACKWARD_ARGS_INIT;
    IN("grad_out", &a->grad_out, fdt, 0, 0, 2, 3, 3, 4, 4);
    IN("idx", &a->idx, idt, 0, 5, 2, 3);
    OUT("grad_features", &a->grad_features, fdt, 2, 3, 8, 12);
    break;
  }
  case APX_OP_TILEUNPACK_BACKWARD: {
    apx_tileunpack_backward_args *a = &c->args.tileunpack_backward;
    *a = (apx_tileunpack_backward_args)APX_TILEUNPACK_BACKWARD_ARGS_INIT;
    a->tile = 4;
    IN("grad_out", &a->grad_out, fdt, 0, 0, 2, 3, 8, 12);
    OPT("idx", &a->idx, idt, 0, 5, 2, 3);
    OPT("levels", &a->levels, idt, 0, 2, 2, 3);
    OUT("grad_base", &a->grad_base, fdt, 2, 3, 8, 12);
    OUT("grad_packed", &a->grad_packed, fdt, 2, 3, 3, 4, 4);
    break;
  }
  case APX_OP_FUSED_PACK_OP_UNPACK_BACKWARD: {
    apx_fused_pack_op_unpack_backward_args *a = &c->args.fused_backward;
    *a = (apx_fused_pack_op_unpack_backward_args)APX_FUSED_PACK_OP_UNPACK_BACKWARD_ARGS_INIT;
    a->tile = 4;
    int grad_out = IN("grad_out", &a->grad_out, fdt, 0, 0, 2, 3, 8, 12);
    IN("features", &a->features, fdt, 0, 0, 2, 3, 8, 12);
    int idx = IN("idx", &a->idx, idt, 0, 5, 2, 3);
    for (int64_t i = 0; i < 6; i++) /* rows {0,2,4} and {1,3,5}: unique */
      tu_set(&c->t[idx], i, (double)((i / 3) + 2 * (i % 3)));
    int grad_features = OUT("grad_features", &a->grad_features, fdt, 2, 3, 8, 12);
    c->alias_of[grad_features] = grad_out;
    OPT_OUT("grad_scalars", &a->grad_scalars, APX_DTYPE_F32, 4);
    break;
  }
  case APX_OP_INDEX_SELECT_BACKWARD: {
    apx_index_select_backward_args *a = &c->args.index_select_backward;
    *a = (apx_index_select_backward_args)APX_INDEX_SELECT_BACKWARD_ARGS_INIT;
    IN("grad_out", &a->grad_out, fdt, 0, 0, 7, 4);
    IN("index", &a->index, idt, 0, 4, 7);
    OUT("grad_src", &a->grad_src, fdt, 5, 4);
    break;
  }
  default:
    ck_abort_msg("vt_make: unknown op %d", (int)op);
  }
}

void vt_free(vt_case *c) {
  for (int i = 0; i < c->count; i++)
    tu_free(&c->t[i]);
  c->count = 0;
  apx_ff_weights_free(vt_ctx, c->weights);
  c->weights = NULL;
}

int vt_slot(const vt_case *c, const char *name) {
  for (int i = 0; i < c->count; i++)
    if (strcmp(c->names[i], name) == 0)
      return i;
  ck_abort_msg("case of %s has no tensor %s", apx_op_name(c->op), name);
  return -1;
}

apx_tensor *vt_tensor(vt_case *c, const char *name) {
  return (apx_tensor *)*c->field[vt_slot(c, name)];
}

void vt_set(vt_case *c, const char *name, const apx_tensor *t) { *c->field[vt_slot(c, name)] = t; }

apx_status vt_call(apx_op_id op, const void *args, const apx_call *call) {
  switch (op) {
#define VT_CALL_(upper, lower)                                                                     \
  case APX_OP_##upper:                                                                             \
    return apx_##lower(vt_ctx, args, call);
    APX_OP_MAP(VT_CALL_)
#undef VT_CALL_
  default:
    break;
  }
  ck_abort_msg("vt_call: unknown op %d", (int)op);
  return APX_ERR_INVALID_ARG;
}

static void check_rejected(const char *file, int line, const char *how, apx_status st,
                           const char *const *substrings) {
  const char *message = apx_last_error();
  ck_assert_msg(st == APX_ERR_INVALID_ARG,
                "%s:%d: %s returned %s, expected APX_ERR_INVALID_ARG (message [%s])", file, line,
                how, apx_status_name(st), message);
  ck_assert_msg(message[0] != '\0', "%s:%d: %s: empty message", file, line, how);
  for (int i = 0; substrings[i]; i++)
    ck_assert_msg(strstr(message, substrings[i]) != NULL, "%s:%d: %s: message [%s] lacks [%s]",
                  file, line, how, message, substrings[i]);
}

void vt_expect_invalid_(const char *file, int line, vt_case *c, ...) {
  const char *substrings[16];
  int n = 0;
  va_list ap;
  va_start(ap, c);
  for (const char *s; (s = va_arg(ap, const char *)) != NULL;) {
    ck_assert_int_lt(n, 15);
    substrings[n++] = s;
  }
  va_end(ap);
  substrings[n] = NULL;

  apx_tensor before[VT_MAX_SLOTS];
  for (int i = 0; i < c->count; i++)
    before[i] = tu_clone(&c->t[i]);

  apx_call cpu_call = {"cpu", NULL};
  apx_status st = vt_call(c->op, &c->args, &cpu_call);
  check_rejected(file, line, "the op (backend cpu)", st, substrings);
  st = vt_call(c->op, &c->args, NULL);
  check_rejected(file, line, "the op (call NULL)", st, substrings);
  apx_explanation expl;
  st = apx_explain(vt_ctx, c->op, &c->args, NULL, &expl);
  check_rejected(file, line, "apx_explain", st, substrings);

  for (int i = 0; i < c->count; i++) {
    ck_assert_msg(tu_bytes_equal(&before[i], &c->t[i]), "%s:%d: %s was modified by a rejected call",
                  file, line, c->names[i]);
    if (c->is_output[i])
      ck_assert_msg(tu_is_poisoned(&c->t[i]), "%s:%d: output %s was written", file, line,
                    c->names[i]);
    tu_free(&before[i]);
  }
}

void vt_expect_valid_(const char *file, int line, vt_case *c) {
  apx_explanation expl;
  apx_status st = apx_explain(vt_ctx, c->op, &c->args, NULL, &expl);
  ck_assert_msg(st != APX_ERR_INVALID_ARG, "%s:%d: apx_explain rejected a valid %s call: %s", file,
                line, apx_op_name(c->op), apx_last_error());
  apx_call cpu_call = {"cpu", NULL};
  st = vt_call(c->op, &c->args, &cpu_call);
  ck_assert_msg(st != APX_ERR_INVALID_ARG, "%s:%d: a valid %s call was rejected: %s", file, line,
                apx_op_name(c->op), apx_last_error());
  /* Once a backend runs the call it writes the outputs: poison them again
   * so that later rejected calls on this case can be checked. */
  for (int i = 0; i < c->count; i++) {
    if (!c->is_output[i])
      continue;
    tu_poison(&c->t[i]);
    if (*c->field[i] && (*c->field[i])->data)
      tu_poison(*c->field[i]);
  }
}

char *fmt(const char *format, ...) {
  static char ring[8][256];
  static int next;
  char *buf = ring[next++ % 8];
  va_list ap;
  va_start(ap, format);
  vsnprintf(buf, sizeof ring[0], format, ap);
  va_end(ap);
  return buf;
}

apx_tensor owned(apx_dtype dtype, int ndim, const int64_t *shape) {
  apx_tensor t = tu_host(dtype, ndim, shape);
  tu_poison(&t);
  return t;
}

apx_tensor *view_of(vt_case *c, const char *name, apx_tensor *storage) {
  *storage = *vt_tensor(c, name);
  vt_set(c, name, storage);
  return storage;
}

void restore(vt_case *c, const char *name) { vt_set(c, name, &c->t[vt_slot(c, name)]); }
