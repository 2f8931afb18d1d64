/* SPDX-License-Identifier: Apache-2.0 */
/* The public op entry points: validate and dispatch, then call the chosen
 * backend's function with the call's options (defaults when NULL). */
#include "config.h"

#include "ff/ff_internal.h"
#include "internal.h"
#include "op_table.h"

/* Calls that wait for the host cannot be captured into a graph
 * (docs/graph.md): validate = eager checks device values by waiting for the
 * stream (the ops with device checks), and an op may wait for its own
 * reasons (ff_infer's stats). */
static apx_status graph_refusal(apx_context *ctx, apx_op_id op, const void *args,
                                const apx__backend *b, const apx_call *call) {
  if (__atomic_load_n(&ctx->captures_open, __ATOMIC_ACQUIRE) == 0) return APX_OK;
  const apx__op *o = apx__op_get(op);
  const char *what = o->waits_for_device ? o->waits_for_device(args) : NULL;
  if (!what && ctx->config.validate == APX_VALIDATE_EAGER &&
      !(o->desc.caps & APX_OP_CAP_EAGER_CAPTURE))
    what = "validate = eager waits for the device to check the indices (captured calls need "
           "validate = device or off)";
  if (!what) return APX_OK;
  return apx__graph_waits_refused(ctx, o->desc.name, b->config->name,
                                  call ? call->stream : NULL, what);
}

/* A call's weights handle (ff_infer's) is pinned for the call
 * (libapexx/ff/weights.c): found among the context's open handles, and not
 * freed until the call returns. */
#define OP_ENTRY_(upper, lower)                                                \
  static apx_status run_##lower(apx_context *ctx,                             \
                                const apx_##lower##_args *args,                \
                                const apx_call *call) {                        \
    static const apx_call default_call = APX_CALL_INIT;                        \
    apx__backend *b = NULL;                                                    \
    apx_status st = apx__dispatch(ctx, APX_OP_##upper, args, call, &b, NULL);  \
    if (st != APX_OK) return st;                                               \
    st = graph_refusal(ctx, APX_OP_##upper, args, b, call);                    \
    if (st != APX_OK) return st;                                               \
    st = b->table->ops->lower(b->state_ptr, args, call ? call : &default_call); \
    if (st != APX_OK && !apx_last_error()[0])                                  \
      apx__error(st, "%s: backend %s failed with %s", #lower, b->config->name, \
                 apx_status_name(st));                                         \
    return st;                                                                 \
  }                                                                            \
  APX_API apx_status apx_##lower(apx_context *ctx,                            \
                                 const apx_##lower##_args *args,               \
                                 const apx_call *call) {                       \
    apx__clear_error();                                                        \
    const apx_ff_weights *pinned = NULL;                                       \
    apx_status st = apx__ff_pin_args(ctx, apx_op_describe(APX_OP_##upper), args, \
                                      &pinned);                                \
    if (st != APX_OK) return st;                                               \
    st = run_##lower(ctx, args, call);                                         \
    apx__ff_unpin(ctx, pinned);                                                \
    return st;                                                                 \
  }
APX_OP_MAP(OP_ENTRY_)
#undef OP_ENTRY_

APX_API apx_status apx_op_run(apx_context *ctx, apx_op_id op, const void *args,
                              const apx_call *call) {
  switch (op) {
#define OP_RUN_(upper, lower)                                                  \
  case APX_OP_##upper:                                                         \
    return apx_##lower(ctx, args, call);
    APX_OP_MAP(OP_RUN_)
#undef OP_RUN_
  default:
    apx__clear_error();
    return apx__error(APX_ERR_INVALID_ARG, "apx_op_run: op = [%d] is not an op id", (int)op);
  }
}
