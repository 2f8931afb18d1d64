/* The suite: every selected entry (an op with one setting of its mode) on
 * every configured backend. Per entry: generate the inputs on the host once
 * (seeded, inputs.c), record the default dispatch (apx_explain), run the cpu
 * backend once untimed as the parity reference, then per backend: copy the
 * inputs to its device, warm up, time `iters` calls with the backend's
 * timer, take the statistics, peak memory, and compare the output with the
 * cpu reference. Sizes, seeds and work counts are documented in
 * apexx-bench(1). */
#include "bench.h"

#include <apexx/trt_engine_runner.h>
#include <dlfcn.h>

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- entries ----------------------------------------------------------- */
typedef enum entry_id {
  E_TILEPACK,
  E_TILEUNPACK_OVERRIDE,
  E_TILEUNPACK_BLEND,
  E_FUSED_PACK_OP_UNPACK,
  E_FUSIONGATE_ALPHA,
  E_FUSIONGATE_FUSE,
  E_TILESSM_FORWARD,
  E_TILESSM_BIDIRECTIONAL,
  E_GATHER,
  E_INDEX_SELECT,
  E_SCATTER_ADD,
  E_GATHER_BACKWARD,
  E_FF_INFER,
  E_TRT_TILESSM_PLUGIN,
  E_TRT_ENGINE,
  E_FF_INFER_GRAPH, /* appended: entry ids seed the inputs */
  E_COPY,
  E_COUNT
} entry_id;

typedef enum entry_kind {
  KIND_OP,          /* an apexx op, run on every backend */
  KIND_TRT_PLUGIN,  /* the op as a TensorRT plugin: the plugin library's runner */
  KIND_TRT_ENGINE,  /* a serialized engine: no runner API in this version */
  KIND_COPY         /* the bandwidth reference: apx_tensor_copy, not an op */
} entry_kind;

typedef struct entry_def {
  entry_id id;
  const char *section;
  const char *name;
  entry_kind kind;
  apx_op_id op;
  const char *mode;           /* the op's setting, for the report */
  const char *throughput_key; /* docs/report.md, Timing */
  int exact;                  /* copy op: parity is bit-exact */
  int extra_ulps;             /* transcendentals: one storage ulp more */
} entry_def;

static const entry_def entries[E_COUNT] = {
    {E_TILEPACK, "tile_ops", "tilepack", KIND_OP, APX_OP_TILEPACK, "kernel form",
     "tiles_per_s", 1, 0},
    {E_TILEUNPACK_OVERRIDE, "tile_ops", "tileunpack_override", KIND_OP,
     APX_OP_TILEUNPACK, "override, ids, levels", "tiles_per_s", 1, 0},
    {E_TILEUNPACK_BLEND, "tile_ops", "tileunpack_blend", KIND_OP,
     APX_OP_TILEUNPACK, "blend alpha 0.5, ids, levels", "tiles_per_s", 0, 0},
    {E_FUSED_PACK_OP_UNPACK, "tile_ops", "fused_pack_op_unpack", KIND_OP,
     APX_OP_FUSED_PACK_OP_UNPACK, "value 1/0, gate 1/0, unique ids",
     "tiles_per_s", 0, 0},
    {E_FUSIONGATE_ALPHA, "tile_ops", "fusiongate_alpha", KIND_OP,
     APX_OP_FUSIONGATE_ALPHA, "log weights 1/1, bias 0", "elements_per_s", 0, 1},
    {E_FUSIONGATE_FUSE, "tile_ops", "fusiongate_fuse", KIND_OP,
     APX_OP_FUSIONGATE_FUSE, "out of place", "elements_per_s", 0, 0},
    {E_TILESSM_FORWARD, "tilessm", "tilessm_forward", KIND_OP,
     APX_OP_TILESSM_SCAN, "forward", "tokens_per_s", 0, 0},
    {E_TILESSM_BIDIRECTIONAL, "tilessm", "tilessm_bidirectional", KIND_OP,
     APX_OP_TILESSM_SCAN, "bidirectional, merge avg", "tokens_per_s", 0, 0},
    {E_GATHER, "indexing", "gather", KIND_OP, APX_OP_GATHER, "dim 0",
     "elements_per_s", 1, 0},
    {E_INDEX_SELECT, "indexing", "index_select", KIND_OP, APX_OP_INDEX_SELECT,
     "rows", "elements_per_s", 1, 0},
    {E_SCATTER_ADD, "indexing", "scatter_add", KIND_OP, APX_OP_SCATTER_ADD,
     "dim 0, out of place", "elements_per_s", 0, 0},
    {E_GATHER_BACKWARD, "indexing", "gather_backward", KIND_OP,
     APX_OP_GATHER_BACKWARD, "dim 0", "elements_per_s", 0, 0},
    {E_FF_INFER, "end_to_end_infer", "ff_infer", KIND_OP, APX_OP_FF_INFER,
     "eager, tiles 16/8, kmax K/2K", "frames_per_s", 0, 2},
    {E_TRT_TILESSM_PLUGIN, "tensorrt", "tilessm_plugin", KIND_TRT_PLUGIN,
     APX_OP_TILESSM_SCAN, "forward, fp16, TileSSMScan plugin", "tokens_per_s",
     0, 0},
    {E_TRT_ENGINE, "tensorrt", "engine", KIND_TRT_ENGINE, APX_OP_COUNT,
     "serialized engine", "frames_per_s", 0, 0},
    {E_FF_INFER_GRAPH, "end_to_end_infer", "ff_infer_graph", KIND_OP,
     APX_OP_FF_INFER, "graph replay, tiles 16/8, kmax K/2K", "frames_per_s", 0,
     2},
    {E_COPY, "reference", "copy", KIND_COPY, APX_OP_COUNT,
     "features-sized copy on the backend's device (host: memmove)",
     "elements_per_s", 1, 0},
};

/* reference first: its rows are the same run's copy bandwidth that the
 * other rows' pct_of_copy divides by (reference.c) */
static const char *const sections[] = {"reference", "tile_ops", "tilessm", "indexing",
                                       "end_to_end_infer", "tensorrt"};
#define SECTION_COUNT ((int)(sizeof sections / sizeof sections[0]))

/* The end-to-end entries' weights: --ff-weights or the seeded generator,
 * made once per run (bench_run) for the profile's channel count. */
static apx_ff_weights *ff_weights;

int bench_op_name_known(const char *name) {
  for (int i = 0; i < E_COUNT; i++) {
    if (strcmp(entries[i].name, name) == 0) return 1;
  }
  for (int i = 0; i < SECTION_COUNT; i++) {
    if (strcmp(sections[i], name) == 0) return 1;
  }
  return 0;
}

void bench_print_op_names(FILE *to) {
  for (int i = 0; i < SECTION_COUNT; i++) {
    fprintf(to, "%s%s (", i ? "; " : "", sections[i]);
    int first = 1;
    for (int e = 0; e < E_COUNT; e++) {
      if (strcmp(entries[e].section, sections[i]) != 0) continue;
      fprintf(to, "%s%s", first ? "" : ", ", entries[e].name);
      first = 0;
    }
    fprintf(to, ")");
  }
  fprintf(to, "\n");
}

/* The presets (--profile seed|large) time the workloads of the GPU
 * bandwidth table and its torch peers: tileunpack without levels (the
 * peer is clone + index_copy_). The default profile keeps the suite's
 * levels. */
static int preset_profile(const bench_options *o) {
  return o->profile && strcmp(o->profile, "default") != 0;
}

/* The op's setting as the report states it. */
static const char *entry_mode(const entry_def *e, const bench_options *o) {
  if (preset_profile(o) && e->id == E_TILEUNPACK_OVERRIDE) return "override, ids, no levels";
  if (preset_profile(o) && e->id == E_TILEUNPACK_BLEND) return "blend alpha 0.5, ids, no levels";
  return e->mode;
}

static int entry_selected(const bench_options *opts, const entry_def *e) {
  if (opts->op_count == 0) return 1;
  if (e->kind == KIND_COPY) {
    /* the reference runs whenever an op runs, so every row has its share */
    for (int i = 0; i < E_COUNT; i++)
      if (entries[i].kind == KIND_OP && entry_selected(opts, &entries[i])) return 1;
  }
  if (e->kind == KIND_COPY) {
    /* the reference runs whenever an op runs, so every row has its share */
    for (int i = 0; i < E_COUNT; i++)
      if (entries[i].kind == KIND_OP && entry_selected(opts, &entries[i])) return 1;
  }
  for (int i = 0; i < opts->op_count; i++) {
    if (strcmp(opts->ops[i], e->name) == 0 ||
        strcmp(opts->ops[i], e->section) == 0) {
      return 1;
    }
  }
  return 0;
}

/* ---- a case: the tensors of one entry ----------------------------------- */
#define MAX_TENSORS 8

typedef enum gen_kind {
  GEN_NORMAL,    /* a*N(0,1) + b */
  GEN_UNIFORM,   /* uniform in [a, b) */
  GEN_TILE_IDS,  /* inputs.c: per row, first K of a permutation, sorted */
  GEN_LEVELS,    /* integers uniform in [0, 3) */
  GEN_ROWS,      /* [N]: row ids uniform in [0, M) */
  GEN_ROWS_WIDE, /* [N,D]: row ids uniform in [0, M), repeated along a row */
  GEN_OUTPUT,    /* not generated: poisoned before each backend's run */
  GEN_SCRATCH    /* a further output: poisoned, written, not compared */
} gen_kind;

typedef struct case_tensor {
  const char *name;
  gen_kind gen;
  double a, b;
  int64_t limit;         /* M for GEN_ROWS*, grid size for GEN_TILE_IDS */
  int64_t touched_elems; /* elements a minimal kernel reads/writes; -1 all */
  apx_tensor host;
} case_tensor;

typedef struct bench_case {
  int count;
  int output; /* index of the output tensor */
  case_tensor t[MAX_TENSORS];
  double work; /* the throughput's work count */
} bench_case;

static void add_tensor(bench_case *c, const char *name, gen_kind gen,
                       apx_dtype dtype, int ndim, const int64_t *shape) {
  case_tensor *ct = &c->t[c->count];
  memset(ct, 0, sizeof *ct);
  ct->name = name;
  ct->gen = gen;
  ct->touched_elems = -1;
  ct->host.dtype = dtype;
  ct->host.device = APX_DEVICE_HOST;
  ct->host.ndim = ndim;
  for (int i = 0; i < ndim; i++) ct->host.shape[i] = shape[i];
  if (gen == GEN_OUTPUT) c->output = c->count;
  c->count++;
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define NDIM(...) ((int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define ADD(c, name, gen, dtype, ...)                                          \
  add_tensor((c), (name), (gen), (dtype), NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__))

/* Shapes and generators of each entry (documented in apexx-bench(1)). */
static void describe_case(const entry_def *e, const bench_options *o,
                          bench_case *c) {
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
    ADD(c, "out", GEN_OUTPUT, f, B, K, C, t, t);
    c->work = (double)(B * K);
    break;
  case E_TILEUNPACK_OVERRIDE:
  case E_TILEUNPACK_BLEND:
    ADD(c, "base", GEN_NORMAL, f, B, C, H, W);
    ADD(c, "packed", GEN_NORMAL, f, B, K, C, t, t);
    c->t[0].a = c->t[1].a = 1.0;
    ADD(c, "idx", GEN_TILE_IDS, ix, B, K);
    c->t[2].limit = grid;
    ADD(c, "levels", GEN_LEVELS, ix, B, K);
    if (preset_profile(o)) c->t[3].touched_elems = 0; /* not passed */
    ADD(c, "out", GEN_OUTPUT, f, B, C, H, W);
    c->work = (double)(B * K);
    break;
  case E_FUSED_PACK_OP_UNPACK:
    ADD(c, "features", GEN_NORMAL, f, B, C, H, W);
    c->t[0].a = 1.0;
    ADD(c, "idx", GEN_TILE_IDS, ix, B, K);
    c->t[1].limit = grid;
    ADD(c, "out", GEN_OUTPUT, f, B, C, H, W);
    c->work = (double)(B * K);
    break;
  case E_FUSIONGATE_ALPHA:
    ADD(c, "boundary", GEN_UNIFORM, f, B, 1, H, W);
    ADD(c, "uncertainty", GEN_UNIFORM, f, B, 1, H, W);
    c->t[0].b = c->t[1].b = 1.0;
    ADD(c, "out", GEN_OUTPUT, f, B, 1, H, W);
    /* alpha has no channel axis: its work is its output, B*H*W */
    c->work = (double)(B * H * W);
    break;
  case E_FUSIONGATE_FUSE:
    ADD(c, "base", GEN_NORMAL, f, B, C, H, W);
    ADD(c, "detail", GEN_NORMAL, f, B, C, H, W);
    c->t[0].a = c->t[1].a = 1.0;
    ADD(c, "alpha", GEN_UNIFORM, f, B, 1, H, W);
    c->t[2].b = 1.0;
    ADD(c, "out", GEN_OUTPUT, f, B, C, H, W);
    c->work = (double)(B * C * H * W);
    break;
  case E_TILESSM_FORWARD:
  case E_TILESSM_BIDIRECTIONAL:
  case E_TRT_TILESSM_PLUGIN: {
    /* docs/report.md, Profile and inputs: decay rand*0.8+0.1, gains rand*1.5+0.05,
     * state_bias randn*0.1 */
    apx_dtype tok = e->id == E_TRT_TILESSM_PLUGIN ? APX_DTYPE_F16 : f;
    ADD(c, "tokens", GEN_NORMAL, tok, SB, S, SC);
    c->t[0].a = 1.0;
    ADD(c, "decay", GEN_UNIFORM, tok, SC);
    c->t[1].a = 0.1, c->t[1].b = 0.9;
    ADD(c, "input_gain", GEN_UNIFORM, tok, SC);
    c->t[2].a = 0.05, c->t[2].b = 1.55;
    ADD(c, "output_gain", GEN_UNIFORM, tok, SC);
    c->t[3].a = 0.05, c->t[3].b = 1.55;
    ADD(c, "state_bias", GEN_NORMAL, tok, SC);
    c->t[4].a = 0.1;
    ADD(c, "out", GEN_OUTPUT, tok, SB, S, SC);
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
    ADD(c, "out", GEN_OUTPUT, f, N, D);
    c->work = (double)(N * D);
    break;
  case E_INDEX_SELECT:
    ADD(c, "src", GEN_NORMAL, f, M, D);
    c->t[0].a = 1.0;
    c->t[0].touched_elems = N * D;
    ADD(c, "index", GEN_ROWS, ix, N);
    c->t[1].limit = M;
    ADD(c, "out", GEN_OUTPUT, f, N, D);
    c->work = (double)(N * D);
    break;
  case E_SCATTER_ADD:
    ADD(c, "self", GEN_NORMAL, f, M, D);
    ADD(c, "index", GEN_ROWS_WIDE, ix, N, D);
    c->t[1].limit = M;
    ADD(c, "src", GEN_NORMAL, f, N, D);
    c->t[0].a = c->t[2].a = 1.0;
    ADD(c, "out", GEN_OUTPUT, f, M, D);
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
  case E_FF_INFER:
  case E_FF_INFER_GRAPH: {
    /* apexx-bench(1), ENTRIES: L0 tiles 16, L1 tiles 8, kmax_l0 = kmax, kmax_l1 =
     * 2*kmax; inputs as the seed draws them (randn dense and utilities,
     * rand proxies) */
    const int64_t g0 = (H / 16) * (W / 16);
    ADD(c, "dense", GEN_NORMAL, f, B, C, H, W);
    c->t[0].a = 1.0;
    ADD(c, "utilities", GEN_NORMAL, f, B, g0);
    ADD(c, "split_utilities", GEN_NORMAL, f, B, g0);
    c->t[1].a = c->t[2].a = 1.0;
    ADD(c, "boundary", GEN_UNIFORM, f, B, 1, H, W);
    ADD(c, "uncertainty", GEN_UNIFORM, f, B, 1, H, W);
    c->t[3].b = c->t[4].b = 1.0;
    ADD(c, "heavy", GEN_OUTPUT, f, B, C, H, W);
    ADD(c, "detail", GEN_SCRATCH, f, B, C, H, W);
    ADD(c, "alpha", GEN_SCRATCH, f, B, 1, H, W);
    c->work = (double)B; /* docs/report.md, Sections and entries: frames = batch */
    break;
  }
  case E_TRT_ENGINE:
  case E_COUNT:
    c->work = (double)B;
    break;
  }
}

static int64_t tensor_bytes(const apx_tensor *t) {
  return apx_tensor_numel(t) * (int64_t)apx_dtype_size(t->dtype);
}

/* docs/report.md, Rows: bytes_moved is the minimum traffic: each input read once
 * (only the elements the op must read) and each output written once. */
static double case_bytes_moved(const bench_case *c) {
  double bytes = 0.0;
  for (int i = 0; i < c->count; i++) {
    const case_tensor *ct = &c->t[i];
    if (ct->touched_elems >= 0) {
      bytes += (double)ct->touched_elems * (double)apx_dtype_size(ct->host.dtype);
    } else {
      bytes += (double)tensor_bytes(&ct->host);
    }
  }
  return bytes;
}

static void free_case(apx_context *ctx, bench_case *c) {
  for (int i = 0; i < c->count; i++) apx_tensor_free(ctx, &c->t[i].host);
}

#define BENCH_DRAWN_MAX (INT64_C(1) << 24)

/* Copy the first BENCH_DRAWN_MAX elements of t over the rest (n > that). */
static void repeat_drawn(const apx_tensor *t, int64_t n) {
  if (n <= BENCH_DRAWN_MAX) return;
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
static int generate_case(apx_context *ctx, const bench_options *o,
                         const entry_def *e, bench_case *c, char *err,
                         size_t err_size) {
  for (int j = 0; j < c->count; j++) {
    case_tensor *ct = &c->t[j];
    apx_tensor shape = ct->host;
    if (apx_tensor_alloc(ctx, APX_DEVICE_HOST, 0, shape.dtype, shape.ndim,
                         shape.shape, &ct->host) != APX_OK) {
      snprintf(err, err_size, "%s: cannot allocate host tensor %s: %s",
               e->name, ct->name, apx_last_error());
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
        snprintf(err, err_size, "%s: cannot draw %" PRId64 " distinct ids of %" PRId64,
                 e->name, ct->host.shape[1], ct->limit);
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
        for (int64_t k = 0; k < width; k++) bench_set(&ct->host, i * width + k, row);
      }
      break;
    }
    case GEN_OUTPUT:
    case GEN_SCRATCH:
      memset(ct->host.data, 0xA5, (size_t)tensor_bytes(&ct->host));
      break;
    }
  }
  return 0;
}

/* The end-to-end call of the profile on the case's tensors. */
static apx_ff_infer_args ff_args(const entry_def *e, const bench_options *o,
                                 const apx_tensor *ts, apx_ff_stats *stats) {
  apx_ff_infer_args a = APX_FF_INFER_ARGS_INIT;
  a.dense = &ts[0], a.utilities = &ts[1], a.split_utilities = &ts[2];
  a.boundary = &ts[3], a.uncertainty = &ts[4];
  a.heavy = &ts[5], a.detail = &ts[6], a.alpha = &ts[7];
  a.weights = ff_weights;
  a.tile_l0 = 16, a.tile_l1 = 8;
  a.kmax_l0 = o->kmax, a.kmax_l1 = 2 * o->kmax;
  a.budget_b1 = o->budget_b1, a.budget_b2 = o->budget_b2;
  a.graph_replay = e->id == E_FF_INFER_GRAPH;
  a.stats = stats;
  return a;
}

/* Run (or, with explain != NULL, explain) the entry's op on tensors ts. */
static apx_status invoke(apx_context *ctx, const entry_def *e,
                         const bench_options *o, const apx_tensor *ts,
                         const apx_call *call, apx_explanation *explain) {
#define RUN(op_fn, args)                                                       \
  (explain ? apx_explain(ctx, e->op, &(args), call, explain)                   \
           : op_fn(ctx, &(args), call))
  switch (e->id) {
  case E_TILEPACK: {
    apx_tilepack_args a = APX_TILEPACK_ARGS_INIT;
    a.features = &ts[0], a.idx = &ts[1], a.tile = o->tile_size, a.out = &ts[2];
    return RUN(apx_tilepack, a);
  }
  case E_TILEUNPACK_OVERRIDE:
  case E_TILEUNPACK_BLEND: {
    apx_tileunpack_args a = APX_TILEUNPACK_ARGS_INIT;
    a.base = &ts[0], a.packed = &ts[1], a.idx = &ts[2];
    a.levels = preset_profile(o) ? NULL : &ts[3];
    a.out = &ts[4];
    if (e->id == E_TILEUNPACK_BLEND) {
      a.mode = APX_OVERLAP_BLEND;
      a.blend_alpha = 0.5;
    }
    return RUN(apx_tileunpack, a);
  }
  case E_FUSED_PACK_OP_UNPACK: {
    apx_fused_pack_op_unpack_args a = APX_FUSED_PACK_OP_UNPACK_ARGS_INIT;
    a.features = &ts[0], a.idx = &ts[1], a.tile = o->tile_size, a.out = &ts[2];
    return RUN(apx_fused_pack_op_unpack, a);
  }
  case E_FUSIONGATE_ALPHA: {
    apx_fusiongate_alpha_args a = APX_FUSIONGATE_ALPHA_ARGS_INIT;
    a.boundary = &ts[0], a.uncertainty = &ts[1], a.out = &ts[2];
    return RUN(apx_fusiongate_alpha, a);
  }
  case E_FUSIONGATE_FUSE: {
    apx_fusiongate_fuse_args a = APX_FUSIONGATE_FUSE_ARGS_INIT;
    a.base = &ts[0], a.detail = &ts[1], a.alpha = &ts[2], a.out = &ts[3];
    return RUN(apx_fusiongate_fuse, a);
  }
  case E_TILESSM_FORWARD:
  case E_TILESSM_BIDIRECTIONAL:
  case E_TRT_TILESSM_PLUGIN: {
    apx_tilessm_scan_args a = APX_TILESSM_SCAN_ARGS_INIT;
    a.tokens = &ts[0], a.decay = &ts[1], a.input_gain = &ts[2];
    a.output_gain = &ts[3], a.state_bias = &ts[4], a.out = &ts[5];
    if (e->id == E_TILESSM_BIDIRECTIONAL) {
      a.direction = APX_SCAN_BIDIRECTIONAL;
      a.merge = APX_MERGE_AVG;
    }
    return RUN(apx_tilessm_scan, a);
  }
  case E_GATHER: {
    apx_gather_args a = APX_GATHER_ARGS_INIT;
    a.src = &ts[0], a.dim = 0, a.index = &ts[1], a.out = &ts[2];
    return RUN(apx_gather, a);
  }
  case E_INDEX_SELECT: {
    apx_index_select_args a = APX_INDEX_SELECT_ARGS_INIT;
    a.src = &ts[0], a.index = &ts[1], a.out = &ts[2];
    return RUN(apx_index_select, a);
  }
  case E_SCATTER_ADD: {
    apx_scatter_add_args a = APX_SCATTER_ADD_ARGS_INIT;
    a.self = &ts[0], a.dim = 0, a.index = &ts[1], a.src = &ts[2], a.out = &ts[3];
    return RUN(apx_scatter_add, a);
  }
  case E_GATHER_BACKWARD: {
    apx_gather_backward_args a = APX_GATHER_BACKWARD_ARGS_INIT;
    a.grad_out = &ts[0], a.dim = 0, a.index = &ts[1], a.grad_src = &ts[2];
    return RUN(apx_gather_backward, a);
  }
  case E_FF_INFER:
  case E_FF_INFER_GRAPH: {
    apx_ff_infer_args a = ff_args(e, o, ts, NULL);
    return RUN(apx_ff_infer, a);
  }
  case E_COPY:
    /* not dispatched: the copy goes to the backend serving the device */
    return explain ? APX_OK : apx_tensor_copy(ctx, &ts[1], &ts[0], call);
  default:
    return APX_ERR_UNSUPPORTED;
  }
#undef RUN
}

/* ---- the run's state ---------------------------------------------------- */
typedef struct run_state {
  apx_context *ctx;
  const bench_options *opts;
  int backend_count;
  struct apx_backend_info backends[APX_MAX_BACKENDS];
  int cpu_index; /* -1 when no backend is named cpu */
  int rows_measured;
  long fail_after; /* APEXX_BENCH_FAIL_AFTER (test-only), -1 when unset */
  int progress;
  int any_failed;
  char *err;
  size_t err_size;
} run_state;

static int backend_selected(const run_state *rs, const char *name) {
  if (rs->opts->backend_count == 0) return 1;
  for (int i = 0; i < rs->opts->backend_count; i++) {
    if (strcmp(rs->opts->backends[i], name) == 0) return 1;
  }
  return 0;
}

static void progress(const run_state *rs, const entry_def *e, const char *backend,
                     int i, int n) {
  if (!rs->progress) return;
  fprintf(stderr, "\r\033[K[apexx-bench] %s.%s %s %d/%d", e->section, e->name,
          backend, i, n);
  if (i == n) fputc('\n', stderr);
  fflush(stderr);
}

static cJSON *row_skipped(const char *fmt, ...) {
  cJSON *row = cJSON_CreateObject();
  char reason[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  cJSON_AddStringToObject(row, "status", "skipped");
  cJSON_AddStringToObject(row, "reason", reason);
  return row;
}

static cJSON *row_failed(run_state *rs, const char *fmt, ...) {
  cJSON *row = cJSON_CreateObject();
  char reason[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  cJSON_AddStringToObject(row, "status", "failed");
  cJSON_AddStringToObject(row, "reason", reason);
  rs->any_failed = 1;
  return row;
}

static const char *backend_unusable_reason(const struct apx_backend_info *b,
                                           char *buf, size_t size) {
  snprintf(buf, size, "%s: %s", apx_backend_state_name(b->state),
           b->reason && *b->reason ? b->reason : "no reason given");
  return buf;
}

/* The pass-over sentence for `backend` in an explanation, else the error. */
static const char *passed_over_reason(const apx_explanation *ex,
                                      const char *backend) {
  for (int i = 0; i < ex->passed_over_count; i++) {
    if (ex->passed_over[i].backend &&
        strcmp(ex->passed_over[i].backend, backend) == 0) {
      return ex->passed_over[i].reason;
    }
  }
  return apx_last_error();
}

static cJSON *explanation_json(apx_context *ctx, const entry_def *e,
                               const bench_options *o, const apx_tensor *ts,
                               const char *tensors_on) {
  if (e->kind == KIND_COPY) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "tensors", tensors_on);
    cJSON_AddNullToObject(d, "backend");
    cJSON_AddStringToObject(d, "reason",
                            "not dispatched: apx_tensor_copy goes to the backend serving the "
                            "tensors' device");
    cJSON_AddArrayToObject(d, "passed_over");
    return d;
  }
  apx_explanation ex;
  memset(&ex, 0, sizeof ex);
  apx_status st = invoke(ctx, e, o, ts, NULL, &ex);
  cJSON *d = cJSON_CreateObject();
  cJSON_AddStringToObject(d, "tensors", tensors_on);
  if (st != APX_OK && st != APX_ERR_UNSUPPORTED) {
    cJSON_AddNullToObject(d, "backend");
    cJSON_AddStringToObject(d, "error", apx_last_error());
    cJSON_AddArrayToObject(d, "passed_over");
    return d;
  }
  bench_json_string_or_null(d, "backend", ex.backend);
  if (!ex.backend) {
    cJSON_AddStringToObject(d, "reason", "no backend can run this call");
  }
  cJSON *list = cJSON_AddArrayToObject(d, "passed_over");
  for (int i = 0; i < ex.passed_over_count && i < APX_MAX_BACKENDS; i++) {
    cJSON *p = cJSON_CreateObject();
    bench_json_string_or_null(p, "backend", ex.passed_over[i].backend);
    const char *code = apx_pass_over_name(ex.passed_over[i].code);
    cJSON_AddStringToObject(p, "code", code ? code : "unknown");
    bench_json_string_or_null(p, "reason", ex.passed_over[i].reason);
    cJSON_AddItemToArray(list, p);
  }
  return d;
}

static cJSON *tensors_json(const bench_case *c) {
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

/* ---- one row: one backend on one entry ---------------------------------- */
typedef struct device_tensors {
  int count;
  apx_tensor t[MAX_TENSORS];
  int owned[MAX_TENSORS];
} device_tensors;

static void free_device_tensors(apx_context *ctx, device_tensors *d) {
  for (int i = 0; i < d->count; i++) {
    if (d->owned[i]) apx_tensor_free(ctx, &d->t[i]);
  }
  d->count = 0;
}

/* Place the case on the backend's device: host backends share the host
 * inputs and get their own output; device backends get copies. The output
 * is poisoned (0xA5 bytes) so a kernel that skips elements is caught. */
static int place_case(apx_context *ctx, const bench_case *c, apx_device device,
                      device_tensors *d, char *why, size_t why_size) {
  memset(d, 0, sizeof *d);
  for (int i = 0; i < c->count; i++) {
    const apx_tensor *h = &c->t[i].host;
    int is_output = i == c->output || c->t[i].gen == GEN_SCRATCH;
    d->count = i + 1;
    if (device == APX_DEVICE_HOST && !is_output) {
      d->t[i] = *h;
      continue;
    }
    if (apx_tensor_alloc(ctx, device, 0, h->dtype, h->ndim, h->shape, &d->t[i]) !=
        APX_OK) {
      snprintf(why, why_size, "allocating %s on %s: %s", c->t[i].name,
               apx_device_name(device), apx_last_error());
      return -1;
    }
    d->owned[i] = 1;
    /* the host output is still all 0xA5 (generate_case), so copying it
     * poisons the device output too */
    if (device == APX_DEVICE_HOST) {
      memset(d->t[i].data, 0xA5, (size_t)tensor_bytes(h));
    } else if (apx_tensor_copy(ctx, &d->t[i], h, NULL) != APX_OK) {
      snprintf(why, why_size, "copying %s to %s: %s", c->t[i].name,
               apx_device_name(device), apx_last_error());
      return -1;
    }
  }
  return 0;
}

static cJSON *parity_json(const bench_parity *p, int exact) {
  cJSON *obj = cJSON_CreateObject();
  cJSON_AddStringToObject(obj, "against", "cpu");
  if (p->non_finite) {
    const char *why =
        p->nan_count ? "NaN in the output or the cpu reference" : "infinity on one side only";
    cJSON_AddNullToObject(obj, "max_abs_err");
    cJSON_AddStringToObject(obj, "max_abs_err_reason", why);
    cJSON_AddNullToObject(obj, "max_rel_err");
    cJSON_AddStringToObject(obj, "max_rel_err_reason", why);
  } else {
    bench_json_number(obj, "max_abs_err", p->max_abs_err, NULL);
    bench_json_number(obj, "max_rel_err", p->max_rel_err, NULL);
  }
  cJSON_AddBoolToObject(obj, "ok", p->ok);
  cJSON_AddStringToObject(obj, "rule",
                          exact ? "bit-exact (copy op)"
                                : "|err| <= 2*(atol + rtol*|ref|)");
  cJSON_AddNumberToObject(obj, "atol", exact ? 0.0 : p->atol);
  cJSON_AddNumberToObject(obj, "rtol", exact ? 0.0 : p->rtol);
  cJSON_AddNumberToObject(obj, "bad_elements", (double)p->bad_count);
  return obj;
}

static int fault_injected(run_state *rs) {
  if (rs->fail_after >= 0 && rs->rows_measured >= rs->fail_after) {
    snprintf(rs->err, rs->err_size,
             "APEXX_BENCH_FAIL_AFTER=%ld: run stopped after %d measured rows "
             "(test-only fault injection)",
             rs->fail_after, rs->rows_measured);
    return 1;
  }
  return 0;
}

/* FLOPs of one level of the FF path with k tiles of side t, C channels,
 * over a B x H x W map (docs/ff_infer.md; multiply-add = 2): token mean,
 * FiLM (LayerNorm, C x C and 2C x C linears), FiLM apply, depthwise 3x3,
 * pointwise C -> 2C, GroupNorm, ReGLU and residual per tile pixel, and the
 * fusion gate and detail over the map. */
static double ff_level_flops(double k, double t, double C, double map_px) {
  double px = k * t * t;
  double tiles = px * C                                   /* token mean */
                 + k * (8.0 * C + 2.0 * C * C + 4.0 * C * C) /* FiLM */
                 + px * C * 2.0                           /* apply */
                 + px * C * 18.0                          /* depthwise */
                 + px * 2.0 * C * C * 2.0                 /* pointwise */
                 + px * 2.0 * C * 6.0                     /* norm, act */
                 + px * C * 2.0;                          /* ReGLU, residual */
  return tiles + map_px * (10.0 + C * 4.0);               /* gate, detail */
}

/* The routing counts of one untimed call (with stats: the cuda backend
 * synchronises for it) and the frame's FLOPs into the row. */
static void ff_metrics(apx_context *ctx, const entry_def *e,
                       const bench_options *o, const apx_tensor *ts,
                       const apx_call *call, double p50_ms, cJSON *row) {
  const int64_t B = o->batch;
  int64_t *counts = calloc((size_t)(2 * B), sizeof *counts);
  double *spent = calloc((size_t)(2 * B), sizeof *spent);
  if (!counts || !spent) {
    free(counts), free(spent);
    return;
  }
  apx_ff_stats stats = {counts, counts + B, spent, spent + B, NULL, NULL};
  apx_ff_infer_args a = ff_args(e, o, ts, &stats);
  a.graph_replay = 0;
  if (apx_ff_infer(ctx, &a, call) == APX_OK && apx_sync(ctx, call) == APX_OK) {
    double l0 = 0, l1 = 0, b1 = 0, b2 = 0;
    for (int64_t b = 0; b < B; b++) {
      l0 += (double)counts[b], l1 += (double)counts[B + b];
      b1 += spent[b], b2 += spent[B + b];
    }
    cJSON_AddNumberToObject(row, "selected_l0_per_call", l0);
    cJSON_AddNumberToObject(row, "selected_l1_per_call", l1);
    cJSON_AddNumberToObject(row, "budget_b1_spent", b1);
    cJSON_AddNumberToObject(row, "budget_b2_spent", b2);
    double map_px = (double)(B * o->height * o->width);
    double flops = ff_level_flops(l0, 16, (double)o->channels, map_px) +
                   ff_level_flops(l1, 8, (double)o->channels, map_px);
    cJSON_AddNumberToObject(row, "flops", flops);
    if (p50_ms > 0) cJSON_AddNumberToObject(row, "tflop_per_s", flops / (p50_ms * 1e-3) / 1e12);
  } else {
    cJSON_AddStringToObject(row, "stats_reason", apx_last_error());
  }
  free(counts), free(spent);
}

/* docs/report.md, Timing (graph replay): BENCH_GRAPH_CALLS calls of the
 * entry captured once into a graph on the row's backend (apx_graph_*), one
 * untimed replay, then `n` replays each between the backend's timer
 * events: a sample is a replay's time over the calls it holds. Returns 1
 * with samples filled; 0 when the calls cannot be captured (why says why:
 * the row is then timed by events); -1 when a replay failed (why: the row
 * fails). */
static int time_by_graph(apx_context *ctx, const entry_def *e, const bench_options *o,
                         const apx_tensor *ts, const apx_call *call, double *samples, int n,
                         char *why, size_t why_size) {
  apx_graph *g = NULL;
  apx_status st = apx_graph_begin(ctx, call, &g);
  if (st != APX_OK) {
    snprintf(why, why_size, "apx_graph_begin: %s", apx_last_error());
    return 0;
  }
  for (int k = 0; k < BENCH_GRAPH_CALLS && st == APX_OK; k++)
    st = invoke(ctx, e, o, ts, apx_graph_call(g), NULL);
  if (st != APX_OK) {
    snprintf(why, why_size, "a captured call: %s", apx_last_error());
    apx_graph_free(ctx, g);
    return 0;
  }
  st = apx_graph_end(ctx, g);
  if (st != APX_OK) {
    snprintf(why, why_size, "apx_graph_end: %s", apx_last_error());
    apx_graph_free(ctx, g);
    return 0;
  }
  st = apx_graph_replay(ctx, g, call);
  if (st == APX_OK) st = apx_sync(ctx, call);
  for (int i = 0; i < n && st == APX_OK; i++) {
    apx_timer *timer = NULL;
    st = apx_timer_begin(ctx, call->backend, call, &timer);
    if (st != APX_OK) break;
    apx_status replayed = apx_graph_replay(ctx, g, call);
    double ms = 0;
    char replay_error[512];
    snprintf(replay_error, sizeof replay_error, "%s", apx_last_error());
    st = apx_timer_end(ctx, timer, &ms);
    if (replayed != APX_OK) {
      snprintf(why, why_size, "replay %d: %s", i + 1, replay_error);
      apx_graph_free(ctx, g);
      return -1;
    }
    samples[i] = ms / BENCH_GRAPH_CALLS;
  }
  if (st == APX_OK) st = apx_sync(ctx, call);
  if (st != APX_OK) snprintf(why, why_size, "graph replay: %s", apx_last_error());
  apx_graph_free(ctx, g);
  return st == APX_OK ? 1 : -1;
}

/* Measure one backend; returns the row object. *p50_out is set for
 * speedups when the row is ok. Returns NULL when the run must abort. */
static cJSON *measure_row(run_state *rs, const entry_def *e, bench_case *c,
                          const struct apx_backend_info *b,
                          const apx_tensor *reference, const char *ref_reason,
                          cJSON *entry_json, double *p50_out) {
  apx_context *ctx = rs->ctx;
  const bench_options *o = rs->opts;
  char why[1024];
  *p50_out = NAN;

  device_tensors dev;
  if (place_case(ctx, c, b->device, &dev, why, sizeof why) != 0) {
    free_device_tensors(ctx, &dev);
    return row_failed(rs, "%s", why);
  }
  /* the default dispatch with tensors on this device, once per device kind */
  if (b->device != APX_DEVICE_HOST &&
      !cJSON_GetObjectItemCaseSensitive(entry_json, "dispatch_cuda")) {
    cJSON_AddItemToObject(entry_json, "dispatch_cuda",
                          explanation_json(ctx, e, o, dev.t, "cuda"));
  }

  if (o->cpu_time && b->device != APX_DEVICE_HOST) {
    free_device_tensors(ctx, &dev);
    return row_skipped("--timer cpu-time times host backends only; %s runs on a device",
                       b->name);
  }
  apx_call call = APX_CALL_INIT;
  call.backend = b->name;
  apx_explanation ex;
  memset(&ex, 0, sizeof ex);
  apx_status st = invoke(ctx, e, o, dev.t, &call, &ex);
  if (st == APX_ERR_UNSUPPORTED) {
    cJSON *row = row_skipped("%s", passed_over_reason(&ex, b->name));
    free_device_tensors(ctx, &dev);
    return row;
  }
  if (st != APX_OK) {
    cJSON *row = row_failed(rs, "explain: %s: %s", apx_status_name(st),
                            apx_last_error());
    free_device_tensors(ctx, &dev);
    return row;
  }
  if (fault_injected(rs)) {
    free_device_tensors(ctx, &dev);
    return NULL;
  }

  int reps = o->repetitions > 0 ? o->repetitions : 1;
  int n_samples = o->iters * reps;
  double *samples = calloc((size_t)n_samples, sizeof *samples);
  double *rep_medians = calloc((size_t)reps * 2, sizeof *rep_medians);
  double *rep_mins = rep_medians ? rep_medians + reps : NULL;
  if (!samples || !rep_medians) {
    free(samples);
    free(rep_medians);
    free_device_tensors(ctx, &dev);
    return row_failed(rs, "out of memory for %d samples", n_samples);
  }
  cJSON *row = NULL;
  int total = o->warmup + n_samples;
  for (int i = 0; i < o->warmup; i++) {
    progress(rs, e, b->name, i + 1, total);
    st = invoke(ctx, e, o, dev.t, &call, NULL);
    if (st == APX_OK) st = apx_sync(ctx, &call);
    if (st != APX_OK) {
      row = row_failed(rs, "warm-up call %d: %s: %s", i + 1, apx_status_name(st),
                       apx_last_error());
      goto done;
    }
  }
  int peak_supported = apx_reset_peak_memory(ctx, b->name) == APX_OK;
  /* the backend's own timer (events on cuda); a backend without one is
   * timed on the host's monotonic clock around the call and a sync;
   * --timer cpu-time: the process's CPU clock around the call and a sync
   * (time the process was descheduled does not count) */
  int host_clock = o->cpu_time;
  clockid_t host_clock_id = o->cpu_time ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
  char timer_reason[512] = "";
  if (o->cpu_time) snprintf(timer_reason, sizeof timer_reason, "--timer cpu-time");
  /* --graph-replay: a device row's samples from graph replays; a row that
   * cannot be captured is timed by events below and says why */
  int graphed = 0;
  char graph_reason[600] = "";
  if (o->graph_replay && b->device != APX_DEVICE_HOST && !o->cpu_time) {
    graphed = time_by_graph(ctx, e, o, dev.t, &call, samples, n_samples, graph_reason,
                            sizeof graph_reason);
    if (graphed < 0) {
      row = row_failed(rs, "%s", graph_reason);
      goto done;
    }
  }
  /* repetitions: the timed loop again, independently; each keeps its own
   * median, and the compare's test runs on those medians */
  for (int i = graphed ? n_samples : 0; i < n_samples; i++) {
    progress(rs, e, b->name, o->warmup + i + 1, total);
    apx_timer *timer = NULL;
    struct timespec t0 = {0, 0}, t1 = {0, 0};
    if (!host_clock) {
      st = apx_timer_begin(ctx, b->name, &call, &timer);
      if (st == APX_ERR_UNSUPPORTED && i == 0) {
        host_clock = 1;
        snprintf(timer_reason, sizeof timer_reason, "%s", apx_last_error());
      } else if (st != APX_OK) {
        row = row_failed(rs, "timer_begin: %s: %s", apx_status_name(st),
                         apx_last_error());
        goto done;
      }
    }
    if (host_clock) clock_gettime(host_clock_id, &t0);
    st = invoke(ctx, e, o, dev.t, &call, NULL);
    if (st != APX_OK) {
      /* end the timer anyway so it is freed; the op's error wins */
      char op_error[512];
      snprintf(op_error, sizeof op_error, "%s", apx_last_error());
      double ignored;
      if (timer) apx_timer_end(ctx, timer, &ignored);
      row = row_failed(rs, "call %d: %s: %s", i + 1, apx_status_name(st), op_error);
      goto done;
    }
    if (host_clock) {
      st = apx_sync(ctx, &call);
      clock_gettime(host_clock_id, &t1);
      samples[i] = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
                   (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
      if (st != APX_OK) {
        row = row_failed(rs, "sync after call %d: %s: %s", i + 1,
                         apx_status_name(st), apx_last_error());
        goto done;
      }
      continue;
    }
    st = apx_timer_end(ctx, timer, &samples[i]);
    if (st != APX_OK) {
      row = row_failed(rs, "timer_end: %s: %s", apx_status_name(st),
                       apx_last_error());
      goto done;
    }
  }
  st = apx_sync(ctx, &call);
  if (st != APX_OK) {
    row = row_failed(rs, "sync: %s: %s", apx_status_name(st), apx_last_error());
    goto done;
  }
  rs->rows_measured++;

  bench_stats stats;
  bench_stats_compute(samples, n_samples, &stats);
  for (int r = 0; r < reps; r++) {
    bench_stats one;
    bench_stats_compute(samples + (size_t)r * (size_t)o->iters, o->iters, &one);
    rep_medians[r] = one.p50_ms;
    rep_mins[r] = one.min_ms;
  }
  bench_summary summary;
  bench_summary_compute(rep_medians, reps, &summary);
  row = cJSON_CreateObject();
  cJSON_AddStringToObject(row, "status", "ok");
  cJSON_AddNullToObject(row, "reason");
  bench_json_number(row, "p50_ms", stats.p50_ms, NULL);
  bench_json_number(row, "p95_ms", stats.p95_ms, NULL);
  bench_json_number(row, "mean_ms", stats.mean_ms, NULL);
  bench_json_number(row, "min_ms", stats.min_ms, NULL);
  bench_json_number(row, "max_ms", stats.max_ms, NULL);
  cJSON_AddNumberToObject(row, "iters", o->iters);
  cJSON_AddNumberToObject(row, "warmup", o->warmup);
  /* schema 1.1: the per-repetition medians and their summary */
  cJSON *rj = cJSON_AddObjectToObject(row, "repetitions");
  cJSON_AddNumberToObject(rj, "n", reps);
  bench_json_number(rj, "min_ms", summary.min, NULL);
  bench_json_number(rj, "median_ms", summary.median, NULL);
  bench_json_number(rj, "p95_ms", summary.p95, NULL);
  bench_json_number(rj, "mad_ms", summary.mad, NULL);
  cJSON *medians = cJSON_AddArrayToObject(rj, "medians_ms");
  cJSON *mins = cJSON_AddArrayToObject(rj, "mins_ms");
  for (int r = 0; r < reps; r++) {
    cJSON_AddItemToArray(medians, cJSON_CreateNumber(rep_medians[r]));
    cJSON_AddItemToArray(mins, cJSON_CreateNumber(rep_mins[r]));
  }
  cJSON_AddStringToObject(row, "timer", o->cpu_time ? "process_cpu_time"
                                        : graphed     ? "graph_replay"
                                        : host_clock  ? "host_clock"
                                                      : "backend");
  if (host_clock) cJSON_AddStringToObject(row, "timer_reason", timer_reason);
  /* schema 1.2: graph replay's calls per sample, or why events timed it */
  if (graphed) cJSON_AddNumberToObject(row, "graph_calls", BENCH_GRAPH_CALLS);
  if (graph_reason[0]) cJSON_AddStringToObject(row, "graph_replay_reason", graph_reason);
  double seconds = stats.p50_ms / 1000.0;
  if (stats.p50_ms > 0) {
    bench_json_number(row, e->throughput_key, c->work / seconds, NULL);
  } else {
    bench_json_number(row, e->throughput_key, NAN,
                      "p50_ms is 0: below the timer's resolution");
  }
  double bytes = case_bytes_moved(c);
  cJSON_AddNumberToObject(row, "bytes_moved", bytes);
  if (stats.p50_ms > 0) {
    bench_json_number(row, "gb_per_s", bytes / seconds / 1e9, NULL);
  } else {
    bench_json_number(row, "gb_per_s", NAN,
                      "p50_ms is 0: below the timer's resolution");
  }
  uint64_t peak = 0;
  if (b->device == APX_DEVICE_HOST) {
    bench_json_number(row, "peak_memory_mb", NAN,
                      "host backend: no device memory to account");
  } else if (!peak_supported || apx_peak_memory(ctx, b->name, &peak) != APX_OK) {
    bench_json_number(row, "peak_memory_mb", NAN, apx_last_error());
  } else {
    cJSON_AddNumberToObject(row, "peak_memory_mb",
                            (double)peak / (1024.0 * 1024.0));
  }

  if (e->op == APX_OP_FF_INFER) ff_metrics(ctx, e, o, dev.t, &call, stats.p50_ms, row);

  /* parity: bring the output home and compare with the cpu reference */
  const apx_tensor *out = &dev.t[c->output];
  apx_tensor home = *out;
  int home_owned = 0;
  if (b->device != APX_DEVICE_HOST) {
    st = apx_tensor_alloc(ctx, APX_DEVICE_HOST, 0, out->dtype, out->ndim,
                          out->shape, &home);
    if (st == APX_OK) {
      home_owned = 1;
      st = apx_tensor_copy(ctx, &home, out, NULL);
    }
    if (st != APX_OK) {
      cJSON_Delete(row);
      row = row_failed(rs, "copying the output home: %s", apx_last_error());
      if (home_owned) apx_tensor_free(ctx, &home);
      goto done;
    }
  }
  if (reference) {
    bench_parity parity;
    bench_parity_compare(reference, &home, e->exact, e->extra_ulps, &parity);
    cJSON_AddItemToObject(row, "parity", parity_json(&parity, e->exact));
    if (!parity.ok) {
      int64_t i = parity.first_bad;
      char reason[512];
      snprintf(reason, sizeof reason,
               "parity: %" PRId64 " element(s) break %s against cpu (%" PRId64
               " NaN); first at flat index [%" PRId64 "]: [%.9g] vs cpu [%.9g]",
               parity.bad_count, e->exact ? "bit-exactness" : "2*(atol + rtol*|ref|)",
               parity.nan_count, i, bench_get(&home, i), bench_get(reference, i));
      cJSON_ReplaceItemInObjectCaseSensitive(row, "status",
                                             cJSON_CreateString("failed"));
      cJSON_ReplaceItemInObjectCaseSensitive(row, "reason",
                                             cJSON_CreateString(reason));
      rs->any_failed = 1;
    }
  } else {
    cJSON_AddNullToObject(row, "parity");
    cJSON_AddStringToObject(row, "parity_reason", ref_reason);
  }
  if (home_owned) apx_tensor_free(ctx, &home);
  if (strcmp(cJSON_GetObjectItemCaseSensitive(row, "status")->valuestring, "ok") ==
      0) {
    *p50_out = stats.p50_ms;
  }

done:
  if (!row) row = row_failed(rs, "internal: no result");
  free(samples);
  free(rep_medians);
  free_device_tensors(ctx, &dev);
  return row;
}

/* One untimed cpu call into out, poisoned with `poison` bytes first. */
static apx_status cpu_call(run_state *rs, const entry_def *e, const bench_case *c,
                           const apx_tensor *out, unsigned char poison) {
  memset(out->data, poison, (size_t)tensor_bytes(out));
  apx_tensor ts[MAX_TENSORS];
  for (int i = 0; i < c->count; i++) ts[i] = c->t[i].host;
  ts[c->output] = *out;
  apx_call call = APX_CALL_INIT;
  call.backend = "cpu";
  return invoke(rs->ctx, e, rs->opts, ts, &call, NULL);
}

/* The cpu backend's output for the entry's inputs, computed untimed into
 * ref (a host tensor of the output's shape). It is computed twice, over
 * two different poison patterns: an element that differs between the two
 * was never written (docs/ops.md, Every output written), and the reference is then
 * refused. Returns 0, or -1 with the reason in why. */
static int cpu_reference(run_state *rs, const entry_def *e, bench_case *c,
                         apx_tensor *ref, char *why, size_t why_size) {
  if (rs->cpu_index < 0) {
    snprintf(why, why_size, "no cpu backend is configured");
    return -1;
  }
  const struct apx_backend_info *cpu = &rs->backends[rs->cpu_index];
  if (cpu->state != APX_BACKEND_OK) {
    char buf[512];
    snprintf(why, why_size, "cpu backend unusable: %s",
             backend_unusable_reason(cpu, buf, sizeof buf));
    return -1;
  }
  const apx_tensor *out = &c->t[c->output].host;
  apx_tensor second;
  memset(&second, 0, sizeof second);
  if (apx_tensor_alloc(rs->ctx, APX_DEVICE_HOST, 0, out->dtype, out->ndim,
                       out->shape, ref) != APX_OK ||
      apx_tensor_alloc(rs->ctx, APX_DEVICE_HOST, 0, out->dtype, out->ndim,
                       out->shape, &second) != APX_OK) {
    snprintf(why, why_size, "cannot allocate the reference: %s", apx_last_error());
    apx_tensor_free(rs->ctx, ref);
    return -1;
  }
  apx_status st = cpu_call(rs, e, c, &second, 0x5A);
  if (st == APX_OK) st = cpu_call(rs, e, c, ref, 0xA5);
  if (st != APX_OK) {
    snprintf(why, why_size, "cpu reference call failed: %s: %s",
             apx_status_name(st), apx_last_error());
    apx_tensor_free(rs->ctx, ref);
    apx_tensor_free(rs->ctx, &second);
    return -1;
  }
  int64_t n = apx_tensor_numel(out), unwritten = 0, first = -1;
  size_t elem = apx_dtype_size(out->dtype);
  for (int64_t i = 0; i < n; i++) {
    if (memcmp((const char *)ref->data + (size_t)i * elem,
               (const char *)second.data + (size_t)i * elem, elem) != 0) {
      if (first < 0) first = i;
      unwritten++;
    }
  }
  apx_tensor_free(rs->ctx, &second);
  if (unwritten > 0) {
    snprintf(why, why_size,
             "cpu reference unusable: %" PRId64 " of %" PRId64
             " output elements differ between two calls over different "
             "poison (unwritten or nondeterministic), first at flat index [%" PRId64 "]",
             unwritten, n, first);
    apx_tensor_free(rs->ctx, ref);
    return -1;
  }
  return 0;
}

static cJSON *work_json(const entry_def *e, const bench_case *c) {
  cJSON *w = cJSON_CreateObject();
  cJSON_AddStringToObject(w, "throughput", e->throughput_key);
  cJSON_AddNumberToObject(w, "count", c->work);
  /* entries without an op have no tensors, hence no traffic to state */
  if (c->count > 0) cJSON_AddNumberToObject(w, "bytes_moved", case_bytes_moved(c));
  return w;
}

/* An entry whose every row is skipped for one reason. */
static cJSON *run_all_skipped(run_state *rs, const entry_def *e,
                              const bench_case *c, const char *reason) {
  cJSON *ej = cJSON_CreateObject();
  cJSON_AddStringToObject(ej, "mode", entry_mode(e, rs->opts));
  cJSON *d = cJSON_AddObjectToObject(ej, "dispatch");
  cJSON_AddNullToObject(d, "backend");
  cJSON_AddStringToObject(d, "reason", reason);
  cJSON_AddArrayToObject(d, "passed_over");
  cJSON_AddItemToObject(ej, "work", work_json(e, c));
  cJSON *rows = cJSON_AddObjectToObject(ej, "rows");
  for (int i = 0; i < rs->backend_count; i++) {
    cJSON_AddItemToObject(rows, rs->backends[i].name, row_skipped("%s", reason));
  }
  cJSON_AddObjectToObject(ej, "speedup_vs_cpu");
  return ej;
}

static int find_backend(const run_state *rs, const char *name) {
  for (int i = 0; i < rs->backend_count; i++) {
    if (strcmp(rs->backends[i].name, name) == 0) return i;
  }
  return -1;
}

static void trt_engine_warning(void *user, const char *line) {
  (void)user;
  fprintf(stderr, "apexx-bench: warning: %s\n", line);
}

/* The trt row of a runner's result (rc as apexx_trt_engine_run_fn):
 * skipped or failed with its reason, else ok with the timings, the file it
 * ran (path_key) and throughput_key = work / p50 in seconds; *ran set when
 * it ran. */
static cJSON *trt_result_row(run_state *rs, int rc, const apexx_trt_engine_result *res,
                             const char *path_key, const char *path,
                             const char *throughput_key, double work, int *ran) {
  const bench_options *o = rs->opts;
  *ran = 0;
  if (rc == 1) return row_skipped("%s", res->reason);
  if (rc != 0) return row_failed(rs, "%s", res->reason);
  *ran = 1;
  rs->rows_measured++;
  cJSON *row = cJSON_CreateObject();
  cJSON_AddStringToObject(row, "status", "ok");
  cJSON_AddNullToObject(row, "reason");
  cJSON_AddStringToObject(row, path_key, path);
  cJSON_AddStringToObject(row, "mode", res->mode);
  cJSON_AddStringToObject(row, "tensorrt_version", res->trt_version);
  bench_json_number(row, "p50_ms", res->p50_ms, NULL);
  bench_json_number(row, "p95_ms", res->p95_ms, NULL);
  bench_json_number(row, "mean_ms", res->mean_ms, NULL);
  cJSON_AddNumberToObject(row, "iters", o->iters);
  cJSON_AddNumberToObject(row, "warmup", o->warmup);
  cJSON_AddStringToObject(row, "timer", "cuda_events");
  bench_json_number(row, "peak_memory_mb", res->peak_memory_mb, NULL);
  if (res->p50_ms > 0)
    bench_json_number(row, throughput_key, work / (res->p50_ms / 1000.0), NULL);
  else
    bench_json_number(row, throughput_key, NAN, "p50_ms is 0: below the timer's resolution");
  return row;
}

/* The plugin library: --trt-plugin-lib, else [backend trt] plugin_library
 * in effect ($APEXX_TRT_PLUGIN_LIB, the configuration's value or the
 * installed library); NULL when neither names one. */
static const char *trt_plugin_path(const run_state *rs) {
  if (rs->opts->trt_plugin_lib) return rs->opts->trt_plugin_lib;
  for (int i = 0, n = apx_config_key_count(rs->ctx); i < n; i++) {
    apx_config_key_info k;
    if (apx_config_key(rs->ctx, i, &k) == APX_OK && k.key &&
        strcmp(k.section, "backend trt") == 0 && strcmp(k.key, "plugin_library") == 0)
      return k.value;
  }
  return NULL;
}

/* tensorrt.engine with an engine file: the engine runner of the plugin
 * library (include/apexx/trt_engine_runner.h, docs/trt.md), opened with the
 * core's checks (apx_library_open). The library stays loaded (TensorRT and
 * the cuda kernels keep state in it). Its skip reasons are the report's
 * (docs/report.md, Rows), plus tensorrt_unavailable: with the probe's
 * reason where TensorRT or the library is missing. */
static cJSON *trt_engine_row(run_state *rs, const char *path, int *ran) {
  const bench_options *o = rs->opts;
  const char *lib = trt_plugin_path(rs);
  *ran = 0;
  if (!lib)
    return row_skipped("tensorrt_unavailable:plugin library not loaded: neither "
                       "--trt-plugin-lib nor [backend trt] plugin_library names one");
  void *h = NULL;
  if (apx_library_open(rs->ctx, lib, &h) != APX_OK)
    return row_skipped("tensorrt_unavailable:plugin library not loaded: %s", apx_last_error());
  void *sym = dlsym(h, APEXX_TRT_ENGINE_RUN_SYMBOL);
  if (!sym) return row_skipped("tensorrt_unavailable:%s lacks %s", lib, APEXX_TRT_ENGINE_RUN_SYMBOL);
  apexx_trt_engine_run_fn run;
  memcpy(&run, &sym, sizeof run);
  apexx_trt_engine_request q;
  memset(&q, 0, sizeof q);
  q.size = sizeof q;
  q.engine_path = path;
  q.input_shapes = o->trt_input_shapes;
  q.input_shape_count = o->trt_input_shape_count;
  q.warmup = o->warmup;
  q.iters = o->iters;
  q.seed = o->seed;
  q.warn = trt_engine_warning;
  apexx_trt_engine_result res;
  int rc = run(&q, &res);
  return trt_result_row(rs, rc, &res, "engine_path", path, "frames_per_s",
                        (double)res.frames, ran);
}

/* An entry that only the trt backend runs, with its one row: every other
 * backend's row dropped, the dispatch naming trt when the row ran, else
 * giving the row's reason. */
static cJSON *trt_only_entry(run_state *rs, const entry_def *e, const bench_case *c,
                             cJSON *row, int ran) {
  const cJSON *why = cJSON_GetObjectItemCaseSensitive(row, "reason");
  cJSON *ej = run_all_skipped(rs, e, c,
                              cJSON_IsString(why) ? why->valuestring : "trt runner");
  cJSON *rows = cJSON_GetObjectItemCaseSensitive(ej, "rows");
  for (int i = 0; i < rs->backend_count; i++) {
    if (strcmp(rs->backends[i].name, "trt") != 0)
      cJSON_DeleteItemFromObjectCaseSensitive(rows, rs->backends[i].name);
  }
  cJSON_DeleteItemFromObjectCaseSensitive(rows, "trt");
  cJSON_AddItemToObject(rows, "trt", row);
  if (ran) {
    cJSON *d = cJSON_GetObjectItemCaseSensitive(ej, "dispatch");
    cJSON_ReplaceItemInObjectCaseSensitive(d, "backend", cJSON_CreateString("trt"));
  }
  return ej;
}

static cJSON *run_trt_engine_file(run_state *rs, const entry_def *e, const bench_case *c,
                                  const char *path) {
  int ran = 0;
  cJSON *row = trt_engine_row(rs, path, &ran);
  return trt_only_entry(rs, e, c, row, ran);
}

/* tensorrt.tilessm_plugin with the plugin library loaded (handle h, kept
 * loaded as the engine row's) and the trt backend usable: the library's
 * apexx_trt_plugin_run (include/apexx/trt_engine_runner.h) builds a network of
 * one TileSSMScan plugin over fp16 tokens [scan_batch, steps,
 * scan_channels] and times its engine; tokens_per_s is
 * scan_batch * steps * scan_channels / p50. */
static cJSON *run_trt_plugin(run_state *rs, const entry_def *e, const bench_case *c,
                             void *h) {
  const bench_options *o = rs->opts;
  int ran = 0;
  cJSON *row;
  void *sym = dlsym(h, APEXX_TRT_PLUGIN_RUN_SYMBOL);
  if (!sym) {
    row = row_skipped("tensorrt_unavailable:%s lacks %s", o->trt_plugin_lib,
                      APEXX_TRT_PLUGIN_RUN_SYMBOL);
  } else {
    apexx_trt_plugin_run_fn run;
    memcpy(&run, &sym, sizeof run);
    apexx_trt_plugin_request q;
    memset(&q, 0, sizeof q);
    q.size = sizeof q;
    q.batch = o->scan_batch;
    q.steps = o->steps;
    q.channels = o->scan_channels;
    q.warmup = o->warmup;
    q.iters = o->iters;
    q.seed = o->seed;
    apexx_trt_engine_result res;
    int rc = run(&q, &res);
    row = trt_result_row(rs, rc, &res, "plugin_library", o->trt_plugin_lib, "tokens_per_s",
                         (double)o->scan_batch * (double)o->steps * (double)o->scan_channels,
                         &ran);
  }
  return trt_only_entry(rs, e, c, row, ran);
}

static cJSON *run_trt_engine(run_state *rs, const entry_def *e,
                             const bench_case *c) {
  const char *path = rs->opts->trt_engine_path;
  char reason[1200];
  struct stat st;
  if (!path) {
    snprintf(reason, sizeof reason, "missing_trt_engine_path");
  } else if (stat(path, &st) != 0) {
    char abs[1024];
    if (path[0] == '/' || !getcwd(abs, sizeof abs)) {
      snprintf(reason, sizeof reason, "engine_not_found:%s", path);
    } else {
      snprintf(reason, sizeof reason, "engine_not_found:%s/%s", abs, path);
    }
  } else {
    return run_trt_engine_file(rs, e, c, path);
  }
  cJSON *ej = run_all_skipped(rs, e, c, reason);
  /* only the trt backend runs engines: other rows would say nothing */
  cJSON *rows = cJSON_GetObjectItemCaseSensitive(ej, "rows");
  for (int i = 0; i < rs->backend_count; i++) {
    if (strcmp(rs->backends[i].name, "trt") != 0) {
      cJSON_DeleteItemFromObjectCaseSensitive(rows, rs->backends[i].name);
    }
  }
  if (find_backend(rs, "trt") < 0) {
    cJSON_AddItemToObject(rows, "trt",
                          row_skipped("not_configured: no [backend trt] section"));
  }
  return ej;
}

/* Run one op entry on every backend. Returns NULL when the run aborts. */
static cJSON *run_entry(run_state *rs, const entry_def *e) {
  apx_context *ctx = rs->ctx;
  bench_case c;
  describe_case(e, rs->opts, &c);
  if (e->kind == KIND_TRT_ENGINE) return run_trt_engine(rs, e, &c);
  if (e->op == APX_OP_FF_INFER) {
    const bench_options *o = rs->opts;
    if (o->height % 16 || o->width % 16 || o->kmax > (o->height / 16) * (o->width / 16))
      return run_all_skipped(rs, e, &c,
                             "profile: the end-to-end path needs height and width "
                             "divisible by 16 (tile_l0) and kmax <= (H/16)*(W/16)");
  }

  /* tensorrt.tilessm_plugin: only the trt backend, and only with a plugin
   * library, which is loaded before the backend's state is asked (loading
   * it needs neither TensorRT nor a device: a file that is no library is
   * cdll_load_failed wherever the row runs) */
  const char *trt_skip = NULL;
  char trt_reason[1024];
  if (e->kind == KIND_TRT_PLUGIN) {
    int trt = find_backend(rs, "trt");
    void *plugin = NULL;
    if (!rs->opts->trt_plugin_lib) {
      trt_skip = "missing_plugin_library";
    } else if (trt < 0) {
      trt_skip = "not_configured: no [backend trt] section";
    } else if (access(rs->opts->trt_plugin_lib, R_OK) != 0) {
      trt_skip = "missing_plugin_library";
    } else if (apx_library_open(rs->ctx, rs->opts->trt_plugin_lib, &plugin) != APX_OK) {
      snprintf(trt_reason, sizeof trt_reason, "cdll_load_failed:%s", apx_last_error());
      trt_skip = trt_reason;
    } else if (rs->backends[trt].state != APX_BACKEND_OK) {
      trt_skip = backend_unusable_reason(&rs->backends[trt], trt_reason,
                                         sizeof trt_reason);
    } else if (!backend_selected(rs, "trt")) {
      trt_skip = "not_selected: excluded by --backends";
    }
    if (trt_skip) {
      cJSON *ej = run_all_skipped(rs, e, &c, trt_skip);
      cJSON *rows = cJSON_GetObjectItemCaseSensitive(ej, "rows");
      for (int i = 0; i < rs->backend_count; i++) {
        if (strcmp(rs->backends[i].name, "trt") != 0) {
          cJSON_DeleteItemFromObjectCaseSensitive(rows, rs->backends[i].name);
        }
      }
      if (trt < 0) cJSON_AddItemToObject(rows, "trt", row_skipped("%s", trt_skip));
      return ej;
    }
    return run_trt_plugin(rs, e, &c, plugin);
  }

  cJSON *ej = cJSON_CreateObject();
  if (e->kind != KIND_COPY) cJSON_AddStringToObject(ej, "op", apx_op_name(e->op));
  cJSON_AddStringToObject(ej, "mode", entry_mode(e, rs->opts));
  char err[1024];
  if (generate_case(ctx, rs->opts, e, &c, err, sizeof err) != 0) {
    free_case(ctx, &c);
    cJSON_Delete(ej);
    snprintf(rs->err, rs->err_size, "%s", err);
    return NULL;
  }
  cJSON_AddItemToObject(ej, "tensors", tensors_json(&c));
  cJSON_AddItemToObject(ej, "work", work_json(e, &c));
  apx_tensor ts[MAX_TENSORS];
  for (int i = 0; i < c.count; i++) ts[i] = c.t[i].host;
  cJSON_AddItemToObject(ej, "dispatch", explanation_json(ctx, e, rs->opts, ts, "host"));

  apx_tensor reference;
  memset(&reference, 0, sizeof reference);
  char ref_reason[1024] = "";
  int have_ref = 0;
  if (rs->opts->parity) {
    have_ref = cpu_reference(rs, e, &c, &reference, ref_reason, sizeof ref_reason) == 0;
  } else {
    snprintf(ref_reason, sizeof ref_reason, "--parity off: no cpu reference computed");
  }

  cJSON *rows = cJSON_AddObjectToObject(ej, "rows");
  double p50[APX_MAX_BACKENDS];
  for (int i = 0; i < rs->backend_count; i++) {
    const struct apx_backend_info *b = &rs->backends[i];
    p50[i] = NAN;
    if (e->kind == KIND_TRT_PLUGIN && strcmp(b->name, "trt") != 0) continue;
    cJSON *row;
    char buf[1024];
    if (!backend_selected(rs, b->name)) {
      row = row_skipped("not_selected: excluded by --backends");
    } else if (b->state != APX_BACKEND_OK) {
      row = row_skipped("%s", backend_unusable_reason(b, buf, sizeof buf));
    } else if (e->id == E_FF_INFER_GRAPH && b->device == APX_DEVICE_HOST) {
      row = row_skipped("not_applicable: graph replay replays CUDA graphs; the "
                        "%s backend runs every call eagerly (the ff_infer row)",
                        b->name);
    } else {
      row = measure_row(rs, e, &c, b, have_ref ? &reference : NULL, ref_reason,
                        ej, &p50[i]);
      if (!row) {
        if (have_ref) apx_tensor_free(ctx, &reference);
        free_case(ctx, &c);
        cJSON_Delete(ej);
        return NULL;
      }
    }
    /* an unwritten cpu output fails the cpu row, whose own parity (against
     * itself) could not see it */
    if (i == rs->cpu_index && !have_ref &&
        strncmp(ref_reason, "cpu reference unusable", 22) == 0 &&
        strcmp(cJSON_GetObjectItemCaseSensitive(row, "status")->valuestring, "ok") == 0) {
      cJSON_ReplaceItemInObjectCaseSensitive(row, "status", cJSON_CreateString("failed"));
      cJSON_ReplaceItemInObjectCaseSensitive(row, "reason", cJSON_CreateString(ref_reason));
      p50[i] = NAN;
      rs->any_failed = 1;
    }
    cJSON_AddItemToObject(rows, b->name, row);
  }
  /* speedup over the cpu row: cpu p50 / backend p50 */
  cJSON *speedup = cJSON_AddObjectToObject(ej, "speedup_vs_cpu");
  if (rs->cpu_index >= 0 && isfinite(p50[rs->cpu_index])) {
    for (int i = 0; i < rs->backend_count; i++) {
      if (i == rs->cpu_index || !isfinite(p50[i]) || p50[i] <= 0) continue;
      cJSON_AddNumberToObject(speedup, rs->backends[i].name,
                              p50[rs->cpu_index] / p50[i]);
    }
  }
  if (have_ref) apx_tensor_free(ctx, &reference);
  free_case(ctx, &c);
  return ej;
}

int bench_run(apx_context *ctx, const bench_options *opts, cJSON *report,
              char *err, size_t err_size) {
  run_state rs;
  memset(&rs, 0, sizeof rs);
  rs.ctx = ctx;
  rs.opts = opts;
  rs.err = err;
  rs.err_size = err_size;
  rs.cpu_index = -1;
  rs.fail_after = -1;
  const char *fail_after = getenv("APEXX_BENCH_FAIL_AFTER");
  if (fail_after && *fail_after) {
    char *end = NULL;
    long v = strtol(fail_after, &end, 10);
    if (*end != '\0' || v < 0) {
      snprintf(err, err_size, "APEXX_BENCH_FAIL_AFTER: [%s] is not an integer >= 0",
               fail_after);
      return 1;
    }
    rs.fail_after = v;
  }
  rs.progress = !opts->quiet && isatty(STDERR_FILENO);
  rs.backend_count = apx_backend_count(ctx);
  if (rs.backend_count > APX_MAX_BACKENDS) rs.backend_count = APX_MAX_BACKENDS;
  for (int i = 0; i < rs.backend_count; i++) {
    if (apx_backend_info(ctx, i, &rs.backends[i]) != APX_OK) {
      snprintf(err, err_size, "backend %d: %s", i, apx_last_error());
      return 1;
    }
    if (strcmp(rs.backends[i].name, "cpu") == 0) rs.cpu_index = i;
  }

  int want_ff = 0;
  for (int i = 0; i < E_COUNT; i++)
    want_ff |= entries[i].op == APX_OP_FF_INFER && entry_selected(opts, &entries[i]);
  ff_weights = NULL;
  if (want_ff) {
    apx_status st = opts->ff_weights_path
                        ? apx_ff_weights_load(ctx, opts->ff_weights_path, &ff_weights)
                        : apx_ff_weights_seeded(ctx, opts->channels, opts->seed, &ff_weights);
    if (st != APX_OK) {
      snprintf(err, err_size, "--ff-weights: %s", apx_last_error());
      return 1;
    }
    if (apx_ff_weights_channels(ff_weights) != opts->channels) {
      snprintf(err, err_size, "--ff-weights: [%s] holds %lld channels, the profile has %lld",
               opts->ff_weights_path ? opts->ff_weights_path : "seeded",
               (long long)apx_ff_weights_channels(ff_weights), (long long)opts->channels);
      apx_ff_weights_free(ctx, ff_weights);
      ff_weights = NULL;
      return 1;
    }
  }

  cJSON *benchmarks = cJSON_CreateObject();
  for (int s = 0; s < SECTION_COUNT; s++) {
    cJSON *section = NULL;
    for (int i = 0; i < E_COUNT; i++) {
      const entry_def *e = &entries[i];
      if (strcmp(e->section, sections[s]) != 0 || !entry_selected(opts, e)) continue;
      if (!section) section = cJSON_AddObjectToObject(benchmarks, sections[s]);
      cJSON *ej = run_entry(&rs, e);
      if (!ej) {
        cJSON_Delete(benchmarks);
        apx_ff_weights_free(ctx, ff_weights);
        ff_weights = NULL;
        return 1;
      }
      cJSON_AddItemToObject(section, e->name, ej);
    }
  }
  apx_ff_weights_free(ctx, ff_weights);
  ff_weights = NULL;
  cJSON_AddStringToObject(report, "status", rs.any_failed ? "failed" : "ok");
  cJSON_AddItemToObject(report, "benchmarks", benchmarks);
  return rs.any_failed ? 2 : 0;
}
