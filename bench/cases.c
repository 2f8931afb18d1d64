/* SPDX-License-Identifier: Apache-2.0 */
/* A case: the tensors of one entry, their shapes and generators
 * (apexx-bench(1), SIZES and INPUTS), generated on the host once per
 * entry, and what the report says of them (tensors, work, bytes moved). */
#include "runner.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static void add_tensor(bench_case *c, const char *name, gen_kind gen, apx_dtype dtype, int ndim,
                       const int64_t *shape) {
  case_tensor *ct = &c->t[c->count];
  memset(ct, 0, sizeof *ct);
  ct->name = name;
  ct->gen = gen;
  ct->touched_elems = -1;
  ct->host.dtype = dtype;
  ct->host.device = APX_DEVICE_HOST;
  ct->host.ndim = ndim;
  for (int i = 0; i < ndim; i++)
    ct->host.shape[i] = shape[i];
  c->count++;
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define NDIM(...) ((int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define ADD(c, name, gen, dtype, ...)                                                              \
  add_tensor((c), (name), (gen), (dtype), NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__))

/* The dtype of the case's tensor named `name`; f32 when there is none. */
static apx_dtype dtype_of(const bench_case *c, const char *name) {
  for (int j = 0; j < c->count; j++)
    if (strcmp(c->t[j].name, name) == 0)
      return c->t[j].host.dtype;
  return APX_DTYPE_F32;
}

/* Add the op's output `name` in the shape its descriptor's output_shape
 * gives for the inputs added so far, with the dtype of its same_dtype_as
 * argument (else the op's first tensor input); 0, or -1 with the reason. */
static int add_output(const entry_def *e, const bench_options *o, bench_case *c, const char *name,
                      gen_kind gen, char *err, size_t err_size) {
  if (runner_plan_call(e, o, c, err, err_size) != 0)
    return -1;
  const apx_op_desc *d = c->plan.desc;
  int arg = -1, first_input = -1;
  for (int i = 0; i < d->arg_count; i++) {
    if (d->args[i].kind == APX_ARG_OUTPUT && strcmp(d->args[i].name, name) == 0)
      arg = i;
    if (d->args[i].kind == APX_ARG_INPUT && first_input < 0)
      first_input = i;
  }
  apx_tensor ts[MAX_TENSORS];
  for (int j = 0; j < c->count; j++)
    ts[j] = c->t[j].host;
  _Alignas(max_align_t) unsigned char args[RUNNER_ARGS_MAX];
  runner_bind_args(c, ts, args);
  int ndim = 0;
  int64_t shape[APX_MAX_DIMS];
  if (arg < 0 || c->count == MAX_TENSORS || !d->output_shape(args, arg, &ndim, shape)) {
    snprintf(err, err_size, "%s: %s is no output whose shape %s's descriptor gives", e->name,
             name, d->name);
    return -1;
  }
  int same = d->args[arg].same_dtype_as >= 0 ? d->args[arg].same_dtype_as : first_input;
  add_tensor(c, name, gen, same >= 0 ? dtype_of(c, d->args[same].name) : APX_DTYPE_F32, ndim,
             shape);
  return 0;
}

#define OUT(c, name, gen)                                                                          \
  do {                                                                                             \
    if (add_output(e, o, (c), (name), (gen), err, err_size) != 0)                                  \
      return -1;                                                                                   \
  } while (0)

/* tileunpack's idx (tile ids below `grid`) and levels, after the inputs
 * already added; at a preset profile levels is not passed (unbound) */
static void add_unpack_ids(bench_case *c, const bench_options *o, apx_dtype ix, int64_t B,
                           int64_t K, int64_t grid) {
  const int at = c->count;
  ADD(c, "idx", GEN_TILE_IDS, ix, B, K);
  c->t[at].limit = grid;
  ADD(c, "levels", GEN_LEVELS, ix, B, K);
  if (runner_preset_profile(o)) {
    c->t[at + 1].touched_elems = 0; /* not passed */
    c->t[at + 1].unbound = 1;
  }
}

/* tilessm_scan's inputs, all of dtype `dt`, after those already added
 * (docs/report.md, Profile and inputs: tokens randn, decay rand*0.8+0.1,
 * gains rand*1.5+0.05, state_bias randn*0.1) */
static void add_scan_inputs(bench_case *c, apx_dtype dt, int64_t B, int64_t K, int64_t C) {
  const int at = c->count;
  ADD(c, "tokens", GEN_NORMAL, dt, B, K, C);
  c->t[at].a = 1.0;
  ADD(c, "decay", GEN_UNIFORM, dt, C);
  c->t[at + 1].a = 0.1, c->t[at + 1].b = 0.9;
  ADD(c, "input_gain", GEN_UNIFORM, dt, C);
  c->t[at + 2].a = 0.05, c->t[at + 2].b = 1.55;
  ADD(c, "output_gain", GEN_UNIFORM, dt, C);
  c->t[at + 3].a = 0.05, c->t[at + 3].b = 1.55;
  ADD(c, "state_bias", GEN_NORMAL, dt, C);
  c->t[at + 4].a = 0.1;
}

/* end_to_end_infer's case (apexx-bench(1), ENTRIES): L0 tiles 16, L1
 * tiles 8, kmax_l0 = kmax, kmax_l1 = 2*kmax; inputs as the seed draws them
 * (randn dense and utilities, rand proxies) */
static int describe_ff(const entry_def *e, const bench_options *o, bench_case *c, char *err,
                       size_t err_size) {
  const int64_t B = runner_entry_batch(e, o), C = o->channels, H = o->height, W = o->width;
  const apx_dtype f = o->dtype;
  const int64_t g0 = (H / 16) * (W / 16);
  ADD(c, "dense", GEN_NORMAL, f, B, C, H, W);
  c->t[0].a = 1.0;
  ADD(c, "utilities", GEN_NORMAL, f, B, g0);
  ADD(c, "split_utilities", GEN_NORMAL, f, B, g0);
  c->t[1].a = c->t[2].a = 1.0;
  ADD(c, "boundary", GEN_UNIFORM, f, B, 1, H, W);
  ADD(c, "uncertainty", GEN_UNIFORM, f, B, 1, H, W);
  c->t[3].b = c->t[4].b = 1.0;
  OUT(c, "heavy", GEN_OUTPUT);
  OUT(c, "detail", GEN_SCRATCH);
  OUT(c, "alpha", GEN_SCRATCH);
  c->work = (double)B; /* docs/report.md, Sections and entries: frames = batch */
  return 0;
}

/* Shapes and generators of each entry (documented in apexx-bench(1)); the
 * outputs' shapes from the op's descriptor. */
int runner_describe_case(const entry_def *e, const bench_options *o, bench_case *c, char *err,
                         size_t err_size) {
  memset(c, 0, sizeof *c);
  const int64_t B = o->batch, C = o->channels, H = o->height, W = o->width;
  const int64_t t = o->tile_size, K = o->kmax, S = o->steps;
  const int64_t grid = (H / t) * (W / t);
  const apx_dtype f = o->dtype, ix = APX_DTYPE_I32;
  /* indexing: src [M, D], N rows picked uniformly; the default profile
   * takes the pixels of the batch (M = B*H*W rows of C) and as many rows
   * as the selected tiles hold (N = B*kmax*t*t), the presets their own
   * (flags.c) */
  const int64_t M = o->index_src_rows, D = o->index_width, N = o->index_rows;
  /* tilessm: tokens [SB, S, SC] (default: SB = B, SC = C) */
  const int64_t SB = o->scan_batch, SC = o->scan_channels;
  switch (e->id) {
  case E_TILEPACK:
    ADD(c, "features", GEN_NORMAL, f, B, C, H, W);
    c->t[0].a = 1.0;
    c->t[0].touched_elems = B * K * C * t * t; /* only the selected tiles */
    ADD(c, "idx", GEN_TILE_IDS, ix, B, K);
    c->t[1].limit = grid;
    OUT(c, "out", GEN_OUTPUT);
    c->work = (double)(B * K);
    break;
  case E_TILEUNPACK_OVERRIDE:
  case E_TILEUNPACK_BLEND:
    ADD(c, "base", GEN_NORMAL, f, B, C, H, W);
    ADD(c, "packed", GEN_NORMAL, f, B, K, C, t, t);
    c->t[0].a = c->t[1].a = 1.0;
    add_unpack_ids(c, o, ix, B, K, grid);
    OUT(c, "out", GEN_OUTPUT);
    c->work = (double)(B * K);
    break;
  case E_FUSED_PACK_OP_UNPACK:
    ADD(c, "features", GEN_NORMAL, f, B, C, H, W);
    c->t[0].a = 1.0;
    ADD(c, "idx", GEN_TILE_IDS, ix, B, K);
    c->t[1].limit = grid;
    OUT(c, "out", GEN_OUTPUT);
    c->work = (double)(B * K);
    break;
  case E_FUSIONGATE_ALPHA:
    ADD(c, "boundary", GEN_UNIFORM, f, B, 1, H, W);
    ADD(c, "uncertainty", GEN_UNIFORM, f, B, 1, H, W);
    c->t[0].b = c->t[1].b = 1.0;
    OUT(c, "out", GEN_OUTPUT);
    /* alpha has no channel axis: its work is its output, B*H*W */
    c->work = (double)(B * H * W);
    break;
  case E_FUSIONGATE_FUSE:
    ADD(c, "base", GEN_NORMAL, f, B, C, H, W);
    ADD(c, "detail", GEN_NORMAL, f, B, C, H, W);
    c->t[0].a = c->t[1].a = 1.0;
    ADD(c, "alpha", GEN_UNIFORM, f, B, 1, H, W);
    c->t[2].b = 1.0;
    OUT(c, "out", GEN_OUTPUT);
    c->work = (double)(B * C * H * W);
    break;
  case E_TILESSM_FORWARD:
  case E_TILESSM_BIDIRECTIONAL:
  case E_TRT_TILESSM_PLUGIN: {
    add_scan_inputs(c, e->id == E_TRT_TILESSM_PLUGIN ? APX_DTYPE_F16 : f, SB, S, SC);
    OUT(c, "out", GEN_OUTPUT);
    c->work = (double)(SB * S * SC);
    break;
  }
  case E_COPY:
    /* the map of the tile ops, copied: one read and one write of it */
    ADD(c, "src", GEN_NORMAL, f, B, C, H, W);
    c->t[0].a = 1.0;
    ADD(c, "dst", GEN_OUTPUT, f, B, C, H, W);
    c->work = (double)(B * C * H * W);
    break;
  case E_GATHER:
    ADD(c, "src", GEN_NORMAL, f, M, D);
    c->t[0].a = 1.0;
    c->t[0].touched_elems = N * D;
    ADD(c, "index", GEN_ROWS_WIDE, ix, N, D);
    c->t[1].limit = M;
    OUT(c, "out", GEN_OUTPUT);
    c->work = (double)(N * D);
    break;
  case E_INDEX_SELECT:
    ADD(c, "src", GEN_NORMAL, f, M, D);
    c->t[0].a = 1.0;
    c->t[0].touched_elems = N * D;
    ADD(c, "index", GEN_ROWS, ix, N);
    c->t[1].limit = M;
    OUT(c, "out", GEN_OUTPUT);
    c->work = (double)(N * D);
    break;
  case E_SCATTER_ADD:
    ADD(c, "self", GEN_NORMAL, f, M, D);
    ADD(c, "index", GEN_ROWS_WIDE, ix, N, D);
    c->t[1].limit = M;
    ADD(c, "src", GEN_NORMAL, f, N, D);
    c->t[0].a = c->t[2].a = 1.0;
    OUT(c, "out", GEN_OUTPUT);
    c->work = (double)(M * D);
    break;
  case E_GATHER_BACKWARD:
    ADD(c, "grad_out", GEN_NORMAL, f, N, D);
    c->t[0].a = 1.0;
    ADD(c, "index", GEN_ROWS_WIDE, ix, N, D);
    c->t[1].limit = M;
    ADD(c, "grad_src", GEN_OUTPUT, f, M, D);
    c->work = (double)(M * D);
    break;
  /* the backward ops: grad_out and the inputs the backward reads as the
   * forward entry's, every gradient an output compared with the cpu
   * backend's (docs/report.md, Sections and entries) */
  case E_TILEPACK_BACKWARD:
    ADD(c, "grad_out", GEN_NORMAL, f, B, K, C, t, t);
    c->t[0].a = 1.0;
    ADD(c, "idx", GEN_TILE_IDS, ix, B, K);
    c->t[1].limit = grid;
    ADD(c, "grad_features", GEN_OUTPUT, f, B, C, H, W);
    c->work = (double)(B * K);
    break;
  case E_TILEUNPACK_BACKWARD_OVERRIDE:
  case E_TILEUNPACK_BACKWARD_BLEND:
    ADD(c, "grad_out", GEN_NORMAL, f, B, C, H, W);
    c->t[0].a = 1.0;
    add_unpack_ids(c, o, ix, B, K, grid);
    ADD(c, "grad_base", GEN_OUTPUT, f, B, C, H, W);
    ADD(c, "grad_packed", GEN_OUTPUT, f, B, K, C, t, t);
    c->work = (double)(B * K);
    break;
  case E_FUSED_PACK_OP_UNPACK_BACKWARD:
    ADD(c, "grad_out", GEN_NORMAL, f, B, C, H, W);
    ADD(c, "features", GEN_NORMAL, f, B, C, H, W);
    c->t[0].a = c->t[1].a = 1.0;
    c->t[1].touched_elems = B * K * C * t * t; /* only the selected tiles */
    ADD(c, "idx", GEN_TILE_IDS, ix, B, K);
    c->t[2].limit = grid;
    ADD(c, "grad_features", GEN_OUTPUT, f, B, C, H, W);
    ADD(c, "grad_scalars", GEN_OUTPUT, APX_DTYPE_F32, 4);
    c->t[4].sum_terms = B * K * C * t * t;
    c->work = (double)(B * K);
    break;
  case E_FUSIONGATE_ALPHA_BACKWARD: {
    ADD(c, "grad_out", GEN_NORMAL, f, B, 1, H, W);
    c->t[0].a = 1.0;
    ADD(c, "boundary", GEN_UNIFORM, f, B, 1, H, W);
    ADD(c, "uncertainty", GEN_UNIFORM, f, B, 1, H, W);
    c->t[1].b = c->t[2].b = 1.0;
    ADD(c, "grad_boundary", GEN_OUTPUT, f, B, 1, H, W);
    ADD(c, "grad_uncertainty", GEN_OUTPUT, f, B, 1, H, W);
    /* the three scalars' gradients: 0-d f32, each a sum over the pixels */
    static const char *const scalars[] = {"grad_boundary_log_weight", "grad_uncertainty_log_weight",
                                          "grad_bias"};
    for (int k = 0; k < 3; k++) {
      add_tensor(c, scalars[k], GEN_OUTPUT, APX_DTYPE_F32, 0, SHAPE(1));
      c->t[c->count - 1].sum_terms = B * H * W;
    }
    c->work = (double)(B * H * W);
    break;
  }
  case E_FUSIONGATE_FUSE_BACKWARD:
    ADD(c, "grad_out", GEN_NORMAL, f, B, C, H, W);
    ADD(c, "base", GEN_NORMAL, f, B, C, H, W);
    ADD(c, "detail", GEN_NORMAL, f, B, C, H, W);
    c->t[0].a = c->t[1].a = c->t[2].a = 1.0;
    ADD(c, "alpha", GEN_UNIFORM, f, B, 1, H, W);
    c->t[3].b = 1.0;
    ADD(c, "grad_base", GEN_OUTPUT, f, B, C, H, W);
    ADD(c, "grad_detail", GEN_OUTPUT, f, B, C, H, W);
    ADD(c, "grad_alpha", GEN_OUTPUT, f, B, 1, H, W);
    c->t[6].sum_terms = C; /* alpha's broadcast summed back over the channels */
    c->work = (double)(B * C * H * W);
    break;
  case E_TILESSM_SCAN_BACKWARD_FORWARD:
  case E_TILESSM_SCAN_BACKWARD_BIDIRECTIONAL: {
    /* the forward entries' inputs (docs/report.md, Profile and inputs) */
    ADD(c, "grad_out", GEN_NORMAL, f, SB, S, SC);
    c->t[0].a = 1.0;
    add_scan_inputs(c, f, SB, S, SC);
    ADD(c, "grad_tokens", GEN_OUTPUT, f, SB, S, SC);
    /* a vector's gradient sums every stream's steps, of both directions
     * when bidirectional */
    const int64_t terms = SB * S * (e->id == E_TILESSM_SCAN_BACKWARD_BIDIRECTIONAL ? 2 : 1);
    static const char *const vectors[] = {"grad_decay", "grad_input_gain", "grad_output_gain",
                                          "grad_state_bias"};
    for (int k = 0; k < 4; k++) {
      ADD(c, vectors[k], GEN_OUTPUT, f, SC);
      c->t[c->count - 1].sum_terms = terms;
    }
    c->work = (double)(SB * S * SC);
    break;
  }
  case E_INDEX_SELECT_BACKWARD:
    ADD(c, "grad_out", GEN_NORMAL, f, N, D);
    c->t[0].a = 1.0;
    ADD(c, "index", GEN_ROWS, ix, N);
    c->t[1].limit = M;
    ADD(c, "grad_src", GEN_OUTPUT, f, M, D);
    c->work = (double)(M * D);
    break;
  case E_FF_INFER:
  case E_FF_INFER_GRAPH:
  case E_FF_INFER_B8:
  case E_FF_INFER_GRAPH_B8:
  case E_FF_INFER_B32:
  case E_FF_INFER_GRAPH_B32:
    if (describe_ff(e, o, c, err, err_size) != 0)
      return -1;
    break;
  case E_TRT_ENGINE:
  case E_COUNT:
    c->work = (double)B;
    break;
  }
  return runner_plan_call(e, o, c, err, err_size);
}

int64_t runner_tensor_bytes(const apx_tensor *t) {
  return apx_tensor_numel(t) * (int64_t)apx_dtype_size(t->dtype);
}

/* docs/report.md, Rows: bytes_moved is the minimum traffic: each input read once
 * (only the elements the op must read) and each output written once. */
double runner_case_bytes_moved(const bench_case *c) {
  double bytes = 0.0;
  for (int i = 0; i < c->count; i++) {
    const case_tensor *ct = &c->t[i];
    if (ct->touched_elems >= 0) {
      bytes += (double)ct->touched_elems * (double)apx_dtype_size(ct->host.dtype);
    } else {
      bytes += (double)runner_tensor_bytes(&ct->host);
    }
  }
  return bytes;
}

void runner_free_case(apx_context *ctx, bench_case *c) {
  for (int i = 0; i < c->count; i++)
    apx_tensor_free(ctx, &c->t[i].host);
}

#define BENCH_DRAWN_MAX (INT64_C(1) << 24)

/* Copy the first BENCH_DRAWN_MAX elements of t over the rest (n > that). */
static void repeat_drawn(const apx_tensor *t, int64_t n) {
  if (n <= BENCH_DRAWN_MAX)
    return;
  size_t elem = apx_dtype_size(t->dtype), block = (size_t)BENCH_DRAWN_MAX * elem;
  char *base = t->data;
  for (int64_t at = BENCH_DRAWN_MAX; at < n; at += BENCH_DRAWN_MAX) {
    int64_t len = n - at < BENCH_DRAWN_MAX ? n - at : BENCH_DRAWN_MAX;
    memcpy(base + (size_t)at * elem, base, len == BENCH_DRAWN_MAX ? block : (size_t)len * elem);
  }
}

/* Allocate and fill the host tensors. Stream seed of tensor j of entry e
 * (e, j counted from 0 in the order of apexx-bench(1)) = seed + 100*(e+1)
 * + j, so entries do not share draws and adding an entry changes no other
 * entry's inputs. */
int runner_generate_case(apx_context *ctx, const bench_options *o, const entry_def *e,
                         bench_case *c, char *err, size_t err_size) {
  for (int j = 0; j < c->count; j++) {
    case_tensor *ct = &c->t[j];
    apx_tensor shape = ct->host;
    if (apx_tensor_alloc(ctx, APX_DEVICE_HOST, 0, shape.dtype, shape.ndim, shape.shape,
                         &ct->host) != APX_OK) {
      snprintf(err, err_size, "%s: cannot allocate host tensor %s: %s", e->name, ct->name,
               apx_last_error());
      return -1;
    }
    bench_rng rng = {o->seed + 100u * ((uint64_t)e->id + 1u) + (uint64_t)j};
    int64_t n = apx_tensor_numel(&ct->host);
    /* apexx-bench(1), INPUTS: a float tensor above 2^24 elements repeats
     * its first 2^24 values (the large profile's maps would otherwise take
     * minutes of Box-Muller on the host) */
    apx_tensor drawn = ct->host;
    if ((ct->gen == GEN_NORMAL || ct->gen == GEN_UNIFORM) && n > BENCH_DRAWN_MAX) {
      drawn.ndim = 1;
      drawn.shape[0] = BENCH_DRAWN_MAX;
    }
    switch (ct->gen) {
    case GEN_NORMAL:
      bench_fill_normal(&rng, &drawn, ct->a, ct->b);
      repeat_drawn(&ct->host, n);
      break;
    case GEN_UNIFORM:
      bench_fill_uniform(&rng, &drawn, ct->a, ct->b);
      repeat_drawn(&ct->host, n);
      break;
    case GEN_TILE_IDS:
      if (bench_fill_tile_ids(&rng, &ct->host, ct->limit) != 0) {
        snprintf(err, err_size, "%s: cannot draw %" PRId64 " distinct ids of %" PRId64, e->name,
                 ct->host.shape[1], ct->limit);
        return -1;
      }
      break;
    case GEN_LEVELS:
      for (int64_t i = 0; i < n; i++) {
        bench_set(&ct->host, i, (double)bench_rng_below(&rng, 3));
      }
      break;
    case GEN_ROWS:
      for (int64_t i = 0; i < n; i++) {
        bench_set(&ct->host, i, (double)bench_rng_below(&rng, ct->limit));
      }
      break;
    case GEN_ROWS_WIDE: {
      int64_t rows = ct->host.shape[0], width = ct->host.shape[1];
      for (int64_t i = 0; i < rows; i++) {
        double row = (double)bench_rng_below(&rng, ct->limit);
        for (int64_t k = 0; k < width; k++)
          bench_set(&ct->host, i * width + k, row);
      }
      break;
    }
    case GEN_OUTPUT:
    case GEN_SCRATCH:
      memset(ct->host.data, 0xA5, (size_t)runner_tensor_bytes(&ct->host));
      break;
    }
  }
  return 0;
}

cJSON *runner_tensors_json(const bench_case *c) {
  cJSON *obj = cJSON_CreateObject();
  for (int i = 0; i < c->count; i++) {
    const apx_tensor *t = &c->t[i].host;
    cJSON *d = cJSON_AddObjectToObject(obj, c->t[i].name);
    cJSON *shape = cJSON_AddArrayToObject(d, "shape");
    for (int k = 0; k < t->ndim; k++) {
      cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[k]));
    }
    cJSON_AddStringToObject(d, "dtype", apx_dtype_name(t->dtype));
  }
  return obj;
}

cJSON *runner_work_json(const entry_def *e, const bench_case *c) {
  cJSON *w = cJSON_CreateObject();
  cJSON_AddStringToObject(w, "throughput", e->throughput_key);
  cJSON_AddNumberToObject(w, "count", c->work);
  /* entries without an op have no tensors, hence no traffic to state */
  if (c->count > 0)
    cJSON_AddNumberToObject(w, "bytes_moved", runner_case_bytes_moved(c));
  return w;
}
