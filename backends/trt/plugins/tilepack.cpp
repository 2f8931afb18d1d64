/* SPDX-License-Identifier: Apache-2.0 */
// TilePack's enqueue: the tilepack op (docs/ops.md, tilepack) on the cuda
// backend. An id outside the tile grid is an error reported through the
// plugin's error path (the seed's plugin wrote a zero tile instead).
#include "config.h"

#include "plugin.h"

namespace apexx_trt {

int enqueue_tilepack(const EnqueueCall &c) {
  apx_tensor in[APX_TRT_MAX_IO], out[APX_TRT_MAX_IO];
  Kernels k;
  if (enqueue_prepare(c, in, out, &k) != 0) return -1;
  apx_tilepack_args a = APX_TILEPACK_ARGS_INIT;
  a.features = &in[0];
  a.idx = &in[1];
  a.tile = c.params->tile_size;
  a.out = &out[0];
  apx_call call = {"cuda", c.stream};
  if (k.table->ops->tilepack(k.state, &a, &call) != APX_OK) return enqueue_failed(c);
  return enqueue_finish(c, k);
}

}  // namespace apexx_trt
