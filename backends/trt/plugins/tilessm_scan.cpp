/* SPDX-License-Identifier: Apache-2.0 */
// TileSSMScan's enqueue: the tilessm_scan op (docs/ops.md, tilessm_scan)
// forward or backward on the cuda backend, with final_state as the second
// output and the optional init_state [B,C]; clamp_value acts as |value|
// (the seed's plugin floored it at 1.0).
#include "config.h"

#include "plugin.h"

namespace apexx_trt {

int enqueue_tilessm_scan(const EnqueueCall &c) {
  apx_tensor in[APX_TRT_MAX_IO], out[APX_TRT_MAX_IO];
  Kernels k;
  if (enqueue_prepare(c, in, out, &k) != 0) return -1;
  apx_tilessm_scan_args a = APX_TILESSM_SCAN_ARGS_INIT;
  a.tokens = &in[0];
  a.decay = &in[1];
  a.input_gain = &in[2];
  a.output_gain = &in[3];
  a.state_bias = &in[4];
  a.init_state = c.nb_inputs == 6 ? &in[5] : nullptr;
  a.clamp_value = c.params->clamp_value;
  a.direction = c.params->direction == 1 ? APX_SCAN_BACKWARD : APX_SCAN_FORWARD;
  a.out = &out[0];
  a.final_state = &out[1];
  apx_call call = {"cuda", c.stream};
  if (k.table->ops->tilessm_scan(k.state, &a, &call) != APX_OK) return enqueue_failed(c);
  return enqueue_finish(c, k);
}

}  // namespace apexx_trt
