/* cpu backend: the end-to-end FF path (spec/ops.md 8, 9). (skeleton) */
#include "config.h"

#include "cpu.h"

apx_status cpu_ff_infer(void *state, const apx_ff_infer_args *args, const apx_call *call) {
  cpu_state *s = state;
  (void)args; (void)call;
  return s->svc->set_error(APX_ERR_UNSUPPORTED, "ff_infer: cpu path not built yet");
}
