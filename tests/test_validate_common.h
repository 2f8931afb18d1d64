/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers of the validation suites (tests/test_validate_*.c): one valid
 * call per op built from host tensors ("a case"), and the assertion that a
 * call is rejected in the core with APX_ERR_INVALID_ARG, a message naming
 * the argument and the bad value, and no byte of any tensor written. */
#ifndef APX_TEST_VALIDATE_COMMON_H
#define APX_TEST_VALIDATE_COMMON_H

#include <apexx/apexx.h>
#include <check.h>

#include "testutil.h"

#define VT_MAX_SLOTS 16

typedef union vt_args {
  apx_tilepack_args tilepack;
  apx_tileunpack_args tileunpack;
  apx_fused_pack_op_unpack_args fused;
  apx_fusiongate_alpha_args alpha;
  apx_fusiongate_fuse_args fuse;
  apx_tilessm_scan_args scan;
  apx_gather_args gather;
  apx_index_select_args index_select;
  apx_scatter_add_args scatter_add;
  apx_gather_backward_args gather_backward;
  apx_ff_infer_args ff_infer;
  apx_fusiongate_fuse_backward_args fuse_backward;
  apx_fusiongate_alpha_backward_args alpha_backward;
  apx_tilessm_scan_backward_args scan_backward;
  apx_tilepack_backward_args tilepack_backward;
  apx_tileunpack_backward_args tileunpack_backward;
  apx_fused_pack_op_unpack_backward_args fused_backward;
  apx_index_select_backward_args index_select_backward;
} vt_args;

/* A valid call of one op. Slot i is the tensor t[i], named names[i], that
 * the args field *field[i] points at; tests swap a field to a modified copy.
 * Outputs are poisoned when the case is made. alias_of[i] is the input slot
 * an output may alias exactly (-1: none). */
typedef struct vt_case {
  apx_op_id op;
  vt_args args;
  int count;
  apx_tensor t[VT_MAX_SLOTS];
  const char *names[VT_MAX_SLOTS];
  const apx_tensor **field[VT_MAX_SLOTS];
  int is_output[VT_MAX_SLOTS];
  int required[VT_MAX_SLOTS];
  int alias_of[VT_MAX_SLOTS];
  apx_ff_weights *weights; /* ff_infer's (freed by vt_free), else NULL */
} vt_case;

/* The context of the running test (opened by vt_setup, closed by
 * vt_teardown: use them as a checked fixture). */
extern apx_context *vt_ctx;
void vt_setup(void);
void vt_teardown(void);

/* Build the default valid case of `op` with float dtype `fdt` (data ops
 * other than floats use it too) and index dtype `idt`. Shapes:
 *   tilepack      features [2,3,8,12], tile 4, idx [2,3], out [2,3,3,4,4]
 *   tileunpack    base [2,3,8,12], packed [2,3,3,4,4], idx [2,3],
 *                 levels [2,3], out [2,3,8,12]
 *   fused         features [2,3,8,12], tile 4, idx [2,3] (unique rows), out
 *   alpha         boundary [2,1,8,12], uncertainty [2,8,12], out [2,1,8,12]
 *   fuse          base, detail [2,3,8,12], alpha [2,1,8,12], out
 *   scan          tokens [2,5,3], vectors [3], init_state [2,2,3],
 *                 merge_gate [2,1,3], bidirectional gated, out [2,5,3],
 *                 final_state [2,2,3]
 *   gather        src [3,4,5], dim 1, index [2,6,5] in [0,4), out [2,6,5]
 *   index_select  src [5,4], index [7] in [0,5), out [7,4]
 *   scatter_add   self [4,5], dim 0, index [6,3] in [0,4), src [6,4], out
 *   gather_bwd    grad_out [2,6,5], dim 1, index [2,6,5] in [0,4),
 *                 grad_src [3,4,5]
 *   ff_infer      dense [2,3,8,12], tile_l0 4 (G0 6), kmax 4/8, utilities,
 *                 split_utilities [2,6], boundary [2,1,8,12], uncertainty
 *                 [2,8,12], weights seeded for C 3, heavy, detail
 *                 [2,3,8,12], alpha [2,1,8,12]
 *   fuse_bwd      grad_out, base, detail [2,3,8,12], alpha [2,1,8,12],
 *                 grad_base, grad_detail [2,3,8,12], grad_alpha [2,1,8,12]
 *   alpha_bwd     grad_out [2,1,8,12], boundary [2,1,8,12], uncertainty
 *                 [2,8,12], grad_boundary [2,1,8,12], grad_uncertainty
 *                 [2,8,12], the three scalar gradients []
 *   scan_bwd      the scan case's inputs and options, grad_out [2,5,3],
 *                 grad_final_state [2,2,3], grad_tokens [2,5,3], the
 *                 vectors' gradients [3], grad_init_state [2,2,3],
 *                 grad_merge_gate [2,1,3]
 *   tilepack_bwd  grad_out [2,3,3,4,4], idx [2,3], grad_features [2,3,8,12]
 *   tileunpack_bwd grad_out [2,3,8,12], tile 4, idx [2,3], levels [2,3],
 *                 grad_base [2,3,8,12], grad_packed [2,3,3,4,4]
 *   fused_bwd     grad_out, features [2,3,8,12], tile 4, idx [2,3] (unique
 *                 rows), grad_features [2,3,8,12], grad_scalars [4] f32
 *   index_sel_bwd grad_out [7,4], index [7] in [0,5), grad_src [5,4] */
void vt_make(vt_case *c, apx_op_id op, apx_dtype fdt, apx_dtype idt);
void vt_free(vt_case *c);
/* Slot of the tensor named `name` (the test fails if there is none). */
int vt_slot(const vt_case *c, const char *name);
/* The tensor currently passed for `name` (what its field points at). */
apx_tensor *vt_tensor(vt_case *c, const char *name);
/* Point `name`'s field at a tensor the test owns (NULL = absent). */
void vt_set(vt_case *c, const char *name, const apx_tensor *t);

/* Call op through its public function (with call, NULL allowed). */
apx_status vt_call(apx_op_id op, const void *args, const apx_call *call);

/* The call (through the public function with backend "cpu", with a NULL
 * call, and through apx_explain) must return APX_ERR_INVALID_ARG with a
 * message containing every one of the NULL-terminated substrings; every
 * slot tensor of the case keeps its bytes and its outputs stay poisoned. */
void vt_expect_invalid_(const char *file, int line, vt_case *c, ...);
#define vt_expect_invalid(c, ...)                                                                  \
  vt_expect_invalid_(__FILE__, __LINE__, c, __VA_ARGS__, (const char *)NULL)

/* The call passes validation: apx_explain and the op do not return
 * APX_ERR_INVALID_ARG (the op may still be unsupported). */
void vt_expect_valid_(const char *file, int line, vt_case *c);
#define vt_expect_valid(c) vt_expect_valid_(__FILE__, __LINE__, c)

/* A host tensor of the given shape filled with ints in [lo, hi] (index
 * dtypes) or normal values (floats). */
apx_tensor vt_tensor_like(apx_dtype dtype, int ndim, const int64_t *shape, int64_t lo, int64_t hi);

/* A message built with printf formatting, from a ring of 8 buffers (valid
 * until 8 more calls). */
char *fmt(const char *format, ...) __attribute__((format(printf, 1, 2)));

/* A poisoned host tensor the test owns; OWNED(dtype, d0, d1, ...). */
apx_tensor owned(apx_dtype dtype, int ndim, const int64_t *shape);
#define OWNED(dtype, ...)                                                                          \
  owned(dtype, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

/* A view of slot `name` the test may reshape freely (same data); restore
 * puts the case's own tensor back. */
apx_tensor *view_of(vt_case *c, const char *name, apx_tensor *storage);
void restore(vt_case *c, const char *name);

#endif
