/* SPDX-License-Identifier: Apache-2.0 */
/* The op table: every op's descriptor by id (op_table.h), gathered from
 * APX_OP_MAP so that an op added there without a descriptor fails to link. */
#include "config.h"

#include <string.h>

#include "internal.h"
#include "op_table.h"

static const apx__op *const ops[APX_OP_COUNT] = {
#define OP_ENTRY_(upper, lower) [APX_OP_##upper] = &apx__op_##lower,
    APX_OP_MAP(OP_ENTRY_)
#undef OP_ENTRY_
};

const apx__op *apx__op_get(apx_op_id op) {
  if ((unsigned)op >= (unsigned)APX_OP_COUNT)
    return NULL;
  return ops[op];
}

APX_API const apx_op_desc *apx_op_describe(apx_op_id op) {
  const apx__op *o = apx__op_get(op);
  return o ? &o->desc : NULL;
}

const apx_tensor *apx__op_tensor(const apx_op_desc *desc, const void *args, int arg) {
  if (arg < 0 || arg >= desc->arg_count)
    return NULL;
  const apx_op_arg *a = &desc->args[arg];
  if (a->kind != APX_ARG_INPUT && a->kind != APX_ARG_INDEX && a->kind != APX_ARG_OUTPUT)
    return NULL;
  const apx_tensor *t;
  memcpy(&t, (const char *)args + a->offset, sizeof t);
  return t;
}
