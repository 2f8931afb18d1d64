/* Argument validation shared by every backend (spec/ops.md 2.A, 3, 4.A,
 * 5.A, 6.A, 7, 10; DESIGN.md "Dispatch and fallback"). */
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

/* Same for the host op apx_tile_order. */
apx_status apx__validate_tile_order(const apx_tile_order_args *args);

#endif
