/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda backend's index checks (validate.cu, docs/ops.md "Validation
 * modes"): their bounds, the records a check reads and writes on the
 * device (a check's description, its result, the pre-pass's slots, the
 * device's deferred error record, an in-kernel check), and the host calls
 * an op makes to check its indices. The device side of a verdict:
 * cuda_check_device.cuh. */
#ifndef APX_CUDA_CHECK_H
#define APX_CUDA_CHECK_H

#include <apexx/backend.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "cuda_geom.h"

struct cuda_state;

/* Check slots per device, for the pre-pass (validate.cu): each pre-pass
 * takes the next one, round robin, for its blocks' partial results and its
 * verdict. A slot is reused only CUDA_CHECK_SLOTS pre-passes later, so
 * calls in flight on different streams never share one in practice. Known
 * limit: CUDA graphs hold the slots their capture took, so two graphs
 * captured CUDA_CHECK_SLOTS or more pre-passes apart may hold the same
 * slot; replayed at the same time on two streams they could mix their
 * verdicts (nothing waits on a slot, so nothing can hang). Checks inside
 * an op's kernel (cuda_check_own, cuda_block_check) use no slot. */
#define CUDA_CHECK_SLOTS 128
/* The check kernel's grid is capped so that its per-block partial results
 * fit in the slot (grid-stride loops cover any size). */
#define CUDA_CHECK_MAX_BLOCKS 1024
#define CUDA_CHECK_THREADS 256

/* ---- in-kernel checks of small indices ----------------------------------- */

/* A small index (validate=device) of an op whose blocks must agree (an
 * aliased output, uniqueness, the levels' span) is checked by the main
 * kernel itself: every block checks all of it before its first store and
 * stores nothing when it is bad, so the call needs no pre-pass launch and
 * no flag read, and an aliased output stays untouched; block (0,0,0)
 * publishes the failure. The bounds keep each block's share small:
 * a few loads a thread, from L2 after the first block. */
#define CUDA_INLINE_CHECK_MAX 1024  /* entries (and levels) */
#define CUDA_INLINE_UNIQUE_MAX 64   /* row length of a uniqueness check */

/* ---- device-side check records --------------------------------------- */

/* What a check found wrong (kinds of cuda_check_result.kind). */
enum cuda_check_kind {
  CUDA_BAD_NONE = 0,
  CUDA_BAD_RANGE = 1,      /* an id/index value outside [lo, hi] */
  CUDA_BAD_ORIGIN = 2,     /* an origin pair outside the image */
  CUDA_BAD_DUPLICATE = 3,  /* a repeated id in a batch row (require_unique) */
  CUDA_BAD_LEVEL_SPAN = 4, /* levels too far apart for the int32 key */
  CUDA_BAD_NAN = 5         /* a NaN float (ff_infer's utilities) */
};

/* One index tensor to check, passed by value to the check kernel. */
struct cuda_check_desc {
  int op;              /* apx_op_id, for the message */
  char arg[16];        /* argument name: "idx", "index", "origins" */
  const void *data;    /* device pointer; NULL = nothing to check */
  int is64;            /* i64 (else i32) */
  int ndim;            /* index tensor's ndim and shape, for the message */
  int64_t shape[APX_MAX_DIMS];
  int64_t count;       /* entries: elements, or (y0,x0) pairs for origins */
  int pairs;           /* 1: entries are (y0, x0) pairs (origins) */
  int64_t lo, hi;      /* inclusive range of a value (of y0 for pairs) */
  int64_t lo2, hi2;    /* inclusive range of x0 for pairs */
  int check_range;     /* 0 in validate=off: only statistics below */
  int64_t unique_row;  /* > 0: ids must be unique within rows of this length */
  int64_t const_row;   /* > 0: note whether rows of this length are constant */
  cuda_fastdiv row_div; /* const_row, when count < 2^31 (small_rows) */
  int small_rows;
  /* levels (tileunpack): min/max over the tensor, span checked against the
   * int32 priority key (docs/ops.md, tileunpack (priority)) when check_range. */
  const void *levels;
  int levels_is64;
  int64_t levels_count;
  int order_bits;
  int64_t key_k;       /* K, for the key bound */
  /* the call's id on its device (cuda_check_stamp): the error record
   * keeps one call's failure; 0 for a check with no id (ff_infer) */
  unsigned long long call;
  /* unique_row with a map (cuda_check_run sets it for few rows over a
   * small id range): [rows, hi - lo + 1] ints holding the least in-row
   * position of each id, so a repeat is one lookup instead of a scan of
   * the row's earlier entries */
  const int *unique_map;
};

/* A check's outcome, in the slot (EAGER reads it) and, in DEVICE mode, in
 * the per-device deferred record (the first failure since the last sync). */
struct cuda_check_result {
  int bad;              /* 1 when the checked call must write nothing */
  int kind;             /* cuda_check_kind */
  unsigned long long pos; /* linear position of the first bad entry */
  long long value[2];   /* its value (both components for pairs) */
  long long other;      /* duplicate: earlier position of the same id */
  long long lmin, lmax; /* levels statistics (0, 0 when none) */
  long long kat;        /* the largest k whose level is lmax */
  int rows_vary;        /* const_row: some row is not constant */
};

struct cuda_check_slot {
  cuda_check_result result;
  unsigned int blocks_done;
  unsigned long long partial_pos[CUDA_CHECK_MAX_BLOCKS];
  long long partial_lmin[CUDA_CHECK_MAX_BLOCKS];
  long long partial_lmax[CUDA_CHECK_MAX_BLOCKS];
  long long partial_kat[CUDA_CHECK_MAX_BLOCKS]; /* largest k at lmax */
  int partial_rows_vary[CUDA_CHECK_MAX_BLOCKS];
};

/* The deferred error of one device (validate=device): the first failing
 * call since the last sync holds it (`call`), and among that call's
 * publishers the least bad position wins (`pos_inv`, an atomic max of
 * ~position), so the message names the call's first bad entry in
 * row-major order whichever blocks saw bad entries, in whatever order.
 * All zero between syncs. */
struct cuda_error_record {
  unsigned long long call;    /* the holding call's desc.call + 1 (0: none) */
  unsigned long long pos_inv; /* ~(least bad position published), 1: a
                               * failure without a position (levels span) */
  int lock;             /* guards result and desc while one is written */
  int ready;            /* set once result and desc are complete */
  cuda_check_result result;
  cuda_check_desc desc; /* the failing check (pointers are stale) */
};

/* ---- checks inside an op's kernel (validate=device) --------------------- */

/* An op whose kernel checks the index entries it reads itself gets one of
 * these (cuda_check_own; record NULL: no check, e.g. validate=off or
 * eager, whose pre-pass has run). A kernel of an out-of-place call checks
 * only what it reads, clamps what it reads into range, and publishes the
 * least bad position it saw (cuda_warp_publish): no block waits for
 * another, and its stores happen or not (the output's values are
 * unspecified after a failure, docs/ops.md, Validation modes). */
struct cuda_inline_check {
  cuda_error_record *record; /* NULL: nothing to check in the kernel */
  cuda_check_desc desc;
};

/* ---- index checks (validate.cu) ---------------------------------------- */

/* The outcome of launching a call's checks. */
struct cuda_checked {
  const int *bad;                 /* pass to main kernels (NULL: none) */
  const long long *lmin;          /* device pointer to the levels minimum */
  const int *rows_vary;           /* device pointer to the row flag */
  cuda_check_slot *slot;          /* the slot used (NULL: no check ran) */
};

/* Fill the common fields of a check description. */
void cuda_check_init(cuda_check_desc *d, apx_op_id op, const char *arg,
                     const apx_tensor *index);

/* The device's next check slot (round robin, CUDA_CHECK_SLOTS). */
cuda_check_slot *cuda_check_take_slot(cuda_state *st, int device_index);

/* Run the pre-pass for `desc` on the stream according to the validate
 * mode: DEVICE launches the check (the failure lands in the device record
 * for the next sync), EAGER launches it, waits and returns
 * APX_ERR_INVALID_ARG with the message, OFF skips the range checks but
 * still computes statistics that `need_stats` asks for (levels minimum,
 * row flag). Out: *out for the main kernels. */
apx_status cuda_check_run(cuda_state *st, int device_index, cudaStream_t stream,
                          cuda_check_desc *desc, int need_stats,
                          cuda_checked *out);

/* cuda_check_run for one index argument: its values in [lo, hi], and with
 * unique_row > 0 unique within rows of that length; for kernels that read
 * in bounds whatever the values (they compare ids or skip bad ones), so
 * the check's outcome is all they need. */
static inline apx_status cuda_check_index_values(cuda_state *st, int device_index,
                                                 cudaStream_t stream, apx_op_id op,
                                                 const char *arg, const apx_tensor *index,
                                                 int64_t lo, int64_t hi, int64_t unique_row) {
  cuda_check_desc d;
  cuda_check_init(&d, op, arg, index);
  d.lo = lo;
  d.hi = hi;
  if (unique_row > 0) d.unique_row = unique_row;
  cuda_checked chk;
  memset(&chk, 0, sizeof chk);
  return cuda_check_run(st, device_index, stream, &d, 0, &chk);
}

/* Wait for the stream and read the check's row flag (validate=eager only:
 * scatter_add then launches one path; otherwise the device decides).
 * Returns the flag in *rows_vary. */
apx_status cuda_check_read_rows_vary(cuda_state *st, cudaStream_t stream,
                                     const cuda_checked *chk, int *rows_vary);

/* Give `desc` the next call id of the device (desc->call): every check of
 * one call, pre-pass or in a kernel, carries the same one. */
void cuda_check_stamp(cuda_state *st, int device_index, cuda_check_desc *desc);

/* validate=device: fill *ic (stamped, the range checked) so that the op's
 * kernels check the entries they read (cuda_warp_publish) and return 1.
 * Otherwise ic->record = NULL and 0: eager runs cuda_check_run first, off
 * checks nothing. For out-of-place outputs only: an aliased output must
 * stay untouched, which takes every block's verdict before any store
 * (cuda_check_run, cuda_block_check). */
int cuda_check_own(cuda_state *st, int device_index, const cuda_check_desc *desc,
                   cuda_inline_check *ic);

/* validate=device and an index within the in-kernel bounds: fill *ic so
 * that the main kernel checks it (cuda_block_check) and return 1; no
 * pre-pass is launched then. Otherwise ic->record = NULL, return 0: run
 * cuda_check_run. */
int cuda_check_inline(cuda_state *st, int device_index, const cuda_check_desc *desc,
                      cuda_inline_check *ic);

/* Format a check failure as the user message ("gather: index[3][1] =
 * [-1] is outside [0, 7]") into buf. */
void cuda_check_message(const cuda_check_desc *d, const cuda_check_result *r,
                        char *buf, size_t size);

/* Read, report once and clear the device's deferred error (sync). */
apx_status cuda_check_take_deferred(cuda_state *st, int device_index,
                                    cudaStream_t stream);

#endif /* APX_CUDA_CHECK_H */
