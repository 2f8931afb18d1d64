/* SPDX-License-Identifier: Apache-2.0 */
/* gather_backward on CUDA (docs/ops.md, gather_backward): grad_src = zeros
 * with grad_out added along `dim` at index, i.e. scatter_add with self =
 * zeros; the kernels are scatter_add.cu's (cuda_scatter_accumulate). */
#include "cuda_backend.h"

apx_status cuda_gather_backward(void *state, const apx_gather_backward_args *a,
                                const apx_call *call) {
  return cuda_scatter_accumulate((cuda_state *)state, APX_OP_GATHER_BACKWARD, NULL, a->index,
                                 a->grad_out, a->grad_src, a->dim, call);
}
