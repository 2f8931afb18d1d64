/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench ab (bench/ab.c, docs/report.md, A/B). Most cases run ab on
 * two fake builds written here: a build tree whose bench/apexx-bench is a
 * script writing a report of three rows whose per-pass times it draws from
 * its fake.conf (a time per row, a factor, log-uniform noise, a drift of
 * the shared "machine" after some processes), so the paired samples are
 * known: identical builds are unchanged; a 20% slower row with tight
 * samples regressed and only it; a drift that slows both sides by 50%
 * halfway through cancels in the pairs; the same 20% drowned in noise is
 * inconclusive (exit 3) with the rounds that would settle it, never
 * unchanged, and --until-settled adds rounds; improved; a row missing in B
 * fails, a row new in B does not; builds of different profiles, a side
 * that is not a build, a side whose apexx-bench fails, and bad flags exit
 * 1. Last, the real suite on a tiny profile: this build tree against
 * itself does not regress, and every op 30% slower in B (the first
 * reproduction) is never unchanged. */
#define _GNU_SOURCE /* asprintf */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_bench_util.h"

static char *dir;

static void setup(void) { dir = bt_tmpdir(); }
static void teardown(void) {
  bt_rm_rf(dir);
  free(dir);
}

/* The fake apexx-bench: reads ../fake.conf (shell variables), counts its
 * runs in the shared MACHINE file, writes a report with one value per pass
 * and row to the --output-json path. */
static const char fake_bench[] =
    "#!/bin/sh\n"
    "here=$(cd \"$(dirname \"$0\")/..\" && pwd)\n"
    "TP=0.010 FF=0.020 GA=0.030 SCALE_TP=1 SCALE_FF=1 SCALE_GA=1 NOISE=0 CHANNELS=32\n"
    "DRIFT_AFTER=0 DROP_GA=0 NEW_ROW=0 EXIT=0\n"
    ". \"$here/fake.conf\"\n"
    "out=; reps=1\n"
    "while [ $# -gt 0 ]; do\n"
    "  case $1 in --output-json) out=$2; shift ;; --repetitions) reps=$2; shift ;; esac\n"
    "  shift\n"
    "done\n"
    "if [ \"$EXIT\" != 0 ]; then echo \"fake: told to fail\" >&2; exit \"$EXIT\"; fi\n"
    "n=$(cat \"$MACHINE\" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > \"$MACHINE\"\n"
    "drift=1; if [ \"$DRIFT_AFTER\" -gt 0 ] && [ $n -gt \"$DRIFT_AFTER\" ]; then drift=1.5; fi\n"
    "awk -v reps=\"$reps\" -v seed=\"$n$SEED\" -v noise=\"$NOISE\" -v drift=$drift \\\n"
    "  -v tp=\"$TP\" -v ff=\"$FF\" -v ga=\"$GA\" -v stp=\"$SCALE_TP\" -v sff=\"$SCALE_FF\" \\\n"
    "  -v sga=\"$SCALE_GA\" -v ch=\"$CHANNELS\" -v drop=\"$DROP_GA\" -v new=\"$NEW_ROW\" \\\n"
    "  -v lib=\"$here/libapexx.so\" '\n"
    "function row(name, t,   i, v) {\n"
    "  printf \"\\\"%s\\\": {\\\"op\\\": \\\"%s\\\", \\\"rows\\\": {\\\"cpu\\\": {\\\"status\\\": "
    "\\\"ok\\\", "
    "\\\"reason\\\": null, \\\"p50_ms\\\": %.9g, \\\"repetitions\\\": {\\\"mins_ms\\\": [\", name, "
    "name, t\n"
    "  for (i = 0; i < reps; i++) { v = t * drift * exp(noise * (2 * rand() - 1));"
    " printf \"%s%.9g\", i ? \", \" : \"\", v }\n"
    "  printf \"]}}}}\"\n"
    "}\n"
    "BEGIN {\n"
    "  srand(seed)\n"
    "  printf \"{\\\"schema_version\\\": {\\\"major\\\": 1, \\\"minor\\\": 3}, \\\"suite\\\": "
    "\\\"apexx\\\", "
    "\\\"status\\\": \\\"ok\\\",\\n\"\n"
    "  printf \"\\\"producer\\\": {\\\"name\\\": \\\"apexx-bench\\\", \\\"git_sha\\\": "
    "\\\"fake\\\"},\\n\"\n"
    "  printf \"\\\"environment\\\": {\\\"host\\\": \\\"box\\\", \\\"cpu_model\\\": \\\"Test "
    "CPU\\\", "
    "\\\"cpu_cores\\\": 2, \\\"library_path\\\": \\\"%s\\\"},\\n\", lib\n"
    "  printf \"\\\"config\\\": {\\\"channels\\\": %d, \\\"dtype\\\": \\\"fp16\\\"},\\n\", ch\n"
    "  printf \"\\\"benchmarks\\\": {\\\"tile_ops\\\": {\"\n"
    "  row(\"tilepack\", tp * stp); printf \", \"; row(\"fusiongate_fuse\", ff * sff)\n"
    "  if (new) { printf \", \"; row(\"tileunpack_blend\", tp) }\n"
    "  printf \"}\"\n"
    "  if (!drop) { printf \", \\\"indexing\\\": {\"; row(\"gather\", ga * sga); printf \"}\" }\n"
    "  printf \"}}\\n\"\n"
    "}' > \"$out\"\n";

/* A fake build tree NAME with the given fake.conf lines (the machine
 * counter is shared by every build of a test). Returns its path. */
static char *fake_build(const char *name, const char *conf) {
  char *root = bt_path(dir, name);
  char *bench_dir = bt_path(root, "bench");
  char *backends = bt_path(root, "backends");
  ck_assert_int_eq(mkdir(root, 0755), 0);
  ck_assert_int_eq(mkdir(bench_dir, 0755), 0);
  ck_assert_int_eq(mkdir(backends, 0755), 0);
  char *script = bt_path(bench_dir, "apexx-bench");
  bt_write(script, fake_bench);
  ck_assert_int_eq(chmod(script, 0755), 0);
  char *conf_path = bt_path(root, "fake.conf");
  char *machine = bt_path(dir, "machine");
  char *text = NULL;
  ck_assert_int_ge(asprintf(&text, "MACHINE='%s'\nSEED=%d\n%s\n", machine, (int)name[0], conf), 0);
  bt_write(conf_path, text);
  free(text);
  free(machine);
  free(conf_path);
  free(script);
  free(backends);
  free(bench_dir);
  return root;
}

/* ab A B with up to 44 more arguments (NULL-terminated); exit status. */
static int ab(bt_result *r, const char *a, const char *b, const char *const *more) {
  const char *argv[48] = {"ab", a, b};
  int n = 3;
  for (int i = 0; more && more[i] && n < 47; i++)
    argv[n++] = more[i];
  argv[n] = NULL;
  bt_run(r, NULL, argv);
  return r->status;
}

static cJSON *load(const char *name) {
  char *path = bt_path(dir, name);
  cJSON *j = bt_load_json(path);
  free(path);
  ck_assert_ptr_nonnull(j);
  return j;
}

static const char *verdict_of(const cJSON *report, const char *row) {
  const cJSON *rows = bt_get(report, "rows");
  const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(rows, row), "verdict");
  return cJSON_IsString(v) ? v->valuestring : "(none)";
}

#define TP_ROW "tile_ops.tilepack/cpu"
#define FF_ROW "tile_ops.fusiongate_fuse/cpu"
#define GA_ROW "indexing.gather/cpu"

static char *out_json(void) { return bt_path(dir, "ab.json"); }

START_TEST(identical_builds_are_unchanged) {
  char *a = fake_build("a", "NOISE=0.01");
  char *b = fake_build("b", "NOISE=0.01");
  char *json = out_json();
  const char *more[] = {"--rounds", "8", "--output-json", json, "--quiet", NULL};
  bt_result r;
  ck_assert_msg(ab(&r, a, b, more) == 0, "%s%s", r.out, r.err);
  /* the table on stdout, then the verdict line */
  ck_assert_ptr_nonnull(strstr(r.out, "# apexx-bench ab"));
  ck_assert_ptr_nonnull(strstr(r.out, "| row | A | B | B/A | 99% interval | verdict | note |"));
  ck_assert_ptr_nonnull(strstr(r.out, "ab status=pass rows=3 regressed=0 improved=0 unchanged=3 "
                                      "inconclusive=0"));
  bt_result_free(&r);
  cJSON *j = load("ab.json");
  ck_assert_str_eq(bt_get(j, "suite")->valuestring, "apexx-ab");
  ck_assert_int_eq((int)bt_get(j, "schema_version.minor")->valuedouble, 5);
  ck_assert_str_eq(bt_get(j, "status")->valuestring, "pass");
  ck_assert_int_eq((int)bt_get(j, "settings.rounds")->valuedouble, 8);
  ck_assert_int_eq((int)bt_get(j, "settings.passes")->valuedouble, 3);
  ck_assert_str_eq(bt_get(j, "settings.statistic")->valuestring, "floor");
  ck_assert_str_eq(bt_get(j, "sides.a.layout")->valuestring, "build tree");
  ck_assert_ptr_nonnull(strstr(bt_get(j, "sides.b.library_path")->valuestring, "/b/"));
  const cJSON *row = cJSON_GetObjectItem(bt_get(j, "rows"), TP_ROW);
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(row, "a_ms")), 8);
  ck_assert_int_eq((int)cJSON_GetObjectItem(row, "pairs")->valuedouble, 8);
  ck_assert(fabs(cJSON_GetObjectItem(row, "ratio")->valuedouble - 1.0) < 0.02);
  ck_assert(cJSON_GetObjectItem(row, "interval_low")->valuedouble > 0.95);
  ck_assert(cJSON_GetObjectItem(row, "interval_high")->valuedouble < 1.05);
  cJSON_Delete(j);
  free(a);
  free(b);
  free(json);
}
END_TEST

START_TEST(tight_20_percent_regresses_its_row_only) {
  char *a = fake_build("a", "NOISE=0.01");
  char *b = fake_build("b", "NOISE=0.01 SCALE_GA=1.2");
  char *json = out_json();
  const char *more[] = {"--rounds", "8", "--output-json", json, NULL};
  bt_result r;
  ck_assert_msg(ab(&r, a, b, more) == 2, "%s%s", r.out, r.err);
  ck_assert_ptr_nonnull(strstr(r.out, "| indexing.gather / cpu |"));
  ck_assert_ptr_nonnull(strstr(r.out, "| **regressed** |"));
  /* progress goes to stderr: one line per round */
  ck_assert_ptr_nonnull(strstr(r.err, "round 8/8 (B first)"));
  bt_result_free(&r);
  cJSON *j = load("ab.json");
  ck_assert_str_eq(verdict_of(j, GA_ROW), "regressed");
  ck_assert_str_eq(verdict_of(j, TP_ROW), "unchanged");
  ck_assert_str_eq(verdict_of(j, FF_ROW), "unchanged");
  const cJSON *row = cJSON_GetObjectItem(bt_get(j, "rows"), GA_ROW);
  ck_assert(fabs(cJSON_GetObjectItem(row, "ratio")->valuedouble - 1.2) < 0.03);
  ck_assert(cJSON_GetObjectItem(row, "interval_low")->valuedouble > 1.1);
  ck_assert_str_eq(bt_get(j, "status")->valuestring, "fail");
  cJSON_Delete(j);
  free(a);
  free(b);
  free(json);
}
END_TEST

START_TEST(drift_of_both_sides_cancels) {
  /* after 9 processes (the two probes and 3.5 rounds) the machine is 50%
   * slower for both builds */
  char *a = fake_build("a", "NOISE=0.01 DRIFT_AFTER=9");
  char *b = fake_build("b", "NOISE=0.01 DRIFT_AFTER=9");
  char *json = out_json();
  const char *more[] = {"--rounds", "12", "--output-json", json, "--quiet", NULL};
  bt_result r;
  ck_assert_msg(ab(&r, a, b, more) == 0, "%s%s", r.out, r.err);
  bt_result_free(&r);
  cJSON *j = load("ab.json");
  ck_assert_str_eq(verdict_of(j, TP_ROW), "unchanged");
  const cJSON *row = cJSON_GetObjectItem(bt_get(j, "rows"), TP_ROW);
  const cJSON *a_ms = cJSON_GetObjectItem(row, "a_ms");
  /* the drift is in the samples: late rounds are 1.5x the early ones */
  ck_assert(cJSON_GetArrayItem(a_ms, 11)->valuedouble >
            1.4 * cJSON_GetArrayItem(a_ms, 0)->valuedouble);
  cJSON_Delete(j);
  free(a);
  free(b);
  free(json);
}
END_TEST

START_TEST(shift_in_noise_is_inconclusive_until_settled) {
  /* 20% slower, +/-40% noise a pass: 6 rounds cannot tell */
  char *a = fake_build("a", "NOISE=0.4");
  char *b = fake_build("b", "NOISE=0.4 SCALE_GA=1.2");
  char *json = out_json();
  const char *more[] = {"--rounds", "6", "--passes", "2", "--output-json", json, "--quiet", NULL};
  bt_result r;
  int rc = ab(&r, a, b, more);
  ck_assert_msg(strstr(r.out, "| unchanged |") == NULL || rc != 0, "%s", r.out);
  ck_assert_msg(rc == 3, "exit %d: %s%s", rc, r.out, r.err);
  ck_assert_ptr_nonnull(strstr(r.out, "more round(s) would settle it"));
  ck_assert_ptr_nonnull(strstr(r.out, "ab note:"));
  bt_result_free(&r);
  cJSON *j = load("ab.json");
  ck_assert_str_eq(verdict_of(j, GA_ROW), "inconclusive");
  const cJSON *row = cJSON_GetObjectItem(bt_get(j, "rows"), GA_ROW);
  ck_assert_int_gt((int)cJSON_GetObjectItem(row, "rounds_to_settle")->valuedouble, 0);
  ck_assert_str_eq(bt_get(j, "status")->valuestring, "inconclusive");
  cJSON_Delete(j);
  /* --until-settled adds rounds (two at a time) while a row is not settled */
  const char *until[] = {"--rounds",      "6",  "--passes", "2", "--until-settled", "10",
                         "--output-json", json, NULL};
  rc = ab(&r, a, b, until);
  ck_assert_ptr_nonnull(strstr(r.err, "inconclusive after 6 rounds"));
  bt_result_free(&r);
  j = load("ab.json");
  ck_assert_int_gt((int)bt_get(j, "settings.rounds")->valuedouble, 6);
  ck_assert_int_le((int)bt_get(j, "settings.rounds")->valuedouble, 10);
  ck_assert_int_eq((int)bt_get(j, "settings.rounds_asked")->valuedouble, 6);
  ck_assert_str_ne(verdict_of(j, GA_ROW), "unchanged");
  cJSON_Delete(j);
  free(a);
  free(b);
  free(json);
}
END_TEST

START_TEST(three_rounds_of_2x_are_not_unchanged) {
  char *a = fake_build("a", "NOISE=0.01");
  char *b = fake_build("b", "NOISE=0.01 SCALE_TP=2");
  const char *more[] = {"--rounds", "3", "--quiet", NULL};
  bt_result r;
  int rc = ab(&r, a, b, more);
  ck_assert_msg(rc == 3 || rc == 2, "exit %d: %s", rc, r.out);
  ck_assert_ptr_nonnull(strstr(r.out, "| tile_ops.tilepack / cpu |"));
  char *line = strstr(r.out, "| tile_ops.tilepack / cpu |");
  *strchr(line, '\n') = '\0';
  ck_assert_ptr_null(strstr(line, "unchanged"));
  /* "| row | A | B | B/A | ...": the median ratio of 2x with 1% noise */
  const char *cell = line;
  for (int bar = 0; bar < 3 && cell; bar++)
    cell = strchr(cell + 1, '|');
  ck_assert_ptr_nonnull(cell);
  double ratio = strtod(cell + 1, NULL);
  ck_assert_msg(ratio > 1.9 && ratio < 2.1, "B/A %g in [%s]", ratio, line);
  bt_result_free(&r);
  free(a);
  free(b);
}
END_TEST

START_TEST(improvement_passes) {
  char *a = fake_build("a", "NOISE=0.01");
  char *b = fake_build("b", "NOISE=0.01 SCALE_FF=0.7");
  const char *more[] = {"--rounds", "8", "--quiet", NULL};
  bt_result r;
  ck_assert_msg(ab(&r, a, b, more) == 0, "%s", r.out);
  ck_assert_ptr_nonnull(strstr(r.out, "regressed=0 improved=1 unchanged=2"));
  bt_result_free(&r);
  free(a);
  free(b);
}
END_TEST

START_TEST(missing_and_new_rows) {
  char *a = fake_build("a", "NOISE=0.01");
  char *b = fake_build("b", "NOISE=0.01 DROP_GA=1 NEW_ROW=1");
  char *json = out_json();
  const char *more[] = {"--rounds", "6", "--quiet", "--output-json", json, NULL};
  bt_result r;
  ck_assert_msg(ab(&r, a, b, more) == 2, "%s", r.out);
  ck_assert_ptr_nonnull(strstr(r.out, "missing=1"));
  ck_assert_ptr_nonnull(strstr(r.out, "ran in A, not in B"));
  bt_result_free(&r);
  cJSON *j = load("ab.json");
  ck_assert_str_eq(verdict_of(j, GA_ROW), "missing");
  ck_assert_str_eq(verdict_of(j, "tile_ops.tileunpack_blend/cpu"), "new");
  ck_assert_int_eq((int)bt_get(j, "verdicts.new")->valuedouble, 1);
  cJSON_Delete(j);
  /* the other way round: B gained the row, lost none */
  ck_assert_msg(ab(&r, b, a, more) == 2, "%s", r.out); /* tileunpack_blend missing in A->B */
  bt_result_free(&r);
  free(a);
  free(b);
  free(json);
}
END_TEST

START_TEST(unusable_input_exits_1) {
  char *a = fake_build("a", "NOISE=0.01");
  char *other = fake_build("o", "CHANNELS=64");
  char *broken = fake_build("x", "EXIT=1");
  bt_result r;
  const char *quiet[] = {"--rounds", "2", "--quiet", NULL};
  /* different profiles: not the same measurement */
  ck_assert_int_eq(ab(&r, a, other, quiet), 1);
  ck_assert_ptr_nonnull(strstr(r.err, "did not measure the same thing: profile: channels"));
  bt_result_free(&r);
  /* a side whose apexx-bench fails: its message */
  ck_assert_int_eq(ab(&r, a, broken, quiet), 1);
  ck_assert_ptr_nonnull(strstr(r.err, "B: ["));
  ck_assert_ptr_nonnull(strstr(r.err, "exited 1 (probe run): fake: told to fail"));
  bt_result_free(&r);
  /* not a build */
  ck_assert_int_eq(ab(&r, a, dir, quiet), 1);
  ck_assert_ptr_nonnull(strstr(r.err, "is neither a build tree"));
  bt_result_free(&r);
  char *nowhere = bt_path(dir, "nowhere");
  ck_assert_int_eq(ab(&r, nowhere, a, quiet), 1);
  ck_assert_ptr_nonnull(strstr(r.err, "A: ["));
  bt_result_free(&r);
  /* flags: one build, a third operand, ab's own run flags, bad values */
  const char *one[] = {"ab", a, NULL};
  bt_run(&r, NULL, one);
  ck_assert_int_eq(r.status, 1);
  ck_assert_ptr_nonnull(strstr(r.err, "needs two builds"));
  bt_result_free(&r);
  const char *third[] = {a, NULL};
  ck_assert_int_eq(ab(&r, a, a, third), 1);
  ck_assert_ptr_nonnull(strstr(r.err, "is a third"));
  bt_result_free(&r);
  static const struct {
    const char *flag, *value, *mention;
  } bad[] = {{"--rounds", "0", "--rounds: [0]"},
             {"--passes", "x", "--passes: [x]"},
             {"--threshold", "-1", "--threshold: [-1]"},
             {"--confidence", "1", "--confidence: [1]"},
             {"--statistic", "mean", "--statistic: [mean]"},
             {"--order", "sideways", "--order: [sideways]"},
             {"--a-env", "NOEQUALS", "--a-env: [NOEQUALS]"},
             {"--until-settled", "1", "--until-settled: [1] is fewer than --rounds"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *more[] = {bad[i].flag, bad[i].value, NULL};
    ck_assert_int_eq(ab(&r, a, a, more), 1);
    ck_assert_msg(strstr(r.err, bad[i].mention) != NULL, "%s: %s", bad[i].flag, r.err);
    bt_result_free(&r);
  }
  const char *own[] = {"--", "--repetitions", "5", NULL};
  ck_assert_int_eq(ab(&r, a, a, own), 1);
  ck_assert_ptr_nonnull(strstr(r.err, "run flag [--repetitions]: ab sets it"));
  bt_result_free(&r);
  free(nowhere);
  free(a);
  free(other);
  free(broken);
}
END_TEST

/* The real suite: this build tree against itself. */
START_TEST(this_build_against_itself_does_not_regress) {
  const char *builddir = getenv("APEXX_BUILDDIR");
  char *json = out_json();
  const char *more[] = {"--rounds",   "8",
                        "--passes",   "2",
                        "--quiet",    "--output-json",
                        json,         "--",
                        "--backends", "cpu",
                        "--channels", "8",
                        "--height",   "16",
                        "--width",    "16",
                        "--kmax",     "2",
                        "--steps",    "8",
                        "--iters",    "5",
                        "--warmup",   "1",
                        "--ops",      "tilepack,gather",
                        NULL};
  bt_result r;
  int rc = ab(&r, builddir, builddir, more);
  ck_assert_msg(rc == 0 || rc == 3, "exit %d: %s%s", rc, r.out, r.err);
  bt_result_free(&r);
  cJSON *j = load("ab.json");
  const char *v = verdict_of(j, TP_ROW);
  ck_assert_msg(strcmp(v, "unchanged") == 0 || strcmp(v, "inconclusive") == 0, "%s", v);
  ck_assert_str_ne(verdict_of(j, GA_ROW), "(none)");
  /* both sides ran this build's own libapexx */
  ck_assert_ptr_nonnull(strstr(bt_get(j, "sides.a.library_path")->valuestring, builddir));
  ck_assert_str_eq(bt_get(j, "sides.a.layout")->valuestring, "build tree");
  cJSON_Delete(j);
  free(json);
}
END_TEST

/* The first reproduction on the real suite: every op 30% slower
 * (bench/slowdown.c preloaded into both sides, factor 0 in A) against the
 * same build; against an absolute baseline of another machine 12 of 13
 * rows read "improved" or "unchanged". In pairs no slowed row may read
 * unchanged or improved; on a quiet machine they regress. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZER_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZER_BUILD 1
#endif
#endif

START_TEST(every_op_30_percent_slower_is_not_unchanged) {
#ifdef SANITIZER_BUILD
  /* a sanitizer's runtime must come first in the library list: a
   * preloaded library cannot be */
  printf("skipped: LD_PRELOAD of the slowdown library in a sanitizer build\n");
  return;
#endif
  const char *builddir = getenv("APEXX_BUILDDIR");
  char *lib = bt_path(builddir, "bench/.libs/apexx-slowdown.so");
  if (!bt_exists(lib)) {
    printf("skipped: %s is not built\n", lib);
    free(lib);
    return;
  }
  char *a_env = NULL, *b_env = NULL;
  ck_assert_int_ge(asprintf(&a_env, "LD_PRELOAD=%s", lib), 0);
  b_env = strdup(a_env);
  char *json = out_json();
  const char *more[] = {"--rounds", "8", "--until-settled", "14", "--passes", "2", "--quiet",
                        "--output-json", json, "--a-env", a_env, "--a-env",
                        "APEXX_SLOWDOWN_FACTOR=0", "--b-env", b_env, "--b-env",
                        "APEXX_SLOWDOWN_FACTOR=0.3", "--", "--backends", "cpu", "--channels", "8",
                        "--height", "16", "--width", "16", "--kmax", "2", "--steps", "8",
                        "--iters", "20", "--warmup", "2", "--ops", "tilepack,gather", NULL};
  bt_result r;
  int rc = ab(&r, builddir, builddir, more);
  ck_assert_msg(rc == 2 || rc == 3, "exit %d: %s%s", rc, r.out, r.err);
  bt_result_free(&r);
  cJSON *j = load("ab.json");
  static const char *const slowed[] = {TP_ROW, GA_ROW};
  for (int i = 0; i < 2; i++) {
    const char *v = verdict_of(j, slowed[i]);
    ck_assert_msg(strcmp(v, "regressed") == 0 || strcmp(v, "inconclusive") == 0, "%s: %s",
                  slowed[i], v);
  }
  ck_assert_ptr_nonnull(strstr(bt_get(j, "sides.b.env")->child->valuestring, "LD_PRELOAD="));
  cJSON_Delete(j);
  free(json);
  free(a_env);
  free(b_env);
  free(lib);
}
END_TEST

int main(void) {
  bt_bench();
  Suite *s = suite_create("bench_ab");
  TCase *tc = tcase_create("ab");
  tcase_set_timeout(tc, 120);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, identical_builds_are_unchanged);
  tcase_add_test(tc, tight_20_percent_regresses_its_row_only);
  tcase_add_test(tc, drift_of_both_sides_cancels);
  tcase_add_test(tc, shift_in_noise_is_inconclusive_until_settled);
  tcase_add_test(tc, three_rounds_of_2x_are_not_unchanged);
  tcase_add_test(tc, improvement_passes);
  tcase_add_test(tc, missing_and_new_rows);
  tcase_add_test(tc, unusable_input_exits_1);
  tcase_add_test(tc, this_build_against_itself_does_not_regress);
  tcase_add_test(tc, every_op_30_percent_slower_is_not_unchanged);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
