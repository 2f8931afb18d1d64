/* SPDX-License-Identifier: Apache-2.0 */
/* One row: one backend on one entry (docs/report.md, Timing, Parity): the
 * case placed on the backend's device, warm-up, the timed calls (the
 * backend's timer, the host clock, or graph replays), the statistics, and
 * the output against the cpu reference. */
#include "runner.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- one row: one backend on one entry ---------------------------------- */
typedef struct device_tensors {
  const bench_case *c; /* the case placed, with its call's plan */
  int count;
  apx_tensor t[MAX_TENSORS];
  int owned[MAX_TENSORS];
} device_tensors;

static void free_device_tensors(apx_context *ctx, device_tensors *d) {
  for (int i = 0; i < d->count; i++) {
    if (d->owned[i])
      apx_tensor_free(ctx, &d->t[i]);
  }
  d->count = 0;
}

/* Place the case on the backend's device: host backends share the host
 * inputs and get their own outputs; device backends get copies. The
 * outputs are poisoned (0xA5 bytes) so a kernel that skips elements is
 * caught. */
static int place_case(apx_context *ctx, const bench_case *c, apx_device device, device_tensors *d,
                      char *why, size_t why_size) {
  memset(d, 0, sizeof *d);
  d->c = c;
  for (int i = 0; i < c->count; i++) {
    const apx_tensor *h = &c->t[i].host;
    int is_output = c->t[i].gen == GEN_OUTPUT || c->t[i].gen == GEN_SCRATCH;
    d->count = i + 1;
    if (device == APX_DEVICE_HOST && !is_output) {
      d->t[i] = *h;
      continue;
    }
    if (apx_tensor_alloc(ctx, device, 0, h->dtype, h->ndim, h->shape, &d->t[i]) != APX_OK) {
      snprintf(why, why_size, "allocating %s on %s: %s", c->t[i].name, apx_device_name(device),
               apx_last_error());
      return -1;
    }
    d->owned[i] = 1;
    /* the host output is still all 0xA5 (generate_case), so copying it
     * poisons the device output too */
    if (device == APX_DEVICE_HOST) {
      memset(d->t[i].data, 0xA5, (size_t)runner_tensor_bytes(h));
    } else if (apx_tensor_copy(ctx, &d->t[i], h, NULL) != APX_OK) {
      snprintf(why, why_size, "copying %s to %s: %s", c->t[i].name, apx_device_name(device),
               apx_last_error());
      return -1;
    }
  }
  return 0;
}

/* The parity factor of case tensor j: the entry's (2 unless it says),
 * times ceil(sqrt(n)) for an output whose elements are sums of n terms
 * (docs/report.md, Parity: two fp32 sums of n terms in different orders) */
static int output_factor(const entry_def *e, const case_tensor *ct) {
  int f = e->parity_factor > 0 ? e->parity_factor : 2;
  if (ct->sum_terms > 1)
    f *= (int)ceil(sqrt((double)ct->sum_terms));
  return f;
}

/* "|err| <= F*(atol + rtol*|ref|)[ + U ulp]" (with_err: the "|err| <= "
 * part), then "; NAME, ... (sums of N terms): F*(...)" for each run of
 * compared outputs held to another factor (sums); a static buffer: one
 * rule at a time */
static const char *parity_rule(const entry_def *e, const bench_case *c, int with_err) {
  static char rule[512];
  char ulps[24] = "";
  if (e->extra_ulps > 0)
    snprintf(ulps, sizeof ulps, " + %d ulp", e->extra_ulps);
  int base = e->parity_factor > 0 ? e->parity_factor : 2;
  size_t len = (size_t)snprintf(rule, sizeof rule, "%s%d*(atol + rtol*|ref|)%s",
                                with_err ? "|err| <= " : "", base, ulps);
  for (int j = 0; j < c->count && len < sizeof rule; j++) {
    const case_tensor *ct = &c->t[j];
    if (ct->gen != GEN_OUTPUT || output_factor(e, ct) == base)
      continue;
    /* a run of outputs summing as many terms is stated once */
    int last = j;
    while (last + 1 < c->count && c->t[last + 1].gen == GEN_OUTPUT &&
           c->t[last + 1].sum_terms == ct->sum_terms)
      last++;
    len += (size_t)snprintf(rule + len, sizeof rule - len, "; ");
    for (int k = j; k <= last && len < sizeof rule; k++)
      len +=
          (size_t)snprintf(rule + len, sizeof rule - len, "%s%s", k > j ? ", " : "", c->t[k].name);
    if (len < sizeof rule)
      len += (size_t)snprintf(rule + len, sizeof rule - len,
                              " (sums of %lld terms): %d*(atol + rtol*|ref|)%s",
                              (long long)ct->sum_terms, output_factor(e, ct), ulps);
    j = last;
  }
  return rule;
}

static cJSON *parity_json(const entry_def *e, const bench_case *c, const bench_parity *p,
                          int exact) {
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
  cJSON_AddStringToObject(obj, "rule", exact ? "bit-exact (copy op)" : parity_rule(e, c, 1));
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
  double tiles = px * C                                      /* token mean */
                 + k * (8.0 * C + 2.0 * C * C + 4.0 * C * C) /* FiLM */
                 + px * C * 2.0                              /* apply */
                 + px * C * 18.0                             /* depthwise */
                 + px * 2.0 * C * C * 2.0                    /* pointwise */
                 + px * 2.0 * C * 6.0                        /* norm, act */
                 + px * C * 2.0;                             /* ReGLU, residual */
  return tiles + map_px * (10.0 + C * 4.0);                  /* gate, detail */
}

/* The routing counts of one untimed call (with stats: the cuda backend
 * synchronises for it) and the frame's FLOPs into the row. */
static void ff_metrics(apx_context *ctx, const entry_def *e, const bench_options *o,
                       const device_tensors *dev, const apx_call *call, double p50_ms,
                       cJSON *row) {
  const int64_t B = runner_entry_batch(e, o);
  int64_t *counts = calloc((size_t)(2 * B), sizeof *counts);
  double *spent = calloc((size_t)(2 * B), sizeof *spent);
  if (!counts || !spent) {
    free(counts), free(spent);
    return;
  }
  apx_ff_stats stats = {counts, counts + B, spent, spent + B, NULL, NULL};
  apx_ff_infer_args a;
  runner_bind_args(dev->c, dev->t, &a);
  a.stats = &stats;
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
    if (p50_ms > 0)
      cJSON_AddNumberToObject(row, "tflop_per_s", flops / (p50_ms * 1e-3) / 1e12);
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
static int time_by_graph(apx_context *ctx, const entry_def *e, const device_tensors *dev,
                         const apx_call *call, double *samples, int n,
                         char *why, size_t why_size) {
  apx_graph *g = NULL;
  apx_status st = apx_graph_begin(ctx, call, &g);
  if (st != APX_OK) {
    snprintf(why, why_size, "apx_graph_begin: %s", apx_last_error());
    return 0;
  }
  for (int k = 0; k < BENCH_GRAPH_CALLS && st == APX_OK; k++)
    st = runner_invoke(ctx, e, dev->c, dev->t, apx_graph_call(g), NULL);
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
  if (st == APX_OK)
    st = apx_sync(ctx, call);
  for (int i = 0; i < n && st == APX_OK; i++) {
    apx_timer *timer = NULL;
    st = apx_timer_begin(ctx, call->backend, call, &timer);
    if (st != APX_OK)
      break;
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
  if (st == APX_OK)
    st = apx_sync(ctx, call);
  if (st != APX_OK)
    snprintf(why, why_size, "graph replay: %s", apx_last_error());
  apx_graph_free(ctx, g);
  return st == APX_OK ? 1 : -1;
}

/* How a row's samples were timed: the backend's timer (events on cuda);
 * a backend without one on the host's monotonic clock around the call and
 * a sync; --timer cpu-time: the process's CPU clock around the call and a
 * sync (time the process was descheduled does not count); --graph-replay:
 * a device row's samples from graph replays, or why it could not be. */
typedef struct row_timing {
  int host_clock;
  clockid_t host_clock_id;
  char timer_reason[512];
  int graphed;
  char graph_reason[600];
} row_timing;

/* o->warmup untimed calls; NULL, or the failed row. */
static cJSON *warm_up(run_state *rs, const entry_def *e, const struct apx_backend_info *b,
                      const device_tensors *dev, const apx_call *call, int total) {
  const bench_options *o = rs->opts;
  for (int i = 0; i < o->warmup; i++) {
    runner_progress(rs, e, b->name, i + 1, total);
    apx_status st = runner_invoke(rs->ctx, e, dev->c, dev->t, call, NULL);
    if (st == APX_OK)
      st = apx_sync(rs->ctx, call);
    if (st != APX_OK) {
      return runner_row_failed(rs, "warm-up call %d: %s: %s", i + 1, apx_status_name(st),
                               apx_last_error());
    }
  }
  return NULL;
}

/* The n_samples timed calls into samples (after graph replays where they
 * apply), then a sync; NULL, or the failed row. */
static cJSON *time_calls(run_state *rs, const entry_def *e, const struct apx_backend_info *b,
                         const device_tensors *dev, const apx_call *call, double *samples,
                         int n_samples, row_timing *tm) {
  apx_context *ctx = rs->ctx;
  const bench_options *o = rs->opts;
  int total = o->warmup + n_samples;
  apx_status st;
  tm->host_clock = o->cpu_time;
  tm->host_clock_id = o->cpu_time ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
  if (o->cpu_time)
    snprintf(tm->timer_reason, sizeof tm->timer_reason, "--timer cpu-time");
  /* a row that cannot be captured is timed by events below and says why */
  if (o->graph_replay && b->device != APX_DEVICE_HOST && !o->cpu_time) {
    tm->graphed = time_by_graph(ctx, e, dev, call, samples, n_samples, tm->graph_reason,
                                sizeof tm->graph_reason);
    if (tm->graphed < 0)
      return runner_row_failed(rs, "%s", tm->graph_reason);
  }
  /* repetitions: the timed loop again, independently; each keeps its own
   * median, and the compare's test runs on those medians */
  for (int i = tm->graphed ? n_samples : 0; i < n_samples; i++) {
    runner_progress(rs, e, b->name, o->warmup + i + 1, total);
    apx_timer *timer = NULL;
    struct timespec t0 = {0, 0}, t1 = {0, 0};
    if (!tm->host_clock) {
      st = apx_timer_begin(ctx, b->name, call, &timer);
      if (st == APX_ERR_UNSUPPORTED && i == 0) {
        tm->host_clock = 1;
        snprintf(tm->timer_reason, sizeof tm->timer_reason, "%s", apx_last_error());
      } else if (st != APX_OK) {
        return runner_row_failed(rs, "timer_begin: %s: %s", apx_status_name(st), apx_last_error());
      }
    }
    if (tm->host_clock)
      clock_gettime(tm->host_clock_id, &t0);
    st = runner_invoke(ctx, e, dev->c, dev->t, call, NULL);
    if (st != APX_OK) {
      /* end the timer anyway so it is freed; the op's error wins */
      char op_error[512];
      snprintf(op_error, sizeof op_error, "%s", apx_last_error());
      double ignored;
      if (timer)
        apx_timer_end(ctx, timer, &ignored);
      return runner_row_failed(rs, "call %d: %s: %s", i + 1, apx_status_name(st), op_error);
    }
    if (tm->host_clock) {
      st = apx_sync(ctx, call);
      clock_gettime(tm->host_clock_id, &t1);
      samples[i] = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
      if (st != APX_OK) {
        return runner_row_failed(rs, "sync after call %d: %s: %s", i + 1, apx_status_name(st),
                                 apx_last_error());
      }
      continue;
    }
    st = apx_timer_end(ctx, timer, &samples[i]);
    if (st != APX_OK) {
      return runner_row_failed(rs, "timer_end: %s: %s", apx_status_name(st), apx_last_error());
    }
  }
  st = apx_sync(ctx, call);
  if (st != APX_OK) {
    return runner_row_failed(rs, "sync: %s: %s", apx_status_name(st), apx_last_error());
  }
  return NULL;
}

/* The ok row of the samples: statistics, the repetitions (schema 1.1),
 * the timer, throughput, traffic and peak memory; rep_medians has room
 * for 2*reps (the medians, then the minima). *stats gets the statistics
 * over all samples. */
static cJSON *ok_row(run_state *rs, const entry_def *e, const bench_case *c,
                     const struct apx_backend_info *b, const double *samples, int reps,
                     double *rep_medians, const row_timing *tm, int peak_supported,
                     bench_stats *stats) {
  const bench_options *o = rs->opts;
  int n_samples = o->iters * reps;
  double *rep_mins = rep_medians + reps;
  bench_stats_compute(samples, n_samples, stats);
  for (int r = 0; r < reps; r++) {
    bench_stats one;
    bench_stats_compute(samples + (size_t)r * (size_t)o->iters, o->iters, &one);
    rep_medians[r] = one.p50_ms;
    rep_mins[r] = one.min_ms;
  }
  bench_summary summary;
  bench_summary_compute(rep_medians, reps, &summary);
  cJSON *row = cJSON_CreateObject();
  cJSON_AddStringToObject(row, "status", "ok");
  cJSON_AddNullToObject(row, "reason");
  bench_json_number(row, "p50_ms", stats->p50_ms, NULL);
  bench_json_number(row, "p95_ms", stats->p95_ms, NULL);
  bench_json_number(row, "mean_ms", stats->mean_ms, NULL);
  bench_json_number(row, "min_ms", stats->min_ms, NULL);
  bench_json_number(row, "max_ms", stats->max_ms, NULL);
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
  cJSON_AddStringToObject(row, "timer",
                          o->cpu_time      ? "process_cpu_time"
                          : tm->graphed    ? "graph_replay"
                          : tm->host_clock ? "host_clock"
                                           : "backend");
  if (tm->host_clock)
    cJSON_AddStringToObject(row, "timer_reason", tm->timer_reason);
  /* schema 1.2: graph replay's calls per sample, or why events timed it */
  if (tm->graphed)
    cJSON_AddNumberToObject(row, "graph_calls", BENCH_GRAPH_CALLS);
  if (tm->graph_reason[0])
    cJSON_AddStringToObject(row, "graph_replay_reason", tm->graph_reason);
  double seconds = stats->p50_ms / 1000.0;
  if (stats->p50_ms > 0) {
    bench_json_number(row, e->throughput_key, c->work / seconds, NULL);
  } else {
    bench_json_number(row, e->throughput_key, NAN, "p50_ms is 0: below the timer's resolution");
  }
  double bytes = runner_case_bytes_moved(c);
  cJSON_AddNumberToObject(row, "bytes_moved", bytes);
  if (stats->p50_ms > 0) {
    bench_json_number(row, "gb_per_s", bytes / seconds / 1e9, NULL);
  } else {
    bench_json_number(row, "gb_per_s", NAN, "p50_ms is 0: below the timer's resolution");
  }
  uint64_t peak = 0;
  if (b->device == APX_DEVICE_HOST) {
    bench_json_number(row, "peak_memory_mb", NAN, "host backend: no device memory to account");
  } else if (!peak_supported || apx_peak_memory(rs->ctx, b->name, &peak) != APX_OK) {
    bench_json_number(row, "peak_memory_mb", NAN, apx_last_error());
  } else {
    cJSON_AddNumberToObject(row, "peak_memory_mb", (double)peak / (1024.0 * 1024.0));
  }
  return row;
}

/* Output j of the row on the host, in *home (a host backend's own, else
 * a copy brought home, *owned set); 0, or -1 (apx_last_error says why). */
static int output_home(apx_context *ctx, const struct apx_backend_info *b,
                       const device_tensors *dev, int j, apx_tensor *home, int *owned) {
  const apx_tensor *out = &dev->t[j];
  *home = *out;
  *owned = 0;
  if (b->device == APX_DEVICE_HOST)
    return 0;
  apx_status st =
      apx_tensor_alloc(ctx, APX_DEVICE_HOST, 0, out->dtype, out->ndim, out->shape, home);
  if (st == APX_OK) {
    *owned = 1;
    st = apx_tensor_copy(ctx, home, out, NULL);
  }
  if (st != APX_OK && *owned) {
    apx_tensor_free(ctx, home);
    *owned = 0;
  }
  return st == APX_OK ? 0 : -1;
}

/* Parity of the row's outputs (every GEN_OUTPUT tensor, each held to its
 * own factor) against the cpu reference (or why there is none): each
 * output brought home first. One parity object for the row: the largest
 * errors over the outputs, ok when every output is, the bad elements
 * summed; a break names the first output that broke. Returns row, failed
 * when parity breaks, or a new failed row (row deleted) when a copy home
 * failed. */
static cJSON *check_parity(run_state *rs, const entry_def *e, const bench_case *c,
                           const struct apx_backend_info *b, const device_tensors *dev,
                           const apx_tensor *reference, const char *ref_reason, cJSON *row) {
  apx_context *ctx = rs->ctx;
  if (!reference) {
    cJSON_AddNullToObject(row, "parity");
    cJSON_AddStringToObject(row, "parity_reason", ref_reason);
    return row;
  }
  bench_parity all;
  memset(&all, 0, sizeof all);
  all.ok = 1;
  all.first_bad = -1;
  int compared = 0, first_output = -1;
  for (int j = 0; j < c->count; j++)
    compared += c->t[j].gen == GEN_OUTPUT;
  char reason[768] = "";
  for (int j = 0; j < c->count; j++) {
    if (c->t[j].gen != GEN_OUTPUT)
      continue;
    apx_tensor home;
    int owned = 0;
    if (output_home(ctx, b, dev, j, &home, &owned) != 0) {
      cJSON_Delete(row);
      return runner_row_failed(rs, "copying the output %s home: %s", c->t[j].name,
                               apx_last_error());
    }
    bench_parity p;
    bench_parity_compare_bound(&reference[j], &home, e->exact, output_factor(e, &c->t[j]),
                               e->extra_ulps, &p);
    if (first_output < 0) {
      first_output = j;
      all.atol = p.atol, all.rtol = p.rtol;
      all.factor = p.factor, all.extra_ulps = p.extra_ulps;
    }
    all.max_abs_err = fmax(all.max_abs_err, p.max_abs_err);
    all.max_rel_err = fmax(all.max_rel_err, p.max_rel_err);
    all.bad_count += p.bad_count;
    all.nan_count += p.nan_count;
    all.non_finite |= p.non_finite;
    if (!p.ok && all.ok) {
      int64_t i = p.first_bad;
      char of[96] = "";
      if (compared > 1)
        snprintf(of, sizeof of, " of %s", c->t[j].name);
      snprintf(reason, sizeof reason,
               "parity: %" PRId64 " element(s)%s break %s against cpu (%" PRId64
               " NaN); first at flat index [%" PRId64 "]: [%.9g] vs cpu [%.9g]",
               p.bad_count, of, e->exact ? "bit-exactness" : parity_rule(e, c, 0), p.nan_count, i,
               bench_get(&home, i), bench_get(&reference[j], i));
      all.ok = 0;
    }
    if (owned)
      apx_tensor_free(ctx, &home);
  }
  cJSON_AddItemToObject(row, "parity", parity_json(e, c, &all, e->exact));
  if (!all.ok) {
    cJSON_ReplaceItemInObjectCaseSensitive(row, "status", cJSON_CreateString("failed"));
    cJSON_ReplaceItemInObjectCaseSensitive(row, "reason", cJSON_CreateString(reason));
    rs->any_failed = 1;
  }
  return row;
}

/* The explanation of the backend's call (NULL when it will run), or the
 * skipped or failed row; *abort set when the run must stop. */
static cJSON *explain_call(run_state *rs, const entry_def *e, const struct apx_backend_info *b,
                           const device_tensors *dev, const apx_call *call, int *abort_run) {
  apx_explanation ex;
  memset(&ex, 0, sizeof ex);
  apx_status st = runner_invoke(rs->ctx, e, dev->c, dev->t, call, &ex);
  *abort_run = 0;
  if (st == APX_ERR_UNSUPPORTED)
    return runner_row_skipped("%s", runner_passed_over_reason(&ex, b->name));
  if (st != APX_OK) {
    return runner_row_failed(rs, "explain: %s: %s", apx_status_name(st), apx_last_error());
  }
  if (fault_injected(rs))
    *abort_run = 1;
  return NULL;
}

cJSON *runner_measure_row(run_state *rs, const entry_def *e, bench_case *c,
                          const struct apx_backend_info *b, const apx_tensor *reference,
                          const char *ref_reason, cJSON *entry_json, double *p50_out) {
  apx_context *ctx = rs->ctx;
  const bench_options *o = rs->opts;
  char why[1024];
  *p50_out = NAN;

  device_tensors dev;
  if (place_case(ctx, c, b->device, &dev, why, sizeof why) != 0) {
    free_device_tensors(ctx, &dev);
    return runner_row_failed(rs, "%s", why);
  }
  /* the default dispatch with tensors on this device, once per device kind */
  if (b->device != APX_DEVICE_HOST &&
      !cJSON_GetObjectItemCaseSensitive(entry_json, "dispatch_cuda")) {
    cJSON_AddItemToObject(entry_json, "dispatch_cuda",
                          runner_explanation_json(ctx, e, c, dev.t, "cuda"));
  }

  if (o->cpu_time && b->device != APX_DEVICE_HOST) {
    free_device_tensors(ctx, &dev);
    return runner_row_skipped("--timer cpu-time times host backends only; %s runs on a device",
                              b->name);
  }
  apx_call call = APX_CALL_INIT;
  call.backend = b->name;
  int abort_run = 0;
  cJSON *row = explain_call(rs, e, b, &dev, &call, &abort_run);
  if (row || abort_run) {
    free_device_tensors(ctx, &dev);
    return row;
  }

  int reps = o->repetitions > 0 ? o->repetitions : 1;
  int n_samples = o->iters * reps;
  double *samples = calloc((size_t)n_samples, sizeof *samples);
  double *rep_medians = calloc((size_t)reps * 2, sizeof *rep_medians);
  if (!samples || !rep_medians) {
    free(samples);
    free(rep_medians);
    free_device_tensors(ctx, &dev);
    return runner_row_failed(rs, "out of memory for %d samples", n_samples);
  }
  row_timing tm;
  memset(&tm, 0, sizeof tm);
  row = warm_up(rs, e, b, &dev, &call, o->warmup + n_samples);
  int peak_supported = 0;
  if (!row) {
    peak_supported = apx_reset_peak_memory(ctx, b->name) == APX_OK;
    row = time_calls(rs, e, b, &dev, &call, samples, n_samples, &tm);
  }
  if (!row) {
    rs->rows_measured++;
    bench_stats stats;
    row = ok_row(rs, e, c, b, samples, reps, rep_medians, &tm, peak_supported, &stats);
    if (e->op == APX_OP_FF_INFER)
      ff_metrics(ctx, e, o, &dev, &call, stats.p50_ms, row);
    row = check_parity(rs, e, c, b, &dev, reference, ref_reason, row);
    if (strcmp(cJSON_GetObjectItemCaseSensitive(row, "status")->valuestring, "ok") == 0)
      *p50_out = stats.p50_ms;
  }
  free(samples);
  free(rep_medians);
  free_device_tensors(ctx, &dev);
  return row;
}

/* One untimed cpu call into outs (by case tensor: each GEN_OUTPUT one),
 * each poisoned with `poison` bytes first. */
static apx_status cpu_call(run_state *rs, const entry_def *e, const bench_case *c,
                           const apx_tensor *outs, unsigned char poison) {
  apx_tensor ts[MAX_TENSORS];
  for (int i = 0; i < c->count; i++) {
    ts[i] = c->t[i].host;
    if (c->t[i].gen == GEN_OUTPUT) {
      memset(outs[i].data, poison, (size_t)runner_tensor_bytes(&outs[i]));
      ts[i] = outs[i];
    }
  }
  apx_call call = APX_CALL_INIT;
  call.backend = "cpu";
  return runner_invoke(rs->ctx, e, c, ts, &call, NULL);
}

void runner_free_reference(apx_context *ctx, const bench_case *c, apx_tensor *ref) {
  for (int j = 0; j < c->count; j++)
    if (ref[j].data)
      apx_tensor_free(ctx, &ref[j]);
}

/* The cpu backend's outputs for the entry's inputs, computed untimed into
 * ref (host tensors of the outputs' shapes). They are computed twice, over
 * two different poison patterns: an element that differs between the two
 * was never written (docs/ops.md, Every output written), and the reference
 * is then refused. Returns 0, or -1 with the reason in why. */
int runner_cpu_reference(run_state *rs, const entry_def *e, bench_case *c, apx_tensor *ref,
                         char *why, size_t why_size) {
  memset(ref, 0, MAX_TENSORS * sizeof *ref);
  if (rs->cpu_index < 0) {
    snprintf(why, why_size, "no cpu backend is configured");
    return -1;
  }
  const struct apx_backend_info *cpu = &rs->backends[rs->cpu_index];
  if (cpu->state != APX_BACKEND_OK) {
    char buf[512];
    snprintf(why, why_size, "cpu backend unusable: %s",
             runner_backend_unusable_reason(cpu, buf, sizeof buf));
    return -1;
  }
  apx_tensor second[MAX_TENSORS];
  memset(second, 0, sizeof second);
  apx_status st = APX_OK;
  for (int j = 0; j < c->count && st == APX_OK; j++) {
    const apx_tensor *out = &c->t[j].host;
    if (c->t[j].gen != GEN_OUTPUT)
      continue;
    st = apx_tensor_alloc(rs->ctx, APX_DEVICE_HOST, 0, out->dtype, out->ndim, out->shape, &ref[j]);
    if (st == APX_OK)
      st = apx_tensor_alloc(rs->ctx, APX_DEVICE_HOST, 0, out->dtype, out->ndim, out->shape,
                            &second[j]);
  }
  if (st != APX_OK) {
    snprintf(why, why_size, "cannot allocate the reference: %s", apx_last_error());
    runner_free_reference(rs->ctx, c, ref);
    runner_free_reference(rs->ctx, c, second);
    return -1;
  }
  st = cpu_call(rs, e, c, second, 0x5A);
  if (st == APX_OK)
    st = cpu_call(rs, e, c, ref, 0xA5);
  if (st != APX_OK) {
    snprintf(why, why_size, "cpu reference call failed: %s: %s", apx_status_name(st),
             apx_last_error());
    runner_free_reference(rs->ctx, c, ref);
    runner_free_reference(rs->ctx, c, second);
    return -1;
  }
  int64_t unwritten = 0, first = -1, total = 0;
  int first_in = -1, compared = 0;
  for (int j = 0; j < c->count; j++) {
    if (c->t[j].gen != GEN_OUTPUT)
      continue;
    int64_t n = apx_tensor_numel(&ref[j]);
    total += n;
    compared++;
    size_t elem = apx_dtype_size(ref[j].dtype);
    for (int64_t i = 0; i < n; i++) {
      if (memcmp((const char *)ref[j].data + (size_t)i * elem,
                 (const char *)second[j].data + (size_t)i * elem, elem) != 0) {
        if (first < 0)
          first = i, first_in = j;
        unwritten++;
      }
    }
  }
  runner_free_reference(rs->ctx, c, second);
  if (unwritten > 0) {
    runner_free_reference(rs->ctx, c, ref);
    snprintf(why, why_size,
             "cpu reference unusable: %" PRId64 " of %" PRId64
             " output elements differ between two calls over different "
             "poison (unwritten or nondeterministic), first at flat index [%" PRId64 "]%s%s",
             unwritten, total, first, compared > 1 ? " of " : "",
             compared > 1 ? c->t[first_in].name : "");
    return -1;
  }
  return 0;
}
