/* SPDX-License-Identifier: Apache-2.0 */
/* Argument validation of every op, run in the core before any backend
 * (docs/ops.md, Errors and each op's section; docs/architecture.md,
 * Dispatch). apx__validate walks the op's descriptor (op_table.h, in the
 * order given there) for what every op shares and calls the op's hooks for
 * its own rules. The first failure wins; its message names the op, the
 * argument, the position and the bad value in brackets. Nothing here reads
 * or writes output memory. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "op_table.h"
#include "validate.h"

/* The tensor argument `arg` as the op reads it: NULL when absent or
 * ignored with these options. */
static const apx_tensor *tensor_arg(const apx__op *o, const void *args, int arg) {
  if (o->ignores && o->ignores(args, arg))
    return NULL;
  return apx__op_tensor(&o->desc, args, arg);
}

static int is_tensor(apx_arg_kind kind) {
  return kind == APX_ARG_INPUT || kind == APX_ARG_INDEX || kind == APX_ARG_OUTPUT;
}

/* 1. Each tensor well-formed on the call's one device, then the required
 * handles present. */
static apx_status check_present(apx__vstate *v, const apx__op *o, const void *args) {
  const apx_op_desc *d = &o->desc;
  for (int i = 0; i < d->arg_count; i++) {
    const apx_op_arg *a = &d->args[i];
    if (!is_tensor(a->kind) || (o->ignores && o->ignores(args, i)))
      continue;
    APX__TRY(apx__vcheck_tensor(v, a->name, apx__op_tensor(d, args, i), !a->optional));
  }
  for (int i = 0; i < d->arg_count; i++) {
    const apx_op_arg *a = &d->args[i];
    const void *handle;
    if (a->kind != APX_ARG_HANDLE || a->optional)
      continue;
    memcpy(&handle, (const char *)args + a->offset, sizeof handle);
    if (!handle)
      return apx__vfail(v, "%s is required, got [NULL]", a->name);
  }
  return APX_OK;
}

/* 2. The fixed ranks of inputs. */
static apx_status check_ranks(const apx__vstate *v, const apx__op *o, const void *args) {
  const apx_op_desc *d = &o->desc;
  for (int i = 0; i < d->arg_count; i++) {
    const apx_op_arg *a = &d->args[i];
    const apx_tensor *t = tensor_arg(o, args, i);
    if (t && a->kind != APX_ARG_OUTPUT && a->ndim > 0)
      APX__TRY(apx__vrequire_ndim(v, a->name, t, a->ndim, a->layout));
  }
  return APX_OK;
}

/* The dtype class, then the dtype of same_dtype_as when that is present. */
static apx_status check_dtype(const apx__vstate *v, const apx__op *o, const void *args, int arg) {
  const apx_op_arg *a = &o->desc.args[arg];
  const apx_tensor *t = tensor_arg(o, args, arg);
  APX__TRY(apx__vrequire_dtypes(v, a->name, t, a->dtypes));
  const apx_tensor *ref = tensor_arg(o, args, a->same_dtype_as);
  if (ref)
    APX__TRY(apx__vrequire_same_dtype(v, a->name, t, o->desc.args[a->same_dtype_as].name, ref));
  return APX_OK;
}

/* 4. The inputs' dtype rules. */
static apx_status check_input_dtypes(const apx__vstate *v, const apx__op *o, const void *args) {
  for (int i = 0; i < o->desc.arg_count; i++)
    if (o->desc.args[i].kind != APX_ARG_OUTPUT && tensor_arg(o, args, i))
      APX__TRY(check_dtype(v, o, args, i));
  return APX_OK;
}

/* 5. Each output's shape from the inputs (when the op derives it) and its
 * dtype rules. */
static apx_status check_outputs(const apx__vstate *v, const apx__op *o, const void *args) {
  const apx_op_desc *d = &o->desc;
  for (int i = 0; i < d->arg_count; i++) {
    const apx_tensor *t = tensor_arg(o, args, i);
    if (d->args[i].kind != APX_ARG_OUTPUT || !t)
      continue;
    int ndim = 0;
    int64_t shape[APX_MAX_DIMS];
    const char *rule = d->output_shape ? d->output_shape(args, i, &ndim, shape) : NULL;
    if (rule)
      APX__TRY(apx__vrequire_shape(v, d->args[i].name, t, ndim, shape, rule));
    APX__TRY(check_dtype(v, o, args, i));
  }
  return APX_OK;
}

/* 6. No output overlaps an input or an earlier output, but for the exact
 * alias its alias_of allows. */
static apx_status check_aliasing(const apx__vstate *v, const apx__op *o, const void *args) {
  const apx_op_desc *d = &o->desc;
  for (int i = 0; i < d->arg_count; i++) {
    const apx_tensor *out = tensor_arg(o, args, i);
    if (d->args[i].kind != APX_ARG_OUTPUT || !out)
      continue;
    for (int pass = 0; pass < 2; pass++) /* inputs, then earlier outputs */
      for (int j = 0; j < (pass ? i : d->arg_count); j++) {
        const apx_op_arg *other = &d->args[j];
        if (!is_tensor(other->kind) || (other->kind == APX_ARG_OUTPUT) != (pass == 1))
          continue;
        APX__TRY(apx__vrequire_no_overlap(v, d->args[i].name, out, other->name,
                                          tensor_arg(o, args, j), d->args[i].alias_of == j));
      }
  }
  return APX_OK;
}

/* 7. The values of host index tensors, then the op's own value rules. */
static apx_status check_host_values(apx__vstate *v, const apx__op *o, const void *args) {
  const apx_op_desc *d = &o->desc;
  for (int i = 0; i < d->arg_count && d->index_range; i++) {
    const apx_tensor *t = tensor_arg(o, args, i);
    int64_t lo, hi;
    char why[120] = "", note[124];
    /* the range alone first: the text only where a value is outside it */
    if (d->args[i].kind != APX_ARG_INDEX || !t || !d->index_range(args, i, &lo, &hi, why, 0) ||
        apx__values_in(t, lo, hi))
      continue;
    why[0] = '\0';
    d->index_range(args, i, &lo, &hi, why, sizeof why);
    snprintf(note, sizeof note, "(%s)", why);
    APX__TRY(apx__vrequire_values_in(v, d->args[i].name, t, lo, hi, why[0] ? note : NULL));
  }
  return o->check_values ? o->check_values(v, args) : APX_OK;
}

apx_status apx__validate(apx_op_id op, const void *args, apx__site *site) {
  const apx__op *o = apx__op_get(op);
  if (!o)
    return apx__error(APX_ERR_INVALID_ARG, "apexx: op id [%d] is not an op", (int)op);
  apx__vstate v = {o->desc.name, {APX_DEVICE_HOST, 0}, 0, NULL};
  if (!args)
    return apx__vfail(&v, "args is [NULL]");
  APX__TRY(check_present(&v, o, args));
  APX__TRY(check_ranks(&v, o, args));
  if (o->check)
    APX__TRY(o->check(&v, args));
  APX__TRY(check_input_dtypes(&v, o, args));
  APX__TRY(check_outputs(&v, o, args));
  APX__TRY(check_aliasing(&v, o, args));
  if (v.have_site && v.site.device == APX_DEVICE_HOST)
    APX__TRY(check_host_values(&v, o, args));
  if (site)
    *site = v.site;
  return APX_OK;
}
