/* SPDX-License-Identifier: Apache-2.0 */
/* apx_tile_order: the host op that re-orders tile ids along a space-filling
 * or scan order (docs/ops.md, tile_order; tilepack does no ordering). */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <apexx/op_rules.h>

#include "internal.h"
#include "validate.h"

/* A sort key: a 128-bit primary (hi, lo) and the input position, which
 * makes qsort stable (docs/ops.md, tile_order: duplicates keep their input order). */
typedef struct order_entry {
  uint64_t hi, lo;
  int64_t pos;
  int64_t id;
} order_entry;

static int compare_entries(const void *pa, const void *pb) {
  const order_entry *a = pa, *b = pb;
  if (a->hi != b->hi)
    return a->hi < b->hi ? -1 : 1;
  if (a->lo != b->lo)
    return a->lo < b->lo ? -1 : 1;
  return a->pos < b->pos ? -1 : a->pos > b->pos;
}

/* docs/ops.md, tile_order: ids and out [K] i32|i64 host tensors of one dtype
 * (out may alias ids exactly), grid > 0, a known mode, every id in
 * [0, gh*gw). A host op of the core, so not in the op table. */
static apx_status validate(const apx_tile_order_args *args) {
  apx__vstate v = {"tile_order", {APX_DEVICE_HOST, 0}, 0, NULL};
  if (!args) return apx__vfail(&v, "args is [NULL]");
  APX__TRY(apx__vcheck_tensor(&v, "ids", args->ids, 1));
  APX__TRY(apx__vcheck_tensor(&v, "out", args->out, 1));
  if (v.site.device != APX_DEVICE_HOST)
    return apx__vfail(&v,
                      "ids and out are on [cuda:%d]; tile_order is a host op "
                      "and needs host tensors",
                      v.site.device_index);
  APX__TRY(apx__vrequire_ndim(&v, "ids", args->ids, 1, "[K]"));
  APX__TRY(apx__vrequire_dtypes(&v, "ids", args->ids, APX_DTYPES_INDEX));
  APX__TRY(apx__vrequire_shape(&v, "out", args->out, 1, args->ids->shape, "[K] of ids"));
  APX__TRY(apx__vrequire_same_dtype(&v, "out", args->out, "ids", args->ids));
  if (args->grid_h <= 0)
    return apx__vfail(&v, "grid_h = [%lld] must be > 0", (long long)args->grid_h);
  if (args->grid_w <= 0)
    return apx__vfail(&v, "grid_w = [%lld] must be > 0", (long long)args->grid_w);
  int64_t tiles;
  if (__builtin_mul_overflow(args->grid_h, args->grid_w, &tiles))
    return apx__vfail(&v, "grid_h * grid_w = [%lld * %lld] overflows int64",
                      (long long)args->grid_h, (long long)args->grid_w);
  if ((unsigned)args->mode > (unsigned)APX_ORDER_MULTI_DIRECTION)
    return apx__vfail(&v, "mode = [%d] is not an apx_order_mode (0..5)", (int)args->mode);
  APX__TRY(apx__vrequire_no_overlap(&v, "out", args->out, "ids", args->ids, 1));
  return apx__vrequire_values_in(&v, "ids", args->ids, 0, tiles - 1, NULL);
}

APX_API apx_status apx_tile_order(apx_context *ctx, const apx_tile_order_args *args) {
  apx__clear_error();
  /* a pure host computation, but like every call it needs a context */
  if (!ctx)
    return apx__error(APX_ERR_INVALID_ARG, "tile_order: ctx = [NULL]");
  apx_status st = validate(args);
  if (st != APX_OK)
    return st;

  const apx_tensor *ids = args->ids, *out = args->out;
  int64_t count = ids->shape[0];
  if (count == 0)
    return APX_OK;
  order_entry *entries = malloc((size_t)count * sizeof *entries);
  if (!entries)
    return apx__error(APX_ERR_NO_MEMORY, "tile_order: no memory to sort [%lld] ids",
                      (long long)count);
  uint64_t grid_h = (uint64_t)args->grid_h, grid_w = (uint64_t)args->grid_w;
  uint64_t hilbert_n = apx_hilbert_side(grid_h > grid_w ? grid_h : grid_w);
  for (int64_t i = 0; i < count; i++) {
    int64_t id = ids->dtype == APX_DTYPE_I32 ? ((const int32_t *)ids->data)[i]
                                             : ((const int64_t *)ids->data)[i];
    entries[i].pos = i;
    entries[i].id = id;
    apx_order_key(args->mode, (uint64_t)id, grid_h, grid_w, hilbert_n, &entries[i].hi,
                  &entries[i].lo);
  }
  qsort(entries, (size_t)count, sizeof *entries, compare_entries);
  /* Every id was read above, so writing out is safe when it aliases ids. */
  for (int64_t i = 0; i < count; i++) {
    if (out->dtype == APX_DTYPE_I32)
      ((int32_t *)out->data)[i] = (int32_t)entries[i].id;
    else
      ((int64_t *)out->data)[i] = entries[i].id;
  }
  free(entries);
  return APX_OK;
}

APX_API int apx_order_mode_from_name(const char *name) {
  static const struct {
    const char *name;
    apx_order_mode mode;
  } names[] = {
      {"hilbert", APX_ORDER_HILBERT}, {"multi_direction", APX_ORDER_MULTI_DIRECTION},
      {"l2r", APX_ORDER_L2R},         {"lr", APX_ORDER_L2R},
      {"scan_lr", APX_ORDER_L2R},     {"r2l", APX_ORDER_R2L},
      {"rl", APX_ORDER_R2L},          {"scan_rl", APX_ORDER_R2L},
      {"u2d", APX_ORDER_U2D},         {"ud", APX_ORDER_U2D},
      {"scan_ud", APX_ORDER_U2D},     {"d2u", APX_ORDER_D2U},
      {"du", APX_ORDER_D2U},          {"scan_du", APX_ORDER_D2U},
  };
  if (!name)
    return -1;
  /* docs/ops.md, tile_order: names are matched trimmed and case-insensitively. */
  while (*name && isspace((unsigned char)*name))
    name++;
  size_t length = strlen(name);
  while (length > 0 && isspace((unsigned char)name[length - 1]))
    length--;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strlen(names[i].name) == length && strncasecmp(name, names[i].name, length) == 0)
      return (int)names[i].mode;
  return -1;
}
