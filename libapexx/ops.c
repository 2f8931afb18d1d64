/* The public op entry points: validate and dispatch, then call the chosen
 * backend's function with the call's options (defaults when NULL). */
#include "config.h"

#include "internal.h"

#define OP_ENTRY_(upper, lower)                                                \
  APX_API apx_status apx_##lower(apx_context *ctx,                            \
                                 const apx_##lower##_args *args,               \
                                 const apx_call *call) {                       \
    static const apx_call default_call = APX_CALL_INIT;                        \
    apx__clear_error();                                                        \
    apx__backend *b = NULL;                                                    \
    apx_status st = apx__dispatch(ctx, APX_OP_##upper, args, call, &b, NULL);  \
    if (st != APX_OK) return st;                                               \
    st = b->table->lower(b->state_ptr, args, call ? call : &default_call);     \
    if (st != APX_OK && !apx_last_error()[0])                                  \
      apx__error(st, "%s: backend %s failed with %s", #lower, b->config->name, \
                 apx_status_name(st));                                         \
    return st;                                                                 \
  }
APX_OP_MAP(OP_ENTRY_)
#undef OP_ENTRY_
