/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench compare's comparability (docs/report.md, Compare): what makes
 * two reports' times incomparable (profile, dtype, timer, backends, the
 * machine), what only qualifies them, and what makes a baseline stale. */
#include "compare.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static void add_text(text_list *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_text(text_list *t, const char *fmt, ...) {
  if (t->count == 16)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->items[t->count++], sizeof t->items[0], fmt, ap);
  va_end(ap);
}

/* Where a document keeps a machine key: a report's environment, a
 * baseline file's source. */
static const cJSON *machine_item(const doc *d, const char *key) {
  const char *holder = d->kind == DOC_REPORT ? "environment" : "source";
  return cmp_member(cmp_member(d->json, holder), key);
}

static void differ(text_list *t, const char *what, const char *key, const cJSON *b,
                   const cJSON *c) {
  if (!b || !c || cJSON_Compare(b, c, 1))
    return;
  char *bs = cJSON_PrintUnformatted(b), *cs = cJSON_PrintUnformatted(c);
  add_text(t, "%s: %s baseline=%s current=%s", what, key, bs ? bs : "?", cs ? cs : "?");
  free(bs);
  free(cs);
}

/* Differences that make timings incomparable (mismatches) and those that
 * only qualify them (notes). */
void cmp_find_mismatches(const doc *base, const doc *cur, int subset, text_list *mismatch,
                         text_list *notes) {
  static const char *const profile[] = {
      "batch",       "channels",   "height",      "width",         "tile_size",
      "kmax",        "steps",      "budget_b1",   "budget_b2",     "budget_total",
      "seed",        "ops",        "scan_batch",  "scan_channels", "index_src_rows",
      "index_width", "index_rows", "graph_replay"};
  static const char *const settings[] = {"warmup", "iters", "repetitions"};
  const cJSON *bc = cmp_member(base->json, "config");
  const cJSON *cc = cmp_member(cur->json, "config");
  for (size_t i = 0; i < sizeof profile / sizeof profile[0]; i++) {
    /* --ops checks a subset: the runs' own selections may differ */
    if (subset && strcmp(profile[i], "ops") == 0)
      continue;
    differ(mismatch, "profile", profile[i], cmp_member(bc, profile[i]), cmp_member(cc, profile[i]));
  }
  /* a report before --profile was of the default profile */
  cJSON *default_profile = cJSON_CreateString("default");
  const cJSON *bp = cmp_member(bc, "profile");
  const cJSON *cp = cmp_member(cc, "profile");
  differ(mismatch, "profile", "profile", bp ? bp : default_profile, cp ? cp : default_profile);
  cJSON_Delete(default_profile);
  differ(mismatch, "dtype", "dtype", cmp_member(bc, "dtype"), cmp_member(cc, "dtype"));
  /* ff_infer's options (1.4): a report without them ran the defaults */
  static const struct {
    const char *key, *default_text;
  } ff_options[] = {{"ff_order_mode", "hilbert"},
                    {"ff_overlap_mode", "override"},
                    {"ff_blend_alpha", NULL},
                    {"ff_scan_mode", "bidirectional"}};
  for (size_t i = 0; i < sizeof ff_options / sizeof ff_options[0]; i++) {
    cJSON *fallback = ff_options[i].default_text ? cJSON_CreateString(ff_options[i].default_text)
                                                 : cJSON_CreateNumber(0.5);
    const cJSON *bf = cmp_member(bc, ff_options[i].key), *cf = cmp_member(cc, ff_options[i].key);
    differ(mismatch, "profile", ff_options[i].key, bf ? bf : fallback, cf ? cf : fallback);
    cJSON_Delete(fallback);
  }
  /* a report before the timer key was timed by the backend */
  cJSON *backend_timer = cJSON_CreateString("backend");
  const cJSON *bt = cmp_member(bc, "timer");
  const cJSON *ct = cmp_member(cc, "timer");
  differ(mismatch, "timer", "timer", bt ? bt : backend_timer, ct ? ct : backend_timer);
  cJSON_Delete(backend_timer);
  differ(mismatch, "backend set", "backends", cmp_member(bc, "backends"),
         cmp_member(cc, "backends"));
  differ(mismatch, "machine", "cpu_model", machine_item(base, "cpu_model"),
         machine_item(cur, "cpu_model"));
  differ(mismatch, "machine", "cpu_cores", machine_item(base, "cpu_cores"),
         machine_item(cur, "cpu_cores"));
  const cJSON *bg = machine_item(base, "gpu"), *cg = machine_item(cur, "gpu");
  if (bg && cg) {
    differ(mismatch, "machine", "gpu.name", cJSON_IsObject(bg) ? cmp_member(bg, "name") : bg,
           cJSON_IsObject(cg) ? cmp_member(cg, "name") : cg);
  }
  /* the machine's identity (1.3: host, CPU, memory, machine-id and the
   * network devices' addresses): an absolute comparison holds on one
   * machine only. Without it on both sides (older reports) the host name
   * stands in: cloned VMs and containers share CPU models, and a renamed
   * host cannot be told from another one. */
  const cJSON *bid = machine_item(base, "machine_id"), *cid = machine_item(cur, "machine_id");
  if (bid && cid) {
    differ(mismatch, "machine", "machine_id", bid, cid);
    differ(mismatch, "machine", "memory_mb", machine_item(base, "memory_mb"),
           machine_item(cur, "memory_mb"));
  }
  differ(mismatch, "machine", "host", machine_item(base, "host"), machine_item(cur, "host"));
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
    differ(notes, "measurement", settings[i], cmp_member(bc, settings[i]),
           cmp_member(cc, settings[i]));
  }
}

int bench_reports_mismatch(const cJSON *a, const cJSON *b, char *why, size_t why_size) {
  doc da = {"A", (cJSON *)a, DOC_REPORT}, db = {"B", (cJSON *)b, DOC_REPORT};
  text_list mismatch, notes;
  memset(&mismatch, 0, sizeof mismatch);
  memset(&notes, 0, sizeof notes);
  cmp_find_mismatches(&da, &db, 0, &mismatch, &notes);
  if (mismatch.count && why_size)
    snprintf(why, why_size, "%s", mismatch.items[0]);
  return mismatch.count;
}

/* The rows the checks name ("...rows.<backend>", a check's own path for a
 * row check), into rows (scope l); the strings are kept in *owned (caller
 * frees each and the array). 0, or -1 out of memory. */
static int index_rows(const check_list *l, bench_index *rows, char ***owned) {
  *owned = calloc((size_t)l->count + 1, sizeof **owned);
  if (!*owned)
    return -1;
  for (int i = 0; i < l->count; i++) {
    char *row = cmp_row_path_of(l->items[i].path);
    if (!row)
      row = strdup(l->items[i].path);
    if (!row)
      return -1;
    (*owned)[i] = row;
    if (bench_index_add(rows, l, row, row) < 0)
      return -1;
  }
  return 0;
}

void cmp_find_staleness(const doc *base, const doc *cur, const check_list *l, text_list *stale) {
  if (cmp_schema_minor(base) < 1) {
    add_text(stale,
             "recorded with schema 1.%g (before repetitions: no noise "
             "estimate)",
             cmp_schema_minor(base));
  }
  static const char *const versions[] = {"backend_abi_version", "library_version"};
  for (size_t i = 0; i < 2; i++) {
    const cJSON *b = machine_item(base, versions[i]);
    const cJSON *c = machine_item(cur, versions[i]);
    if (!c)
      continue;
    if (!b) {
      add_text(stale, "records no %s (current %s)", versions[i],
               cJSON_IsString(c) ? c->valuestring : "");
      if (cJSON_IsNumber(c)) {
        snprintf(stale->items[stale->count - 1], sizeof stale->items[0],
                 "records no %s (current %g)", versions[i], c->valuedouble);
      }
    } else if (!cJSON_Compare(b, c, 1)) {
      char *bs = cJSON_PrintUnformatted(b), *cs = cJSON_PrintUnformatted(c);
      add_text(stale, "%s %s, current %s", versions[i], bs ? bs : "?", cs ? cs : "?");
      free(bs);
      free(cs);
    }
  }
  /* rows of the current suite the baseline does not know */
  int missing = 0;
  char first[512] = "";
  const cJSON *section, *entry, *row;
  char path[1024];
  bench_index rows;
  bench_index_init(&rows);
  char **owned = NULL;
  if (index_rows(l, &rows, &owned) != 0) {
    add_text(stale, "not checked for rows the baseline lacks: out of memory");
    goto out;
  }
  cJSON_ArrayForEach(section, cmp_member(cur->json, "benchmarks")) {
    cJSON_ArrayForEach(entry, section) {
      cJSON_ArrayForEach(row, cmp_member(entry, "rows")) {
        snprintf(path, sizeof path, "benchmarks.%s.%s.rows.%s", section->string, entry->string,
                 row->string);
        if (!bench_index_find(&rows, l, path)) {
          if (!missing++)
            snprintf(first, sizeof first, "%.400s", path + 11);
        }
      }
    }
  }
out:
  for (int i = 0; owned && i < l->count; i++)
    free(owned[i]);
  free(owned);
  bench_index_free(&rows);
  if (missing) {
    add_text(stale, "lacks %d row(s) of the current suite (first: %s)", missing, first);
  }
}
