/* Argument validation shared by every backend (docs/ops.md, Errors and
 * each op's section; DESIGN.md "Dispatch and fallback"). */
#ifndef APX_CORE_VALIDATE_H
#define APX_CORE_VALIDATE_H

#include <apexx/apexx.h>

/* Where a validated call's tensors live. */
typedef struct apx__site {
  apx_device device; /* every tensor of the call is on this device kind */
  int device_index;  /* and this ordinal */
} apx__site;

/* Check every argument of op `op` (args points at that op's args struct):
 * NULL/absent tensors, ndim and shapes, dtypes, tile grid, scalar options,
 * aliasing (only the exact aliases the API allows), that all tensors are on
 * one device, and the value ranges of index tensors that live in host
 * memory. On failure: sets the thread's error message (naming the op, the
 * argument, the position and the bad value) and returns
 * APX_ERR_INVALID_ARG. Reads no output memory and writes none. */
apx_status apx__validate(apx_op_id op, const void *args, apx__site *site);

/* apx_ff_infer's arguments (validate_ff.c), same contract. */
apx_status apx__validate_ff_infer(const apx_ff_infer_args *args, apx__site *site);

/* The checks of validate.c, for op validators in other files (validate_ff.c):
 * the same messages, "op: ..." with the bad value in brackets. The state
 * carries the op's name and the device of the first tensor seen. */
typedef struct apx__vstate {
  const char *op; /* op name, first word of every message */
  apx__site site; /* device of the first tensor seen */
  int have_site;
  const char *site_name; /* the argument that fixed the site */
} apx__vstate;
/* Well-formed tensor (ndim, shape, dtype, device, sizes, data, alignment) on
 * the call's one device; t may be NULL only when !required. */
apx_status apx__vcheck_tensor(apx__vstate *v, const char *name, const apx_tensor *t, int required);
apx_status apx__vrequire_ndim(const apx__vstate *v, const char *name, const apx_tensor *t, int ndim,
                              const char *layout);
apx_status apx__vrequire_shape(const apx__vstate *v, const char *name, const apx_tensor *t,
                               int ndim, const int64_t *shape, const char *layout);
apx_status apx__vrequire_float(const apx__vstate *v, const char *name, const apx_tensor *t);
apx_status apx__vrequire_same_dtype(const apx__vstate *v, const char *name, const apx_tensor *t,
                                    const char *ref_name, const apx_tensor *ref);
/* A proxy or alpha map: [B,1,H,W] or [B,H,W]; its (B, H, W) in bhw. */
apx_status apx__vrequire_gate_map(const apx__vstate *v, const char *name, const apx_tensor *t,
                                  int64_t bhw[3]);
/* out may share memory with in only when allow_exact and then exactly. */
apx_status apx__vrequire_no_overlap(const apx__vstate *v, const char *out_name,
                                    const apx_tensor *out, const char *in_name,
                                    const apx_tensor *in, int allow_exact);

/* Same for the host op apx_tile_order. */
apx_status apx__validate_tile_order(const apx_tile_order_args *args);

#endif
