/* SPDX-License-Identifier: Apache-2.0 */
/* Dispatch: validate in core, then walk the op's order; every backend passed
 * over is recorded with a stable code and a sentence (docs/architecture.md,
 * Dispatch; reasons follow docs/ops.md, Dispatch: "<code>:<detail>"). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "ff/ff_internal.h"
#include "internal.h"
#include "validate.h"

/* The order for op: its [op NAME] order, else the global order; configured
 * backends missing from the order follow in configuration order. */
static int op_order(const apx_context *ctx, apx_op_id op, const char **names) {
  const apx__config *cfg = &ctx->config;
  int n = 0;
  char *const *list = cfg->op_order_count[op] ? cfg->op_order[op] : cfg->order;
  int count = cfg->op_order_count[op] ? cfg->op_order_count[op] : cfg->order_count;
  for (int i = 0; i < count; i++) {
    int dup = 0;
    for (int j = 0; j < n; j++) dup |= strcmp(names[j], list[i]) == 0;
    if (!dup) names[n++] = list[i];
  }
  for (int i = 0; i < ctx->backend_count; i++) {
    int present = 0;
    for (int j = 0; j < n; j++) present |= strcmp(names[j], ctx->backends[i].config->name) == 0;
    if (!present && n < APX_MAX_BACKENDS) names[n++] = ctx->backends[i].config->name;
  }
  return n;
}

/* Why b cannot run this call, or 0 when it can. */
static int pass_over_reason(apx__backend *b, apx_op_id op, const void *args,
                            const apx__site *site, apx_pass_over_code *code,
                            char *reason, size_t size) {
  const char *name = b->config->name;
  switch (b->state) {
  case APX_BACKEND_OK:
    break;
  case APX_BACKEND_DISABLED:
    *code = APX_PASS_DISABLED;
    snprintf(reason, size, "disabled:%s is disabled in the configuration", name);
    return 1;
  case APX_BACKEND_UNAVAILABLE:
    *code = APX_PASS_UNAVAILABLE;
    snprintf(reason, size, "unavailable:%s", b->reason);
    return 1;
  default:
    *code = APX_PASS_NOT_LOADED;
    snprintf(reason, size, "not_loaded:%s: %s", apx_backend_state_name(b->state), b->reason);
    return 1;
  }
  if (!apx__backend_has_op(b, op)) {
    *code = APX_PASS_OP_UNSUPPORTED;
    char why[300];
    snprintf(reason, size, "op_unsupported:%s", apx__backend_lacks_op(b, op, why, sizeof why));
    return 1;
  }
  if (b->table->device != site->device) {
    *code = APX_PASS_DEVICE_MISMATCH;
    snprintf(reason, size, "device_mismatch:tensors are in %s memory, %s serves %s",
             apx_device_name(site->device), name, apx_device_name(b->table->device));
    return 1;
  }
  if (b->table->supports) {
    char why[400] = "";
    apx_pass_over_code backend_code = APX_PASS_OP_UNSUPPORTED;
    if (!b->table->supports(b->state_ptr, op, args, &backend_code, why, sizeof why)) {
      why[sizeof why - 1] = '\0';
      if ((int)backend_code < 0 || backend_code >= APX_PASS_COUNT)
        backend_code = APX_PASS_OP_UNSUPPORTED;
      *code = backend_code;
      snprintf(reason, size, "%s:%s", apx_pass_over_name(backend_code),
               why[0] ? why : "backend declined the call");
      return 1;
    }
  }
  return 0;
}

apx_status apx__dispatch(apx_context *ctx, apx_op_id op, const void *args,
                         const apx_call *call, apx__backend **chosen,
                         apx_explanation *expl) {
  const char *op_name = apx_op_name(op);
  if (!ctx) return apx__error(APX_ERR_INVALID_ARG, "%s: ctx = [NULL]", op_name ? op_name : "op");
  if (!op_name) return apx__error(APX_ERR_INVALID_ARG, "apx_explain: op = [%d] is not an op id", (int)op);
  if (!args) return apx__error(APX_ERR_INVALID_ARG, "%s: args = [NULL]", op_name);
  apx__site site;
  apx_status st = apx__validate(op, args, &site);
  if (st != APX_OK) return st;

  const char *forced = call && call->backend ? call->backend : ctx->config.forced_backend;
  const char *forced_by = call && call->backend ? "the call" : "APEXX_BACKEND";
  if (forced && !apx__backend_find(ctx, forced))
    return apx__error(APX_ERR_INVALID_ARG, "%s: backend [%s] forced by %s is not configured",
                      op_name, forced, forced_by);

  const char *names[APX_MAX_BACKENDS];
  int n = op_order(ctx, op, names);
  apx_explanation local;
  apx_explanation *e = expl ? expl : &local;
  memset(e, 0, sizeof *e);
  char all_reasons[2048] = "";
  size_t reasons_len = 0;
  char forced_reason[600] = "";
  for (int i = 0; i < n; i++) {
    apx__backend *b = apx__backend_find(ctx, names[i]);
    apx_pass_over_code code;
    char reason[600];
    int pass = 0;
    if (forced && strcmp(forced, names[i]) != 0) {
      code = APX_PASS_NOT_FORCED;
      snprintf(reason, sizeof reason, "not_forced:%s forces backend %s", forced_by, forced);
      pass = 1;
    } else {
      pass = pass_over_reason(b, op, args, &site, &code, reason, sizeof reason);
      if (pass && forced) apx__strlcpy(forced_reason, reason, sizeof forced_reason);
    }
    if (!pass) {
      e->backend = b->config->name;
      *chosen = b;
      return APX_OK;
    }
    apx_pass_over *p = &e->passed_over[e->passed_over_count++];
    p->backend = b->config->name;
    p->code = code;
    p->reason = apx__intern(ctx, reason);
    if (code != APX_PASS_NOT_FORCED && reasons_len < sizeof all_reasons) {
      int w = snprintf(all_reasons + reasons_len, sizeof all_reasons - reasons_len, "%s%s: %s",
                       reasons_len ? "; " : "", b->config->name, reason);
      if (w > 0) reasons_len += (size_t)w;
    }
  }
  *chosen = NULL;
  if (forced)
    return apx__error(APX_ERR_UNSUPPORTED, "%s: backend %s forced by %s cannot run it: %s",
                      op_name, forced, forced_by, forced_reason);
  return apx__error(APX_ERR_UNSUPPORTED, "%s: no backend can run this call: %s", op_name,
                    reasons_len ? all_reasons : "no backends configured");
}

APX_API apx_status apx_op_order(const apx_context *ctx, apx_op_id op, const char **names,
                                int *count) {
  apx__clear_error();
  if (!ctx || !names || !count) return apx__error(APX_ERR_INVALID_ARG, "apx_op_order: NULL argument");
  if (!apx_op_name(op)) return apx__error(APX_ERR_INVALID_ARG, "apx_op_order: op = [%d] is not an op id", (int)op);
  *count = op_order(ctx, op, names);
  return APX_OK;
}

APX_API apx_status apx_backend_provides(const apx_context *ctx, int i, apx_op_id op,
                                        int *provides) {
  apx__clear_error();
  if (!ctx || !provides)
    return apx__error(APX_ERR_INVALID_ARG, "apx_backend_provides: NULL argument");
  if (i < 0 || i >= ctx->backend_count)
    return apx__error(APX_ERR_INVALID_ARG, "apx_backend_provides: i = [%d] is outside [0, %d]", i,
                      ctx->backend_count - 1);
  if (!apx_op_name(op))
    return apx__error(APX_ERR_INVALID_ARG, "apx_backend_provides: op = [%d] is not an op id",
                      (int)op);
  *provides = apx__backend_has_op(&ctx->backends[i], op);
  return APX_OK;
}

APX_API const char *apx_forced_backend(const apx_context *ctx) {
  return ctx ? ctx->config.forced_backend : NULL;
}

APX_API apx_status apx_explain(apx_context *ctx, apx_op_id op, const void *args,
                               const apx_call *call, apx_explanation *out) {
  apx__clear_error();
  if (!out) return apx__error(APX_ERR_INVALID_ARG, "apx_explain: out = [NULL]");
  memset(out, 0, sizeof *out);
  apx__backend *chosen = NULL;
  const apx_ff_weights *pinned = NULL; /* validation reads ff_infer's weights */
  apx_status st = apx__ff_pin_args(ctx, apx_op_describe(op), args, &pinned);
  if (st != APX_OK) return st;
  st = apx__dispatch(ctx, op, args, call, &chosen, out);
  apx__ff_unpin(ctx, pinned);
  return st;
}
