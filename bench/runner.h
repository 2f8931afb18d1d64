/* SPDX-License-Identifier: Apache-2.0 */
/* The suite runner's files share these (docs/report.md, apexx-bench(1)):
 *   runner.c      the run: every selected entry on every backend, the
 *                 run's state, skipped and failed rows, dispatch records
 *   entries.c     the entries, their selection, the call each makes
 *   cases.c       an entry's tensors: shapes, generators, work
 *   measure.c     one row: placing, warm-up, timing, statistics, parity
 *   runner_trt.c  the tensorrt section's rows (engine, plugin)
 * Names shared between them start with runner_. */
#ifndef APX_BENCH_RUNNER_H
#define APX_BENCH_RUNNER_H

#include "bench.h"

#include <stddef.h>

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
  E_FF_INFER_B8, /* appended: the end-to-end entries at fixed batches */
  E_FF_INFER_GRAPH_B8,
  E_FF_INFER_B32,
  E_FF_INFER_GRAPH_B32,
  /* appended: the backward ops, each entry named by its op and placed in
   * its forward's section (docs/report.md, Sections and entries) */
  E_TILEPACK_BACKWARD,
  E_TILEUNPACK_BACKWARD_OVERRIDE,
  E_TILEUNPACK_BACKWARD_BLEND,
  E_FUSED_PACK_OP_UNPACK_BACKWARD,
  E_FUSIONGATE_ALPHA_BACKWARD,
  E_FUSIONGATE_FUSE_BACKWARD,
  E_TILESSM_SCAN_BACKWARD_FORWARD,
  E_TILESSM_SCAN_BACKWARD_BIDIRECTIONAL,
  E_INDEX_SELECT_BACKWARD,
  E_COUNT
} entry_id;

typedef enum entry_kind {
  KIND_OP,         /* an apexx op, run on every backend */
  KIND_TRT_PLUGIN, /* the op as a TensorRT plugin: the plugin library's runner */
  KIND_TRT_ENGINE, /* a serialized engine: no runner API in this version */
  KIND_COPY        /* the bandwidth reference: apx_tensor_copy, not an op */
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
  /* the op's options beyond its ARGS_INIT, "name=value,...": a value is a
   * number, an enum value's name, or a profile variable ($tile, $kmax,
   * $2kmax, $b1, $b2); entries.c, runner_plan_call */
  const char *settings;
  int64_t batch; /* the case's batch, or 0: the profile's (--batch) */
  /* parity's bound in multiples of (atol + rtol*|ref|); 0: 2, both sides'
   * rounding (docs/report.md, Parity); ff_infer: 4, as its suite
   * (docs/ff_infer.md: a value rounded at an rnd point may land one ulp
   * away, and level 1 reads level 0's result) */
  int parity_factor;
} entry_def;

#define MAX_TENSORS 16 /* tilessm_scan_backward: 6 inputs, 5 gradients */

typedef enum gen_kind {
  GEN_NORMAL,    /* a*N(0,1) + b */
  GEN_UNIFORM,   /* uniform in [a, b) */
  GEN_TILE_IDS,  /* inputs.c: per row, first K of a permutation, sorted */
  GEN_LEVELS,    /* integers uniform in [0, 3) */
  GEN_ROWS,      /* [N]: row ids uniform in [0, M) */
  GEN_ROWS_WIDE, /* [N,D]: row ids uniform in [0, M), repeated along a row */
  GEN_OUTPUT,    /* not generated: poisoned before each backend's run,
                    compared with the cpu backend's (every one of a case's) */
  GEN_SCRATCH    /* a further output: poisoned, written, not compared */
} gen_kind;

typedef struct case_tensor {
  const char *name;
  gen_kind gen;
  double a, b;
  int64_t limit;         /* M for GEN_ROWS*, grid size for GEN_TILE_IDS */
  int64_t touched_elems; /* elements a minimal kernel reads/writes; -1 all */
  int unbound;           /* generated, not passed to the op */
  /* an output each of whose elements is a sum of this many terms (a
   * backward op's reduction), else 0: parity's bound grows by
   * ceil(sqrt(sum_terms)) (docs/report.md, Parity) */
  int64_t sum_terms;
  apx_tensor host;
} case_tensor;

#define RUNNER_ARGS_MAX 512 /* bytes of the largest args struct */

/* An entry's call, planned once per case from the op's descriptor: its
 * args struct as ARGS_INIT with the entry's settings applied (and the FF
 * weights handle), and which case tensor each tensor argument takes (the
 * one of the same name). */
typedef struct runner_call_plan {
  const apx_op_desc *desc; /* NULL: the entry runs no op (copy, engine) */
  int bound;               /* tensor arguments taken from the case */
  size_t offset[MAX_TENSORS];
  int tensor[MAX_TENSORS]; /* index into the case's tensors */
  _Alignas(max_align_t) unsigned char args[RUNNER_ARGS_MAX];
} runner_call_plan;

typedef struct bench_case {
  int count;
  case_tensor t[MAX_TENSORS];
  double work; /* the throughput's work count */
  runner_call_plan plan;
} bench_case;

typedef struct run_state {
  apx_context *ctx;
  const bench_options *opts;
  int backend_count;
  struct apx_backend_info backends[APX_MAX_BACKENDS];
  int cpu_index; /* -1 when no backend is named cpu */
  int rows_measured;
  long fail_after; /* APEXX_BENCH_FAIL_AFTER (test-only), -1 when unset */
  enum { PROGRESS_NONE, PROGRESS_TERMINAL, PROGRESS_LINES } progress; /* runner_progress */
  int any_failed;
  char *err;
  size_t err_size;
} run_state;

/* ---- entries (entries.c) ------------------------------------------------- */
extern const entry_def runner_entries[E_COUNT];
/* reference first: its rows are the same run's copy bandwidth that the
 * other rows' pct_of_copy divides by (reference.c) */
extern const char *const runner_sections[];
extern const int runner_section_count;
/* The end-to-end entries' weights: --ff-weights or the seeded generator,
 * made once per run (bench_run) for the profile's channel count. */
extern apx_ff_weights *runner_ff_weights;
/* A --profile preset (seed, large): tileunpack without levels. */
int runner_preset_profile(const bench_options *o);
/* The op's setting as the report states it. */
const char *runner_entry_mode(const entry_def *e, const bench_options *o);
int runner_entry_selected(const bench_options *opts, const entry_def *e);
/* The batch the entry's case runs at: its own, else the profile's. */
int64_t runner_entry_batch(const entry_def *e, const bench_options *o);
/* 1 when the entry's call sets graph_replay (its settings say so). */
int runner_entry_replays(const entry_def *e);
/* Plan the entry's call (c->plan) for the case's tensors named so far;
 * 0, or -1 with the reason in err (a setting its op does not have, a
 * value out of its kind). */
int runner_plan_call(const entry_def *e, const bench_options *o, bench_case *c, char *err,
                     size_t err_size);
/* The planned args struct of the case's call on tensors ts (parallel to
 * the case's), into args (RUNNER_ARGS_MAX bytes). */
void runner_bind_args(const bench_case *c, const apx_tensor *ts, void *args);
/* Run (or, with explain != NULL, explain) the entry's op on tensors ts. */
apx_status runner_invoke(apx_context *ctx, const entry_def *e, const bench_case *c,
                         const apx_tensor *ts, const apx_call *call, apx_explanation *explain);

/* ---- cases (cases.c) ----------------------------------------------------- */
/* Shapes and generators of each entry (documented in apexx-bench(1)), the
 * outputs' shapes and dtypes from the op's descriptor, and the call's plan;
 * 0, or -1 with the reason in err. */
int runner_describe_case(const entry_def *e, const bench_options *o, bench_case *c, char *err,
                         size_t err_size);
/* Allocate and fill the host tensors; 0, or -1 with a message in err. */
int runner_generate_case(apx_context *ctx, const bench_options *o, const entry_def *e,
                         bench_case *c, char *err, size_t err_size);
void runner_free_case(apx_context *ctx, bench_case *c);
int64_t runner_tensor_bytes(const apx_tensor *t);
/* docs/report.md, Rows: the minimum traffic of the case. */
double runner_case_bytes_moved(const bench_case *c);
cJSON *runner_tensors_json(const bench_case *c);
cJSON *runner_work_json(const entry_def *e, const bench_case *c);

/* ---- the run (runner.c) -------------------------------------------------- */
int runner_backend_selected(const run_state *rs, const char *name);
void runner_progress(const run_state *rs, const entry_def *e, const char *backend, int i, int n);
cJSON *runner_row_skipped(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A failed row; marks the run failed. */
cJSON *runner_row_failed(run_state *rs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *runner_backend_unusable_reason(const struct apx_backend_info *b, char *buf,
                                           size_t size);
/* The pass-over sentence for `backend` in an explanation, else the error. */
const char *runner_passed_over_reason(const apx_explanation *ex, const char *backend);
cJSON *runner_explanation_json(apx_context *ctx, const entry_def *e, const bench_case *c,
                               const apx_tensor *ts, const char *tensors_on);
/* An entry whose every row is skipped for one reason. */
cJSON *runner_run_all_skipped(run_state *rs, const entry_def *e, const bench_case *c,
                              const char *reason);
int runner_find_backend(const run_state *rs, const char *name);

/* ---- one row (measure.c) ------------------------------------------------- */
/* Measure one backend; returns the row object. reference: the cpu
 * outputs as runner_cpu_reference gives them (by case tensor), or NULL
 * with ref_reason. *p50_out is set for speedups when the row is ok.
 * Returns NULL when the run must abort. */
cJSON *runner_measure_row(run_state *rs, const entry_def *e, bench_case *c,
                          const struct apx_backend_info *b, const apx_tensor *reference,
                          const char *ref_reason, cJSON *entry_json, double *p50_out);
/* The cpu backend's outputs for the entry's inputs, computed untimed into
 * ref[j] for each GEN_OUTPUT tensor j of the case (ref: MAX_TENSORS
 * tensors, the others left zeroed); 0, or -1 with the reason in why and
 * nothing left allocated. runner_free_reference frees them. */
int runner_cpu_reference(run_state *rs, const entry_def *e, bench_case *c, apx_tensor *ref,
                         char *why, size_t why_size);
void runner_free_reference(apx_context *ctx, const bench_case *c, apx_tensor *ref);

/* ---- tensorrt (runner_trt.c) --------------------------------------------- */
/* tensorrt.engine: the engine file's row, or every row skipped. */
cJSON *runner_run_trt_engine(run_state *rs, const entry_def *e, const bench_case *c);
/* tensorrt.tilessm_plugin with the plugin library loaded (handle h). */
cJSON *runner_run_trt_plugin(run_state *rs, const entry_def *e, const bench_case *c, void *h);

#endif
