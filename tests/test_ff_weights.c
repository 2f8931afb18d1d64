/* SPDX-License-Identifier: Apache-2.0 */
/* apx_ff_weights_* (libapexx/ff/, docs/ff_weights.md): files the
 * test writes itself in f32, f16, bf16 and mixed dtypes, read back through a
 * check-only backend (tests/fixtures/ff_weights_backend.c) that dumps the
 * apx_ff_params it is given; the seeded generator against the documented
 * recipe; save/load round trips; every malformed file named; the backend
 * cache (made once per dtype, released with the handle, nothing cached on
 * failure); handles left open at apx_close. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define ck_assert_contains(hay, needle)                                                            \
  ck_assert_msg(strstr((hay), (needle)) != NULL, "expected [%s] in [%s]", (needle), (hay))

/* ---- the documented tensors (docs/ff_weights.md), in the documented order ---- */

typedef enum init_kind { INIT_ZERO, INIT_ONE, INIT_UNIFORM_C, INIT_UNIFORM_9 } init_kind;

typedef struct tensor_def {
  const char *suffix;
  const char *shape; /* dims separated by ',': "C", "2C", or a constant; "" is 0-d */
  init_kind init;
  int rank; /* the field's position in apx_ff_level_params (the probe's order) */
} tensor_def;

static const tensor_def defs[] = {
    {"scan_bidirectional.merge_gate_logit", "C", INIT_ZERO, 0},
    {"scan_bidirectional.forward_scan.decay_logit", "C", INIT_ZERO, 1},
    {"scan_bidirectional.forward_scan.input_gain_raw", "C", INIT_ZERO, 3},
    {"scan_bidirectional.forward_scan.output_gain_raw", "C", INIT_ZERO, 5},
    {"scan_bidirectional.forward_scan.state_bias", "C", INIT_ZERO, 7},
    {"scan_bidirectional.backward_scan.decay_logit", "C", INIT_ZERO, 2},
    {"scan_bidirectional.backward_scan.input_gain_raw", "C", INIT_ZERO, 4},
    {"scan_bidirectional.backward_scan.output_gain_raw", "C", INIT_ZERO, 6},
    {"scan_bidirectional.backward_scan.state_bias", "C", INIT_ZERO, 8},
    {"film.token_norm.weight", "C", INIT_ONE, 9},
    {"film.token_norm.bias", "C", INIT_ZERO, 10},
    {"film.mlp.0.weight", "C,C", INIT_UNIFORM_C, 11},
    {"film.mlp.0.bias", "C", INIT_UNIFORM_C, 12},
    {"film.mlp.2.weight", "2C,C", INIT_UNIFORM_C, 13},
    {"film.mlp.2.bias", "2C", INIT_UNIFORM_C, 14},
    {"refine.depthwise.weight", "C,1,3,3", INIT_UNIFORM_9, 15},
    {"refine.depthwise.bias", "C", INIT_UNIFORM_9, 16},
    {"refine.pointwise.weight", "2C,C,1,1", INIT_UNIFORM_C, 17},
    {"refine.pointwise.bias", "2C", INIT_UNIFORM_C, 18},
    {"refine.norm.weight", "2C", INIT_ONE, 19},
    {"refine.norm.bias", "2C", INIT_ZERO, 20},
    {"fusion_gate.boundary_log_weight", "", INIT_ONE, 21},
    {"fusion_gate.uncertainty_log_weight", "", INIT_ONE, 22},
    {"fusion_gate.bias", "", INIT_ZERO, 23},
};
#define NDEFS ((int)(sizeof defs / sizeof defs[0]))
static const char *const prefix[2] = {"l0_path.", "l1_path."};

static int def_dims(const tensor_def *d, int64_t c, int64_t *dims) {
  int ndim = 0;
  for (const char *p = d->shape; *p;) {
    if (strncmp(p, "2C", 2) == 0)
      dims[ndim++] = 2 * c;
    else if (*p == 'C')
      dims[ndim++] = c;
    else
      dims[ndim++] = strtol(p, NULL, 10);
    while (*p && *p != ',')
      p++;
    if (*p == ',')
      p++;
  }
  return ndim;
}

static int64_t def_numel(const tensor_def *d, int64_t c) {
  int64_t dims[4], n = 1;
  int ndim = def_dims(d, c, dims);
  for (int i = 0; i < ndim; i++)
    n *= dims[i];
  return n;
}

static int64_t level_numel(int64_t c) {
  int64_t n = 0;
  for (int i = 0; i < NDEFS; i++)
    n += def_numel(&defs[i], c);
  return n;
}

/* Where tensor (level, i) sits in the probe's dump. */
static int64_t dump_offset(int level, int i, int64_t c) {
  int64_t off = level * level_numel(c);
  for (int j = 0; j < NDEFS; j++)
    if (defs[j].rank < defs[i].rank)
      off += def_numel(&defs[j], c);
  return off;
}

static void full_name(char *out, size_t size, int level, int i) {
  snprintf(out, size, "%s%s", prefix[level], defs[i].suffix);
}

/* Expected fp32 values of every tensor. */
typedef struct weight_set {
  int64_t c;
  float *v[2][NDEFS];
} weight_set;

static void weight_set_free(weight_set *ws) {
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < NDEFS; i++)
      free(ws->v[l][i]);
}

/* ---- a safetensors writer of the test's own ---- */

typedef struct st_tensor {
  char name[128];
  const char *dtype;
  int ndim;
  int64_t dims[8];
  unsigned char *data; /* owned */
  size_t bytes;
  int explicit_offsets;
  uint64_t begin, end;
} st_tensor;

typedef struct st_file {
  st_tensor t[96];
  int n;
  char metadata[256]; /* JSON value of __metadata__, "" for none */
} st_file;

static st_tensor *st_add(st_file *f, const char *name, const char *dtype, int ndim,
                         const int64_t *dims, size_t bytes) {
  ck_assert_int_lt(f->n, 96);
  st_tensor *t = &f->t[f->n++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->dtype = dtype;
  t->ndim = ndim;
  memcpy(t->dims, dims, (size_t)ndim * sizeof *dims);
  t->bytes = bytes;
  t->data = calloc(1, bytes ? bytes : 1);
  return t;
}

static st_tensor *st_find(st_file *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (strcmp(f->t[i].name, name) == 0)
      return &f->t[i];
  ck_abort_msg("no tensor %s", name);
  return NULL;
}

static void st_remove(st_file *f, const char *name) {
  st_tensor *t = st_find(f, name);
  free(t->data);
  memmove(t, t + 1, (size_t)(f->t + f->n - (t + 1)) * sizeof *t);
  f->n--;
}

static void st_free(st_file *f) {
  for (int i = 0; i < f->n; i++)
    free(f->t[i].data);
  f->n = 0;
}

static void appendf(char **buf, size_t *used, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void appendf(char **buf, size_t *used, size_t *cap, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(*buf + *used, *cap - *used, fmt, ap);
    va_end(ap);
    if ((size_t)n < *cap - *used) {
      *used += (size_t)n;
      return;
    }
    *cap = 2 * *cap + (size_t)n;
    *buf = realloc(*buf, *cap);
    ck_assert_ptr_nonnull(*buf);
  }
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *fp = fopen(path, "wb");
  ck_assert_ptr_nonnull(fp);
  ck_assert_uint_eq(fwrite(data, 1, n, fp), n);
  ck_assert_int_eq(fclose(fp), 0);
}

/* 8-byte little-endian length, header (padded with spaces to 8), data. */
static void write_with_header(const char *path, const char *header, const unsigned char *data,
                              size_t data_bytes) {
  size_t hn = strlen(header), padded = (hn + 7) / 8 * 8;
  unsigned char *buf = malloc(8 + padded + data_bytes + 1);
  ck_assert_ptr_nonnull(buf);
  for (int i = 0; i < 8; i++)
    buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  memcpy(buf + 8, header, hn);
  memset(buf + 8 + hn, ' ', padded - hn);
  if (data_bytes)
    memcpy(buf + 8 + padded, data, data_bytes);
  write_bytes(path, buf, 8 + padded + data_bytes);
  free(buf);
}

/* Write f; `edit_from` (when set) must occur in the header and is replaced
 * by `edit_to`; `truncate` bytes are cut off the end of the data. */
static void st_write(const char *path, const st_file *f, const char *edit_from, const char *edit_to,
                     size_t truncate) {
  size_t cap = 1024, used = 0, data_bytes = 0;
  char *h = malloc(cap);
  ck_assert_ptr_nonnull(h);
  appendf(&h, &used, &cap, "{");
  if (f->metadata[0])
    appendf(&h, &used, &cap, "\"__metadata__\":%s", f->metadata);
  for (int i = 0; i < f->n; i++) {
    const st_tensor *t = &f->t[i];
    uint64_t begin = t->explicit_offsets ? t->begin : data_bytes;
    uint64_t end = t->explicit_offsets ? t->end : data_bytes + t->bytes;
    appendf(&h, &used, &cap, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[",
            (i || f->metadata[0]) ? "," : "", t->name, t->dtype);
    for (int d = 0; d < t->ndim; d++)
      appendf(&h, &used, &cap, "%s%lld", d ? "," : "", (long long)t->dims[d]);
    appendf(&h, &used, &cap, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)begin,
            (unsigned long long)end);
    data_bytes += t->bytes;
  }
  appendf(&h, &used, &cap, "}");
  if (edit_from) {
    char *at = strstr(h, edit_from);
    ck_assert_msg(at != NULL, "edit [%s] not in the header", edit_from);
    size_t from_n = strlen(edit_from), to_n = strlen(edit_to);
    char *edited = malloc(used - from_n + to_n + 1);
    ck_assert_ptr_nonnull(edited);
    memcpy(edited, h, (size_t)(at - h));
    memcpy(edited + (at - h), edit_to, to_n);
    strcpy(edited + (at - h) + to_n, at + from_n);
    free(h);
    h = edited;
  }
  unsigned char *data = malloc(data_bytes + 1);
  ck_assert_ptr_nonnull(data);
  size_t pos = 0;
  for (int i = 0; i < f->n; i++) {
    if (f->t[i].bytes)
      memcpy(data + pos, f->t[i].data, f->t[i].bytes);
    pos += f->t[i].bytes;
  }
  ck_assert_uint_le(truncate, data_bytes);
  write_with_header(path, h, data, data_bytes - truncate);
  free(data);
  free(h);
}

/* binary16 bits -> value, from the format's definition */
static float f16_value(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  return (float)((h & 0x8000) ? -v : v);
}

static float bf16_value(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void put_le(unsigned char *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

/* Every required tensor of C channels with random values stored as `dtype`
 * ("F32", "F16", "BF16", or "mixed": a dtype drawn per tensor); the
 * expected fp32 values go to ws. */
static void make_valid(st_file *f, weight_set *ws, int64_t c, const char *dtype, tu_rng *r) {
  static const char *const kinds[3] = {"F32", "F16", "BF16"};
  memset(f, 0, sizeof *f);
  memset(ws, 0, sizeof *ws);
  ws->c = c;
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < NDEFS; i++) {
      int64_t dims[4];
      int ndim = def_dims(&defs[i], c, dims);
      int64_t n = def_numel(&defs[i], c);
      const char *dt = strcmp(dtype, "mixed") == 0 ? kinds[tu_int(r, 0, 2)] : dtype;
      int size = strcmp(dt, "F32") == 0 ? 4 : 2;
      char name[128];
      full_name(name, sizeof name, l, i);
      st_tensor *t = st_add(f, name, dt, ndim, dims, (size_t)(n * size));
      float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
      ck_assert_ptr_nonnull(v);
      for (int64_t k = 0; k < n; k++) {
        if (size == 4) {
          float x = (float)tu_normal(r);
          uint32_t u;
          memcpy(&u, &x, 4);
          put_le(t->data + 4 * k, u, 4);
          v[k] = x;
        } else if (strcmp(dt, "F16") == 0) {
          uint16_t h;
          do
            h = (uint16_t)tu_next(r);
          while (((h >> 10) & 31) == 31); /* finite values */
          put_le(t->data + 2 * k, h, 2);
          v[k] = f16_value(h);
        } else {
          uint16_t b;
          do
            b = (uint16_t)tu_next(r);
          while (((b >> 7) & 0xff) == 0xff);
          put_le(t->data + 2 * k, b, 2);
          v[k] = bf16_value(b);
        }
      }
      ws->v[l][i] = v;
    }
}

/* ---- fixtures: a temporary directory, a context on the probe backend ---- */

static apx_context *ctx;
static char dir[256];

static const char *tmp_path(const char *name) {
  static char paths[4][512];
  static int next;
  char *p = paths[next++ % 4];
  snprintf(p, sizeof paths[0], "%s/%s", dir, name);
  return p;
}

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/apexx-ffw-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  const char *modules = getenv("APEXX_TEST_MODULES");
  ck_assert_msg(modules != NULL, "APEXX_TEST_MODULES is not set (run under make check)");
  char ini[1024];
  snprintf(ini, sizeof ini,
           "[apexx]\nbackend_dir = %s\norder = ffprobe\n"
           "[backend ffprobe]\nlibrary = fixture-ffprobe.so\nenabled = yes\n",
           modules);
  const char *ini_path = tmp_path("probe.ini");
  write_bytes(ini_path, ini, strlen(ini));
  unsetenv("APEXX_BACKEND_DIR");
  apx_status st = apx_open(&ctx, ini_path);
  ck_assert_msg(st == APX_OK, "apx_open: %s: %s", apx_status_name(st), apx_last_error());
}

static void teardown(void) {
  apx_close(ctx);
  ctx = NULL;
  DIR *d = opendir(dir);
  if (d) {
    for (struct dirent *e; (e = readdir(d));)
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (rmdir(p) != 0)
          unlink(p);
      }
    closedir(d);
  }
  rmdir(dir);
}

/* ---- the probe ---- */

typedef struct probe_result {
  apx_status status;
  float *dump; /* f32 calls: the params, in the probe's order (malloc'd) */
  float makes, releases, serial, channels;
} probe_result;

static probe_result probe(const apx_ff_weights *w, apx_dtype dtype, double budget_b2) {
  int64_t c = apx_ff_weights_channels(w);
  apx_tensor dense = tu_host4(dtype, 1, c, 32, 32), util = tu_host2(APX_DTYPE_F32, 1, 4);
  apx_tensor heavy = tu_host4(dtype, 1, c, 32, 32), detail = tu_host4(dtype, 1, c, 32, 32);
  apx_tensor alpha = tu_host4(dtype, 1, 1, 32, 32);
  memset(dense.data, 0, tu_bytes(&dense));
  memset(util.data, 0, tu_bytes(&util));
  apx_ff_infer_args a = APX_FF_INFER_ARGS_INIT;
  a.dense = &dense;
  a.utilities = &util;
  a.weights = w;
  a.kmax_l0 = 4;
  a.kmax_l1 = 16;
  a.budget_b2 = budget_b2;
  a.heavy = &heavy;
  a.detail = &detail;
  a.alpha = &alpha;
  probe_result r = {apx_ff_infer(ctx, &a, NULL), NULL, 0, 0, 0, 0};
  if (dtype == APX_DTYPE_F32 && r.status == APX_OK) {
    size_t n = (size_t)(2 * level_numel(c));
    r.dump = malloc(n * sizeof *r.dump);
    ck_assert_ptr_nonnull(r.dump);
    memcpy(r.dump, heavy.data, n * sizeof *r.dump);
  }
  if (r.status == APX_OK || r.status == APX_ERR_BACKEND) {
    r.makes = (float)tu_get(&alpha, 0);
    r.releases = (float)tu_get(&alpha, 1);
    r.serial = (float)tu_get(&alpha, 2);
    r.channels = (float)tu_get(&alpha, 3);
  }
  tu_free(&dense);
  tu_free(&util);
  tu_free(&heavy);
  tu_free(&detail);
  tu_free(&alpha);
  return r;
}

static float *dump_of(const apx_ff_weights *w) {
  probe_result r = probe(w, APX_DTYPE_F32, 8.0);
  ck_assert_msg(r.status == APX_OK, "probe: %s: %s", apx_status_name(r.status), apx_last_error());
  return r.dump;
}

/* Every parameter the backend sees equals ws, bit for bit. */
static void expect_params(const apx_ff_weights *w, const weight_set *ws) {
  ck_assert_int_eq(apx_ff_weights_channels(w), ws->c);
  float *dump = dump_of(w);
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < NDEFS; i++) {
      int64_t n = def_numel(&defs[i], ws->c), off = dump_offset(l, i, ws->c);
      for (int64_t k = 0; k < n; k++)
        ck_assert_msg(memcmp(&dump[off + k], &ws->v[l][i][k], 4) == 0,
                      "%s%s[%lld] = %.9g, expected %.9g", prefix[l], defs[i].suffix, (long long)k,
                      dump[off + k], ws->v[l][i][k]);
    }
  free(dump);
}

static apx_ff_weights *load_ok(const char *path) {
  apx_ff_weights *w = NULL;
  apx_status st = apx_ff_weights_load(ctx, path, &w);
  ck_assert_msg(st == APX_OK, "load %s: %s: %s", path, apx_status_name(st), apx_last_error());
  ck_assert_ptr_nonnull(w);
  return w;
}

/* ---- reading valid files ---- */

static const char *const load_dtypes[] = {"F32", "F16", "BF16", "mixed"};

START_TEST(test_load_dtypes) {
  tu_rng r = {tu_seed() + (uint64_t)_i};
  int64_t c = tu_int(&r, 1, 9);
  st_file f;
  weight_set ws;
  make_valid(&f, &ws, c, load_dtypes[_i], &r);
  const char *path = tmp_path("valid.safetensors");
  st_write(path, &f, NULL, NULL, 0);
  apx_ff_weights *w = load_ok(path);
  expect_params(w, &ws);
  apx_ff_weights_free(ctx, w);
  st_free(&f);
  weight_set_free(&ws);
}
END_TEST

START_TEST(test_load_ignores_extras) {
  tu_rng r = {tu_seed() + 11};
  int64_t c = 4;
  st_file f;
  weight_set ws;
  make_valid(&f, &ws, c, "F32", &r);
  snprintf(f.metadata, sizeof f.metadata, "{\"format\":\"pt\",\"note\":\"extra\"}");
  st_add(&f, "head.weight", "I64", 2, (int64_t[]){3, 2}, 48);
  st_add(&f, "head.scale", "F64", 1, (int64_t[]){5}, 40);
  st_add(&f, "head.future", "X9", 1, (int64_t[]){7}, 13); /* unknown dtype, ignored */
  st_add(&f, "head.empty", "F32", 2, (int64_t[]){0, 4}, 0);
  st_add(&f, "l0_path.refine.depthwise.weight_orig", "F16", 1, (int64_t[]){3}, 6);
  /* the unidirectional scan's parameters, present in some exports */
  static const char *const scan_forward[] = {"decay_logit", "input_gain_raw", "output_gain_raw",
                                             "state_bias"};
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < 4; i++) {
      char name[128];
      snprintf(name, sizeof name, "%sscan_forward.%s", prefix[l], scan_forward[i]);
      st_add(&f, name, "F32", 1, (int64_t[]){c}, (size_t)(4 * c));
    }
  const char *path = tmp_path("extras.safetensors");
  st_write(path, &f, NULL, NULL, 0);
  apx_ff_weights *w = load_ok(path);
  expect_params(w, &ws);
  apx_ff_weights_free(ctx, w);
  st_free(&f);
  weight_set_free(&ws);
}
END_TEST

/* Tensors stored out of order, with gaps between them (offsets need not be
 * the names' order). */
START_TEST(test_load_any_layout) {
  tu_rng r = {tu_seed() + 12};
  int64_t c = 3;
  st_file f;
  weight_set ws;
  make_valid(&f, &ws, c, "F32", &r);
  /* reverse the data: tensor i's bytes at the mirrored place, 8 bytes apart */
  uint64_t total = 0;
  for (int i = 0; i < f.n; i++)
    total += f.t[i].bytes + 8;
  uint64_t end = total;
  unsigned char *data = calloc(1, total);
  for (int i = 0; i < f.n; i++) {
    st_tensor *t = &f.t[i];
    t->explicit_offsets = 1;
    t->end = end - 8;
    t->begin = t->end - t->bytes;
    memcpy(data + t->begin, t->data, t->bytes);
    end = t->begin;
  }
  /* header from st_write's logic, data written by hand */
  const char *path = tmp_path("layout.safetensors");
  st_write(path, &f, NULL, NULL, 0); /* header only matters; rewrite the data below */
  FILE *fp = fopen(path, "r+b");
  ck_assert_ptr_nonnull(fp);
  unsigned char len[8];
  ck_assert_uint_eq(fread(len, 1, 8, fp), 8);
  uint64_t hn = 0;
  for (int i = 7; i >= 0; i--)
    hn = hn << 8 | len[i];
  ck_assert_int_eq(fseek(fp, (long)(8 + hn), SEEK_SET), 0);
  ck_assert_uint_eq(fwrite(data, 1, total, fp), total);
  ck_assert_int_eq(fclose(fp), 0);
  apx_ff_weights *w = load_ok(path);
  expect_params(w, &ws);
  apx_ff_weights_free(ctx, w);
  free(data);
  st_free(&f);
  weight_set_free(&ws);
}
END_TEST

/* ---- the seeded generator ---- */

/* docs/ff_weights.md: splitmix64 from the seed, tensors in the documented
 * order, l0_path then l1_path; uniform tensors take (2u-1)*b rounded to
 * fp32, b = 1/sqrt(fan_in) in double. */
static void documented_seeded(weight_set *ws, int64_t c, uint64_t seed) {
  memset(ws, 0, sizeof *ws);
  ws->c = c;
  tu_rng r = {seed};
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < NDEFS; i++) {
      int64_t n = def_numel(&defs[i], c);
      float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
      ck_assert_ptr_nonnull(v);
      for (int64_t k = 0; k < n; k++) {
        switch (defs[i].init) {
        case INIT_ZERO:
          v[k] = 0.0f;
          break;
        case INIT_ONE:
          v[k] = 1.0f;
          break;
        case INIT_UNIFORM_C:
          v[k] = (float)((2.0 * tu_uniform(&r) - 1.0) * (1.0 / sqrt((double)c)));
          break;
        case INIT_UNIFORM_9:
          v[k] = (float)((2.0 * tu_uniform(&r) - 1.0) * (1.0 / 3.0));
          break;
        }
      }
      ws->v[l][i] = v;
    }
}

START_TEST(test_seeded_documented) {
  uint64_t seed = tu_seed();
  static const int64_t channels[] = {1, 2, 7, 16};
  for (size_t j = 0; j < sizeof channels / sizeof channels[0]; j++) {
    apx_ff_weights *w = NULL;
    ck_assert_int_eq(apx_ff_weights_seeded(ctx, channels[j], seed + j, &w), APX_OK);
    weight_set ws;
    documented_seeded(&ws, channels[j], seed + j);
    expect_params(w, &ws);
    weight_set_free(&ws);
    apx_ff_weights_free(ctx, w);
  }
}
END_TEST

static int files_equal(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  ck_assert_ptr_nonnull(fa);
  ck_assert_ptr_nonnull(fb);
  int same = 1, ca, cb;
  do {
    ca = fgetc(fa);
    cb = fgetc(fb);
    if (ca != cb)
      same = 0;
  } while (same && ca != EOF);
  fclose(fa);
  fclose(fb);
  return same;
}

START_TEST(test_seeded_deterministic) {
  uint64_t seed = tu_seed();
  apx_ff_weights *a = NULL, *b = NULL, *other = NULL;
  ck_assert_int_eq(apx_ff_weights_seeded(ctx, 6, seed, &a), APX_OK);
  ck_assert_int_eq(apx_ff_weights_seeded(ctx, 6, seed, &b), APX_OK);
  ck_assert_int_eq(apx_ff_weights_seeded(ctx, 6, seed + 1, &other), APX_OK);
  const char *pa = tmp_path("a.safetensors"), *pb = tmp_path("b.safetensors");
  const char *po = tmp_path("other.safetensors");
  ck_assert_int_eq(apx_ff_weights_save(ctx, a, pa), APX_OK);
  ck_assert_int_eq(apx_ff_weights_save(ctx, b, pb), APX_OK);
  ck_assert_int_eq(apx_ff_weights_save(ctx, other, po), APX_OK);
  ck_assert(files_equal(pa, pb));
  ck_assert(!files_equal(pa, po));
  float *da = dump_of(a), *dother = dump_of(other);
  int64_t n = 2 * level_numel(6);
  ck_assert(memcmp(da, dother, (size_t)n * sizeof *da) != 0);
  free(da);
  free(dother);
  apx_ff_weights_free(ctx, a);
  apx_ff_weights_free(ctx, b);
  apx_ff_weights_free(ctx, other);
}
END_TEST

START_TEST(test_seeded_rejects) {
  static const int64_t bad[] = {0, -1, 65537, INT64_MIN, INT64_MAX};
  apx_ff_weights *w = (apx_ff_weights *)&w; /* must come back NULL */
  for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
    ck_assert_int_eq(apx_ff_weights_seeded(ctx, bad[j], 1, &w), APX_ERR_INVALID_ARG);
    ck_assert_contains(apx_last_error(), "channels");
    ck_assert_ptr_null(w);
  }
  ck_assert_int_eq(apx_ff_weights_seeded(NULL, 4, 1, &w), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "ctx");
  ck_assert_int_eq(apx_ff_weights_seeded(ctx, 4, 1, NULL), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "weights");
}
END_TEST

/* ---- save ---- */

START_TEST(test_round_trip) {
  tu_rng r = {tu_seed() + 21};
  st_file f;
  weight_set ws;
  make_valid(&f, &ws, 5, "mixed", &r);
  const char *src = tmp_path("src.safetensors"), *p1 = tmp_path("one.safetensors");
  const char *p2 = tmp_path("two.safetensors");
  st_write(src, &f, NULL, NULL, 0);
  apx_ff_weights *w = load_ok(src);
  write_bytes(p1, "old contents", 12); /* an existing regular file is replaced */
  ck_assert_int_eq(apx_ff_weights_save(ctx, w, p1), APX_OK);
  apx_ff_weights *back = load_ok(p1);
  expect_params(back, &ws);
  ck_assert_int_eq(apx_ff_weights_save(ctx, back, p2), APX_OK);
  ck_assert(files_equal(p1, p2));
  /* the writer's layout: header length a multiple of 8, F32 only, every
   * required name, nothing left beside the file */
  FILE *fp = fopen(p1, "rb");
  ck_assert_ptr_nonnull(fp);
  unsigned char len[8];
  ck_assert_uint_eq(fread(len, 1, 8, fp), 8);
  uint64_t hn = 0;
  for (int i = 7; i >= 0; i--)
    hn = hn << 8 | len[i];
  ck_assert_uint_eq(hn % 8, 0);
  char *header = calloc(1, hn + 1);
  ck_assert_uint_eq(fread(header, 1, hn, fp), hn);
  fclose(fp);
  ck_assert(strstr(header, "F16") == NULL && strstr(header, "BF16") == NULL);
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < NDEFS; i++) {
      char quoted[140];
      snprintf(quoted, sizeof quoted, "\"%s%s\"", prefix[l], defs[i].suffix);
      ck_assert_contains(header, quoted);
    }
  free(header);
  int entries = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e; (e = readdir(d));)
    entries += e->d_name[0] != '.';
  closedir(d);
  ck_assert_int_eq(entries, 4); /* probe.ini, src, one, two: no temporary left */
  apx_ff_weights_free(ctx, w);
  apx_ff_weights_free(ctx, back);
  st_free(&f);
  weight_set_free(&ws);
}
END_TEST

START_TEST(test_save_rejects) {
  apx_ff_weights *w = NULL;
  ck_assert_int_eq(apx_ff_weights_seeded(ctx, 3, 5, &w), APX_OK);
  ck_assert_int_eq(apx_ff_weights_save(ctx, w, dir), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), dir);
  ck_assert_contains(apx_last_error(), "not a regular file");
  const char *missing = tmp_path("no/such/dir.safetensors");
  ck_assert_int_eq(apx_ff_weights_save(ctx, w, missing), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), missing);
  ck_assert_int_eq(apx_ff_weights_save(NULL, w, missing), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "ctx");
  ck_assert_int_eq(apx_ff_weights_save(ctx, NULL, missing), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "weights");
  ck_assert_int_eq(apx_ff_weights_save(ctx, w, NULL), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "path");
  apx_ff_weights_free(ctx, w);
}
END_TEST

/* A write that fails (here the file size limit, as on a full disk) is
 * APX_ERR_IO with the system's text; the old file stays and no temporary
 * is left. In a child process: the limit must not outlive the case. */
START_TEST(test_save_full_disk_is_an_io_error) {
  apx_ff_weights *w = NULL;
  ck_assert_int_eq(apx_ff_weights_seeded(ctx, 16, 5, &w), APX_OK);
  const char *target = tmp_path("full.safetensors");
  write_bytes(target, "old", 3);
  fflush(NULL);
  pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN); /* write returns EFBIG instead */
    struct rlimit lim = {4096, 4096};
    int code = setrlimit(RLIMIT_FSIZE, &lim) != 0                        ? 10
               : apx_ff_weights_save(ctx, w, target) != APX_ERR_IO      ? 11
               : !strstr(apx_last_error(), "cannot write: File too large") ? 12
               : !strstr(apx_last_error(), target)                      ? 13
                                                                         : 0;
    if (code)
      fprintf(stderr, "child: %s\n", apx_last_error());
    _exit(code);
  }
  int status = 0;
  ck_assert_int_eq(waitpid(child, &status, 0), child);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
  FILE *fp = fopen(target, "rb");
  char old[8] = "";
  ck_assert_ptr_nonnull(fp);
  ck_assert_uint_eq(fread(old, 1, sizeof old, fp), 3);
  fclose(fp);
  ck_assert_str_eq(old, "old");
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  for (struct dirent *e; (e = readdir(d));)
    ck_assert_msg(strstr(e->d_name, ".tmp.") == NULL, "temporary [%s] left", e->d_name);
  closedir(d);
  apx_ff_weights_free(ctx, w);
}
END_TEST

/* ---- malformed files ---- */

typedef enum malformed {
  M_EMPTY,
  M_SHORT_LENGTH,
  M_LENGTH_PAST_END,
  M_NOT_JSON,
  M_JSON_ARRAY,
  M_TRAILING_BYTES,
  M_METADATA_NOT_OBJECT,
  M_MISSING_DTYPE,
  M_UNKNOWN_DTYPE,
  M_UNSUPPORTED_DTYPE,
  M_SHAPE_OFFSET_MISMATCH,
  M_SHAPE_NEGATIVE,
  M_SHAPE_NOT_LIST,
  M_OFFSETS_BAD,
  M_OFFSETS_REVERSED,
  M_OFFSETS_PAST_FILE,
  M_OVERLAP,
  M_MISSING_TENSOR,
  M_MISSING_FIRST,
  M_CHANNELS_ZERO,
  M_WRONG_SHAPE,
  M_WRONG_RANK,
  M_NOT_0D,
  M_DUPLICATE,
  M_BAD_EXTRA,
  M_NUL_IN_KEY,
  M_DUPLICATE_SAME_BYTES,
  M_NAN_F32,
  M_INF_F16,
  M_NAN_BF16,
  M_LONG_ARRAY,
  M_DEEP,
  M_LONG_NUMBER,
  M_LONE_SURROGATE,
  M_CONTROL_IN_STRING,
  M_COUNT
} malformed;

/* Write case m to path; returns the text the error must contain besides
 * the path. */
static const char *write_malformed(malformed m, const char *path) {
  tu_rng r = {tu_seed() + 31};
  st_file f;
  weight_set ws;
  make_valid(&f, &ws, 3, "F32", &r);
  weight_set_free(&ws);
  const char *from = NULL, *to = NULL, *expect = NULL;
  size_t truncate = 0;
  switch (m) {
  case M_EMPTY:
    write_bytes(path, "", 0);
    expect = "too short";
    break;
  case M_SHORT_LENGTH:
    write_bytes(path, "\x10\0\0", 3);
    expect = "too short";
    break;
  case M_LENGTH_PAST_END:
    write_bytes(path, "\xe8\x03\0\0\0\0\0\0{\"a\":1}   ", 18);
    expect = "header length [1000]";
    break;
  case M_NOT_JSON:
    write_with_header(path, "{\"l0_path.x\": {not json", NULL, 0);
    expect = "not JSON";
    break;
  case M_JSON_ARRAY:
    write_with_header(path, "[1, 2, 3]", NULL, 0);
    expect = "not a JSON object";
    break;
  case M_TRAILING_BYTES:
    write_with_header(path, "{} x", NULL, 0);
    expect = "after its JSON value";
    break;
  case M_METADATA_NOT_OBJECT:
    snprintf(f.metadata, sizeof f.metadata, "[\"pt\"]");
    expect = "__metadata__";
    break;
  case M_MISSING_DTYPE:
    from = "\"l1_path.film.mlp.0.bias\":{\"dtype\":\"F32\",";
    to = "\"l1_path.film.mlp.0.bias\":{";
    expect = "l1_path.film.mlp.0.bias] has no dtype";
    break;
  case M_UNKNOWN_DTYPE:
    from = "\"l0_path.refine.norm.bias\":{\"dtype\":\"F32\"";
    to = "\"l0_path.refine.norm.bias\":{\"dtype\":\"Q7\"";
    expect = "l0_path.refine.norm.bias]: dtype [Q7]";
    break;
  case M_UNSUPPORTED_DTYPE: /* I32 takes the bytes of F32: well-formed, but not a float */
    from = "\"l0_path.refine.norm.bias\":{\"dtype\":\"F32\"";
    to = "\"l0_path.refine.norm.bias\":{\"dtype\":\"I32\"";
    expect = "l0_path.refine.norm.bias]: dtype [I32]";
    break;
  case M_SHAPE_OFFSET_MISMATCH:
    from = "\"l0_path.film.token_norm.weight\":{\"dtype\":\"F32\",\"shape\":[3]";
    to = "\"l0_path.film.token_norm.weight\":{\"dtype\":\"F32\",\"shape\":[4]";
    expect = "l0_path.film.token_norm.weight]: data_offsets";
    break;
  case M_SHAPE_NEGATIVE:
    from = "\"l1_path.refine.norm.weight\":{\"dtype\":\"F32\",\"shape\":[6]";
    to = "\"l1_path.refine.norm.weight\":{\"dtype\":\"F32\",\"shape\":[-6]";
    expect = "l1_path.refine.norm.weight]: shape[0]";
    break;
  case M_SHAPE_NOT_LIST:
    from = "\"l1_path.refine.norm.weight\":{\"dtype\":\"F32\",\"shape\":[6]";
    to = "\"l1_path.refine.norm.weight\":{\"dtype\":\"F32\",\"shape\":6";
    expect = "l1_path.refine.norm.weight]: shape";
    break;
  case M_OFFSETS_BAD: {
    st_tensor *t = st_find(&f, "l0_path.film.mlp.0.bias");
    t->explicit_offsets = 1;
    t->begin = 0;
    t->end = 1u << 30;
    from = "[0,1073741824]";
    to = "[0,\"12\"]";
    expect = "l0_path.film.mlp.0.bias]: data_offsets";
    break;
  }
  case M_OFFSETS_REVERSED: {
    st_tensor *t = st_find(&f, "l0_path.film.mlp.0.bias");
    t->explicit_offsets = 1;
    t->begin = 12;
    t->end = 0;
    expect = "l0_path.film.mlp.0.bias]: data_offsets [12, 0]";
    break;
  }
  case M_OFFSETS_PAST_FILE:
    truncate = 4; /* the last tensor in the file loses its end */
    expect = "l1_path.fusion_gate.bias]: data_offsets";
    break;
  case M_OVERLAP: {
    /* norm.weight claims the bytes of norm.bias: both are [2C] F32 */
    st_tensor *a = NULL, *b = st_find(&f, "l1_path.refine.norm.bias");
    uint64_t pos = 0;
    for (int i = 0; i < f.n; i++) {
      if (&f.t[i] == b)
        break;
      pos += f.t[i].bytes;
    }
    a = st_find(&f, "l1_path.refine.norm.weight");
    a->explicit_offsets = 1;
    a->begin = pos + 4; /* partly overlapping */
    a->end = pos + 4 + a->bytes;
    expect = "overlap tensor [l1_path.refine.norm.";
    break;
  }
  case M_MISSING_TENSOR:
    st_remove(&f, "l1_path.fusion_gate.uncertainty_log_weight");
    expect = "l1_path.fusion_gate.uncertainty_log_weight] is missing";
    break;
  case M_MISSING_FIRST:
    st_remove(&f, "l0_path.scan_bidirectional.merge_gate_logit");
    expect = "l0_path.scan_bidirectional.merge_gate_logit] is missing";
    break;
  case M_CHANNELS_ZERO: {
    st_tensor *t = st_find(&f, "l0_path.scan_bidirectional.merge_gate_logit");
    t->dims[0] = 0;
    t->bytes = 0;
    expect = "l0_path.scan_bidirectional.merge_gate_logit] has shape [0]";
    break;
  }
  case M_WRONG_SHAPE: { /* [C, 2C] holds as many values as [2C, C] */
    st_tensor *t = st_find(&f, "l0_path.film.mlp.2.weight");
    t->dims[0] = 3;
    t->dims[1] = 6;
    expect = "l0_path.film.mlp.2.weight] has shape [3, 6], expected [6, 3]";
    break;
  }
  case M_WRONG_RANK: {
    st_tensor *t = st_find(&f, "l1_path.refine.depthwise.weight");
    t->ndim = 3;
    t->dims[1] = 3;
    t->dims[2] = 3;
    expect = "l1_path.refine.depthwise.weight] has shape [3, 3, 3], expected [3, 1, 3, 3]";
    break;
  }
  case M_NOT_0D: {
    st_tensor *t = st_find(&f, "l0_path.fusion_gate.bias");
    t->ndim = 1;
    t->dims[0] = 1;
    expect = "l0_path.fusion_gate.bias] has shape [1], expected []";
    break;
  }
  case M_DUPLICATE: {
    st_tensor *t = st_add(&f, "l0_path.film.mlp.0.bias", "F32", 1, (int64_t[]){3}, 12);
    (void)t;
    expect = "l0_path.film.mlp.0.bias] appears more than once";
    break;
  }
  case M_BAD_EXTRA:
    st_add(&f, "head.junk", "F32", 1, (int64_t[]){3}, 12);
    from = "\"head.junk\":{\"dtype\":\"F32\",\"shape\":[3]";
    to = "\"head.junk\":{\"dtype\":\"F32\",\"shape\":[1.5]";
    expect = "head.junk]: shape[0]";
    break;
  case M_NUL_IN_KEY: /* cJSON's copy of the key would end at the NUL: "T" */
    from = "\"l1_path.fusion_gate.bias\"";
    to = "\"l1_path.fusion_gate.bias\\u0000x\"";
    expect = "not JSON: \\u0000 (NUL) inside a string at byte";
    break;
  case M_DUPLICATE_SAME_BYTES: { /* the same name for the same bytes */
    st_tensor *t = st_find(&f, "l0_path.film.mlp.0.bias");
    uint64_t pos = 0;
    for (int i = 0; &f.t[i] != t; i++)
      pos += f.t[i].bytes;
    st_tensor *twin = st_add(&f, "l0_path.film.mlp.0.bias", "F32", 1, (int64_t[]){3}, 0);
    twin->explicit_offsets = 1;
    twin->begin = pos;
    twin->end = pos + 12;
    expect = "tensor [l0_path.film.mlp.0.bias] appears more than once";
    break;
  }
  case M_NAN_F32: { /* [2C, C] = [6, 3]: element 1*3 + 2 */
    st_tensor *t = st_find(&f, "l1_path.film.mlp.2.weight");
    put_le(t->data + 4 * 5, 0x7fc00001u, 4);
    expect = "tensor [l1_path.film.mlp.2.weight] holds NaN at index [1, 2] (element 5)";
    break;
  }
  case M_INF_F16: {
    st_file g;
    weight_set ws16;
    st_free(&f);
    make_valid(&g, &ws16, 3, "F16", &r);
    weight_set_free(&ws16);
    f = g;
    st_tensor *t = st_find(&f, "l0_path.refine.depthwise.weight"); /* [3, 1, 3, 3] */
    put_le(t->data + 2 * 13, 0x7c00u, 2);
    expect = "tensor [l0_path.refine.depthwise.weight] holds +inf at index [1, 0, 1, 1]";
    break;
  }
  case M_NAN_BF16: {
    st_file g;
    weight_set wsb;
    st_free(&f);
    make_valid(&g, &wsb, 3, "BF16", &r);
    weight_set_free(&wsb);
    f = g;
    st_tensor *t = st_find(&f, "l0_path.fusion_gate.bias"); /* 0-d */
    put_le(t->data, 0xff81u, 2);
    expect = "tensor [l0_path.fusion_gate.bias] holds NaN at index [] (element 0)";
    break;
  }
  case M_LONG_ARRAY: /* 65 items: refused before cJSON builds a tree */
    snprintf(f.metadata, sizeof f.metadata,
             "{\"a\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
             "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}");
    expect = "the header has an array of more than 64 items (at byte 150), over apexx's limit";
    break;
  case M_DEEP:
    snprintf(f.metadata, sizeof f.metadata, "{\"a\":[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]}");
    expect = "the header has objects and arrays nested more than 16 deep (at byte 35)";
    break;
  case M_LONG_NUMBER: /* cJSON 1.7 would stop reading it after 63 characters */
    snprintf(f.metadata, sizeof f.metadata,
             "{\"a\":1000000000000000000000000000000000000000000000000000000000000000}");
    expect = "the header has a number of more than 63 characters (at byte 21)";
    break;
  case M_LONE_SURROGATE:
    snprintf(f.metadata, sizeof f.metadata, "{\"\\udc00\":\"x\"}");
    expect = "not JSON: a \\u escape of a lone low surrogate at byte 18";
    break;
  case M_CONTROL_IN_STRING:
    snprintf(f.metadata, sizeof f.metadata, "{\"a\tb\":\"x\"}");
    expect = "not JSON: a control character inside a string at byte 19";
    break;
  case M_COUNT:
    break;
  }
  if (m >= M_METADATA_NOT_OBJECT)
    st_write(path, &f, from, to, truncate);
  st_free(&f);
  return expect;
}

START_TEST(test_malformed) {
  const char *path = tmp_path("bad.safetensors");
  const char *expect = write_malformed((malformed)_i, path);
  apx_ff_weights *w = (apx_ff_weights *)&w;
  apx_status st = apx_ff_weights_load(ctx, path, &w);
  ck_assert_msg(st == APX_ERR_INVALID_ARG, "case %d: %s: %s", _i, apx_status_name(st),
                apx_last_error());
  ck_assert_ptr_null(w);
  ck_assert_contains(apx_last_error(), path);
  ck_assert_contains(apx_last_error(), expect);
}
END_TEST

/* tools/export_ff_weights.py's seeded mode writes the bytes that
 * apx_ff_weights_seeded + apx_ff_weights_save write (an independent
 * implementation of the documented generator and layout); --check accepts
 * the file and refuses one with a misshapen tensor. */
START_TEST(test_export_script) {
  const char *src = getenv("APEXX_SRCDIR");
  if (!src || system("command -v python3 >/dev/null 2>&1") != 0) {
    printf("# skip test_export_script: %s\n",
           src ? "python3 not found" : "APEXX_SRCDIR not set (run under make check)");
    return;
  }
  uint64_t seed = tu_seed() * 0x9e3779b97f4a7c15ull; /* all 64 bits in use */
  apx_ff_weights *w = NULL;
  ck_assert_int_eq(apx_ff_weights_seeded(ctx, 5, seed, &w), APX_OK);
  const char *from_c = tmp_path("c.safetensors"), *from_py = tmp_path("py.safetensors");
  ck_assert_int_eq(apx_ff_weights_save(ctx, w, from_c), APX_OK);
  apx_ff_weights_free(ctx, w);
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "python3 '%s/tools/export_ff_weights.py' '%s' --channels 5 --seed %llu >/dev/null", src,
           from_py, (unsigned long long)seed);
  ck_assert_int_eq(system(cmd), 0);
  ck_assert(files_equal(from_c, from_py));
  snprintf(cmd, sizeof cmd, "python3 '%s/tools/export_ff_weights.py' --check '%s' >/dev/null", src,
           from_c);
  ck_assert_int_eq(system(cmd), 0);
  const char *bad = tmp_path("bad.safetensors");
  write_malformed(M_WRONG_SHAPE, bad);
  snprintf(cmd, sizeof cmd, "python3 '%s/tools/export_ff_weights.py' --check '%s' >/dev/null", src,
           bad);
  ck_assert_int_ne(system(cmd), 0);
}
END_TEST

START_TEST(test_bad_paths) {
  apx_ff_weights *w = (apx_ff_weights *)&w;
  ck_assert_int_eq(apx_ff_weights_load(ctx, dir, &w), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), dir);
  ck_assert_contains(apx_last_error(), "not a regular file");
  ck_assert_ptr_null(w);
  const char *missing = tmp_path("missing.safetensors");
  ck_assert_int_eq(apx_ff_weights_load(ctx, missing, &w), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), missing);
  ck_assert_contains(apx_last_error(), "cannot open the file: No such file");
  const char *fifo = tmp_path("fifo");
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  ck_assert_int_eq(apx_ff_weights_load(ctx, fifo, &w), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "not a regular file");
  ck_assert_int_eq(apx_ff_weights_load(NULL, missing, &w), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "ctx");
  ck_assert_int_eq(apx_ff_weights_load(ctx, NULL, &w), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "path");
  ck_assert_int_eq(apx_ff_weights_load(ctx, missing, NULL), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "weights");
}
END_TEST

/* ---- limits and long paths (docs/ff_weights.md, Limits) ---- */

/* The process's peak resident set in KiB (VmHWM), after resetting it when
 * the kernel allows (clear_refs 5). */
static long peak_rss_kb(int reset) {
  if (reset) {
    FILE *fp = fopen("/proc/self/clear_refs", "w");
    if (fp) {
      fputs("5", fp);
      fclose(fp);
    }
  }
  FILE *fp = fopen("/proc/self/status", "r");
  long kb = -1;
  char line[256];
  while (fp && fgets(line, sizeof line, fp))
    if (strncmp(line, "VmHWM:", 6) == 0)
      kb = strtol(line + 6, NULL, 10);
  if (fp)
    fclose(fp);
  return kb;
}

/* A header past the cap is refused from its length alone: nothing is read
 * or allocated for it (a sparse file of 100 MB claiming 98 MB). */
START_TEST(test_header_over_the_cap) {
  const char *path = tmp_path("huge.safetensors");
  FILE *fp = fopen(path, "wb");
  ck_assert_ptr_nonnull(fp);
  unsigned char len[8];
  put_le(len, 98u * 1000 * 1000, 8);
  ck_assert_uint_eq(fwrite(len, 1, 8, fp), 8);
  ck_assert_int_eq(ftruncate(fileno(fp), 100 * 1000 * 1000), 0);
  ck_assert_int_eq(fclose(fp), 0);
  long before = peak_rss_kb(1);
  apx_ff_weights *w = NULL;
  ck_assert_int_eq(apx_ff_weights_load(ctx, path, &w), APX_ERR_INVALID_ARG);
  long grown = peak_rss_kb(0) - before;
  ck_assert_contains(apx_last_error(),
                     "header length [98000000] is over apexx's limit of 16777216 bytes");
  printf("# a 98 MB header: refused, peak RSS grew %ld KiB\n", grown);
  ck_assert_msg(grown < 8 * 1024, "peak RSS grew %ld KiB", grown);
}
END_TEST

/* A header just under the cap of nothing but tiny members: the scan stops
 * it at the value limit before cJSON builds a tree (which would take about
 * 8x the header). */
START_TEST(test_header_of_tiny_members) {
  size_t cap = (16u << 20) - 64, used = 0;
  char *h = malloc(cap + 1);
  ck_assert_ptr_nonnull(h);
  used += (size_t)snprintf(h, cap, "{");
  for (long k = 0; used + 32 < cap; k++)
    used += (size_t)snprintf(h + used, cap - used, "%s\"%lx\":0", k ? "," : "", k);
  used += (size_t)snprintf(h + used, cap - used, "}");
  const char *path = tmp_path("tiny-members.safetensors");
  write_with_header(path, h, NULL, 0);
  free(h);
  long before = peak_rss_kb(1);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  apx_ff_weights *w = NULL;
  ck_assert_int_eq(apx_ff_weights_load(ctx, path, &w), APX_ERR_INVALID_ARG);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  long grown = peak_rss_kb(0) - before;
  ck_assert_contains(apx_last_error(), "the header has more than 524288 values and keys");
  printf("# a %zu-byte header of tiny members: refused in %.3f s, peak RSS grew %ld KiB\n", used,
         (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec), grown);
  ck_assert_msg(grown < 64 * 1024, "peak RSS grew %ld KiB", grown);
}
END_TEST

/* A path of 1,100 bytes: the problem and the tensor come first, so the
 * 1023-byte message keeps them; the path is cut at the end. */
START_TEST(test_long_path_keeps_the_problem) {
  char deep[1600];
  snprintf(deep, sizeof deep, "%s", dir);
  char component[201];
  memset(component, 'd', 200);
  component[200] = '\0';
  int levels = 0;
  while (strlen(deep) < 1050) {
    strcat(deep, "/");
    strcat(deep, component);
    ck_assert_int_eq(mkdir(deep, 0700), 0);
    levels++;
  }
  char path[1700];
  snprintf(path, sizeof path, "%s/weights.safetensors", deep);
  ck_assert_uint_gt(strlen(path), 1040);
  write_malformed(M_MISSING_TENSOR, path);
  apx_ff_weights *w = NULL;
  ck_assert_int_eq(apx_ff_weights_load(ctx, path, &w), APX_ERR_INVALID_ARG);
  const char *msg = apx_last_error();
  ck_assert_uint_le(strlen(msg), 1023);
  ck_assert_contains(msg, "apx_ff_weights_load: tensor [l1_path.fusion_gate.uncertainty_log_weight] "
                          "is missing (file [");
  ck_assert_contains(msg, dir);
  unlink(path);
  for (; levels > 0; levels--) {
    ck_assert_int_eq(rmdir(deep), 0);
    *strrchr(deep, '/') = '\0';
  }
}
END_TEST

/* ---- lifetime and the backend cache ---- */

START_TEST(test_free_null) {
  apx_ff_weights_free(ctx, NULL);
  apx_ff_weights_free(NULL, NULL);
  ck_assert_int_eq(apx_ff_weights_channels(NULL), 0);
}
END_TEST

/* Handles (one with cache entries) left open: apx_close frees them (the
 * suite under valgrind shows no leak). */
START_TEST(test_left_open) {
  apx_ff_weights *a = NULL, *b = NULL;
  ck_assert_int_eq(apx_ff_weights_seeded(ctx, 3, 1, &a), APX_OK);
  ck_assert_int_eq(apx_ff_weights_seeded(ctx, 4, 2, &b), APX_OK);
  probe_result r = probe(a, APX_DTYPE_F16, 8.0);
  ck_assert_int_eq(r.status, APX_OK);
  apx_close(ctx);
  ctx = NULL;
}
END_TEST

START_TEST(test_cache) {
  apx_ff_weights *a = NULL, *b = NULL;
  ck_assert_int_eq(apx_ff_weights_seeded(ctx, 3, 1, &a), APX_OK);
  ck_assert_int_eq(apx_ff_weights_seeded(ctx, 3, 2, &b), APX_OK);
  /* made once per (handle, dtype), then returned from the cache */
  probe_result r = probe(a, APX_DTYPE_F32, 8.0);
  free(r.dump);
  ck_assert_int_eq(r.status, APX_OK);
  ck_assert(r.makes == 1 && r.serial == 1 && r.channels == 3);
  r = probe(a, APX_DTYPE_F32, 8.0);
  free(r.dump);
  ck_assert(r.makes == 1 && r.serial == 1);
  r = probe(a, APX_DTYPE_F16, 8.0);
  ck_assert(r.makes == 2 && r.serial == 2);
  r = probe(a, APX_DTYPE_BF16, 8.0);
  ck_assert(r.makes == 3 && r.serial == 3);
  r = probe(a, APX_DTYPE_F16, 8.0);
  ck_assert(r.makes == 3 && r.serial == 2);
  /* a failing make caches nothing; the next call makes it */
  r = probe(b, APX_DTYPE_F16, 7.25);
  ck_assert_int_eq(r.status, APX_ERR_BACKEND);
  ck_assert_contains(apx_last_error(), "make failed on purpose");
  ck_assert(r.makes == 3 && r.serial == -1);
  r = probe(b, APX_DTYPE_F16, 8.0);
  ck_assert_int_eq(r.status, APX_OK);
  ck_assert(r.makes == 4 && r.serial == 4);
  /* freeing a handle releases its entries, and only its */
  ck_assert(r.releases == 0);
  apx_ff_weights_free(ctx, a);
  r = probe(b, APX_DTYPE_F16, 8.0);
  ck_assert(r.makes == 4 && r.serial == 4 && r.releases == 3);
  apx_ff_weights_free(ctx, b);
}
END_TEST

static Suite *ff_weights_suite(void) {
  Suite *s = suite_create("ff_weights");
  TCase *tc = tcase_create("load");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, test_load_dtypes, 0, 4);
  tcase_add_test(tc, test_load_ignores_extras);
  tcase_add_test(tc, test_load_any_layout);
  tcase_add_loop_test(tc, test_malformed, 0, M_COUNT);
  tcase_add_test(tc, test_bad_paths);
  tcase_add_test(tc, test_header_over_the_cap);
  tcase_add_test(tc, test_header_of_tiny_members);
  tcase_add_test(tc, test_long_path_keeps_the_problem);
  suite_add_tcase(s, tc);
  tc = tcase_create("seeded_save");
  /* test_export_script runs tools/export_ff_weights.py (1.8 s alone here):
   * Check's default 4 s is too short on a loaded machine */
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_seeded_documented);
  tcase_add_test(tc, test_seeded_deterministic);
  tcase_add_test(tc, test_seeded_rejects);
  tcase_add_test(tc, test_round_trip);
  tcase_add_test(tc, test_save_rejects);
  tcase_add_test(tc, test_save_full_disk_is_an_io_error);
  tcase_add_test(tc, test_export_script);
  suite_add_tcase(s, tc);
  tc = tcase_create("lifetime");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_free_null);
  tcase_add_test(tc, test_left_open);
  tcase_add_test(tc, test_cache);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(ff_weights_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
