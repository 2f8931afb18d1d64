/* SPDX-License-Identifier: Apache-2.0 */
/* The op table (docs/architecture.md, The op table): one descriptor per op,
 * defined in the op's own file libapexx/op/NAME.c as apx__op_NAME, gathered
 * by op_table.c from APX_OP_MAP. The public part (apx_op_desc) is what
 * apx_op_describe hands out; the hooks below are the op's own validation
 * rules, called by apx__validate (validate.c) between the checks it runs
 * for every op from the descriptor:
 *   1. each tensor's well-formedness and device, required handles present
 *      (arguments in order; those `ignores` names are skipped throughout);
 *   2. the fixed ranks (apx_op_arg.ndim);
 *   3. check: the op's own rules on inputs, options and enums;
 *   4. the inputs' dtype rules (class, then same_dtype_as);
 *   5. each output's shape (output_shape) and dtype rules;
 *   6. aliasing: each output against every input, then earlier outputs,
 *      exact aliases only where alias_of allows;
 *   7. host tensors only: each index argument's values in index_range,
 *      then check_values (the op's own value rules).
 * The first failure wins. */
#ifndef APX_CORE_OP_TABLE_H
#define APX_CORE_OP_TABLE_H

#include <apexx/apexx.h>

#include "validate.h"

typedef struct apx__op {
  apx_op_desc desc;
  /* 1 when the op does not read argument `arg` with these options (an
   * argument it ignores is not validated); NULL: it reads all. */
  int (*ignores)(const void *args, int arg);
  /* Step 3 and step 7's own value rules (NULL: none). */
  apx_status (*check)(apx__vstate *v, const void *args);
  apx_status (*check_values)(apx__vstate *v, const void *args);
  /* Why a call with these args waits for the device whatever the validate
   * mode (ff_infer's stats), or NULL: such a call cannot be captured. NULL
   * hook: never. */
  const char *(*waits_for_device)(const void *args);
} apx__op;

/* The op's descriptor and hooks; NULL for an unknown id. */
const apx__op *apx__op_get(apx_op_id op);

#define APX__OP_DECLARE_(upper, lower) extern const apx__op apx__op_##lower;
APX_OP_MAP(APX__OP_DECLARE_)
#undef APX__OP_DECLARE_

/* ---- helpers for the op files ---- */
/* The tensor argument `arg` of args (NULL when absent or not a tensor). */
const apx_tensor *apx__op_tensor(const apx_op_desc *desc, const void *args, int arg);
/* shape[d] of t, 0 when t is NULL or has fewer dimensions (output shapes of
 * unvalidated args). */
static inline int64_t apx__dim_or_0(const apx_tensor *t, int d) {
  return t && d >= 0 && d < t->ndim && t->ndim <= APX_MAX_DIMS ? t->shape[d] : 0;
}
/* Copy t's shape into *ndim/shape (ndim 0 when t is NULL or malformed). */
static inline void apx__shape_of(const apx_tensor *t, int *ndim, int64_t shape[APX_MAX_DIMS]) {
  *ndim = t && t->ndim > 0 && t->ndim <= APX_MAX_DIMS ? t->ndim : 0;
  for (int d = 0; d < *ndim; d++)
    shape[d] = t->shape[d];
}

/* Rules an op shares with its backward op, defined in the forward's file. */
/* tileunpack.c: the placement and priority checks from mode on (k_count < 0:
 * K from idx or origins; k_rule: the shape rule named in a mismatch, NULL for
 * the plain one), and the host value checks. */
apx_status apx__tileunpack_check_placement(apx__vstate *v, const apx_tensor *map, int64_t k_count,
                                           const char *k_rule, const apx_tensor *idx,
                                           const apx_tensor *origins, const apx_tensor *levels,
                                           int mode, double blend_alpha,
                                           int assume_priority_sorted);
apx_status apx__tileunpack_check_values(apx__vstate *v, const apx_tensor *map, int64_t tile,
                                        const apx_tensor *origins, const apx_tensor *levels);
/* fused_pack_op_unpack.c: every row of idx [B,K] holds distinct ids. */
apx_status apx__require_unique_rows(const apx__vstate *v, const char *name,
                                    const apx_tensor *idx);

/* An argument entry: tensors and options. */
#define APX__TENSOR(type, field, kind_, optional_, ndim_, dtypes_, same_as_, alias_of_, layout_)   \
  {                                                                                                \
    .name = #field, .kind = (kind_), .offset = offsetof(type, field), .optional = (optional_),     \
    .ndim = (ndim_), .dtypes = (dtypes_), .same_dtype_as = (same_as_), .alias_of = (alias_of_),    \
    .layout = (layout_)                                                                            \
  }
#define APX__OPTION(type, field, kind_)                                                            \
  {                                                                                                \
    .name = #field, .kind = (kind_), .offset = offsetof(type, field), .same_dtype_as = -1,         \
    .alias_of = -1                                                                                 \
  }
#define APX__ENUM(type, field, names_)                                                             \
  {                                                                                                \
    .name = #field, .kind = APX_ARG_ENUM, .offset = offsetof(type, field), .same_dtype_as = -1,    \
    .alias_of = -1, .enum_names = (names_),                                                        \
    .enum_count = (int)(sizeof(names_) / sizeof(names_)[0])                                        \
  }
#define APX__POINTER(type, field, kind_, optional_, type_name_)                                    \
  {                                                                                                \
    .name = #field, .kind = (kind_), .offset = offsetof(type, field), .optional = (optional_),     \
    .same_dtype_as = -1, .alias_of = -1, .type_name = (type_name_)                                 \
  }
#define APX__COUNT(array) ((int)(sizeof(array) / sizeof(array)[0]))
/* The descriptor's identity: id and name from APX_OP_MAP's pair, the args
 * struct, its ARGS_INIT values, the argument list, the capability bits and
 * the one-line summary. */
#define APX__OP_DESC(upper, lower, args_type, init_, args_, caps_, summary_)                       \
  .size = sizeof(apx_op_desc), .id = APX_OP_##upper, .name = #lower, .summary = (summary_),        \
  .args_size = sizeof(args_type), .args_init = &(init_), .arg_count = APX__COUNT(args_),           \
  .args = (args_), .caps = (caps_)

#endif
