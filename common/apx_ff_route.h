/* SPDX-License-Identifier: Apache-2.0 */
/* The FF path's host routing (docs/ff_infer.md, Routing) for the in-tree
 * backends: common/apx_ff_route.c, built as a static library
 * (common/libapx_ffroute.la) that a backend routing on the host links, so
 * that a frame needs no call into the core. It follows the rules of
 * include/apexx/ff_backend.h (the tile cost, the budgets' slack), as the
 * cuda backend's device router does. */
#ifndef APX_FF_ROUTE_H
#define APX_FF_ROUTE_H

#include <apexx/ff_backend.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The routing of one call, into arrays its caller owns (each may be NULL). */
typedef struct apx_ff_route {
  int64_t *l0_count;   /* [B] */
  int64_t *l1_count;   /* [B] */
  double *b1_spent;    /* [B] */
  double *b2_spent;    /* [B] */
  int64_t *l0_greedy;  /* [B,kmax_l0] greedy order, -1 padded */
  int64_t *l0_hilbert; /* [B,kmax_l0] the same ids in Hilbert order, -1
                          padded */
  int64_t *l1_hilbert; /* [B,kmax_l1] L1 ids in Hilbert order, -1 padded */
  /* The pack and scan order of the frame (docs/ff_infer.md, Options):
   * l0_greedy's ids and l1_hilbert's ids each stably sorted by the key of
   * args->order_mode (apx_tile_order's), -1 padded; with APX_ORDER_HILBERT
   * they equal l0_hilbert and l1_hilbert. */
  int64_t *l0_ordered; /* [B,kmax_l0] */
  int64_t *l1_ordered; /* [B,kmax_l1] */
} apx_ff_route;

/* Route a validated call whose utilities are host tensors into *route:
 * per batch row, a greedy L0 selection by utility under budget b1, then a
 * split stage that takes L0 parents by split utility under budget b2, each
 * bringing its four quadtree children (the L1 tiles); float64, ties by the
 * smaller id; both id lists also in Hilbert order and in the order of
 * args->order_mode. Failure (arguments not
 * validated, device utilities, no memory for the sort): the status, with
 * the message given to set_error (a backend passes its services'). */
apx_status apx_ff_route_host(const apx_ff_infer_args *args, apx_ff_route *route,
                             apx_status (*set_error)(apx_status status, const char *fmt, ...));

#ifdef __cplusplus
}
#endif
#endif /* APX_FF_ROUTE_H */
