/* Argument validation of apx_ff_infer (spec/ops.md 9). (skeleton) */
#include "config.h"

#include "internal.h"
#include "validate.h"

apx_status apx__validate_ff_infer(const apx_ff_infer_args *args, apx__site *site) {
  (void)args; (void)site;
  return apx__error(APX_ERR_UNSUPPORTED, "ff_infer: validation not built yet");
}
