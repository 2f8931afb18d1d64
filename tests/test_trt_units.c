/* SPDX-License-Identifier: Apache-2.0 */
/* The TensorRT plugins' pure parts (backends/trt/trt_units.h), without
 * TensorRT: the creator list, attribute parsing with apexx's rules
 * (docs/trt.md, The plugins), the versioned
 * serialisation (round trips of random parameters; truncated, extended and
 * foreign blobs rejected, each read from an exact-size heap copy so that
 * valgrind sees any overread), the shape rules against the spec's shape
 * formulas on random sizes, and the type/format rules. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../backends/trt/trt_units.h"
#include "testutil.h"

static char err[512];

static apx__trt_field int_field(const char *name, const int32_t *v) {
  apx__trt_field f = {name, v, APX_TRT_FIELD_INT32, 1};
  return f;
}

/* ---- creators ---- */

START_TEST(test_creators) {
  int n = 0;
  const apx__trt_creator_info *c = apx__trt_creators(&n);
  ck_assert_int_eq(n, 3);
  const char *names[] = {"TilePack", "TileUnpackFusion", "TileSSMScan"};
  for (int i = 0; i < n; i++) {
    ck_assert_str_eq(c[i].name, names[i]);
    ck_assert_str_eq(c[i].version, "1");
    ck_assert_str_eq(c[i].name_space, "apexx");
    ck_assert_int_eq(c[i].kind, i);
    ck_assert_ptr_eq(apx__trt_creator_find(names[i], "1", "apexx"), &c[i]);
    ck_assert_ptr_eq(apx__trt_creator_find(names[i], "1", ""), &c[i]);
    ck_assert_ptr_eq(apx__trt_creator_find(names[i], "1", NULL), &c[i]);
    ck_assert_ptr_null(apx__trt_creator_find(names[i], "2", "apexx"));
    ck_assert_ptr_null(apx__trt_creator_find(names[i], "1", "other"));
  }
  ck_assert_ptr_null(apx__trt_creator_find("DecodeNMS", "1", "apexx"));
  ck_assert_ptr_null(apx__trt_creator_find(NULL, "1", "apexx"));
  ck_assert_int_eq(apx__trt_nb_outputs(APX_TRT_TILEPACK), 1);
  ck_assert_int_eq(apx__trt_nb_outputs(APX_TRT_TILEUNPACK_FUSION), 1);
  ck_assert_int_eq(apx__trt_nb_outputs(APX_TRT_TILESSM_SCAN), 2);
}
END_TEST

START_TEST(test_field_decls) {
  int n = 0;
  const apx__trt_field_decl *d = apx__trt_field_decls(APX_TRT_TILEPACK, &n);
  ck_assert_int_eq(n, 1);
  ck_assert_str_eq(d[0].name, "tile_size");
  ck_assert_int_eq(d[0].type, APX_TRT_FIELD_INT32);
  d = apx__trt_field_decls(APX_TRT_TILEUNPACK_FUSION, &n);
  ck_assert_int_eq(n, 1);
  ck_assert_str_eq(d[0].name, "num_inputs");
  d = apx__trt_field_decls(APX_TRT_TILESSM_SCAN, &n);
  ck_assert_int_eq(n, 3);
  ck_assert_str_eq(d[0].name, "direction");
  ck_assert_int_eq(d[0].type, APX_TRT_FIELD_INT32);
  ck_assert_str_eq(d[1].name, "clamp_value");
  ck_assert_int_eq(d[1].type, APX_TRT_FIELD_FLOAT32);
  ck_assert_str_eq(d[2].name, "num_inputs");
}
END_TEST

/* ---- attributes ---- */

START_TEST(test_parse_defaults) {
  apx__trt_params p;
  ck_assert_int_eq(apx__trt_parse_fields(APX_TRT_TILEPACK, NULL, 0, &p, err, sizeof err), 0);
  ck_assert_int_eq(p.kind, APX_TRT_TILEPACK);
  ck_assert_int_eq(p.tile_size, 8);
  ck_assert_int_eq(apx__trt_parse_fields(APX_TRT_TILEUNPACK_FUSION, NULL, 0, &p, err, sizeof err),
                   0);
  ck_assert_int_eq(p.num_inputs, 0);
  ck_assert_int_eq(apx__trt_parse_fields(APX_TRT_TILESSM_SCAN, NULL, 0, &p, err, sizeof err), 0);
  ck_assert_int_eq(p.direction, 0);
  ck_assert(p.clamp_value == 1e4f);
  ck_assert_int_eq(p.num_inputs, 0);
}
END_TEST

START_TEST(test_parse_values) {
  apx__trt_params p;
  int32_t t32 = 16;
  apx__trt_field f = int_field("tile_size", &t32);
  ck_assert_int_eq(apx__trt_parse_fields(APX_TRT_TILEPACK, &f, 1, &p, err, sizeof err), 0);
  ck_assert_int_eq(p.tile_size, 16);
  int64_t t64 = 32;
  apx__trt_field f64 = {"tile_size", &t64, APX_TRT_FIELD_INT64, 1};
  ck_assert_int_eq(apx__trt_parse_fields(APX_TRT_TILEPACK, &f64, 1, &p, err, sizeof err), 0);
  ck_assert_int_eq(p.tile_size, 32);

  int32_t dir = 1, nin = 6;
  float clamp = -250.5f; /* docs/ops.md, tilessm_scan: |clamp_value| */
  apx__trt_field fs[3] = {int_field("direction", &dir),
                          {"clamp_value", &clamp, APX_TRT_FIELD_FLOAT32, 1},
                          int_field("num_inputs", &nin)};
  ck_assert_int_eq(apx__trt_parse_fields(APX_TRT_TILESSM_SCAN, fs, 3, &p, err, sizeof err), 0);
  ck_assert_int_eq(p.direction, 1);
  ck_assert(p.clamp_value == 250.5f);
  ck_assert_int_eq(p.num_inputs, 6);
  /* below the seed's floor of 1.0: kept, as the op keeps it */
  double small = 0.25;
  apx__trt_field fd = {"clamp_value", &small, APX_TRT_FIELD_FLOAT64, 1};
  ck_assert_int_eq(apx__trt_parse_fields(APX_TRT_TILESSM_SCAN, &fd, 1, &p, err, sizeof err), 0);
  ck_assert(p.clamp_value == 0.25f);

  int32_t five = 5;
  apx__trt_field fu = int_field("num_inputs", &five);
  ck_assert_int_eq(apx__trt_parse_fields(APX_TRT_TILEUNPACK_FUSION, &fu, 1, &p, err, sizeof err),
                   0);
  ck_assert_int_eq(p.num_inputs, 5);

  /* the ONNX parser's creator-naming attributes pass through */
  apx__trt_field named[3] = {{"plugin_version", "1", APX_TRT_FIELD_CHAR, 1},
                             {"plugin_namespace", "apexx", APX_TRT_FIELD_CHAR, 5},
                             int_field("tile_size", &t32)};
  ck_assert_int_eq(apx__trt_parse_fields(APX_TRT_TILEPACK, named, 3, &p, err, sizeof err), 0);
  ck_assert_int_eq(p.tile_size, 16);
}
END_TEST

/* A parse that must fail, leave *out alone and name `needle`. */
static void expect_parse_error(apx__trt_kind kind, const apx__trt_field *f, int n,
                               const char *needle) {
  apx__trt_params p;
  memset(&p, 0x5a, sizeof p);
  apx__trt_params before = p;
  err[0] = '\0';
  ck_assert_int_eq(apx__trt_parse_fields(kind, f, n, &p, err, sizeof err), -1);
  ck_assert_msg(strstr(err, needle) != NULL, "message [%s] lacks [%s]", err, needle);
  ck_assert(memcmp(&p, &before, sizeof p) == 0);
}

START_TEST(test_parse_errors) {
  int32_t zero = 0, neg = -3, two = 2, three = 3;
  apx__trt_field f = int_field("tile_size", &zero);
  expect_parse_error(APX_TRT_TILEPACK, &f, 1, "TilePack: tile_size [0] is not positive");
  f = int_field("tile_size", &neg);
  expect_parse_error(APX_TRT_TILEPACK, &f, 1, "tile_size [-3]");
  int64_t huge = (int64_t)1 << 40;
  apx__trt_field fh = {"tile_size", &huge, APX_TRT_FIELD_INT64, 1};
  expect_parse_error(APX_TRT_TILEPACK, &fh, 1, "outside the int32 range");
  float fl = 8.0f;
  apx__trt_field ft = {"tile_size", &fl, APX_TRT_FIELD_FLOAT32, 1};
  expect_parse_error(APX_TRT_TILEPACK, &ft, 1, "has type [1]");
  int32_t pair[2] = {8, 8};
  apx__trt_field fl2 = {"tile_size", pair, APX_TRT_FIELD_INT32, 2};
  expect_parse_error(APX_TRT_TILEPACK, &fl2, 1, "length [2]");
  apx__trt_field fnull = {"tile_size", NULL, APX_TRT_FIELD_INT32, 1};
  expect_parse_error(APX_TRT_TILEPACK, &fnull, 1, "length");
  apx__trt_field fu = int_field("tilesize", &two);
  expect_parse_error(APX_TRT_TILEPACK, &fu, 1, "field [tilesize] is not one");
  apx__trt_field fnoname = {NULL, &two, APX_TRT_FIELD_INT32, 1};
  expect_parse_error(APX_TRT_TILEPACK, &fnoname, 1, "has no name");
  /* a field of another plugin */
  apx__trt_field fd = int_field("direction", &zero);
  expect_parse_error(APX_TRT_TILEPACK, &fd, 1, "field [direction]");
  /* direction: the seed clamped to [0, 1]; apexx rejects */
  fd = int_field("direction", &two);
  expect_parse_error(APX_TRT_TILESSM_SCAN, &fd, 1, "direction [2] is not 0");
  fd = int_field("direction", &neg);
  expect_parse_error(APX_TRT_TILESSM_SCAN, &fd, 1, "direction [-3]");
  float nan_v = NAN;
  apx__trt_field fc = {"clamp_value", &nan_v, APX_TRT_FIELD_FLOAT32, 1};
  expect_parse_error(APX_TRT_TILESSM_SCAN, &fc, 1, "clamp_value [nan]");
  apx__trt_field fn = int_field("num_inputs", &three);
  expect_parse_error(APX_TRT_TILESSM_SCAN, &fn, 1, "num_inputs [3]");
  expect_parse_error(APX_TRT_TILEUNPACK_FUSION, &fn, 1, "num_inputs [3]");
  expect_parse_error((apx__trt_kind)7, NULL, 0, "kind [7]");
  expect_parse_error(APX_TRT_TILEPACK, NULL, 2, "malformed");
}
END_TEST

/* ---- serialisation ---- */

static apx__trt_params random_params(tu_rng *r, apx__trt_kind kind) {
  apx__trt_params p;
  apx__trt_params_default(kind, &p);
  if (kind == APX_TRT_TILEPACK) p.tile_size = (int32_t)tu_int(r, 1, INT32_MAX);
  if (kind == APX_TRT_TILEUNPACK_FUSION) {
    static const int32_t n[] = {0, 4, 5};
    p.num_inputs = n[tu_int(r, 0, 2)];
  }
  if (kind == APX_TRT_TILESSM_SCAN) {
    static const int32_t n[] = {0, 5, 6};
    p.num_inputs = n[tu_int(r, 0, 2)];
    p.direction = (int32_t)tu_int(r, 0, 1);
    p.clamp_value = (float)(tu_uniform(r) * 1e5);
  }
  return p;
}

static int params_equal(const apx__trt_params *a, const apx__trt_params *b) {
  return a->kind == b->kind && a->tile_size == b->tile_size && a->num_inputs == b->num_inputs &&
         a->direction == b->direction &&
         memcmp(&a->clamp_value, &b->clamp_value, sizeof a->clamp_value) == 0;
}

/* Decode buf[0, len) from an exact-size heap copy. */
static int decode_copy(apx__trt_kind kind, const unsigned char *buf, size_t len,
                       apx__trt_params *out) {
  unsigned char *copy = malloc(len ? len : 1);
  ck_assert_ptr_nonnull(copy);
  if (len) memcpy(copy, buf, len);
  int rc = apx__trt_deserialize(kind, copy, len, out, err, sizeof err);
  free(copy);
  return rc;
}

START_TEST(test_serialise_round_trip) {
  tu_rng r = {tu_seed() ^ 0x7472u};
  for (int iter = 0; iter < 300; iter++) {
    apx__trt_kind kind = (apx__trt_kind)(iter % APX_TRT_KIND_COUNT);
    apx__trt_params p = random_params(&r, kind), q;
    size_t need = apx__trt_serialize(&p, NULL, 0);
    ck_assert_uint_ge(need, APX_TRT_BLOB_HEADER);
    unsigned char buf[64];
    memset(buf, 0xcc, sizeof buf);
    /* too small a buffer: the size, nothing written */
    ck_assert_uint_eq(apx__trt_serialize(&p, buf, need - 1), need);
    ck_assert_uint_eq(buf[0], 0xcc);
    ck_assert_uint_eq(apx__trt_serialize(&p, buf, sizeof buf), need);
    ck_assert_uint_eq(buf[need], 0xcc);
    ck_assert(memcmp(buf, "APXT", 4) == 0);
    ck_assert_int_eq(decode_copy(kind, buf, need, &q), 0);
    ck_assert(params_equal(&p, &q));
    /* through the creator fields, as TensorRT hands the state back */
    apx__trt_field f = {APX_TRT_STATE_FIELD, buf, APX_TRT_FIELD_INT8, (int32_t)need};
    memset(&q, 0, sizeof q);
    ck_assert_int_eq(apx__trt_parse_fields(kind, &f, 1, &q, err, sizeof err), 0);
    ck_assert(params_equal(&p, &q));
  }
}
END_TEST

START_TEST(test_serialise_bad_blobs) {
  tu_rng r = {tu_seed() ^ 0x626c6f62u};
  for (int k = 0; k < APX_TRT_KIND_COUNT; k++) {
    apx__trt_kind kind = (apx__trt_kind)k;
    apx__trt_params p = random_params(&r, kind), q;
    unsigned char buf[64];
    size_t need = apx__trt_serialize(&p, buf, sizeof buf);
    apx__trt_params_default(kind, &q);
    apx__trt_params before = q;
    /* every truncation */
    for (size_t len = 0; len < need; len++) {
      ck_assert_int_eq(decode_copy(kind, buf, len, &q), -1);
      ck_assert_msg(strstr(err, "bytes") != NULL, "len %zu: [%s]", len, err);
    }
    /* one byte more */
    unsigned char longer[65];
    memcpy(longer, buf, need);
    longer[need] = 0;
    ck_assert_int_eq(decode_copy(kind, longer, need + 1, &q), -1);
    ck_assert(strstr(err, "expected") != NULL);
    /* another plugin's blob */
    apx__trt_kind other = (apx__trt_kind)((k + 1) % APX_TRT_KIND_COUNT);
    ck_assert_int_eq(decode_copy(other, buf, need, &q), -1);
    ck_assert_msg(strstr(err, "is of plugin") != NULL, "[%s]", err);
    /* foreign bytes: magic, format, kind, payload length */
    unsigned char bad[64];
    memcpy(bad, buf, need);
    bad[0] = 'X';
    ck_assert_int_eq(decode_copy(kind, bad, need, &q), -1);
    ck_assert(strstr(err, "does not start with") != NULL);
    memcpy(bad, buf, need);
    bad[4] = 2;
    ck_assert_int_eq(decode_copy(kind, bad, need, &q), -1);
    ck_assert(strstr(err, "format [2]") != NULL);
    memcpy(bad, buf, need);
    bad[6] = 9;
    ck_assert_int_eq(decode_copy(kind, bad, need, &q), -1);
    ck_assert(strstr(err, "[unknown]") != NULL);
    memcpy(bad, buf, need);
    bad[8] = (unsigned char)(bad[8] + 4);
    ck_assert_int_eq(decode_copy(kind, bad, need, &q), -1);
    ck_assert(params_equal(&q, &before));
    ck_assert_int_eq(apx__trt_deserialize(kind, NULL, need, &q, err, sizeof err), -1);
  }
  /* a well-formed blob holding a value out of range */
  apx__trt_params p;
  apx__trt_params_default(APX_TRT_TILEPACK, &p);
  p.tile_size = 0;
  unsigned char buf[64];
  size_t need = apx__trt_serialize(&p, buf, sizeof buf);
  ck_assert_int_eq(decode_copy(APX_TRT_TILEPACK, buf, need, &p), -1);
  ck_assert(strstr(err, "tile_size [0]") != NULL);
  apx__trt_params_default(APX_TRT_TILESSM_SCAN, &p);
  p.direction = 5;
  need = apx__trt_serialize(&p, buf, sizeof buf);
  ck_assert_int_eq(decode_copy(APX_TRT_TILESSM_SCAN, buf, need, &p), -1);
  ck_assert(strstr(err, "direction [5]") != NULL);
  /* the state field must come alone and as bytes */
  apx__trt_params_default(APX_TRT_TILEPACK, &p);
  need = apx__trt_serialize(&p, buf, sizeof buf);
  int32_t t = 8;
  apx__trt_field two[2] = {{APX_TRT_STATE_FIELD, buf, APX_TRT_FIELD_INT8, (int32_t)need},
                           int_field("tile_size", &t)};
  expect_parse_error(APX_TRT_TILEPACK, two, 2, "comes with [1] other fields");
  apx__trt_field wrong = {APX_TRT_STATE_FIELD, buf, APX_TRT_FIELD_INT32, (int32_t)need};
  expect_parse_error(APX_TRT_TILEPACK, &wrong, 1, "expected int8");
  apx__trt_field neg = {APX_TRT_STATE_FIELD, buf, APX_TRT_FIELD_INT8, -1};
  expect_parse_error(APX_TRT_TILEPACK, &neg, 1, "length [-1]");
}
END_TEST

/* ---- shapes ---- */

static apx__trt_dims dims(int nb, const int64_t *d) {
  apx__trt_dims x;
  memset(&x, 0, sizeof x);
  x.nb = nb;
  for (int i = 0; i < nb; i++) x.d[i] = d[i];
  return x;
}
#define DIMS(...) dims((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

static void assert_dims(const apx__trt_dims *got, int nb, const int64_t *want) {
  ck_assert_int_eq(got->nb, nb);
  for (int i = 0; i < nb; i++) ck_assert_int_eq(got->d[i], want[i]);
}

START_TEST(test_shapes_tilepack) {
  tu_rng r = {tu_seed() ^ 0x7470u};
  apx__trt_params p;
  apx__trt_params_default(APX_TRT_TILEPACK, &p);
  for (int iter = 0; iter < 200; iter++) {
    int64_t B = tu_int(&r, 0, 4), C = tu_int(&r, 1, 64), t = tu_int(&r, 1, 32);
    int64_t gh = tu_int(&r, 1, 9), gw = tu_int(&r, 1, 9), K = tu_int(&r, 0, 40);
    p.tile_size = (int32_t)t;
    apx__trt_dims in[2] = {DIMS(B, C, gh * t, gw * t), DIMS(B, K)}, out[1];
    ck_assert_int_eq(apx__trt_infer_dims(&p, in, 2, out, 1, 1, err, sizeof err), 0);
    /* spec 2.A: P[B,K,C,t,t] */
    int64_t want[5] = {B, K, C, t, t};
    assert_dims(&out[0], 5, want);
    if (t > 1) { /* H not a multiple of t */
      in[0].d[2] = gh * t + 1;
      ck_assert_int_eq(apx__trt_infer_dims(&p, in, 2, out, 1, 1, err, sizeof err), -1);
      ck_assert_msg(strstr(err, "does not divide input 0 dim 2") != NULL, "[%s]", err);
    }
  }
  p.tile_size = 8;
  apx__trt_dims in[2] = {DIMS(2, 3, 16, 24), DIMS(3, 5)}, out[1];
  ck_assert_int_eq(apx__trt_infer_dims(&p, in, 2, out, 1, 0, err, sizeof err), -1);
  ck_assert(strstr(err, "batch") != NULL);
  /* build time: unknown dims skip their checks and pass through */
  in[0] = DIMS(-1, 3, -1, 24);
  in[1] = DIMS(2, -1);
  ck_assert_int_eq(apx__trt_infer_dims(&p, in, 2, out, 1, 0, err, sizeof err), 0);
  int64_t want[5] = {-1, -1, 3, 8, 8};
  assert_dims(&out[0], 5, want);
  ck_assert_int_eq(apx__trt_infer_dims(&p, in, 2, out, 1, 1, err, sizeof err), -1);
  ck_assert(strstr(err, "is not a size") != NULL);
  in[0] = DIMS(2, 3, 16);
  ck_assert_int_eq(apx__trt_infer_dims(&p, in, 2, out, 1, 0, err, sizeof err), -1);
  ck_assert(strstr(err, "input 0 (features [B,C,H,W]) has [3] dims") != NULL);
  ck_assert_int_eq(apx__trt_infer_dims(&p, in, 3, out, 1, 0, err, sizeof err), -1);
  ck_assert(strstr(err, "[3] inputs, expected 2") != NULL);
  ck_assert_int_eq(apx__trt_infer_dims(&p, in, 2, out, 2, 0, err, sizeof err), -1);
  /* the symbolic form: B from F, K from idx, C from F, t constant */
  apx__trt_dim_src src[8];
  int nb = 0;
  ck_assert_int_eq(apx__trt_output_dims(&p, 2, 0, src, &nb, err, sizeof err), 0);
  ck_assert_int_eq(nb, 5);
  ck_assert(src[0].input == 0 && src[0].dim == 0);
  ck_assert(src[1].input == 1 && src[1].dim == 1);
  ck_assert(src[2].input == 0 && src[2].dim == 1);
  ck_assert(src[3].input < 0 && src[3].value == 8 && src[4].input < 0 && src[4].value == 8);
  ck_assert_int_eq(apx__trt_output_dims(&p, 2, 1, src, &nb, err, sizeof err), -1);
}
END_TEST

START_TEST(test_shapes_tileunpack_fusion) {
  tu_rng r = {tu_seed() ^ 0x7475u};
  apx__trt_params p;
  apx__trt_params_default(APX_TRT_TILEUNPACK_FUSION, &p);
  for (int iter = 0; iter < 200; iter++) {
    int64_t B = tu_int(&r, 1, 4), C = tu_int(&r, 1, 64), t = tu_int(&r, 1, 16);
    int64_t H = tu_int(&r, 1, 6) * t, W = tu_int(&r, 1, 6) * t, K = tu_int(&r, 0, 20);
    int nin = iter % 2 ? 5 : 4;
    apx__trt_dims in[5] = {DIMS(B, C, H, W), DIMS(B, K, C, t, t), DIMS(B, K), DIMS(B, K),
                           DIMS(B, 1, H, W)},
                  out[1];
    ck_assert_int_eq(apx__trt_infer_dims(&p, in, nin, out, 1, 1, err, sizeof err), 0);
    int64_t want[4] = {B, C, H, W};
    assert_dims(&out[0], 4, want);
    size_t ws = apx__trt_workspace_bytes(&p, in, nin, 2);
    ck_assert_uint_eq(ws, nin == 5 ? (size_t)(B * C * H * W * 2) : 0);
  }
  apx__trt_dims good[5] = {DIMS(2, 3, 16, 16), DIMS(2, 4, 3, 8, 8), DIMS(2, 4), DIMS(2, 4),
                           DIMS(2, 1, 16, 16)},
                in[5], out[1];
  struct {
    int input;
    apx__trt_dims d;
    const char *needle;
  } cases[] = {
      {1, DIMS(2, 4, 3, 8, 4), "square tiles"},
      {1, DIMS(2, 4, 5, 8, 8), "channels"},
      {1, DIMS(2, 4, 3, 6, 6), "does not divide"},
      {1, DIMS(2, 4, 3, 0, 0), "tile side [0]"},
      {2, DIMS(2, 5), "tiles K"},
      {3, DIMS(1, 4), "batch"},
      {4, DIMS(2, 3, 16, 16), "alpha dim 1 [3] is not 1"},
      {4, DIMS(2, 1, 16, 8), "width"},
      {0, DIMS(2, 3, 16), "has [3] dims"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    memcpy(in, good, sizeof good);
    in[cases[i].input] = cases[i].d;
    ck_assert_int_eq(apx__trt_infer_dims(&p, in, 5, out, 1, 1, err, sizeof err), -1);
    ck_assert_msg(strstr(err, cases[i].needle) != NULL, "case %zu: [%s]", i, err);
  }
  ck_assert_int_eq(apx__trt_infer_dims(&p, good, 3, out, 1, 1, err, sizeof err), -1);
  ck_assert(strstr(err, "[3] inputs, expected 4 or 5") != NULL);
  p.num_inputs = 4; /* a serialised count binds */
  ck_assert_int_eq(apx__trt_infer_dims(&p, good, 5, out, 1, 1, err, sizeof err), -1);
  ck_assert(strstr(err, "[5] inputs, expected 4") != NULL);
}
END_TEST

START_TEST(test_shapes_tilessm_scan) {
  tu_rng r = {tu_seed() ^ 0x7473u};
  apx__trt_params p;
  apx__trt_params_default(APX_TRT_TILESSM_SCAN, &p);
  for (int iter = 0; iter < 200; iter++) {
    int64_t B = tu_int(&r, 0, 4), K = tu_int(&r, 0, 300), C = tu_int(&r, 1, 256);
    int nin = iter % 2 ? 6 : 5;
    apx__trt_dims in[6] = {DIMS(B, K, C), DIMS(C), DIMS(C), DIMS(C), DIMS(C), DIMS(B, C)},
                  out[2];
    ck_assert_int_eq(apx__trt_infer_dims(&p, in, nin, out, 2, 1, err, sizeof err), 0);
    int64_t y[3] = {B, K, C}, s[2] = {B, C};
    assert_dims(&out[0], 3, y);
    assert_dims(&out[1], 2, s);
    int bad = (int)tu_int(&r, 1, 4);
    in[bad].d[0] = C + 1;
    ck_assert_int_eq(apx__trt_infer_dims(&p, in, nin, out, 2, 1, err, sizeof err), -1);
    ck_assert(strstr(err, "channels") != NULL);
  }
  apx__trt_dims in[6] = {DIMS(2, 7, 4), DIMS(4), DIMS(4), DIMS(4), DIMS(4), DIMS(3, 4)}, out[2];
  ck_assert_int_eq(apx__trt_infer_dims(&p, in, 6, out, 2, 1, err, sizeof err), -1);
  ck_assert(strstr(err, "batch") != NULL);
  ck_assert_int_eq(apx__trt_infer_dims(&p, in, 5, out, 1, 1, err, sizeof err), -1);
  ck_assert(strstr(err, "[1] outputs, expected 2") != NULL);
  in[1] = DIMS(1, 4);
  ck_assert_int_eq(apx__trt_infer_dims(&p, in, 5, out, 2, 1, err, sizeof err), -1);
  ck_assert(strstr(err, "decay [C]") != NULL);
}
END_TEST

/* ---- types and formats ---- */

static const int float_types[] = {APX_TRT_FLOAT, APX_TRT_HALF, APX_TRT_BF16};
static const int other_types[] = {APX_TRT_INT8, APX_TRT_INT32, APX_TRT_BOOL, APX_TRT_UINT8,
                                  APX_TRT_FP8, APX_TRT_INT64};

/* The rule for one position, written out from the spec's tables. */
static int expected_type(apx__trt_kind kind, int pos, int nb_inputs, int f) {
  if (kind == APX_TRT_TILEPACK && pos == 1) return APX_TRT_INT32;
  if (kind == APX_TRT_TILEUNPACK_FUSION && (pos == 2 || pos == 3)) return APX_TRT_INT32;
  (void)nb_inputs;
  return f;
}

START_TEST(test_supports) {
  struct {
    apx__trt_kind kind;
    int nin, nout;
  } shapes[] = {{APX_TRT_TILEPACK, 2, 1},     {APX_TRT_TILEUNPACK_FUSION, 4, 1},
                {APX_TRT_TILEUNPACK_FUSION, 5, 1}, {APX_TRT_TILESSM_SCAN, 5, 2},
                {APX_TRT_TILESSM_SCAN, 6, 2}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    apx__trt_params p;
    apx__trt_params_default(shapes[s].kind, &p);
    int n = shapes[s].nin + shapes[s].nout;
    for (int fi = 0; fi < 3; fi++) {
      int f = float_types[fi];
      apx__trt_io io[APX_TRT_MAX_IO];
      for (int pos = 0; pos < n; pos++) {
        int want = expected_type(shapes[s].kind, pos, shapes[s].nin, f);
        io[pos].type = want;
        io[pos].format = 0;
        ck_assert_int_eq(apx__trt_supports(&p, pos, io, shapes[s].nin, shapes[s].nout), 1);
        io[pos].format = 1; /* not linear */
        ck_assert_int_eq(apx__trt_supports(&p, pos, io, shapes[s].nin, shapes[s].nout), 0);
        io[pos].format = 0;
        for (int oi = 0; oi < 3; oi++) { /* another float dtype */
          if (float_types[oi] == want || want == APX_TRT_INT32) continue;
          io[pos].type = pos == 0 ? want : float_types[oi];
          if (pos == 0) continue;
          ck_assert_int_eq(apx__trt_supports(&p, pos, io, shapes[s].nin, shapes[s].nout), 0);
        }
        for (size_t oi = 0; oi < sizeof other_types / sizeof other_types[0]; oi++) {
          if (other_types[oi] == want) continue;
          io[pos].type = other_types[oi];
          ck_assert_int_eq(apx__trt_supports(&p, pos, io, shapes[s].nin, shapes[s].nout), 0);
        }
        io[pos].type = want;
      }
      ck_assert_int_eq(apx__trt_supports(&p, n, io, shapes[s].nin, shapes[s].nout), 0);
      ck_assert_int_eq(apx__trt_supports(&p, 0, io, shapes[s].nin + 2, shapes[s].nout), 0);
      ck_assert_int_eq(apx__trt_supports(&p, 0, io, shapes[s].nin, shapes[s].nout + 1), 0);
    }
  }
}
END_TEST

START_TEST(test_output_types) {
  apx__trt_params p;
  apx__trt_params_default(APX_TRT_TILESSM_SCAN, &p);
  int in[6] = {APX_TRT_BF16, APX_TRT_BF16, APX_TRT_BF16, APX_TRT_BF16, APX_TRT_BF16, APX_TRT_BF16};
  int out[2] = {-1, -1};
  ck_assert_int_eq(apx__trt_output_types(&p, in, 6, out, 2, err, sizeof err), 0);
  ck_assert_int_eq(out[0], APX_TRT_BF16);
  ck_assert_int_eq(out[1], APX_TRT_BF16);
  in[3] = APX_TRT_FLOAT;
  ck_assert_int_eq(apx__trt_output_types(&p, in, 6, out, 2, err, sizeof err), -1);
  ck_assert(strstr(err, "input 3 has dtype [0]") != NULL);
  apx__trt_params_default(APX_TRT_TILEPACK, &p);
  int tp[2] = {APX_TRT_HALF, APX_TRT_INT64};
  ck_assert_int_eq(apx__trt_output_types(&p, tp, 2, out, 1, err, sizeof err), -1);
  ck_assert(strstr(err, "input 1 has dtype [8], expected 3") != NULL);
  tp[1] = APX_TRT_INT32;
  ck_assert_int_eq(apx__trt_output_types(&p, tp, 2, out, 1, err, sizeof err), 0);
  ck_assert_int_eq(out[0], APX_TRT_HALF);
  tp[0] = APX_TRT_INT8;
  ck_assert_int_eq(apx__trt_output_types(&p, tp, 2, out, 1, err, sizeof err), -1);
  ck_assert(strstr(err, "expected fp32, fp16 or bf16") != NULL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("trt_units");
  TCase *tc = tcase_create("trt_units");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_creators);
  tcase_add_test(tc, test_field_decls);
  tcase_add_test(tc, test_parse_defaults);
  tcase_add_test(tc, test_parse_values);
  tcase_add_test(tc, test_parse_errors);
  tcase_add_test(tc, test_serialise_round_trip);
  tcase_add_test(tc, test_serialise_bad_blobs);
  tcase_add_test(tc, test_shapes_tilepack);
  tcase_add_test(tc, test_shapes_tileunpack_fusion);
  tcase_add_test(tc, test_shapes_tilessm_scan);
  tcase_add_test(tc, test_supports);
  tcase_add_test(tc, test_output_types);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
