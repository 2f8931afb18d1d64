/* SPDX-License-Identifier: Apache-2.0 */
// TileUnpackFusion's enqueue: the tileunpack op (docs/ops.md, tileunpack:
// override, ids, levels, priority key (level, k), the highest key winning)
// and, with the optional alpha input, fusiongate_fuse of the base and the
// merged map: out = base + alpha*(merged - base), which is the seed's
// base + a*(P - base) where a tile won and the base value elsewhere. The
// merged map lives in the plugin's workspace. Ids outside the tile grid
// are errors (the seed's plugin skipped those tiles).
#include "config.h"

#include "plugin.h"

#include <stdio.h>

namespace apexx_trt {

int enqueue_tileunpack_fusion(const EnqueueCall &c) {
  apx_tensor in[APX_TRT_MAX_IO], out[APX_TRT_MAX_IO];
  Kernels k;
  if (enqueue_prepare(c, in, out, &k) != 0) return -1;
  int with_alpha = c.nb_inputs == 5;
  apx_tensor merged = out[0];
  if (with_alpha) {
    if (!c.workspace && apx_backend_numel(&out[0]) > 0) {
      snprintf(c.err, c.err_size, "TileUnpackFusion: no workspace for the merged map");
      return -1;
    }
    merged.data = c.workspace;
  }
  apx_tileunpack_args a = APX_TILEUNPACK_ARGS_INIT;
  a.base = &in[0];
  a.packed = &in[1];
  a.idx = &in[2];
  a.levels = &in[3];
  a.mode = APX_OVERLAP_OVERRIDE;
  a.assume_priority_sorted = 0;
  a.out = &merged;
  apx_call call = {"cuda", c.stream};
  if (k.table->ops->tileunpack(k.state, &a, &call) != APX_OK) return enqueue_failed(c);
  if (!with_alpha) return enqueue_finish(c, k);
  apx_fusiongate_fuse_args f = APX_FUSIONGATE_FUSE_ARGS_INIT;
  f.base = &in[0];
  f.detail = &merged;
  f.alpha = &in[4];
  f.out = &out[0];
  if (k.table->ops->fusiongate_fuse(k.state, &f, &call) != APX_OK) return enqueue_failed(c);
  return enqueue_finish(c, k);
}

}  // namespace apexx_trt
