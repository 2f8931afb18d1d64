/* SPDX-License-Identifier: Apache-2.0 */
/* Argument validation shared by every backend (docs/ops.md, Errors and each
 * op's section; docs/architecture.md, The op table).
 *
 * apx__validate (validate.c) walks an op's descriptor (op_table.h) for what
 * every op shares and calls the op's hooks (libapexx/op/NAME.c) for its own
 * rules; both use the checks below (validate_checks.c), so every message
 * has one form: "op: what is wrong [bad value]". */
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

/* ---- the checks (validate_checks.c) ----
 * The state carries the op's name and the device of the first tensor seen.
 * Every check returns APX_OK or APX_ERR_INVALID_ARG with the message set. */
typedef struct apx__vstate {
  const char *op; /* op name, first word of every message */
  apx__site site; /* device of the first tensor seen */
  int have_site;
  const char *site_name; /* the argument that fixed the site */
} apx__vstate;

/* "op: <formatted text>" with APX_ERR_INVALID_ARG. */
apx_status apx__vfail(const apx__vstate *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Return from the enclosing function when a check fails. */
#define APX__TRY(expr)                                                                             \
  do {                                                                                             \
    apx_status try_status_ = (expr);                                                               \
    if (try_status_ != APX_OK)                                                                     \
      return try_status_;                                                                          \
  } while (0)

/* Well-formed tensor (ndim, shape, dtype, device, sizes, data, alignment) on
 * the call's one device; t may be NULL only when !required. */
apx_status apx__vcheck_tensor(apx__vstate *v, const char *name, const apx_tensor *t, int required);
/* The tensor's rank is ndim ("NAME must be LAYOUT, got ndim [n]"). */
apx_status apx__vrequire_ndim(const apx__vstate *v, const char *name, const apx_tensor *t, int ndim,
                              const char *layout);
apx_status apx__vrequire_shape(const apx__vstate *v, const char *name, const apx_tensor *t,
                               int ndim, const int64_t *shape, const char *layout);
/* a.shape[da] == b.shape[db], `what` saying which dimension this is. */
apx_status apx__vrequire_dim_match(const apx__vstate *v, const char *name_a, const apx_tensor *a,
                                   int da, const char *name_b, const apx_tensor *b, int db,
                                   const char *what);
apx_status apx__vrequire_same_ndim(const apx__vstate *v, const char *name, const apx_tensor *t,
                                   const char *ref_name, const apx_tensor *ref);
/* The dtype class (docs/ops.md, Errors: "NAME dtype [x] must be ..."). */
apx_status apx__vrequire_dtypes(const apx__vstate *v, const char *name, const apx_tensor *t,
                                apx_dtype_class dtypes);
apx_status apx__vrequire_same_dtype(const apx__vstate *v, const char *name, const apx_tensor *t,
                                    const char *ref_name, const apx_tensor *ref);
/* A proxy or alpha map: [B,1,H,W] or [B,H,W]; its (B, H, W) in bhw. */
apx_status apx__vrequire_gate_map(const apx__vstate *v, const char *name, const apx_tensor *t,
                                  int64_t bhw[3]);
/* tile > 0 and map's H, W ([B,C,H,W]) divisible by it (docs/ops.md,
 * tilepack); tile_what names the tile in the message. */
apx_status apx__vrequire_tile_grid(const apx__vstate *v, const char *tile_what, int64_t tile,
                                   const char *map_name, const apx_tensor *map);
/* out may share memory with in only when allow_exact and then exactly;
 * NULL out or in: nothing to check. */
apx_status apx__vrequire_no_overlap(const apx__vstate *v, const char *out_name,
                                    const apx_tensor *out, const char *in_name,
                                    const apx_tensor *in, int allow_exact);
/* Every element of the i32|i64 tensor t in [lo, hi]; `note` (may be NULL)
 * is appended to the message. Reads t's memory (a host tensor). */
apx_status apx__vrequire_values_in(const apx__vstate *v, const char *name, const apx_tensor *t,
                                   int64_t lo, int64_t hi, const char *note);

/* ---- the indexing ops (docs/ops.md, Indexing ops) ---- */
/* Wrap a possibly negative dim into [0, ndim) of t. Indexing ops need ndim
 * >= 1: a 0-d tensor has no dimension to index (torch would treat it as [1]). */
apx_status apx__vwrap_dim(const apx__vstate *v, int dim, const char *name, const apx_tensor *t,
                          int *wrapped);
/* torch's gather rule: index.size(d) <= ref.size(d) for every d != dim
 * (every d with include_dim). */
apx_status apx__vrequire_index_fits(const apx__vstate *v, const apx_tensor *index,
                                    const char *ref_name, const apx_tensor *ref, int dim,
                                    int include_dim);
/* Whether every value of index tensor t (i32 or i64, host) lies in [lo, hi],
 * with no text formed: the fast path of apx__vrequire_values_in. */
int apx__values_in(const apx_tensor *t, int64_t lo, int64_t hi);
/* The values an index along `dim` (possibly negative) of validated ref may
 * take, [0, ref.shape[dim] - 1], and where that comes from in why
 * ("src.shape[1] = [4]"): an op's index_range. Returns 1. */
int apx__index_dim_range(const apx_tensor *ref, const char *ref_name, int dim, int64_t *lo,
                         int64_t *hi, char *why, size_t why_size);

/* ---- small facts and texts ---- */
/* Element count of a tensor apx__vcheck_tensor accepted. */
int64_t apx__vnumel(const apx_tensor *t);
/* Element i of an i32|i64 tensor. */
int64_t apx__vindex_at(const apx_tensor *t, int64_t i);
/* "[2,3,8,8]" ("[]" for ndim 0). */
const char *apx__vshape_text(char *buf, size_t size, int ndim, const int64_t *shape);
/* "[0][3]": the multi-index of flat element `flat` of t. */
const char *apx__vposition_text(char *buf, size_t size, const apx_tensor *t, int64_t flat);
/* A double as "%g" when that reads back exactly, else with 17 digits, so a
 * message never shows 1.0000001 as [1]. */
const char *apx__vdouble_text(char *buf, size_t size, double x);

#endif
