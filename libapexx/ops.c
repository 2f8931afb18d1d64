/* The public op entry points: validate and dispatch, then call the chosen
 * backend's function with the call's options (defaults when NULL). */
#include "config.h"

#include "ff_internal.h"
#include "internal.h"

/* Calls that wait for the host cannot be captured into a graph
 * (docs/graph.md): validate = eager checks device indices by waiting for
 * the stream, and ff_infer's stats are copied home inside the call. */
static apx_status graph_refusal(apx_context *ctx, apx_op_id op, const void *args,
                                const apx__backend *b, const apx_call *call) {
  if (__atomic_load_n(&ctx->captures_open, __ATOMIC_ACQUIRE) == 0) return APX_OK;
  const char *what = NULL;
  if (op == APX_OP_FF_INFER && ((const apx_ff_infer_args *)args)->stats)
    what = "ff_infer's stats wait for the device (leave stats NULL in captured calls)";
  else if (ctx->config.validate == APX_VALIDATE_EAGER && op != APX_OP_FUSIONGATE_ALPHA &&
           op != APX_OP_FUSIONGATE_FUSE && op != APX_OP_TILESSM_SCAN)
    what = "validate = eager waits for the device to check the indices (captured calls need "
           "validate = device or off)";
  if (!what) return APX_OK;
  return apx__graph_waits_refused(ctx, apx_op_name(op), b->config->name,
                                  call ? call->stream : NULL, what);
}

/* ff_infer's weights are pinned for the call (ff_weights.c): found among
 * the context's open handles, and not freed until the call returns. */
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
    st = b->table->lower(b->state_ptr, args, call ? call : &default_call);     \
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
    apx_status st = apx__ff_pin_args(ctx, APX_OP_##upper, args, &pinned);      \
    if (st != APX_OK) return st;                                               \
    st = run_##lower(ctx, args, call);                                         \
    apx__ff_unpin(ctx, pinned);                                                \
    return st;                                                                 \
  }
APX_OP_MAP(OP_ENTRY_)
#undef OP_ENTRY_
