/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench history (apexx-bench(1) "HISTORY"):
 *   apexx-bench history DIR [REPORT...] [--output F]
 *   apexx-bench [run flags] --history DIR
 * The store is plain files in DIR: history.jsonl holds one line per run
 * (appended with O_APPEND, never rewritten), keyed by commit and machine;
 * a report the store already holds (the same run_id; a report before
 * schema 1.3 is identified by a hash of its text) is not appended again:
 *   {"run_id", "commit", "machine", "timestamp_utc", "profile", "rows": {
 *      "<section>.<entry>/<backend>": {"median_ms", "min_ms", "p95_ms",
 *      "mad_ms", "n", "medians_ms": [...]}}}
 * After each append, and on `history DIR` alone, DIR/index.html is
 * rendered (atomically): a self-contained page with one inline SVG chart
 * per op and backend, one series per machine, the median time of each run
 * in run order (labelled by commit), the noise band (median +/- 1.4826*MAD
 * of the per-repetition medians), and a red ring on a run that regressed
 * against the previous run of its machine (the compare rule: Mann-Whitney
 * p < 0.05 and more than 5% slower). */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define HISTORY_FILE "history.jsonl"
#define CHART_FILE "index.html"
#define REGRESSION_ALPHA 0.05
#define REGRESSION_RATIO 1.05
/* a page's series and charts (docs/report.md, History) */
#define MAX_MACHINES 32
#define MAX_CHARTS 2000

/* The first max_bytes of text (whole characters: a UTF-8 sequence is not
 * split) with &, <, >, " and ' as entities and control bytes as \xHH, safe
 * in an element's text and in a quoted attribute. Every text of the page
 * that comes from a report goes through here: a commit label "<!--abc"
 * hid the rest of a chart, "</svg>" closed it. */
static void sb_escaped_prefix(bench_text *b, const char *text, size_t max_bytes) {
  size_t len = strnlen(text, max_bytes);
  if (len == max_bytes && text[len] != '\0') {
    while (len > 0 && ((unsigned char)text[len] & 0xC0) == 0x80)
      len--; /* text[len] continues a character: cut before it starts */
  }
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)text[i];
    switch (c) {
    case '&':
      bench_text_append(b, "&amp;");
      break;
    case '<':
      bench_text_append(b, "&lt;");
      break;
    case '>':
      bench_text_append(b, "&gt;");
      break;
    case '"':
      bench_text_append(b, "&quot;");
      break;
    case '\'':
      bench_text_append(b, "&#39;");
      break;
    default:
      if (c < 0x20 || c == 0x7f)
        bench_text_append(b, "\\x%02x", c);
      else
        bench_text_append(b, "%c", c);
    }
  }
}

static void sb_escaped(bench_text *b, const char *text) { sb_escaped_prefix(b, text, SIZE_MAX); }

/* ---- one run's summary ---------------------------------------------------- */
static const cJSON *get(const cJSON *o, const char *k) {
  return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* "AMD EPYC x2" (+ " / GPU name"): the machine key of a report. */
static void machine_key(const cJSON *report, char *buf, size_t size) {
  const cJSON *env = get(report, "environment");
  const cJSON *model = get(env, "cpu_model"), *cores = get(env, "cpu_cores");
  const cJSON *gpu_name = get(get(env, "gpu"), "name");
  snprintf(buf, size, "%s x%d%s%s", cJSON_IsString(model) ? model->valuestring : "unknown cpu",
           cJSON_IsNumber(cores) ? (int)cores->valuedouble : 0,
           cJSON_IsString(gpu_name) ? " / " : "",
           cJSON_IsString(gpu_name) ? gpu_name->valuestring : "");
}

/* The report's run_id (1.3), else "text:" and the FNV-1a hash of its
 * unformatted text: the same file read twice gives the same id. */
static void run_id_of(const cJSON *report, char *buf, size_t size) {
  const cJSON *id = get(report, "run_id");
  if (cJSON_IsString(id) && *id->valuestring) {
    snprintf(buf, size, "%s", id->valuestring);
    return;
  }
  char *text = cJSON_PrintUnformatted(report);
  uint64_t h = UINT64_C(0xcbf29ce484222325);
  for (const unsigned char *p = (const unsigned char *)(text ? text : ""); *p; p++) {
    h ^= *p;
    h *= UINT64_C(0x100000001b3);
  }
  free(text);
  snprintf(buf, size, "text:%016llx", (unsigned long long)h);
}

static cJSON *run_summary(const cJSON *report) {
  cJSON *s = cJSON_CreateObject();
  char id[128];
  run_id_of(report, id, sizeof id);
  cJSON_AddStringToObject(s, "run_id", id);
  const cJSON *sha = get(get(report, "producer"), "git_sha");
  cJSON_AddStringToObject(s, "commit", cJSON_IsString(sha) ? sha->valuestring : "unknown");
  char machine[512];
  machine_key(report, machine, sizeof machine);
  cJSON_AddStringToObject(s, "machine", machine);
  const cJSON *host = get(get(report, "environment"), "host");
  if (cJSON_IsString(host))
    cJSON_AddStringToObject(s, "host", host->valuestring);
  const cJSON *stamp = get(report, "timestamp_utc");
  cJSON_AddStringToObject(s, "timestamp_utc", cJSON_IsString(stamp) ? stamp->valuestring : "");
  const cJSON *config = get(report, "config");
  char profile[256];
  snprintf(profile, sizeof profile, "b%g c%g %gx%g t%g k%g s%g %s",
           cJSON_GetNumberValue(get(config, "batch")),
           cJSON_GetNumberValue(get(config, "channels")),
           cJSON_GetNumberValue(get(config, "height")), cJSON_GetNumberValue(get(config, "width")),
           cJSON_GetNumberValue(get(config, "tile_size")),
           cJSON_GetNumberValue(get(config, "kmax")), cJSON_GetNumberValue(get(config, "steps")),
           cJSON_IsString(get(config, "dtype")) ? get(config, "dtype")->valuestring : "?");
  cJSON_AddStringToObject(s, "profile", profile);
  cJSON_AddStringToObject(s, "status",
                          cJSON_IsString(get(report, "status")) ? get(report, "status")->valuestring
                                                                : "unknown");
  cJSON *rows = cJSON_AddObjectToObject(s, "rows");
  const cJSON *section, *entry, *row;
  cJSON_ArrayForEach(section, get(report, "benchmarks")) {
    cJSON_ArrayForEach(entry, section) {
      cJSON_ArrayForEach(row, get(entry, "rows")) {
        const cJSON *st = get(row, "status");
        const cJSON *p50 = get(row, "p50_ms");
        if (!cJSON_IsString(st) || strcmp(st->valuestring, "ok") != 0 || !cJSON_IsNumber(p50)) {
          continue;
        }
        char key[512];
        snprintf(key, sizeof key, "%s.%s/%s", section->string, entry->string, row->string);
        cJSON *r = cJSON_AddObjectToObject(rows, key);
        const cJSON *reps = get(row, "repetitions");
        const cJSON *med = get(reps, "medians_ms");
        int n = cJSON_IsArray(med) ? cJSON_GetArraySize(med) : 0;
        double *v = n > 0 ? malloc((size_t)n * sizeof *v) : NULL;
        bench_summary sum;
        int k = 0;
        const cJSON *item;
        if (v) {
          cJSON_ArrayForEach(item, med) {
            if (cJSON_IsNumber(item))
              v[k++] = item->valuedouble;
          }
        }
        if (k > 0 && bench_summary_compute(v, k, &sum) == 0) {
          cJSON_AddNumberToObject(r, "median_ms", sum.median);
          cJSON_AddNumberToObject(r, "min_ms", sum.min);
          cJSON_AddNumberToObject(r, "p95_ms", sum.p95);
          cJSON_AddNumberToObject(r, "mad_ms", sum.mad);
          cJSON_AddNumberToObject(r, "n", k);
          cJSON_AddItemToObject(r, "medians_ms", cJSON_Duplicate(med, 1));
        } else {
          /* a 1.0 report: one value, no spread */
          cJSON_AddNumberToObject(r, "median_ms", p50->valuedouble);
          cJSON_AddNumberToObject(r, "n", 1);
        }
        free(v);
      }
    }
  }
  return s;
}

/* ---- the store ------------------------------------------------------------- */
static char *join(const char *dir, const char *name) {
  size_t len = strlen(dir) + strlen(name) + 2;
  char *p = malloc(len);
  if (p)
    snprintf(p, len, "%s/%s", dir, name);
  return p;
}

static int ensure_dir(const char *dir, char *err, size_t err_size) {
  struct stat st;
  if (stat(dir, &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      snprintf(err, err_size, "[%s] is not a directory", dir);
      return -1;
    }
    return 0;
  }
  if (mkdir(dir, 0777) != 0) {
    snprintf(err, err_size, "cannot create the history directory [%s]: %s", dir, strerror(errno));
    return -1;
  }
  return 0;
}

/* Write all of buf at fd's end; 0, or -1 with errno set. */
static int write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t w = write(fd, buf, len);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return -1;
    buf += w;
    len -= (size_t)w;
  }
  return 0;
}

/* Append line (no newline yet) to the store open at fd, whole or not at
 * all: a write or sync that fails (a full disk, the file size limit)
 * truncates the store back to the size it had. A store whose last line
 * lacks its newline (a writer killed mid-record) gets one first, so the
 * new record is never glued onto the torn one. */
static int append_record(int fd, const char *path, char *line, char *err, size_t err_size) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    snprintf(err, err_size, "cannot read [%s]: %s", path, strerror(errno));
    return -1;
  }
  off_t start = st.st_size;
  char last = '\n';
  if (start > 0 && pread(fd, &last, 1, start - 1) != 1) {
    snprintf(err, err_size, "cannot read [%s]: %s", path, strerror(errno));
    return -1;
  }
  size_t len = strlen(line);
  char *record = malloc(len + 3);
  if (!record) {
    snprintf(err, err_size, "out of memory");
    return -1;
  }
  size_t at = 0;
  if (last != '\n')
    record[at++] = '\n';
  memcpy(record + at, line, len);
  at += len;
  record[at++] = '\n';
  int failed = write_all(fd, record, at) != 0 || fsync(fd) != 0;
  int saved = errno;
  free(record);
  if (!failed)
    return 0;
  if (ftruncate(fd, start) != 0) {
    snprintf(err, err_size,
             "cannot append to [%s]: %s; and the partial record could not be removed: %s "
             "(the store's first [%lld] bytes are whole)",
             path, strerror(saved), strerror(errno), (long long)start);
  } else {
    (void)fsync(fd);
    snprintf(err, err_size,
             "cannot append to [%s]: %s (nothing appended: the store is as "
             "it was, [%lld] bytes)",
             path, strerror(saved), (long long)start);
  }
  return -1;
}

static cJSON *load_store(const char *dir, char *err, size_t err_size);

/* Append a run's summary unless the store holds its run_id already. The
 * store is locked (flock) from the check to the append, so two appenders
 * neither both add one run nor cut each other's records.
 * Returns 0 (appended), 1 (held already: nothing written) or -1 with a
 * message in err. */
static int append_new(const char *dir, const cJSON *summary, char *err, size_t err_size) {
  char *path = join(dir, HISTORY_FILE);
  char *line = cJSON_PrintUnformatted(summary);
  cJSON *runs = NULL;
  int rc = -1, fd = -1;
  if (!path || !line) {
    snprintf(err, err_size, "out of memory");
    goto out;
  }
  /* O_NONBLOCK: a FIFO there is refused below, not waited on */
  fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0666);
  if (fd < 0) {
    snprintf(err, err_size, "cannot open [%s] for appending: %s", path, strerror(errno));
    goto out;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    snprintf(err, err_size, "cannot read [%s]: %s", path, strerror(errno));
    goto out;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(err, err_size, "[%s] is %s, not a regular file; the history store is a regular file",
             path, bench_file_kind(st.st_mode));
    goto out;
  }
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      snprintf(err, err_size, "cannot lock [%s]: %s", path, strerror(errno));
      goto out;
    }
  }
  runs = load_store(dir, err, err_size);
  if (!runs)
    goto out;
  const char *id = cJSON_GetStringValue(get(summary, "run_id"));
  const cJSON *run;
  cJSON_ArrayForEach(run, runs) {
    const char *other = cJSON_GetStringValue(get(run, "run_id"));
    if (id && other && strcmp(id, other) == 0) {
      rc = 1;
      goto out;
    }
  }
  rc = append_record(fd, path, line, err, err_size);
out:
  if (fd >= 0 && close(fd) != 0 && rc == 0) {
    snprintf(err, err_size, "cannot finish [%s]: %s", path, strerror(errno));
    rc = -1;
  }
  cJSON_Delete(runs);
  free(path);
  free(line);
  return rc;
}

/* Every line of the store as a JSON array (malformed lines are skipped
 * with a warning naming the line). */
static cJSON *load_store(const char *dir, char *err, size_t err_size) {
  char *path = join(dir, HISTORY_FILE);
  if (!path)
    return NULL;
  cJSON *runs = cJSON_CreateArray();
  struct stat st;
  if (stat(path, &st) != 0) {
    free(path);
    return runs; /* an empty store */
  }
  char *text = bench_read_file(path, BENCH_MAX_STORE_BYTES, "the history store", err, err_size);
  if (!text) {
    free(path);
    cJSON_Delete(runs);
    return NULL;
  }
  int line_no = 0;
  for (char *p = text; *p;) {
    char *nl = strchr(p, '\n');
    if (nl)
      *nl = '\0';
    line_no++;
    if (*p) {
      cJSON *run = cJSON_Parse(p);
      if (cJSON_IsObject(run) && cJSON_IsObject(get(run, "rows"))) {
        cJSON_AddItemToArray(runs, run);
      } else {
        cJSON_Delete(run);
        fprintf(stderr, "apexx-bench history: %s:%d: not a run summary; skipped\n", path, line_no);
      }
    }
    if (!nl)
      break;
    p = nl + 1;
  }
  free(text);
  free(path);
  return runs;
}

/* ---- the chart --------------------------------------------------------------- */
typedef struct point {
  const cJSON *run;
  double median, lo, hi;
  int regressed;
} point;

static void read_medians(const cJSON *row, double **v, int *n) {
  const cJSON *med = get(row, "medians_ms");
  *n = 0;
  *v = NULL;
  int count = cJSON_IsArray(med) ? cJSON_GetArraySize(med) : 0;
  if (count < 1)
    return;
  *v = malloc((size_t)count * sizeof **v);
  if (!*v)
    return;
  const cJSON *item;
  cJSON_ArrayForEach(item, med) {
    if (cJSON_IsNumber(item))
      (*v)[(*n)++] = item->valuedouble;
  }
}

/* Did this run regress against the previous one of its machine? */
static int regressed_against(const cJSON *prev_row, const cJSON *row) {
  double *a, *b;
  int na, nb;
  read_medians(row, &a, &na);
  read_medians(prev_row, &b, &nb);
  double cur = cJSON_GetNumberValue(get(row, "median_ms"));
  double base = cJSON_GetNumberValue(get(prev_row, "median_ms"));
  int r = 0;
  if (na >= 2 && nb >= 2 && isfinite(cur) && isfinite(base)) {
    r = bench_mann_whitney_p(a, na, b, nb) < REGRESSION_ALPHA && cur > base * REGRESSION_RATIO;
  }
  free(a);
  free(b);
  return r;
}

#define CHART_W 640
#define CHART_H 260
#define PAD_L 70
#define PAD_R 20
#define PAD_T 30
#define PAD_B 50

static const char *const series_colors[] = {"#1f77b4", "#2ca02c", "#9467bd",
                                            "#8c564b", "#e377c2", "#7f7f7f"};

/* One run's row of a chart's key, and the run's machine (its index in the
 * page's machine list). */
typedef struct chart_entry {
  const cJSON *run, *row;
  int machine;
} chart_entry;

/* A row key and its rows in run order: a chart reads only its own rows, so
 * the page costs the store's size, not rows times runs. */
typedef struct chart_key {
  const char *key;
  chart_entry *entries;
  int count, cap;
} chart_key;

/* One SVG for a row key over every machine's runs. */
static void render_chart(bench_text *b, const chart_key *ck, const char **machines,
                         int machine_count) {
  const char *key = ck->key;
  point *pts = calloc((size_t)ck->count + 1, sizeof *pts);
  int *counts = calloc((size_t)machine_count + 1, sizeof *counts);
  int *starts = calloc((size_t)machine_count + 1, sizeof *starts);
  const cJSON **prev_rows = calloc((size_t)machine_count + 1, sizeof *prev_rows);
  if (!pts || !counts || !starts || !prev_rows) {
    free(pts);
    free(counts);
    free(starts);
    free(prev_rows);
    b->failed = 1;
    return;
  }
  /* each machine's points in a block of its own, in run order */
  for (int e = 0; e < ck->count; e++)
    starts[ck->entries[e].machine + 1]++;
  for (int m = 1; m < machine_count; m++)
    starts[m] += starts[m - 1];
  double ymax = 0.0;
  int xmax = 0;
  for (int e = 0; e < ck->count; e++) {
    const chart_entry *ce = &ck->entries[e];
    int m = ce->machine;
    const cJSON *row = ce->row;
    if (!cJSON_IsObject(row) || !cJSON_IsNumber(get(row, "median_ms")))
      continue;
    point *p = &pts[starts[m] + counts[m]];
    p->run = ce->run;
    p->median = get(row, "median_ms")->valuedouble;
    double mad = cJSON_IsNumber(get(row, "mad_ms")) ? get(row, "mad_ms")->valuedouble : 0;
    p->lo = fmax(0.0, p->median - 1.4826 * mad);
    p->hi = p->median + 1.4826 * mad;
    p->regressed = prev_rows[m] ? regressed_against(prev_rows[m], row) : 0;
    prev_rows[m] = row;
    if (p->hi > ymax)
      ymax = p->hi;
    counts[m]++;
    if (counts[m] > xmax)
      xmax = counts[m];
  }
  if (ymax <= 0)
    ymax = 1e-3;
  ymax *= 1.1;
  double pw = CHART_W - PAD_L - PAD_R, ph = CHART_H - PAD_T - PAD_B;
#define XS(i) (PAD_L + (xmax > 1 ? pw * (double)(i) / (double)(xmax - 1) : pw / 2))
#define YS(v) (PAD_T + ph * (1.0 - (v) / ymax))
  bench_text_append(b,
                    "<figure><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
                    "height=\"%d\" viewBox=\"0 0 %d %d\" class=\"chart\" data-key=\"",
                    CHART_W, CHART_H, CHART_W, CHART_H);
  sb_escaped(b, key);
  bench_text_append(b, "\">\n<title>");
  sb_escaped(b, key);
  bench_text_append(b, " median time per run</title>\n");
  bench_text_append(b, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n",
                    CHART_W, CHART_H);
  bench_text_append(b, "<text x=\"%d\" y=\"18\" font-size=\"14\" font-family=\"sans-serif\">",
                    PAD_L);
  sb_escaped(b, key);
  bench_text_append(b, "</text>\n");
  /* axes and y ticks (microseconds) */
  bench_text_append(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", PAD_L,
                    PAD_T, PAD_L, CHART_H - PAD_B);
  bench_text_append(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", PAD_L,
                    CHART_H - PAD_B, CHART_W - PAD_R, CHART_H - PAD_B);
  int in_ms = ymax >= 1.0; /* tick labels in ms from 1 ms up, else us */
  for (int t = 0; t <= 4; t++) {
    double v = ymax * t / 4.0;
    bench_text_append(b,
                      "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                      "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\" "
                      "font-family=\"sans-serif\">%.3g %s</text>\n",
                      PAD_L, YS(v), CHART_W - PAD_R, YS(v), PAD_L - 4, YS(v) + 3,
                      in_ms ? v : v * 1e3, in_ms ? "ms" : "us");
  }
  for (int m = 0; m < machine_count; m++) {
    const char *color = series_colors[m % 6];
    point *p = &pts[starts[m]];
    int n = counts[m];
    if (n == 0)
      continue;
    /* the noise band: upper edge forward, lower edge back */
    bench_text_append(b,
                      "<polygon class=\"band\" fill=\"%s\" fill-opacity=\"0.18\" "
                      "stroke=\"none\" points=\"",
                      color);
    for (int i = 0; i < n; i++)
      bench_text_append(b, "%.1f,%.1f ", XS(i), YS(p[i].hi));
    for (int i = n - 1; i >= 0; i--)
      bench_text_append(b, "%.1f,%.1f ", XS(i), YS(p[i].lo));
    bench_text_append(b,
                      "\"/>\n<polyline class=\"median\" fill=\"none\" stroke=\"%s\" "
                      "stroke-width=\"2\" points=\"",
                      color);
    for (int i = 0; i < n; i++)
      bench_text_append(b, "%.1f,%.1f ", XS(i), YS(p[i].median));
    bench_text_append(b, "\"/>\n");
    for (int i = 0; i < n; i++) {
      const char *commit = get(p[i].run, "commit")->valuestring;
      bench_text_append(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>", XS(i),
                        YS(p[i].median), color);
      sb_escaped(b, commit);
      bench_text_append(b, " %.4g us%s</title></circle>\n", p[i].median * 1e3,
                        p[i].regressed ? " (regressed)" : "");
      if (p[i].regressed) {
        bench_text_append(b,
                          "<circle class=\"regression\" cx=\"%.1f\" cy=\"%.1f\" r=\"8\" "
                          "fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\"/>\n",
                          XS(i), YS(p[i].median));
      }
      if (m == 0) {
        bench_text_append(b,
                          "<text x=\"%.1f\" y=\"%d\" font-size=\"9\" text-anchor=\"end\" "
                          "font-family=\"monospace\" transform=\"rotate(-35 %.1f %d)\">",
                          XS(i), CHART_H - PAD_B + 14, XS(i), CHART_H - PAD_B + 14);
        sb_escaped_prefix(b, commit, 7); /* a short commit */
        bench_text_append(b, "</text>\n");
      }
    }
    bench_text_append(b,
                      "<text x=\"%d\" y=\"%d\" font-size=\"10\" fill=\"%s\" "
                      "font-family=\"sans-serif\">",
                      CHART_W - PAD_R - 200, PAD_T + 12 * (m + 1), color);
    sb_escaped(b, machines[m]);
    bench_text_append(b, "</text>\n");
  }
#undef XS
#undef YS
  bench_text_append(b, "</svg></figure>\n");
  free(pts);
  free(counts);
  free(starts);
  free(prev_rows);
}

/* The row keys of the runs in the order first seen, each with its rows;
 * 0, or -1 out of memory (*keys then freed by the caller as well). */
static int collect_keys(const cJSON *runs, const char **machines, int *machine_count,
                        chart_key **keys, int *key_count) {
  int key_cap = 0;
  bench_index seen; /* key -> its index + 1 */
  bench_index_init(&seen);
  const cJSON *run, *row;
  int rc = 0;
  cJSON_ArrayForEach(run, runs) {
    const cJSON *mk = get(run, "machine");
    if (!cJSON_IsString(mk) || !cJSON_IsString(get(run, "commit")))
      continue;
    int m = 0;
    while (m < *machine_count && strcmp(machines[m], mk->valuestring) != 0)
      m++;
    if (m == *machine_count && m < MAX_MACHINES)
      machines[(*machine_count)++] = mk->valuestring;
    cJSON_ArrayForEach(row, get(run, "rows")) {
      uintptr_t k = (uintptr_t)bench_index_find(&seen, keys, row->string);
      if (!k) {
        if (*key_count == key_cap) {
          key_cap = key_cap ? key_cap * 2 : 32;
          chart_key *grown = realloc(*keys, (size_t)key_cap * sizeof *grown);
          if (!grown)
            goto oom;
          *keys = grown;
        }
        (*key_count)++;
        k = (uintptr_t)*key_count;
        (*keys)[k - 1] = (chart_key){row->string, NULL, 0, 0};
        if (bench_index_add(&seen, keys, row->string, (const void *)k) < 0)
          goto oom;
      }
      chart_key *ck = &(*keys)[k - 1];
      if (m >= *machine_count)
        continue; /* a machine past the page's limit: not charted */
      if (ck->count == ck->cap) {
        ck->cap = ck->cap ? ck->cap * 2 : 8;
        chart_entry *grown = realloc(ck->entries, (size_t)ck->cap * sizeof *grown);
        if (!grown)
          goto oom;
        ck->entries = grown;
      }
      ck->entries[ck->count++] = (chart_entry){run, row, m};
    }
  }
  goto out;
oom:
  rc = -1;
out:
  bench_index_free(&seen);
  return rc;
}

static void free_keys(chart_key *keys, int key_count) {
  for (int k = 0; k < key_count; k++)
    free(keys[k].entries);
  free(keys);
}

static char *render_page(const cJSON *runs) {
  bench_text b = {NULL, 0, 0, 0};
  const char *machines[MAX_MACHINES];
  int machine_count = 0;
  chart_key *keys = NULL;
  int key_count = 0;
  if (collect_keys(runs, machines, &machine_count, &keys, &key_count) != 0) {
    free_keys(keys, key_count);
    return NULL;
  }
  int charted = key_count < MAX_CHARTS ? key_count : MAX_CHARTS;
  bench_text_append(&b,
                    "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
                    "<title>apexx-bench history</title>\n<style>body{font-family:"
                    "sans-serif;margin:16px}figure{display:inline-block;margin:6px;"
                    "border:1px solid #ccc}</style></head><body>\n"
                    "<h1>apexx-bench history</h1>\n<p>%d run(s), %d machine(s), %d "
                    "row(s). Each chart: the median time of each run (per-repetition "
                    "medians' median) in run order, labelled by commit; the band is "
                    "median &plusmn; 1.4826&middot;MAD; a red ring marks a run that "
                    "regressed against the previous run of its machine (Mann-Whitney "
                    "p &lt; %.2g and more than %.0f%% slower).</p>\n",
                    cJSON_GetArraySize(runs), machine_count, key_count, REGRESSION_ALPHA,
                    (REGRESSION_RATIO - 1.0) * 100.0);
  if (charted < key_count) {
    bench_text_append(&b,
                      "<p>The first %d rows are charted; %d more are not (a page holds at "
                      "most %d charts).</p>\n",
                      charted, key_count - charted, MAX_CHARTS);
  }
  for (int k = 0; k < charted; k++)
    render_chart(&b, &keys[k], machines, machine_count);
  bench_text_append(&b, "</body></html>\n");
  free_keys(keys, key_count);
  if (b.failed) {
    free(b.data);
    return NULL;
  }
  return b.data;
}

static int render_store(const char *dir, const char *output, char *err, size_t err_size) {
  cJSON *runs = load_store(dir, err, err_size);
  if (!runs)
    return -1;
  char *page = render_page(runs);
  cJSON_Delete(runs);
  if (!page) {
    snprintf(err, err_size, "out of memory rendering the chart");
    return -1;
  }
  char *path = output ? strdup(output) : join(dir, CHART_FILE);
  int rc = path ? bench_write_atomic(path, page, err, err_size) : -1;
  free(path);
  free(page);
  return rc;
}

int bench_history_append(const char *dir, const cJSON *report, char *err, size_t err_size) {
  if (ensure_dir(dir, err, err_size) != 0)
    return -1;
  cJSON *summary = run_summary(report);
  int rc = append_new(dir, summary, err, err_size);
  cJSON_Delete(summary);
  if (rc >= 0)
    rc = render_store(dir, NULL, err, err_size);
  return rc;
}

int bench_history_main(int argc, char **argv) {
  const char *dir = NULL, *output = NULL;
  const char *reports[64];
  int report_count = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--output") == 0 || strcmp(argv[i], "-o") == 0) {
      if (i + 1 >= argc || !*argv[i + 1]) {
        fprintf(stderr, "apexx-bench history: %s: needs a path\n", argv[i]);
        return BENCH_EXIT_USAGE;
      }
      output = argv[++i];
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: apexx-bench history DIR [REPORT...] [--output F] [-h | --help]\n"
             "Append each REPORT's summary to DIR/history.jsonl (keyed by "
             "commit and machine), then render DIR/index.html (or F; '-' is "
             "standard output).\n");
      return BENCH_EXIT_OK;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "apexx-bench history: unknown flag [%s]\n", argv[i]);
      return BENCH_EXIT_USAGE;
    } else if (!dir) {
      dir = argv[i];
    } else if (report_count < 64) {
      reports[report_count++] = argv[i];
    } else {
      fprintf(stderr, "apexx-bench history: at most 64 reports at once\n");
      return BENCH_EXIT_USAGE;
    }
  }
  if (!dir || !*dir) {
    fprintf(stderr, "apexx-bench history: needs DIR (see --help)\n");
    return BENCH_EXIT_USAGE;
  }
  char err[1024];
  if (ensure_dir(dir, err, sizeof err) != 0) {
    fprintf(stderr, "apexx-bench history: %s\n", err);
    return BENCH_EXIT_USAGE;
  }
  for (int i = 0; i < report_count; i++) {
    char *text = bench_read_file(reports[i], BENCH_MAX_REPORT_BYTES, "a report", err, sizeof err);
    int readable = text != NULL;
    cJSON *report = text ? cJSON_ParseWithOpts(text, NULL, 1) : NULL;
    free(text);
    const cJSON *suite = get(report, "suite");
    if (!report || !cJSON_IsString(suite) || strcmp(suite->valuestring, "apexx") != 0 ||
        !cJSON_IsObject(get(report, "benchmarks"))) {
      fprintf(stderr, "apexx-bench history: [%s] is not an apexx report%s%s\n", reports[i],
              readable ? "" : ": ", readable ? "" : err);
      cJSON_Delete(report);
      return BENCH_EXIT_USAGE;
    }
    cJSON *summary = run_summary(report);
    int rc = append_new(dir, summary, err, sizeof err);
    if (rc == 1) {
      fprintf(stderr, "apexx-bench history: [%s]: the store holds run %s already; not appended\n",
              reports[i], cJSON_GetStringValue(get(summary, "run_id")));
    }
    cJSON_Delete(summary);
    cJSON_Delete(report);
    if (rc < 0) {
      fprintf(stderr, "apexx-bench history: %s\n", err);
      return BENCH_EXIT_USAGE;
    }
  }
  if (render_store(dir, output, err, sizeof err) != 0) {
    fprintf(stderr, "apexx-bench history: %s\n", err);
    return BENCH_EXIT_USAGE;
  }
  return BENCH_EXIT_OK;
}
