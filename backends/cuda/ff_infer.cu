/* cuda backend: the end-to-end FF path (spec/ops.md 8, 9). (skeleton) */
#include "cuda_backend.h"

apx_status cuda_ff_infer(void *state, const apx_ff_infer_args *args, const apx_call *call) {
  (void)state; (void)args; (void)call;
  return APX_ERR_UNSUPPORTED;
}
