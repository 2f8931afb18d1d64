/* SPDX-License-Identifier: Apache-2.0 */
/* The suite's entries (apexx-bench(1), ENTRIES): every op with one setting
 * of its mode, its section, its throughput and parity rule; which entries
 * a run selects, and the call each makes (or explains) on a case's
 * tensors. */
#include "runner.h"

#include <string.h>

const entry_def runner_entries[E_COUNT] = {
    {E_TILEPACK, "tile_ops", "tilepack", KIND_OP, APX_OP_TILEPACK, "kernel form", "tiles_per_s", 1,
     0},
    {E_TILEUNPACK_OVERRIDE, "tile_ops", "tileunpack_override", KIND_OP, APX_OP_TILEUNPACK,
     "override, ids, levels", "tiles_per_s", 1, 0},
    {E_TILEUNPACK_BLEND, "tile_ops", "tileunpack_blend", KIND_OP, APX_OP_TILEUNPACK,
     "blend alpha 0.5, ids, levels", "tiles_per_s", 0, 0},
    {E_FUSED_PACK_OP_UNPACK, "tile_ops", "fused_pack_op_unpack", KIND_OP,
     APX_OP_FUSED_PACK_OP_UNPACK, "value 1/0, gate 1/0, unique ids", "tiles_per_s", 0, 0},
    {E_FUSIONGATE_ALPHA, "tile_ops", "fusiongate_alpha", KIND_OP, APX_OP_FUSIONGATE_ALPHA,
     "log weights 1/1, bias 0", "elements_per_s", 0, 1},
    {E_FUSIONGATE_FUSE, "tile_ops", "fusiongate_fuse", KIND_OP, APX_OP_FUSIONGATE_FUSE,
     "out of place", "elements_per_s", 0, 0},
    {E_TILESSM_FORWARD, "tilessm", "tilessm_forward", KIND_OP, APX_OP_TILESSM_SCAN, "forward",
     "tokens_per_s", 0, 0},
    {E_TILESSM_BIDIRECTIONAL, "tilessm", "tilessm_bidirectional", KIND_OP, APX_OP_TILESSM_SCAN,
     "bidirectional, merge avg", "tokens_per_s", 0, 0},
    {E_GATHER, "indexing", "gather", KIND_OP, APX_OP_GATHER, "dim 0", "elements_per_s", 1, 0},
    {E_INDEX_SELECT, "indexing", "index_select", KIND_OP, APX_OP_INDEX_SELECT, "rows",
     "elements_per_s", 1, 0},
    {E_SCATTER_ADD, "indexing", "scatter_add", KIND_OP, APX_OP_SCATTER_ADD, "dim 0, out of place",
     "elements_per_s", 0, 0},
    {E_GATHER_BACKWARD, "indexing", "gather_backward", KIND_OP, APX_OP_GATHER_BACKWARD, "dim 0",
     "elements_per_s", 0, 0},
    {E_FF_INFER, "end_to_end_infer", "ff_infer", KIND_OP, APX_OP_FF_INFER,
     "eager, tiles 16/8, kmax K/2K", "frames_per_s", 0, 2},
    {E_TRT_TILESSM_PLUGIN, "tensorrt", "tilessm_plugin", KIND_TRT_PLUGIN, APX_OP_TILESSM_SCAN,
     "forward, fp16, TileSSMScan plugin", "tokens_per_s", 0, 0},
    {E_TRT_ENGINE, "tensorrt", "engine", KIND_TRT_ENGINE, APX_OP_COUNT, "serialized engine",
     "frames_per_s", 0, 0},
    {E_FF_INFER_GRAPH, "end_to_end_infer", "ff_infer_graph", KIND_OP, APX_OP_FF_INFER,
     "graph replay, tiles 16/8, kmax K/2K", "frames_per_s", 0, 2},
    {E_COPY, "reference", "copy", KIND_COPY, APX_OP_COUNT,
     "features-sized copy on the backend's device (host: memmove)", "elements_per_s", 1, 0},
};

/* reference first: its rows are the same run's copy bandwidth that the
 * other rows' pct_of_copy divides by (reference.c) */
const char *const runner_sections[] = {"reference", "tile_ops",         "tilessm",
                                       "indexing",  "end_to_end_infer", "tensorrt"};
const int runner_section_count = (int)(sizeof runner_sections / sizeof runner_sections[0]);

/* The end-to-end entries' weights: --ff-weights or the seeded generator,
 * made once per run (bench_run) for the profile's channel count. */
apx_ff_weights *runner_ff_weights;

int bench_op_name_known(const char *name) {
  for (int i = 0; i < E_COUNT; i++) {
    if (strcmp(runner_entries[i].name, name) == 0)
      return 1;
  }
  for (int i = 0; i < runner_section_count; i++) {
    if (strcmp(runner_sections[i], name) == 0)
      return 1;
  }
  return 0;
}

void bench_print_op_names(FILE *to) {
  for (int i = 0; i < runner_section_count; i++) {
    fprintf(to, "%s%s (", i ? "; " : "", runner_sections[i]);
    int first = 1;
    for (int e = 0; e < E_COUNT; e++) {
      if (strcmp(runner_entries[e].section, runner_sections[i]) != 0)
        continue;
      fprintf(to, "%s%s", first ? "" : ", ", runner_entries[e].name);
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
int runner_preset_profile(const bench_options *o) {
  return o->profile && strcmp(o->profile, "default") != 0;
}

/* The op's setting as the report states it. */
const char *runner_entry_mode(const entry_def *e, const bench_options *o) {
  if (runner_preset_profile(o) && e->id == E_TILEUNPACK_OVERRIDE)
    return "override, ids, no levels";
  if (runner_preset_profile(o) && e->id == E_TILEUNPACK_BLEND)
    return "blend alpha 0.5, ids, no levels";
  return e->mode;
}

int runner_entry_selected(const bench_options *opts, const entry_def *e) {
  if (opts->op_count == 0)
    return 1;
  if (e->kind == KIND_COPY) {
    /* the reference runs whenever an op runs, so every row has its share */
    for (int i = 0; i < E_COUNT; i++)
      if (runner_entries[i].kind == KIND_OP && runner_entry_selected(opts, &runner_entries[i]))
        return 1;
  }
  if (e->kind == KIND_COPY) {
    /* the reference runs whenever an op runs, so every row has its share */
    for (int i = 0; i < E_COUNT; i++)
      if (runner_entries[i].kind == KIND_OP && runner_entry_selected(opts, &runner_entries[i]))
        return 1;
  }
  for (int i = 0; i < opts->op_count; i++) {
    if (strcmp(opts->ops[i], e->name) == 0 || strcmp(opts->ops[i], e->section) == 0) {
      return 1;
    }
  }
  return 0;
}

/* The end-to-end call of the profile on the case's tensors. */
apx_ff_infer_args runner_ff_args(const entry_def *e, const bench_options *o, const apx_tensor *ts,
                                 apx_ff_stats *stats) {
  apx_ff_infer_args a = APX_FF_INFER_ARGS_INIT;
  a.dense = &ts[0], a.utilities = &ts[1], a.split_utilities = &ts[2];
  a.boundary = &ts[3], a.uncertainty = &ts[4];
  a.heavy = &ts[5], a.detail = &ts[6], a.alpha = &ts[7];
  a.weights = runner_ff_weights;
  a.tile_l0 = 16, a.tile_l1 = 8;
  a.kmax_l0 = o->kmax, a.kmax_l1 = 2 * o->kmax;
  a.budget_b1 = o->budget_b1, a.budget_b2 = o->budget_b2;
  a.graph_replay = e->id == E_FF_INFER_GRAPH;
  a.stats = stats;
  return a;
}

/* Run (or, with explain != NULL, explain) the entry's op on tensors ts. */
apx_status runner_invoke(apx_context *ctx, const entry_def *e, const bench_options *o,
                         const apx_tensor *ts, const apx_call *call, apx_explanation *explain) {
#define RUN(op_fn, args)                                                                           \
  (explain ? apx_explain(ctx, e->op, &(args), call, explain) : op_fn(ctx, &(args), call))
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
    a.levels = runner_preset_profile(o) ? NULL : &ts[3];
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
    apx_ff_infer_args a = runner_ff_args(e, o, ts, NULL);
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
