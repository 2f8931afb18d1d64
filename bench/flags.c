/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench run flags: the fixed profile of docs/report.md (Profile and
 * inputs; apexx-bench(1)) and one flag per field. A bad flag is a
 * message naming the flag and its value, and exit status 1. */
#include "config.h"

#include "bench.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum {
  FLAG_BATCH = 256,
  FLAG_CHANNELS,
  FLAG_HEIGHT,
  FLAG_WIDTH,
  FLAG_TILE_SIZE,
  FLAG_KMAX,
  FLAG_STEPS,
  FLAG_BUDGET_B1,
  FLAG_BUDGET_B2,
  FLAG_BUDGET_TOTAL,
  FLAG_DTYPE,
  FLAG_SEED,
  FLAG_WARMUP,
  FLAG_ITERS,
  FLAG_REPETITIONS,
  FLAG_TIMER,
  FLAG_HISTORY,
  FLAG_OPS,
  FLAG_BACKENDS,
  FLAG_CONFIG,
  FLAG_OUTPUT_JSON,
  FLAG_OUTPUT_MD,
  FLAG_TRT_PLUGIN_LIB,
  FLAG_TRT_ENGINE_PATH,
  FLAG_TRT_INPUT_SHAPE,
  FLAG_FF_WEIGHTS,
  FLAG_FF_ORDER,
  FLAG_FF_OVERLAP,
  FLAG_FF_BLEND_ALPHA,
  FLAG_FF_SCAN,
  FLAG_PROFILE,
  FLAG_GRAPH_REPLAY,
  FLAG_PARITY,
  FLAG_QUIET,
  FLAG_PROGRESS,
  FLAG_NO_PROGRESS,
  FLAG_HELP,
  FLAG_VERSION
};

static const struct option long_flags[] = {
    {"batch", required_argument, NULL, FLAG_BATCH},
    {"channels", required_argument, NULL, FLAG_CHANNELS},
    {"height", required_argument, NULL, FLAG_HEIGHT},
    {"width", required_argument, NULL, FLAG_WIDTH},
    {"tile-size", required_argument, NULL, FLAG_TILE_SIZE},
    {"kmax", required_argument, NULL, FLAG_KMAX},
    {"steps", required_argument, NULL, FLAG_STEPS},
    {"budget-b1", required_argument, NULL, FLAG_BUDGET_B1},
    {"budget-b2", required_argument, NULL, FLAG_BUDGET_B2},
    {"budget-total", required_argument, NULL, FLAG_BUDGET_TOTAL},
    {"dtype", required_argument, NULL, FLAG_DTYPE},
    {"seed", required_argument, NULL, FLAG_SEED},
    {"warmup", required_argument, NULL, FLAG_WARMUP},
    {"iters", required_argument, NULL, FLAG_ITERS},
    {"repetitions", required_argument, NULL, FLAG_REPETITIONS},
    {"timer", required_argument, NULL, FLAG_TIMER},
    {"history", required_argument, NULL, FLAG_HISTORY},
    {"ops", required_argument, NULL, FLAG_OPS},
    {"backends", required_argument, NULL, FLAG_BACKENDS},
    {"config", required_argument, NULL, FLAG_CONFIG},
    {"output-json", required_argument, NULL, FLAG_OUTPUT_JSON},
    {"output-md", required_argument, NULL, FLAG_OUTPUT_MD},
    {"trt-plugin-lib", required_argument, NULL, FLAG_TRT_PLUGIN_LIB},
    {"trt-engine-path", required_argument, NULL, FLAG_TRT_ENGINE_PATH},
    {"trt-input-shape", required_argument, NULL, FLAG_TRT_INPUT_SHAPE},
    {"ff-weights", required_argument, NULL, FLAG_FF_WEIGHTS},
    {"ff-order", required_argument, NULL, FLAG_FF_ORDER},
    {"ff-overlap", required_argument, NULL, FLAG_FF_OVERLAP},
    {"ff-blend-alpha", required_argument, NULL, FLAG_FF_BLEND_ALPHA},
    {"ff-scan", required_argument, NULL, FLAG_FF_SCAN},
    {"profile", required_argument, NULL, FLAG_PROFILE},
    {"graph-replay", required_argument, NULL, FLAG_GRAPH_REPLAY},
    {"parity", required_argument, NULL, FLAG_PARITY},
    {"quiet", no_argument, NULL, FLAG_QUIET},
    {"progress", no_argument, NULL, FLAG_PROGRESS},
    {"no-progress", no_argument, NULL, FLAG_NO_PROGRESS},
    {"help", no_argument, NULL, FLAG_HELP},
    {"version", no_argument, NULL, FLAG_VERSION},
    {NULL, 0, NULL, 0}};

/* Every dense tensor of the profile must stay addressable and small enough
 * to allocate: B*C*H*W and B*steps*C are capped at 2^31 elements. */
#define MAX_ELEMENTS (INT64_C(1) << 31)
#define MAX_DIM (INT64_C(1) << 24)
#define MAX_ITERS 1000000
#define MAX_REPETITIONS 1000
/* JSON numbers are doubles: seeds above 2^53 would not survive the report. */
#define MAX_SEED ((UINT64_C(1) << 53) - 1)

static void defaults(bench_options *opts) {
  memset(opts, 0, sizeof *opts);
  opts->progress = -1; /* neither --progress nor --no-progress */
  /* docs/report.md, Profile and inputs: the fixed baseline profile */
  opts->batch = 1;
  opts->channels = 128;
  opts->height = 128;
  opts->width = 128;
  opts->tile_size = 8;
  opts->kmax = 32;
  opts->steps = 256;
  opts->budget_b1 = 16.0;
  opts->budget_b2 = 8.0;
  opts->budget_total = 32.0;
  opts->requested_dtype = "fp16";
  opts->dtype = APX_DTYPE_F16;
  opts->seed = 123;
  opts->warmup = 10;
  opts->iters = 50;
  /* five repetitions: the smallest count whose Mann-Whitney test can reach
   * p < 0.05 on a shift (two-sided exact p = 2/252 = 0.008 at best) */
  opts->repetitions = BENCH_DEFAULT_REPETITIONS;
  opts->profile = "default";
  opts->parity = 1;
  /* ff_infer's FFModule options: APX_FF_INFER_ARGS_INIT's */
  opts->ff_order = "hilbert";
  opts->ff_overlap = "override";
  opts->ff_scan = "bidirectional";
  opts->ff_blend_alpha = 0.5;
}

/* --profile presets (apexx-bench(1), PROFILES): the shapes the GPU tables
 * are measured at. seed is the default's map (batch 1, 128 channels,
 * 128 x 128, tile 8, kmax 32) with the reference scan (B1, 256 steps, 128
 * channels) and indexing over a (4096, 128) source, 256 rows, its device
 * rows timed by graph replay; large is B8 C256 512 x 512 t8 kmax 2048, scan
 * B8 4096 steps 1024 channels, indexing (262144, 1024) with 65536 rows. */
static int apply_profile(const char *value, bench_options *o) {
  if (strcmp(value, "default") == 0) {
    o->profile = "default";
    return 0;
  }
  if (strcmp(value, "seed") == 0) {
    o->profile = "seed";
    o->scan_batch = 1, o->steps = 256, o->scan_channels = 128;
    o->index_src_rows = 4096, o->index_width = 128, o->index_rows = 256;
    o->graph_replay = 1;
    return 0;
  }
  if (strcmp(value, "large") == 0) {
    o->profile = "large";
    o->batch = 8, o->channels = 256, o->height = 512, o->width = 512;
    o->tile_size = 8, o->kmax = 2048;
    o->scan_batch = 8, o->steps = 4096, o->scan_channels = 1024;
    o->index_src_rows = 262144, o->index_width = 1024, o->index_rows = 65536;
    return 0;
  }
  fprintf(stderr, "apexx-bench: --profile: [%s] is not one of default, seed, large\n", value);
  return 1;
}

static int bad(const char *flag, const char *value, const char *why) {
  fprintf(stderr, "apexx-bench: --%s: [%s] %s\n", flag, value, why);
  return 1;
}

static int parse_int(const char *flag, const char *value, int64_t lo,
                     int64_t hi, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(value, &end, 10);
  if (value[0] == '\0' || *end != '\0' || errno == ERANGE) {
    return bad(flag, value, "is not an integer");
  }
  if (v < lo || v > hi) {
    char why[128];
    snprintf(why, sizeof why, "is outside [%lld, %lld]", (long long)lo,
             (long long)hi);
    return bad(flag, value, why);
  }
  *out = v;
  return 0;
}

static int parse_budget(const char *flag, const char *value, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(value, &end);
  if (value[0] == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v)) {
    return bad(flag, value, "is not a finite number");
  }
  if (v < 0) return bad(flag, value, "must be >= 0");
  *out = v;
  return 0;
}

/* Split a comma-separated list in place (value is argv memory, which we may
 * keep pointing into after writing NULs). Empty items are an error. */
static int parse_list(const char *flag, char *value, const char **items,
                      int *count) {
  char copy[512];
  snprintf(copy, sizeof copy, "%s", value);
  *count = 0;
  char *save = NULL;
  int items_seen = 0;
  for (char *p = value;; p = NULL) {
    char *item = strtok_r(p, ",", &save);
    if (!item) break;
    while (*item == ' ') item++;
    char *tail = item + strlen(item);
    while (tail > item && tail[-1] == ' ') *--tail = '\0';
    if (*item == '\0') continue;
    if (*count == BENCH_MAX_LIST) {
      return bad(flag, copy, "names too many items (at most 32)");
    }
    items[(*count)++] = item;
    items_seen++;
  }
  if (items_seen == 0) return bad(flag, copy, "is an empty list");
  return 0;
}

static int parse_dtype(const char *value, bench_options *opts) {
  static const struct {
    const char *name;
    apx_dtype dtype;
  } known[] = {{"fp16", APX_DTYPE_F16}, {"f16", APX_DTYPE_F16},
               {"bf16", APX_DTYPE_BF16}, {"fp32", APX_DTYPE_F32},
               {"f32", APX_DTYPE_F32},
               /* docs/report.md, Profile and inputs: fp8 falls back to fp16 with a reason
                * (apexx has no fp8 dtype) */
               {"fp8", APX_DTYPE_F16}};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
    if (strcmp(value, known[i].name) == 0) {
      opts->requested_dtype = known[i].name;
      opts->dtype = known[i].dtype;
      return 0;
    }
  }
  return bad("dtype", value, "is not one of fp16, bf16, fp32, fp8");
}

/* --ff-order: an apx_order_mode name or alias (apx_order_mode_from_name),
 * kept as the op descriptor's name of the mode. */
static int parse_ff_order(const char *value, bench_options *opts) {
  static const char *const names[] = {"hilbert", "l2r", "r2l", "u2d", "d2u", "multi_direction"};
  int mode = apx_order_mode_from_name(value);
  if (mode < 0 || mode >= (int)(sizeof names / sizeof names[0]))
    return bad("ff-order", value, "is not one of hilbert, l2r, r2l, u2d, d2u, multi_direction");
  opts->ff_order = names[mode];
  return 0;
}

/* One of two words, kept as the static string that equals it. */
static int parse_either(const char *flag, const char *value, const char *first, const char *second,
                        const char **out) {
  if (strcmp(value, first) == 0 || strcmp(value, second) == 0) {
    *out = strcmp(value, first) == 0 ? first : second;
    return 0;
  }
  char why[96];
  snprintf(why, sizeof why, "is neither %s nor %s", first, second);
  return bad(flag, value, why);
}

/* --ff-blend-alpha: a number in [0, 1] (tileunpack's blend_alpha). */
static int parse_blend_alpha(const char *value, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(value, &end);
  if (value[0] == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v))
    return bad("ff-blend-alpha", value, "is not a finite number");
  if (v < 0.0 || v > 1.0)
    return bad("ff-blend-alpha", value, "is outside [0, 1]");
  *out = v;
  return 0;
}

/* NAME=AxBx... with positive dims (apexx-bench(1), TensorRT). */
static int check_input_shape(const char *value) {
  const char *eq = strchr(value, '=');
  if (!eq || eq == value) {
    return bad("trt-input-shape", value, "must be NAME=AxBx... (no NAME=)");
  }
  const char *p = eq + 1;
  int dims = 0;
  for (;;) {
    char *end = NULL;
    errno = 0;
    if (*p < '0' || *p > '9') {
      return bad("trt-input-shape", value,
                 "must be NAME=AxBx... with positive integer dims");
    }
    long long d = strtoll(p, &end, 10);
    if (errno == ERANGE || d <= 0 || d > MAX_DIM) {
      return bad("trt-input-shape", value,
                 "has a dim outside [1, 16777216]");
    }
    dims++;
    if (*end == '\0') break;
    if (*end != 'x' || dims == APX_MAX_DIMS) {
      return bad("trt-input-shape", value,
                 "must be NAME=AxBx... with at most 8 positive integer dims");
    }
    p = end + 1;
  }
  return 0;
}

/* Relations between fields, checked once every flag is read so the message
 * can name the flag whose value breaks them. */
static int check_profile(const bench_options *o) {
  char value[64], why[160];
  if (o->height % o->tile_size != 0 || o->width % o->tile_size != 0) {
    snprintf(value, sizeof value, "%lld", (long long)o->tile_size);
    snprintf(why, sizeof why, "must divide --height %lld and --width %lld",
             (long long)o->height, (long long)o->width);
    return bad("tile-size", value, why);
  }
  int64_t grid = (o->height / o->tile_size) * (o->width / o->tile_size);
  if (o->kmax > grid) {
    snprintf(value, sizeof value, "%lld", (long long)o->kmax);
    snprintf(why, sizeof why,
             "exceeds the tile grid's %lld tiles (distinct ids per row)",
             (long long)grid);
    return bad("kmax", value, why);
  }
  /* each factor is <= 2^24, so products of two never overflow */
  double dense = (double)o->batch * (double)o->channels * (double)o->height *
                 (double)o->width;
  if (dense > (double)MAX_ELEMENTS) {
    snprintf(value, sizeof value, "%lld", (long long)o->channels);
    snprintf(why, sizeof why,
             "makes batch*channels*height*width = %.0f exceed 2^31 elements",
             dense);
    return bad("channels", value, why);
  }
  double tokens = (double)o->scan_batch * (double)o->steps * (double)o->scan_channels;
  if (tokens > (double)MAX_ELEMENTS) {
    snprintf(value, sizeof value, "%lld", (long long)o->steps);
    snprintf(why, sizeof why,
             "makes batch*steps*channels = %.0f exceed 2^31 elements", tokens);
    return bad("steps", value, why);
  }
  /* the indexing shapes: src [M, D], N rows of D (the same bound) */
  double table = (double)o->index_src_rows * (double)o->index_width;
  double picked = (double)o->index_rows * (double)o->index_width;
  if (table > (double)MAX_ELEMENTS || picked > (double)MAX_ELEMENTS) {
    snprintf(value, sizeof value, "%lld", (long long)o->channels);
    snprintf(why, sizeof why,
             "makes the indexing source (%.0f elements) or its rows (%.0f) exceed 2^31 "
             "elements",
             table, picked);
    return bad("channels", value, why);
  }
  return 0;
}

/* The default profile's derived shapes (bench_options, scan_* and index_*)
 * for the fields no preset set. */
static void derive_shapes(bench_options *o) {
  if (!o->scan_batch) o->scan_batch = o->batch;
  if (!o->scan_channels) o->scan_channels = o->channels;
  if (!o->index_src_rows) o->index_src_rows = o->batch * o->height * o->width;
  if (!o->index_width) o->index_width = o->channels;
  if (!o->index_rows) o->index_rows = o->batch * o->kmax * o->tile_size * o->tile_size;
}

void bench_print_usage(FILE *to) {
  fprintf(to, "usage: apexx-bench [flags]\n"
              "       apexx-bench compare BASELINE CURRENT [--max-ratio R] "
              "[--max-abs-ms A] [--alpha P] [--allow-mismatch]\n"
              "               [--statistic median|min] [--relative] [--confirm F]\n"
              "               [--ops LIST] [--metrics LIST]\n"
              "               [--output-json F] [--output-md F] [--quiet]\n"
              "       apexx-bench ab A B [--rounds N] [--until-settled MAX] [--passes P]\n"
              "               [--threshold T] [--a-env N=V] [--b-env N=V] ... [-- RUN-FLAGS]\n"
              "               (two builds run alternately; apexx-bench ab --help)\n"
              "       apexx-bench history DIR [REPORT...]\n"
              "       apexx-bench compare --emit-baseline REPORT [-o FILE] "
              "[--metrics LIST] [--max-ratio R] [--max-abs-ms A]\n"
              "\n"
              "Profile (defaults: the fixed baseline profile):\n"
              "  --profile default|seed|large (default): a preset of the shapes below\n"
              "                    (apexx-bench(1) PROFILES); later flags change it\n"
              "  --graph-replay on|off (off; on with --profile seed): time device rows\n"
              "                    by replays of a captured graph of 20 calls\n"
              "  --parity on|off (on): compare every row with the cpu backend; off\n"
              "                    skips the cpu reference (large GPU profiles)\n"
              "  --batch N (1)  --channels N (128)  --height N (128)  --width N "
              "(128)\n"
              "  --tile-size N (8)  --kmax N (32)  --steps N (256)\n"
              "  --budget-b1 X (16)  --budget-b2 X (8)  --budget-total X (32)\n"
              "  --dtype fp16|bf16|fp32|fp8 (fp16)  --seed N (123)\n"
              "  --warmup N (10)  --iters N (50)  --repetitions N (5): passes over "
              "the suite;\n"
              "                    each row keeps the N per-pass medians and minima\n"
              "  --timer backend|cpu-time (backend): cpu-time times host rows on the\n"
              "                    process's CPU clock (a shared machine's waits not\n"
              "                    counted) and skips device rows\n"
              "Selection:\n"
              "  --ops LIST        entries or sections, comma-separated (all)\n"
              "  --backends LIST   backends to measure (every configured one)\n"
              "  --config FILE     apexx.ini (else $APEXX_CONFIG, installed, "
              "built-in)\n"
              "Output:\n"
              "  --output-json F   report JSON\n"
              "  --output-md F     Markdown summary (stdout when neither is given)\n"
              "                    ('-' is standard output for either)\n"
              "  --history DIR     append the run's summary to the history store "
              "DIR\n"
              "  --quiet           no progress, no 'wrote_*' lines\n"
              "  --progress        progress on stderr even when it is not a terminal\n"
              "                    (a line as each row starts, for CI logs)\n"
              "  --no-progress     no progress (default: progress on a terminal, unless\n"
              "                    --quiet)\n"
              "End-to-end (end_to_end_infer):\n"
              "  --ff-weights F    FF weights (safetensors, FFModule names); "
              "default: apx_ff_weights_seeded(channels, seed)\n"
              "  --ff-order hilbert|l2r|r2l|u2d|d2u|multi_direction (hilbert)\n"
              "  --ff-overlap override|blend (override)  --ff-blend-alpha X (0.5, in [0, 1])\n"
              "  --ff-scan bidirectional|forward (bidirectional): ff_infer's FFModule\n"
              "                    options (docs/ff_infer.md, Options)\n"
              "TensorRT:\n"
              "  --trt-plugin-lib F (or $APEXX_TRT_PLUGIN_LIB)\n"
              "  --trt-engine-path F  --trt-input-shape NAME=AxBx... "
              "(repeatable)\n"
              "  -h, --help  --version\n"
              "Exit status: 0 every row ran or was skipped with a reason, 2 a row "
              "failed, 1 bad flags or config;\n"
              "compare and ab: 0 pass, 2 regression, 3 inconclusive, 1 unusable input.\n"
              "See apexx-bench(1).\n");
}

static void print_version(void) {
  const char *sha = bench_git_sha();
  if (!sha) sha = "unknown";
  printf("apexx-bench %s (libapexx %s, git %s)\n", PACKAGE_VERSION,
         apx_version(), sha);
}

/* Apply flag c (its long name `name`, its value arg) to opts; 0, or 1 after
 * a message naming the flag and the bad value; 2 when c is no such flag. */
static int apply_flag(int c, const char *name, char *arg, bench_options *opts) {
  int64_t v = 0;
  int rc = 0;
  switch (c) {
  case FLAG_BATCH:
    rc = parse_int(name, arg, 1, MAX_DIM, &opts->batch);
    break;
  case FLAG_CHANNELS:
    rc = parse_int(name, arg, 1, MAX_DIM, &opts->channels);
    break;
  case FLAG_HEIGHT:
    rc = parse_int(name, arg, 1, MAX_DIM, &opts->height);
    break;
  case FLAG_WIDTH:
    rc = parse_int(name, arg, 1, MAX_DIM, &opts->width);
    break;
  case FLAG_TILE_SIZE:
    rc = parse_int(name, arg, 1, MAX_DIM, &opts->tile_size);
    break;
  case FLAG_KMAX:
    rc = parse_int(name, arg, 1, MAX_DIM, &opts->kmax);
    break;
  case FLAG_STEPS:
    rc = parse_int(name, arg, 1, MAX_DIM, &opts->steps);
    break;
  case FLAG_BUDGET_B1:
    rc = parse_budget(name, arg, &opts->budget_b1);
    break;
  case FLAG_BUDGET_B2:
    rc = parse_budget(name, arg, &opts->budget_b2);
    break;
  case FLAG_BUDGET_TOTAL:
    rc = parse_budget(name, arg, &opts->budget_total);
    break;
  case FLAG_DTYPE:
    rc = parse_dtype(arg, opts);
    break;
  case FLAG_SEED:
    rc = parse_int(name, arg, 0, (int64_t)MAX_SEED, &v);
    opts->seed = (uint64_t)v;
    break;
  case FLAG_WARMUP:
    rc = parse_int(name, arg, 0, MAX_ITERS, &v);
    opts->warmup = (int)v;
    break;
  case FLAG_ITERS:
    rc = parse_int(name, arg, 1, MAX_ITERS, &v);
    opts->iters = (int)v;
    break;
  case FLAG_REPETITIONS:
    rc = parse_int(name, arg, 1, MAX_REPETITIONS, &v);
    opts->repetitions = (int)v;
    break;
  case FLAG_TIMER:
    if (strcmp(arg, "backend") == 0) {
      opts->cpu_time = 0;
    } else if (strcmp(arg, "cpu-time") == 0) {
      opts->cpu_time = 1;
    } else {
      rc = bad(name, arg, "is neither backend nor cpu-time");
    }
    break;
  case FLAG_HISTORY:
    if (*arg == '\0') rc = bad(name, arg, "is an empty path");
    opts->history_dir = arg;
    break;
  case FLAG_OPS:
    rc = parse_list(name, arg, opts->ops, &opts->op_count);
    for (int i = 0; rc == 0 && i < opts->op_count; i++) {
      if (!bench_op_name_known(opts->ops[i])) {
        fprintf(stderr, "apexx-bench: --ops: [%s] is not an entry or section; "
                        "known: ", opts->ops[i]);
        bench_print_op_names(stderr);
        rc = 1;
      }
    }
    break;
  case FLAG_BACKENDS:
    rc = parse_list(name, arg, opts->backends, &opts->backend_count);
    break;
  case FLAG_CONFIG:
    if (*arg == '\0') rc = bad(name, arg, "is an empty path");
    opts->config_path = arg;
    break;
  case FLAG_OUTPUT_JSON:
    if (*arg == '\0') rc = bad(name, arg, "is an empty path");
    opts->output_json = arg;
    break;
  case FLAG_OUTPUT_MD:
    if (*arg == '\0') rc = bad(name, arg, "is an empty path");
    opts->output_md = arg;
    break;
  case FLAG_FF_WEIGHTS:
    if (*arg == '\0') rc = bad(name, arg, "is an empty path");
    opts->ff_weights_path = arg;
    break;
  case FLAG_FF_ORDER:
    rc = parse_ff_order(arg, opts);
    break;
  case FLAG_FF_OVERLAP:
    rc = parse_either(name, arg, "override", "blend", &opts->ff_overlap);
    break;
  case FLAG_FF_BLEND_ALPHA:
    rc = parse_blend_alpha(arg, &opts->ff_blend_alpha);
    break;
  case FLAG_FF_SCAN:
    rc = parse_either(name, arg, "bidirectional", "forward", &opts->ff_scan);
    break;
  case FLAG_TRT_PLUGIN_LIB:
    opts->trt_plugin_lib = *arg ? arg : NULL;
    break;
  case FLAG_TRT_ENGINE_PATH:
    opts->trt_engine_path = *arg ? arg : NULL;
    break;
  case FLAG_TRT_INPUT_SHAPE:
    rc = check_input_shape(arg);
    if (rc == 0 && opts->trt_input_shape_count == BENCH_MAX_LIST) {
      rc = bad(name, arg, "is one too many (at most 32)");
    }
    if (rc == 0) opts->trt_input_shapes[opts->trt_input_shape_count++] = arg;
    break;
  case FLAG_PROFILE:
    break; /* applied by the first pass */
  case FLAG_GRAPH_REPLAY:
    if (strcmp(arg, "on") == 0) {
      opts->graph_replay = 1;
    } else if (strcmp(arg, "off") == 0) {
      opts->graph_replay = 0;
    } else {
      rc = bad(name, arg, "is neither on nor off");
    }
    break;
  case FLAG_PARITY:
    if (strcmp(arg, "on") == 0) {
      opts->parity = 1;
    } else if (strcmp(arg, "off") == 0) {
      opts->parity = 0;
    } else {
      rc = bad(name, arg, "is neither on nor off");
    }
    break;
  case FLAG_QUIET:
    opts->quiet = 1;
    break;
  case FLAG_PROGRESS:
    opts->progress = 1;
    break;
  case FLAG_NO_PROGRESS:
    opts->progress = 0;
    break;
  default:
    return 2;
  }
  return rc != 0 ? 1 : 0;
}

int bench_parse_flags(int argc, char **argv, bench_options *opts) {
  defaults(opts);
  const char *env_plugin = getenv("APEXX_TRT_PLUGIN_LIB");
  if (env_plugin && *env_plugin) opts->trt_plugin_lib = env_plugin;

  opterr = 0; /* our own messages name the flag and value */
  /* a first pass applies --profile, so that the other flags change the
   * preset whatever their order */
  optind = 1;
  for (;;) {
    int index = -1;
    int c = getopt_long(argc, argv, ":h", long_flags, &index);
    if (c == -1) break;
    if (c == FLAG_PROFILE && apply_profile(optarg, opts) != 0) return 1;
  }
  optind = 0; /* glibc: a second scan of the same vector reinitialises */
  for (;;) {
    int index = -1;
    int c = getopt_long(argc, argv, ":h", long_flags, &index);
    if (c == -1) break;
    const char *name = index >= 0 ? long_flags[index].name : "";
    int rc = apply_flag(c, name, optarg, opts);
    if (rc == 0) continue;
    if (rc == 1) return 1;
    switch (c) {
    case 'h':
    case FLAG_HELP:
      bench_print_usage(stdout);
      return -1;
    case FLAG_VERSION:
      print_version();
      return -1;
    case ':':
      fprintf(stderr, "apexx-bench: %s: needs a value\n", argv[optind - 1]);
      return 1;
    default:
      fprintf(stderr, "apexx-bench: unknown flag [%s] (see --help)\n",
              argv[optind - 1]);
      return 1;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "apexx-bench: unexpected argument [%s] (see --help)\n",
            argv[optind]);
    return 1;
  }
  if ((int64_t)opts->iters * opts->repetitions > MAX_ITERS) {
    char value[32];
    snprintf(value, sizeof value, "%d", opts->repetitions);
    return bad("repetitions", value, "makes iters*repetitions exceed 1000000");
  }
  derive_shapes(opts);
  return check_profile(opts) != 0 ? 1 : 0;
}
