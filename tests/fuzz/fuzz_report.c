/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench's report reader (bench/report_json.c bench_read_file, then
 * compare's and history's readers, compiled in) on generated files, large
 * ones included. The input:
 *   byte 0   mode (bits 0-1): 0 compare R R, 1 compare --emit-baseline R,
 *            2 history DIR R (append, then render), 3 history DIR with the
 *            text as DIR/history.jsonl (render); bit 2 compare --confirm R,
 *            bit 3 --output-json and --output-md (compare) or --output
 *            (history), bit 4 --statistic min
 *   byte 1-2 K, how many times the body is repeated: byte 1 (0-255); when
 *            byte 2 is 0xE0 or more, times (byte 2 & 31) + 1 (up to 8,160
 *            copies: an eighth of the inputs are large, the rest quick)
 *   byte 3   size: 254 pads the file with spaces to the reader's cap
 *            (read whole), 255 extends it past the cap (refused by size)
 *   then     HEAD, a line "--", BODY, a line "--", TAIL (fewer lines "--":
 *            no body or tail); the file is HEAD, K copies of BODY (every
 *            "######" in a copy replaced by the copy's number, so keys stay
 *            distinct: K rows), TAIL, at most 1 MiB before padding.
 * Checked beyond the sanitizers: the exit status is one of apexx-bench's,
 * an appended store ends with a newline, and the history page never holds
 * "<!--" or "<script" (texts from a report are escaped). */
#include <fcntl.h>

#include "fuzz_common.h"

/* bench/bench.h: the caps of docs/report.md, Input limits */
#define REPORT_CAP ((size_t)16 << 20)
#define STORE_CAP ((size_t)64 << 20)
#define MAX_BUILT ((size_t)1 << 20)

int bench_compare_main(int argc, char **argv);
int bench_history_main(int argc, char **argv);

/* the next "\n--\n" in [p, end), or NULL */
static const char *separator(const char *p, const char *end) {
  for (; p + 4 <= end; p++) {
    if (memcmp(p, "\n--\n", 4) == 0)
      return p;
  }
  return NULL;
}

/* HEAD, K numbered copies of BODY, TAIL into path, then the size rule */
static void build_file(const char *path, const char *text, size_t len, unsigned repeat,
                       unsigned size_rule, size_t cap) {
  const char *end = text + len, *head_end = separator(text, end);
  const char *body = head_end ? head_end + 4 : end;
  const char *body_end = head_end ? separator(body, end) : NULL;
  const char *tail = body_end ? body_end + 4 : end;
  if (!body_end)
    body_end = end;
  size_t head_len = (size_t)((head_end ? head_end : end) - text);
  size_t body_len = (size_t)(body_end - body);
  if (body_len && (size_t)repeat > (MAX_BUILT - head_len) / body_len)
    repeat = (unsigned)((MAX_BUILT - head_len) / body_len);
  if (!body_len)
    repeat = 0;
  FILE *f = fopen(path, "wb");
  if (!f)
    abort();
  fwrite(text, 1, head_len, f);
  char *copy = body_len ? malloc(body_len) : NULL;
  for (unsigned k = 0; k < repeat; k++) {
    memcpy(copy, body, body_len);
    for (size_t i = 0; i + 6 <= body_len; i++) {
      if (memcmp(copy + i, "######", 6) == 0) {
        char num[8];
        snprintf(num, sizeof num, "%06u", k % 1000000u);
        memcpy(copy + i, num, 6);
        i += 5;
      }
    }
    fwrite(copy, 1, body_len, f);
  }
  free(copy);
  fwrite(tail, 1, (size_t)(end - tail), f);
  long written = ftell(f);
  if (size_rule == 254 && written >= 0 && (size_t)written < cap) {
    static char spaces[65536];
    memset(spaces, ' ', sizeof spaces);
    for (size_t left = cap - (size_t)written; left > 0;) {
      size_t n = left < sizeof spaces ? left : sizeof spaces;
      fwrite(spaces, 1, n, f);
      left -= n;
    }
  }
  if (fclose(f) != 0)
    abort();
  if (size_rule == 255 && truncate(path, (off_t)cap + 1) != 0)
    abort();
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)(n > 0 ? n : 0) + 1);
  size_t got = n > 0 ? fread(buf, 1, (size_t)n, f) : 0;
  buf[got] = '\0';
  fclose(f);
  return buf;
}

/* a file at the cap is 16 MiB: none is left for the next input (or in
 * /tmp after make check's replay) */
static void remove_files(const char *a, const char *b, const char *c, const char *d,
                         const char *e) {
  const char *paths[] = {a, b, c, d, e};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
    unlink(paths[i]);
}

static void check_status(int rc) {
  if (rc < 0 || rc > 3) {
    fprintf(stderr, "fuzz_report: exit status %d is none of apexx-bench's\n", rc);
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 4)
    return 0;
  unsigned flags = data[0], repeat = data[1], size_rule = data[3];
  if (data[2] >= 0xE0)
    repeat *= (data[2] & 31u) + 1;
  unsigned mode = flags & 3;
  const char *text = (const char *)data + 4;
  size_t len = size - 4;
  char store[160], lines[192], report[160], out_json[160], out_md[160], page[160];
  snprintf(store, sizeof store, "%s/store", fuzz_dir());
  snprintf(lines, sizeof lines, "%s/history.jsonl", store);
  snprintf(report, sizeof report, "%s/report.json", fuzz_dir());
  snprintf(out_json, sizeof out_json, "%s/out.json", fuzz_dir());
  snprintf(out_md, sizeof out_md, "%s/out.md", fuzz_dir());
  snprintf(page, sizeof page, "%s/page.html", fuzz_dir());
  mkdir(store, 0700);
  unlink(lines); /* each input starts from an empty store */
  unlink(page);

  char *argv[16];
  int argc = 0;
  if (mode <= 1) {
    build_file(report, text, len, repeat, size_rule, REPORT_CAP);
    argv[argc++] = (char *)"compare";
    argv[argc++] = (char *)"--quiet";
    if (flags & 16) {
      argv[argc++] = (char *)"--statistic";
      argv[argc++] = (char *)"min";
    }
    if (flags & 8) {
      argv[argc++] = (char *)"--output-json";
      argv[argc++] = out_json;
      argv[argc++] = (char *)"--output-md";
      argv[argc++] = out_md;
    }
    if ((flags & 4) && mode == 0) {
      argv[argc++] = (char *)"--confirm";
      argv[argc++] = report;
    }
    if (mode == 1)
      argv[argc++] = (char *)"--emit-baseline";
    argv[argc++] = report;
    if (mode == 0)
      argv[argc++] = report;
    argv[argc] = NULL;
    int rc = bench_compare_main(argc, argv);
    fflush(stdout);
    check_status(rc);
    remove_files(report, out_json, out_md, lines, page);
    return 0;
  }
  if (mode == 2)
    build_file(report, text, len, repeat, size_rule, REPORT_CAP);
  else
    build_file(lines, text, len, repeat, size_rule, STORE_CAP);
  argv[argc++] = (char *)"history";
  argv[argc++] = store;
  if (mode == 2)
    argv[argc++] = report;
  argv[argc++] = (char *)"--output";
  argv[argc++] = page;
  argv[argc] = NULL;
  int rc = bench_history_main(argc, argv);
  fflush(stdout);
  check_status(rc);
  if (mode == 2 && rc == 0) {
    char *stored = read_all(lines);
    size_t n = stored ? strlen(stored) : 0;
    if (n && stored[n - 1] != '\n') {
      fprintf(stderr, "fuzz_report: the store does not end with a newline\n");
      abort();
    }
    free(stored);
  }
  char *html = rc == 0 ? read_all(page) : NULL;
  if (html && (strstr(html, "<!--") || strstr(html, "<script"))) {
    fprintf(stderr, "fuzz_report: the history page holds report text unescaped\n");
    abort();
  }
  free(html);
  remove_files(report, out_json, out_md, lines, page);
  return 0;
}
