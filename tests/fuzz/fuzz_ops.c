/* SPDX-License-Identifier: Apache-2.0 */
/* Op argument validation on host tensors: the input picks an op, up to 8
 * host tensors (dtype, ndim and shape, some of them invalid or huge, data
 * from the input), which argument points at which tensor (or NULL, or the
 * same one twice) and the scalar arguments; the call goes to the cpu
 * backend. Rejected calls must return an error; accepted ones run the
 * kernel on buffers of exactly the declared size (a shape above 64 KiB gets
 * no buffer: data NULL, which validation must reject). */
#include "fuzz_common.h"

typedef struct reader {
  const uint8_t *p;
  size_t n;
} reader;

static uint8_t byte(reader *r) {
  if (!r->n) return 0;
  r->n--;
  return *r->p++;
}

static uint64_t word(reader *r) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)byte(r) << (8 * i);
  return v;
}

/* small values mostly, any int64 now and then */
static int64_t small_int(reader *r) {
  uint8_t b = byte(r);
  if (b >= 250) return (int64_t)word(r);
  return (int64_t)(b % 20) - 2;
}

static double scalar(reader *r) {
  uint8_t b = byte(r);
  if (b >= 240) {
    uint64_t w = word(r);
    double d;
    memcpy(&d, &w, sizeof d);
    return d;
  }
  return (b % 17) * 0.125 - 0.5;
}

#define POOL 8
static apx_tensor pool[POOL];
static void *buffers[POOL];

static void make_tensor(reader *r, int i) {
  apx_tensor *t = &pool[i];
  memset(t, 0, sizeof *t);
  t->dtype = (apx_dtype)(byte(r) % (APX_DTYPE_COUNT + 1));
  t->device = APX_DEVICE_HOST;
  t->ndim = (int)(byte(r) % (APX_MAX_DIMS + 2));
  if (byte(r) == 255) t->ndim = -1;
  int64_t numel = 1;
  int overflow = 0;
  for (int d = 0; d < t->ndim && d < APX_MAX_DIMS; d++) {
    uint8_t b = byte(r);
    t->shape[d] = b >= 252 ? (int64_t)word(r) : (int64_t)(b % 9);
    if (t->shape[d] < 0 || __builtin_mul_overflow(numel, t->shape[d], &numel)) overflow = 1;
  }
  size_t es = apx_dtype_size(t->dtype);
  uint8_t fill = byte(r);
  if (!overflow && es && numel >= 0 && (uint64_t)numel * es <= 65536) {
    size_t bytes = (size_t)numel * es;
    buffers[i] = aligned_alloc(64, bytes ? (bytes + 63) / 64 * 64 : 64);
    if (!buffers[i]) abort();
    unsigned char *b = buffers[i];
    for (size_t k = 0; k < bytes; k++)
      /* fill & 1: small values, so that index tensors are often in range */
      b[k] = fill & 1 ? (k % es == 0 ? (uint8_t)(byte(r) % 8) : 0) : byte(r);
    t->data = buffers[i];
  }
}

static const apx_tensor *tensor(reader *r, int count) {
  uint8_t b = byte(r);
  return b % (count + 2) < count ? &pool[b % (count + 2)] : NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  apx_context *ctx = fuzz_cpu_context();
  reader rd = {data, size}, *r = &rd;
  int op = byte(r) % (APX_OP_COUNT + 1);
  int count = 1 + byte(r) % POOL;
  for (int i = 0; i < count; i++) make_tensor(r, i);
  apx_call call = {"cpu", NULL};
  switch (op) {
  case APX_OP_TILEPACK: {
    apx_tilepack_args a = APX_TILEPACK_ARGS_INIT;
    a.features = tensor(r, count);
    a.idx = tensor(r, count);
    a.tile = small_int(r);
    a.out = tensor(r, count);
    apx_tilepack(ctx, &a, &call);
    break;
  }
  case APX_OP_TILEUNPACK: {
    apx_tileunpack_args a = APX_TILEUNPACK_ARGS_INIT;
    a.base = tensor(r, count);
    a.packed = tensor(r, count);
    a.idx = tensor(r, count);
    a.origins = tensor(r, count);
    a.levels = tensor(r, count);
    a.mode = (apx_overlap_mode)(byte(r) % 3);
    a.blend_alpha = scalar(r);
    a.assume_priority_sorted = byte(r) % 3;
    a.out = tensor(r, count);
    apx_tileunpack(ctx, &a, &call);
    break;
  }
  case APX_OP_FUSED_PACK_OP_UNPACK: {
    apx_fused_pack_op_unpack_args a = APX_FUSED_PACK_OP_UNPACK_ARGS_INIT;
    a.features = tensor(r, count);
    a.idx = tensor(r, count);
    a.tile = small_int(r);
    a.value_scale = scalar(r);
    a.value_bias = scalar(r);
    a.gate_scale = scalar(r);
    a.gate_bias = scalar(r);
    a.require_unique = byte(r) % 3;
    a.out = tensor(r, count);
    apx_fused_pack_op_unpack(ctx, &a, &call);
    break;
  }
  case APX_OP_FUSIONGATE_ALPHA: {
    apx_fusiongate_alpha_args a = APX_FUSIONGATE_ALPHA_ARGS_INIT;
    a.boundary = tensor(r, count);
    a.uncertainty = tensor(r, count);
    a.boundary_log_weight = scalar(r);
    a.uncertainty_log_weight = scalar(r);
    a.bias = scalar(r);
    a.out = tensor(r, count);
    apx_fusiongate_alpha(ctx, &a, &call);
    break;
  }
  case APX_OP_FUSIONGATE_FUSE: {
    apx_fusiongate_fuse_args a = APX_FUSIONGATE_FUSE_ARGS_INIT;
    a.base = tensor(r, count);
    a.detail = tensor(r, count);
    a.alpha = tensor(r, count);
    a.out = tensor(r, count);
    apx_fusiongate_fuse(ctx, &a, &call);
    break;
  }
  case APX_OP_TILESSM_SCAN: {
    apx_tilessm_scan_args a = APX_TILESSM_SCAN_ARGS_INIT;
    a.tokens = tensor(r, count);
    a.decay = tensor(r, count);
    a.input_gain = tensor(r, count);
    a.output_gain = tensor(r, count);
    a.state_bias = tensor(r, count);
    a.init_state = tensor(r, count);
    a.merge_gate = tensor(r, count);
    a.clamp_value = scalar(r);
    a.direction = (apx_scan_direction)(byte(r) % 4);
    a.merge = (apx_scan_merge)(byte(r) % 4);
    a.out = tensor(r, count);
    a.final_state = tensor(r, count);
    apx_tilessm_scan(ctx, &a, &call);
    break;
  }
  case APX_OP_GATHER: {
    apx_gather_args a = APX_GATHER_ARGS_INIT;
    a.src = tensor(r, count);
    a.dim = (int)small_int(r);
    a.index = tensor(r, count);
    a.out = tensor(r, count);
    apx_gather(ctx, &a, &call);
    break;
  }
  case APX_OP_INDEX_SELECT: {
    apx_index_select_args a = APX_INDEX_SELECT_ARGS_INIT;
    a.src = tensor(r, count);
    a.index = tensor(r, count);
    a.out = tensor(r, count);
    apx_index_select(ctx, &a, &call);
    break;
  }
  case APX_OP_SCATTER_ADD: {
    apx_scatter_add_args a = APX_SCATTER_ADD_ARGS_INIT;
    a.self = tensor(r, count);
    a.dim = (int)small_int(r);
    a.index = tensor(r, count);
    a.src = tensor(r, count);
    a.out = tensor(r, count);
    apx_scatter_add(ctx, &a, &call);
    break;
  }
  case APX_OP_GATHER_BACKWARD: {
    apx_gather_backward_args a = APX_GATHER_BACKWARD_ARGS_INIT;
    a.grad_out = tensor(r, count);
    a.dim = (int)small_int(r);
    a.index = tensor(r, count);
    a.grad_src = tensor(r, count);
    apx_gather_backward(ctx, &a, &call);
    break;
  }
  default: { /* tile_order (ff_infer needs a weights handle: its own suites) */
    apx_tile_order_args a = APX_TILE_ORDER_ARGS_INIT;
    a.ids = tensor(r, count);
    a.grid_h = small_int(r);
    a.grid_w = small_int(r);
    a.mode = (apx_order_mode)(byte(r) % 7);
    a.out = tensor(r, count);
    apx_tile_order(ctx, &a);
    break;
  }
  }
  for (int i = 0; i < count; i++) {
    free(buffers[i]);
    buffers[i] = NULL;
  }
  return 0;
}
