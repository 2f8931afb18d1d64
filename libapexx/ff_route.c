/* Host routing of the FF path (spec/ops.md 9.2). (skeleton, being written) */
#include "config.h"

#include "ff_internal.h"
#include "internal.h"

apx_status apx__ff_route(const apx_ff_infer_args *args, apx_ff_route *route) {
  (void)args; (void)route;
  return apx__error(APX_ERR_UNSUPPORTED, "ff_infer: routing not built yet");
}
