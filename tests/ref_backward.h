/* SPDX-License-Identifier: Apache-2.0 */
/* Plain reference loops of the backward ops (docs/ops.md,
 * fusiongate_fuse_backward, fusiongate_alpha_backward,
 * tilessm_scan_backward), in double from the stored inputs, written per
 * element from the spec independently of the backends. Each gradient comes
 * with its magnitude (the same sums over the absolute values of every
 * factor), the scale of docs/ops.md's parity bound. */
#ifndef APX_TESTS_REF_BACKWARD_H
#define APX_TESTS_REF_BACKWARD_H

#include <apexx/apexx.h>

typedef struct ref_grad {
  int64_t n;
  double *value, *mag;
} ref_grad;

/* A zeroed gradient of n elements; free with ref_grad_free. */
ref_grad ref_grad_new(int64_t n);
void ref_grad_free(ref_grad *g);

/* The gradients the args' outputs ask for (NULL output: its ref_grad is
 * left alone and may be NULL). */
void ref_fusiongate_fuse_backward(const apx_fusiongate_fuse_backward_args *a, ref_grad *grad_base,
                                  ref_grad *grad_detail, ref_grad *grad_alpha);
/* scalars: [3] for the two log weights and the bias (0-d each) */
void ref_fusiongate_alpha_backward(const apx_fusiongate_alpha_backward_args *a,
                                   ref_grad *grad_boundary, ref_grad *grad_uncertainty,
                                   ref_grad scalars[3]);

/* tilessm_scan_backward's gradients, in the order of its outputs:
 * tokens, decay, input_gain, output_gain, state_bias, init_state,
 * merge_gate (each sized as the op's output; grads[i].value NULL: not
 * asked for). */
#define REF_SCAN_GRADS 7
void ref_tilessm_scan_backward(const apx_tilessm_scan_backward_args *a,
                               ref_grad grads[REF_SCAN_GRADS]);

/* The first element of got (a float tensor of want->n elements) with
 * |got - value| > atol + rtol*mag, or -1 (a NaN value wants a NaN; a value
 * within the bound of the dtype's largest finite one may be an infinity of
 * its sign). */
int64_t ref_grad_mismatch(const apx_tensor *got, const ref_grad *want, double rtol, double atol);
/* The parity rule's rtol = atol of a storage dtype (docs/ops.md, Rounding and
 * parity), for one rounding of an fp32 result. */
double ref_grad_tolerance(apx_dtype dtype);

#endif
