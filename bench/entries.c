/* SPDX-License-Identifier: Apache-2.0 */
/* The suite's entries (apexx-bench(1), ENTRIES): every op with one setting
 * of its mode, its section, its throughput and parity rule; which entries
 * a run selects, and the call each makes (or explains) on a case's
 * tensors. */
#include "runner.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ff_infer as apexx-bench(1), ENTRIES states it: L0 tiles 16, L1 tiles 8,
 * kmax_l0 = kmax, kmax_l1 = 2*kmax, the profile's budgets */
#define FF_SETTINGS "tile_l0=16,tile_l1=8,kmax_l0=$kmax,kmax_l1=$2kmax,budget_b1=$b1,budget_b2=$b2"

const entry_def runner_entries[E_COUNT] = {
    {E_TILEPACK, "tile_ops", "tilepack", KIND_OP, APX_OP_TILEPACK, "kernel form", "tiles_per_s", 1,
     0, "tile=$tile", 0, 2},
    {E_TILEUNPACK_OVERRIDE, "tile_ops", "tileunpack_override", KIND_OP, APX_OP_TILEUNPACK,
     "override, ids, levels", "tiles_per_s", 1, 0, "", 0, 2},
    {E_TILEUNPACK_BLEND, "tile_ops", "tileunpack_blend", KIND_OP, APX_OP_TILEUNPACK,
     "blend alpha 0.5, ids, levels", "tiles_per_s", 0, 0, "mode=blend,blend_alpha=0.5", 0, 2},
    {E_FUSED_PACK_OP_UNPACK, "tile_ops", "fused_pack_op_unpack", KIND_OP,
     APX_OP_FUSED_PACK_OP_UNPACK, "value 1/0, gate 1/0, unique ids", "tiles_per_s", 0, 0,
     "tile=$tile", 0, 2},
    {E_FUSIONGATE_ALPHA, "tile_ops", "fusiongate_alpha", KIND_OP, APX_OP_FUSIONGATE_ALPHA,
     "log weights 1/1, bias 0", "elements_per_s", 0, 1, "", 0, 2},
    {E_FUSIONGATE_FUSE, "tile_ops", "fusiongate_fuse", KIND_OP, APX_OP_FUSIONGATE_FUSE,
     "out of place", "elements_per_s", 0, 0, "", 0, 2},
    {E_TILESSM_FORWARD, "tilessm", "tilessm_forward", KIND_OP, APX_OP_TILESSM_SCAN, "forward",
     "tokens_per_s", 0, 0, "", 0, 2},
    {E_TILESSM_BIDIRECTIONAL, "tilessm", "tilessm_bidirectional", KIND_OP, APX_OP_TILESSM_SCAN,
     "bidirectional, merge avg", "tokens_per_s", 0, 0, "direction=bidirectional,merge=avg", 0, 2},
    {E_GATHER, "indexing", "gather", KIND_OP, APX_OP_GATHER, "dim 0", "elements_per_s", 1, 0,
     "dim=0", 0, 2},
    {E_INDEX_SELECT, "indexing", "index_select", KIND_OP, APX_OP_INDEX_SELECT, "rows",
     "elements_per_s", 1, 0, "", 0, 2},
    {E_SCATTER_ADD, "indexing", "scatter_add", KIND_OP, APX_OP_SCATTER_ADD, "dim 0, out of place",
     "elements_per_s", 0, 0, "dim=0", 0, 2},
    {E_GATHER_BACKWARD, "indexing", "gather_backward", KIND_OP, APX_OP_GATHER_BACKWARD, "dim 0",
     "elements_per_s", 0, 0, "dim=0", 0, 2},
    {E_FF_INFER, "end_to_end_infer", "ff_infer", KIND_OP, APX_OP_FF_INFER,
     "eager, tiles 16/8, kmax K/2K", "frames_per_s", 0, 4, FF_SETTINGS, 0, 4},
    {E_TRT_TILESSM_PLUGIN, "tensorrt", "tilessm_plugin", KIND_TRT_PLUGIN, APX_OP_TILESSM_SCAN,
     "forward, fp16, TileSSMScan plugin", "tokens_per_s", 0, 0, "", 0, 2},
    {E_TRT_ENGINE, "tensorrt", "engine", KIND_TRT_ENGINE, APX_OP_COUNT, "serialized engine",
     "frames_per_s", 0, 0, NULL, 0, 2},
    {E_FF_INFER_GRAPH, "end_to_end_infer", "ff_infer_graph", KIND_OP, APX_OP_FF_INFER,
     "graph replay, tiles 16/8, kmax K/2K", "frames_per_s", 0, 4, FF_SETTINGS ",graph_replay=1", 0,
     4},
    {E_COPY, "reference", "copy", KIND_COPY, APX_OP_COUNT,
     "features-sized copy on the backend's device (host: memmove)", "elements_per_s", 1, 0, NULL, 0,
     2},
    /* the frame at batches 8 and 32 (docs/report.md, Sections and entries) */
    {E_FF_INFER_B8, "end_to_end_infer", "ff_infer_b8", KIND_OP, APX_OP_FF_INFER,
     "eager, B 8, tiles 16/8, kmax K/2K", "frames_per_s", 0, 4, FF_SETTINGS, 8, 4},
    {E_FF_INFER_GRAPH_B8, "end_to_end_infer", "ff_infer_graph_b8", KIND_OP, APX_OP_FF_INFER,
     "graph replay, B 8, tiles 16/8, kmax K/2K", "frames_per_s", 0, 4,
     FF_SETTINGS ",graph_replay=1", 8, 4},
    {E_FF_INFER_B32, "end_to_end_infer", "ff_infer_b32", KIND_OP, APX_OP_FF_INFER,
     "eager, B 32, tiles 16/8, kmax K/2K", "frames_per_s", 0, 4, FF_SETTINGS, 32, 4},
    {E_FF_INFER_GRAPH_B32, "end_to_end_infer", "ff_infer_graph_b32", KIND_OP, APX_OP_FF_INFER,
     "graph replay, B 32, tiles 16/8, kmax K/2K", "frames_per_s", 0, 4,
     FF_SETTINGS ",graph_replay=1", 32, 4},
    /* the backward ops (docs/report.md, Sections and entries): each in its
     * forward's section, named by the op and the forward entry's setting */
    {E_TILEPACK_BACKWARD, "tile_ops", "tilepack_backward", KIND_OP, APX_OP_TILEPACK_BACKWARD,
     "grad of features, unique ids", "tiles_per_s", 1, 0, "", 0, 2},
    {E_TILEUNPACK_BACKWARD_OVERRIDE, "tile_ops", "tileunpack_backward_override", KIND_OP,
     APX_OP_TILEUNPACK_BACKWARD, "override, ids, levels", "tiles_per_s", 1, 0, "tile=$tile", 0, 2},
    {E_TILEUNPACK_BACKWARD_BLEND, "tile_ops", "tileunpack_backward_blend", KIND_OP,
     APX_OP_TILEUNPACK_BACKWARD, "blend alpha 0.5, ids, levels", "tiles_per_s", 0, 0,
     "mode=blend,blend_alpha=0.5,tile=$tile", 0, 2},
    {E_FUSED_PACK_OP_UNPACK_BACKWARD, "tile_ops", "fused_pack_op_unpack_backward", KIND_OP,
     APX_OP_FUSED_PACK_OP_UNPACK_BACKWARD, "value 1/0, gate 1/0, unique ids, grad of the scalars",
     "tiles_per_s", 0, 0, "tile=$tile", 0, 2},
    {E_FUSIONGATE_ALPHA_BACKWARD, "tile_ops", "fusiongate_alpha_backward", KIND_OP,
     APX_OP_FUSIONGATE_ALPHA_BACKWARD, "log weights 1/1, bias 0, every gradient", "elements_per_s",
     0, 1, "", 0, 2},
    {E_FUSIONGATE_FUSE_BACKWARD, "tile_ops", "fusiongate_fuse_backward", KIND_OP,
     APX_OP_FUSIONGATE_FUSE_BACKWARD, "every gradient", "elements_per_s", 0, 0, "", 0, 2},
    {E_TILESSM_SCAN_BACKWARD_FORWARD, "tilessm", "tilessm_scan_backward_forward", KIND_OP,
     APX_OP_TILESSM_SCAN_BACKWARD, "forward, grad of tokens and the four vectors", "tokens_per_s",
     0, 0, "", 0, 2},
    {E_TILESSM_SCAN_BACKWARD_BIDIRECTIONAL, "tilessm", "tilessm_scan_backward_bidirectional",
     KIND_OP, APX_OP_TILESSM_SCAN_BACKWARD,
     "bidirectional, merge avg, grad of tokens and the four vectors", "tokens_per_s", 0, 0,
     "direction=bidirectional,merge=avg", 0, 2},
    {E_INDEX_SELECT_BACKWARD, "indexing", "index_select_backward", KIND_OP,
     APX_OP_INDEX_SELECT_BACKWARD, "rows (dim 0)", "elements_per_s", 0, 0, "", 0, 2},
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
  if (runner_preset_profile(o) &&
      (e->id == E_TILEUNPACK_OVERRIDE || e->id == E_TILEUNPACK_BACKWARD_OVERRIDE))
    return "override, ids, no levels";
  if (runner_preset_profile(o) &&
      (e->id == E_TILEUNPACK_BLEND || e->id == E_TILEUNPACK_BACKWARD_BLEND))
    return "blend alpha 0.5, ids, no levels";
  return e->mode;
}

int64_t runner_entry_batch(const entry_def *e, const bench_options *o) {
  return e->batch > 0 ? e->batch : o->batch;
}

int runner_entry_replays(const entry_def *e) {
  return e->settings && strstr(e->settings, "graph_replay=1") != NULL;
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
  for (int i = 0; i < opts->op_count; i++) {
    if (strcmp(opts->ops[i], e->name) == 0 || strcmp(opts->ops[i], e->section) == 0) {
      return 1;
    }
  }
  return 0;
}

/* A profile variable of a setting's value ($tile, ...), or NAN. */
static double profile_variable(const char *name, const bench_options *o) {
  static const struct {
    const char *name;
    size_t field;
    int twice;
  } vars[] = {
      {"$tile", offsetof(bench_options, tile_size), 0},
      {"$kmax", offsetof(bench_options, kmax), 0},
      {"$2kmax", offsetof(bench_options, kmax), 1},
  };
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (strcmp(name, vars[i].name) == 0) {
      int64_t v = *(const int64_t *)((const char *)o + vars[i].field);
      return (double)(vars[i].twice ? 2 * v : v);
    }
  if (strcmp(name, "$b1") == 0)
    return o->budget_b1;
  if (strcmp(name, "$b2") == 0)
    return o->budget_b2;
  return NAN;
}

/* Store one setting "name=value" (len bytes of text) into args. */
static int apply_setting(const apx_op_desc *d, const bench_options *o, const char *text,
                         size_t len, unsigned char *args, char *err, size_t err_size) {
  char item[128];
  if (len >= sizeof item) {
    snprintf(err, err_size, "%s: setting [%.*s] is too long", d->name, (int)len, text);
    return -1;
  }
  memcpy(item, text, len);
  item[len] = '\0';
  char *value = strchr(item, '=');
  if (!value) {
    snprintf(err, err_size, "%s: setting [%s] is not name=value", d->name, item);
    return -1;
  }
  *value++ = '\0';
  const apx_op_arg *a = NULL;
  for (int i = 0; i < d->arg_count && !a; i++)
    if (strcmp(d->args[i].name, item) == 0)
      a = &d->args[i];
  if (!a) {
    snprintf(err, err_size, "%s: setting [%s]: the op has no such argument", d->name, item);
    return -1;
  }
  unsigned char *at = args + a->offset;
  if (a->kind == APX_ARG_ENUM) {
    for (int k = 0; k < a->enum_count; k++)
      if (strcmp(a->enum_names[k], value) == 0) {
        int v = k;
        memcpy(at, &v, sizeof v);
        return 0;
      }
    snprintf(err, err_size, "%s: setting [%s]: [%s] is none of its values", d->name, item, value);
    return -1;
  }
  char *end = NULL;
  double v = value[0] == '$' ? profile_variable(value, o) : strtod(value, &end);
  if (isnan(v) || (end && (end == value || *end))) {
    snprintf(err, err_size, "%s: setting [%s]: [%s] is not a number or profile variable",
             d->name, item, value);
    return -1;
  }
  switch (a->kind) {
  case APX_ARG_INT64: {
    int64_t x = (int64_t)v;
    memcpy(at, &x, sizeof x);
    return 0;
  }
  case APX_ARG_DIM:
  case APX_ARG_FLAG: {
    int x = (int)v;
    memcpy(at, &x, sizeof x);
    return 0;
  }
  case APX_ARG_DOUBLE:
    memcpy(at, &v, sizeof v);
    return 0;
  default:
    snprintf(err, err_size, "%s: setting [%s]: not an option (a tensor or pointer)", d->name,
             item);
    return -1;
  }
}

/* The op's args struct for the entry, from its descriptor: ARGS_INIT, the
 * settings, the FF weights handle, and every tensor argument bound to the
 * case's tensor of its name (an output the case lacks so far, or one
 * marked unbound, stays NULL). */
int runner_plan_call(const entry_def *e, const bench_options *o, bench_case *c, char *err,
                     size_t err_size) {
  runner_call_plan *p = &c->plan;
  memset(p, 0, sizeof *p);
  if (e->kind != KIND_OP && e->kind != KIND_TRT_PLUGIN)
    return 0;
  const apx_op_desc *d = apx_op_describe(e->op);
  if (!d || d->args_size > RUNNER_ARGS_MAX) {
    snprintf(err, err_size, "%s: no descriptor of op %d, or its args exceed %d bytes", e->name,
             (int)e->op, RUNNER_ARGS_MAX);
    return -1;
  }
  p->desc = d;
  memcpy(p->args, d->args_init, d->args_size);
  char ff_options[160] = "";
  if (e->op == APX_OP_FF_INFER) /* --ff-order, --ff-overlap, --ff-blend-alpha, --ff-scan */
    snprintf(ff_options, sizeof ff_options,
             "order_mode=%s,overlap_mode=%s,blend_alpha=%.17g,scan_mode=%s", o->ff_order,
             o->ff_overlap, o->ff_blend_alpha, o->ff_scan);
  const char *const lists[2] = {e->settings, ff_options};
  for (int l = 0; l < 2; l++)
    for (const char *s = lists[l]; s && *s;) {
      const char *comma = strchr(s, ',');
      size_t len = comma ? (size_t)(comma - s) : strlen(s);
      if (apply_setting(d, o, s, len, p->args, err, err_size) != 0)
        return -1;
      s += len + (comma ? 1 : 0);
    }
  for (int i = 0; i < d->arg_count; i++) {
    const apx_op_arg *a = &d->args[i];
    if (a->kind == APX_ARG_HANDLE && strcmp(a->type_name, "apx_ff_weights") == 0) {
      memcpy(p->args + a->offset, &runner_ff_weights, sizeof runner_ff_weights);
      continue;
    }
    if (a->kind != APX_ARG_INPUT && a->kind != APX_ARG_INDEX && a->kind != APX_ARG_OUTPUT)
      continue;
    for (int j = 0; j < c->count; j++) {
      if (strcmp(c->t[j].name, a->name) != 0 || c->t[j].unbound)
        continue;
      p->offset[p->bound] = a->offset;
      p->tensor[p->bound++] = j;
      break;
    }
  }
  return 0;
}

void runner_bind_args(const bench_case *c, const apx_tensor *ts, void *args) {
  const runner_call_plan *p = &c->plan;
  memcpy(args, p->args, p->desc->args_size);
  for (int k = 0; k < p->bound; k++) {
    const apx_tensor *t = &ts[p->tensor[k]];
    memcpy((unsigned char *)args + p->offset[k], &t, sizeof t);
  }
}

/* Run (or, with explain != NULL, explain) the entry's op on tensors ts. */
apx_status runner_invoke(apx_context *ctx, const entry_def *e, const bench_case *c,
                         const apx_tensor *ts, const apx_call *call, apx_explanation *explain) {
  if (e->kind == KIND_COPY) /* not dispatched: the copy goes to the backend serving the device */
    return explain ? APX_OK : apx_tensor_copy(ctx, &ts[1], &ts[0], call);
  if (!c->plan.desc)
    return APX_ERR_UNSUPPORTED;
  _Alignas(max_align_t) unsigned char args[RUNNER_ARGS_MAX];
  runner_bind_args(c, ts, args);
  return explain ? apx_explain(ctx, e->op, args, call, explain)
                 : apx_op_run(ctx, e->op, args, call);
}
