/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: gather_backward (docs/ops.md, gather_backward): grad_src =
 * zeros with grad_out scattered along `dim` by index, i.e. scatter_add with
 * self = zeros; the accumulation is scatter_add.c's (cpu_scatter_accumulate). */
#include "cpu.h"

apx_status cpu_gather_backward(void *state, const apx_gather_backward_args *args,
                               const apx_call *call) {
  (void)call;
  return cpu_scatter_accumulate(state, "gather_backward", NULL, args->index, args->grad_out,
                                args->grad_src, args->dim);
}
