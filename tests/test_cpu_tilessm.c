/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu backend's TileSSM scan (docs/ops.md, tilessm_scan) against the plain
 * reference loop of ref_scan_index.c, bit for bit, through the public API:
 * random shapes (odd C, B > 1, K = 0), every tokens dtype with mixed
 * parameter dtypes, every direction and merge mode, init_state [B,C],
 * [B,2,C] or absent, merge_gate [C], [B,1,C] or absent, NaN/inf/-0/
 * subnormal tokens, clamp_value 0 and negative. Each case runs twice on
 * fresh inputs with poisoned outputs, once per instruction-set path
 * ($APEXX_CPU_ISA = portable, then the best the CPU has). */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apx_half.h"
#include "ref_scan_index.h"
#include "scan_index_simd.h" /* the cpu backend's SIMD conversions */
#include "testutil.h"

static const apx_call cpu_call = {"cpu", NULL};
static const char *const isa_paths[] = {"portable", NULL}; /* NULL: native */

static void use_isa(const char *isa) {
  if (isa)
    setenv("APEXX_CPU_ISA", isa, 1);
  else
    unsetenv("APEXX_CPU_ISA");
}


static apx_dtype random_float_dtype(tu_rng *r) {
  static const apx_dtype dts[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};
  return dts[tu_int(r, 0, 2)];
}

/* Index of the first differing element of two same-shaped tensors, -1 if
 * the bytes are equal. */
static int64_t first_diff(const apx_tensor *a, const apx_tensor *b) {
  size_t es = apx_dtype_size(a->dtype);
  int64_t n = apx_tensor_numel(a);
  for (int64_t i = 0; i < n; i++)
    if (memcmp((const char *)a->data + i * es, (const char *)b->data + i * es, es))
      return i;
  return -1;
}

/* Tokens with every special value the sanitiser handles. */
static void fill_tokens(tu_rng *r, const apx_tensor *t, double lim) {
  int64_t n = apx_tensor_numel(t);
  double tiny = t->dtype == APX_DTYPE_F16 ? 3e-6 : 1e-39; /* subnormal */
  for (int64_t i = 0; i < n; i++) {
    int kind = (int)tu_int(r, 0, 19);
    double v;
    switch (kind) {
    case 0: v = NAN; break;
    case 1: v = INFINITY; break;
    case 2: v = -INFINITY; break;
    case 3: v = -0.0; break;
    case 4: v = tiny * tu_uniform(r) * (tu_int(r, 0, 1) ? 1 : -1); break;
    case 5: v = (lim + 1.0) * (1.0 + 2.0 * tu_uniform(r)) * (tu_int(r, 0, 1) ? 1 : -1); break;
    default: v = 3.0 * tu_normal(r); break;
    }
    tu_set(t, i, v);
  }
}

typedef struct scan_case {
  int64_t B, K, C;
  apx_dtype dtype;
  apx_scan_direction direction;
  apx_scan_merge merge;
  int init_kind; /* 0 none, 1 [B,C], 2 [B,2,C] */
  int gate_kind; /* 0 none, 1 [C], 2 [B,1,C] */
  int with_final;
  double clamp_value;
  apx_dtype param_dtype[4], init_dtype, gate_dtype;
} scan_case;

static void describe(const scan_case *sc, char *buf, size_t size) {
  snprintf(buf, size,
           "B=%lld K=%lld C=%lld tokens=%s dir=%d merge=%d init=%d gate=%d "
           "final=%d clamp=%g",
           (long long)sc->B, (long long)sc->K, (long long)sc->C,
           apx_dtype_name(sc->dtype), sc->direction, sc->merge, sc->init_kind,
           sc->gate_kind, sc->with_final, sc->clamp_value);
}

/* Run one case twice per instruction-set path and compare with the
 * reference. */
static void run_case(apx_context *ctx, tu_rng *r, const scan_case *sc) {
  char what[256];
  describe(sc, what, sizeof what);
  const int64_t B = sc->B, K = sc->K, C = sc->C;
  apx_tensor tokens = tu_host3(sc->dtype, B, K, C);
  apx_tensor vec[4];
  for (int i = 0; i < 4; i++) vec[i] = tu_host1(sc->param_dtype[i], C);
  apx_tensor init = {0}, gate = {0};
  if (sc->init_kind == 1) init = tu_host2(sc->init_dtype, B, C);
  if (sc->init_kind == 2) init = tu_host3(sc->init_dtype, B, 2, C);
  if (sc->gate_kind == 1) gate = tu_host1(sc->gate_dtype, C);
  if (sc->gate_kind == 2) gate = tu_host3(sc->gate_dtype, B, 1, C);
  int bidir = sc->direction == APX_SCAN_BIDIRECTIONAL;
  apx_tensor out = tu_host3(sc->dtype, B, K, C);
  apx_tensor want = tu_host3(sc->dtype, B, K, C);
  apx_tensor final = bidir ? tu_host3(sc->dtype, B, 2, C) : tu_host2(sc->dtype, B, C);
  apx_tensor want_final = tu_clone(&final);

  apx_tilessm_scan_args args = APX_TILESSM_SCAN_ARGS_INIT;
  args.tokens = &tokens;
  args.decay = &vec[0];
  args.input_gain = &vec[1];
  args.output_gain = &vec[2];
  args.state_bias = &vec[3];
  args.init_state = sc->init_kind ? &init : NULL;
  args.merge_gate = sc->gate_kind ? &gate : NULL;
  args.clamp_value = sc->clamp_value;
  args.direction = sc->direction;
  args.merge = sc->merge;

  for (size_t path = 0; path < sizeof isa_paths / sizeof isa_paths[0]; path++) {
    use_isa(isa_paths[path]);
    for (int round = 0; round < 2; round++) {
      fill_tokens(r, &tokens, fabs(sc->clamp_value));
      /* decay outside [0,1] exercises its clamp */
      tu_fill_uniform(r, &vec[0], -0.05, 1.05);
      tu_fill_uniform(r, &vec[1], -2.0, 2.0);
      tu_fill_uniform(r, &vec[2], -2.0, 2.0);
      tu_fill_normal(r, &vec[3]);
      if (sc->init_kind) tu_fill_normal(r, &init);
      if (sc->gate_kind) tu_fill_uniform(r, &gate, -0.3, 1.3);

      args.out = &want;
      args.final_state = sc->with_final ? &want_final : NULL;
      ref_tilessm_scan(&args);

      tu_poison(&out);
      tu_poison(&final);
      args.out = &out;
      args.final_state = sc->with_final ? &final : NULL;
      apx_status st = apx_tilessm_scan(ctx, &args, &cpu_call);
      ck_assert_msg(st == APX_OK, "%s: %s: %s", what, apx_status_name(st), apx_last_error());
      int64_t at = first_diff(&out, &want);
      ck_assert_msg(at < 0, "%s isa=%s round %d: y[%lld] = %a, reference %a", what,
                    isa_paths[path] ? isa_paths[path] : "native", round, (long long)at,
                    at < 0 ? 0.0 : tu_get(&out, at), at < 0 ? 0.0 : tu_get(&want, at));
      if (sc->with_final) {
        at = first_diff(&final, &want_final);
        ck_assert_msg(at < 0, "%s isa=%s round %d: final_state[%lld] = %a, reference %a",
                      what, isa_paths[path] ? isa_paths[path] : "native", round,
                      (long long)at, at < 0 ? 0.0 : tu_get(&final, at),
                      at < 0 ? 0.0 : tu_get(&want_final, at));
      }
    }
  }
  use_isa(NULL);
  tu_free(&tokens);
  for (int i = 0; i < 4; i++) tu_free(&vec[i]);
  if (sc->init_kind) tu_free(&init);
  if (sc->gate_kind) tu_free(&gate);
  tu_free(&out);
  tu_free(&want);
  tu_free(&final);
  tu_free(&want_final);
}

static scan_case random_case(tu_rng *r) {
  static const double clamps[] = {1e4, 2.5, 0.0, -1.5, 7.0, 1e6};
  static const int64_t steps[] = {0, 1, 2, 3, 7, 16, 33};
  scan_case sc;
  memset(&sc, 0, sizeof sc);
  sc.B = tu_int(r, 1, 4);
  sc.K = steps[tu_int(r, 0, 6)];
  /* odd and even widths around the SIMD lane counts and job blocks */
  sc.C = tu_int(r, 0, 3) == 0 ? tu_int(r, 60, 140) : tu_int(r, 1, 41);
  sc.dtype = random_float_dtype(r);
  sc.direction = (apx_scan_direction)tu_int(r, 0, 2);
  sc.merge = (apx_scan_merge)tu_int(r, 0, 2);
  sc.init_kind = (int)tu_int(r, 0, 2);
  sc.gate_kind = (int)tu_int(r, 0, 2);
  sc.with_final = (int)tu_int(r, 0, 3) != 0;
  sc.clamp_value = clamps[tu_int(r, 0, 5)];
  for (int i = 0; i < 4; i++) sc.param_dtype[i] = random_float_dtype(r);
  sc.init_dtype = random_float_dtype(r);
  sc.gate_dtype = random_float_dtype(r);
  return sc;
}

/* The threaded path with 1 and 3 threads (the default is the core count). */
START_TEST(test_scan_thread_counts) {
  static const int counts[] = {1, 3};
  for (int c = 0; c < 2; c++) {
    apx_context *ctx = tu_open_cpu_threads(counts[c]);
    ck_assert_msg(ctx != NULL, "apx_open with threads = %d: %s", counts[c], apx_last_error());
    tu_rng r = {tu_seed() + 6010 + (uint64_t)c};
    for (int dir = 0; dir < 3; dir++) {
      scan_case sc = random_case(&r);
      sc.B = 3;
      sc.K = 100;
      sc.C = 77;
      sc.direction = (apx_scan_direction)dir;
      sc.merge = APX_MERGE_GATED;
      sc.with_final = 1;
      run_case(ctx, &r, &sc);
    }
    apx_close(ctx);
  }
}
END_TEST

START_TEST(test_scan_random_cases) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() + 6001};
  for (int i = 0; i < 150; i++) {
    scan_case sc = random_case(&r);
    run_case(ctx, &r, &sc);
  }
  apx_close(ctx);
}
END_TEST

/* Every direction x merge x dtype once, gated with each gate shape. */
START_TEST(test_scan_every_mode) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() + 6002};
  for (int dt = 0; dt < 3; dt++)
    for (int dir = 0; dir < 3; dir++)
      for (int merge = 0; merge < 3; merge++)
        for (int gate = 0; gate < 3; gate++) {
          if (gate && (dir != APX_SCAN_BIDIRECTIONAL || merge != APX_MERGE_GATED)) continue;
          scan_case sc = random_case(&r);
          static const apx_dtype dts[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};
          sc.B = 2;
          sc.K = 9;
          sc.C = 19;
          sc.dtype = dts[dt];
          sc.direction = (apx_scan_direction)dir;
          sc.merge = (apx_scan_merge)merge;
          sc.gate_kind = gate;
          sc.with_final = 1;
          sc.clamp_value = 1e4;
          run_case(ctx, &r, &sc);
        }
  apx_close(ctx);
}
END_TEST

/* Sizes that take the multi-threaded path and full SIMD blocks. */
START_TEST(test_scan_large) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() + 6003};
  for (int dir = 0; dir < 3; dir++) {
    scan_case sc = random_case(&r);
    sc.B = 3;
    sc.K = 150;
    sc.C = 133;
    sc.direction = (apx_scan_direction)dir;
    sc.merge = APX_MERGE_GATED;
    sc.gate_kind = 2;
    sc.with_final = 1;
    sc.clamp_value = 1e4;
    run_case(ctx, &r, &sc);
  }
  apx_close(ctx);
}
END_TEST

/* K = 0: y is empty and final_state is init_state cast to the tokens
 * dtype (or zeros). */
START_TEST(test_scan_empty_steps) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() + 6004};
  for (int dir = 0; dir < 3; dir++)
    for (int init_kind = 0; init_kind < 3; init_kind++) {
      scan_case sc = random_case(&r);
      sc.K = 0;
      sc.direction = (apx_scan_direction)dir;
      sc.init_kind = init_kind;
      sc.init_dtype = APX_DTYPE_F32; /* rounded to the tokens dtype */
      sc.with_final = 1;
      run_case(ctx, &r, &sc);
    }
  apx_close(ctx);
}
END_TEST

/* docs/ops.md, tilessm_scan: lim is rounded to the tokens dtype: bf16(1e4) = 9984,
 * fp16 keeps 10000. With decay at its lower clamp, unit gains and zero bias
 * the first output is the sanitised token times (1 - 1e-6), which rounds
 * back to lim in the tokens dtype. */
START_TEST(test_scan_clamp_rounded_to_tokens_dtype) {
  apx_context *ctx = tu_open();
  static const struct {
    apx_dtype dtype;
    double lim;
  } cases[] = {{APX_DTYPE_BF16, 9984.0}, {APX_DTYPE_F16, 10000.0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    apx_dtype dt = cases[i].dtype;
    apx_tensor tokens = tu_host3(dt, 1, 3, 2);
    apx_tensor decay = tu_host1(APX_DTYPE_F32, 2), gain = tu_host1(APX_DTYPE_F32, 2),
               bias = tu_host1(APX_DTYPE_F32, 2);
    for (int c = 0; c < 2; c++) {
      tu_set(&decay, c, 0.0);
      tu_set(&gain, c, 1.0);
      tu_set(&bias, c, 0.0);
    }
    /* k = 0: +inf and 1e5 (both become +lim) */
    tu_set(&tokens, 0, INFINITY);
    tu_set(&tokens, 1, 1e5);
    for (int j = 2; j < 6; j++) tu_set(&tokens, j, 0.0);
    apx_tensor out = tu_host3(dt, 1, 3, 2), want = tu_host3(dt, 1, 3, 2);
    apx_tilessm_scan_args args = APX_TILESSM_SCAN_ARGS_INIT;
    args.tokens = &tokens;
    args.decay = &decay;
    args.input_gain = &gain;
    args.output_gain = &gain;
    args.state_bias = &bias;
    args.out = &want;
    ref_tilessm_scan(&args);
    tu_poison(&out);
    args.out = &out;
    ck_assert_int_eq(apx_tilessm_scan(ctx, &args, &cpu_call), APX_OK);
    ck_assert_msg(tu_bytes_equal(&out, &want), "%s: differs from the reference",
                  apx_dtype_name(dt));
    ck_assert_msg(tu_get(&out, 0) == cases[i].lim && tu_get(&out, 1) == cases[i].lim,
                  "%s: y[0] = %g, %g, expected the clamp %g", apx_dtype_name(dt),
                  tu_get(&out, 0), tu_get(&out, 1), cases[i].lim);
    tu_free(&tokens);
    tu_free(&decay);
    tu_free(&gain);
    tu_free(&bias);
    tu_free(&out);
    tu_free(&want);
  }
  apx_close(ctx);
}
END_TEST

#if SI_HAVE_X86
/* The AVX2/F16C conversions the kernels use against apx_half.h, on a
 * strided sample of all fp32 bit patterns (NaN payloads, subnormals,
 * infinities, ties) and on every fp16/bf16 pattern. (All 2^32 patterns
 * were checked once by hand; that takes too long for make check.) */
SI_TARGET_AVX2 static int64_t conversion_mismatches(void) {
  int64_t bad = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 8 * 257) {
    uint32_t bits[8];
    float f[8], round_h[8], round_b[8];
    uint16_t h[8], b[8];
    for (int i = 0; i < 8; i++) bits[i] = (uint32_t)(u + (uint64_t)i * 31u);
    memcpy(f, bits, sizeof f);
    __m256 v = _mm256_loadu_ps(f);
    si8_store(APX_DTYPE_F16, h, v);
    si8_store(APX_DTYPE_BF16, b, v);
    _mm256_storeu_ps(round_h, si8_round(APX_DTYPE_F16, v));
    _mm256_storeu_ps(round_b, si8_round(APX_DTYPE_BF16, v));
    for (int i = 0; i < 8; i++) {
      float want_h = apx_f16_to_f32(apx_f32_to_f16(f[i]));
      float want_b = apx_bf16_to_f32(apx_f32_to_bf16(f[i]));
      bad += h[i] != apx_f32_to_f16(f[i]) || b[i] != apx_f32_to_bf16(f[i]) ||
             memcmp(&round_h[i], &want_h, 4) != 0 || memcmp(&round_b[i], &want_b, 4) != 0;
    }
  }
  for (uint32_t x = 0; x < 65536; x += 8) {
    uint16_t in[8];
    float got_h[8], got_b[8];
    for (int i = 0; i < 8; i++) in[i] = (uint16_t)(x + (uint32_t)i);
    _mm256_storeu_ps(got_h, si8_load(APX_DTYPE_F16, in));
    _mm256_storeu_ps(got_b, si8_load(APX_DTYPE_BF16, in));
    for (int i = 0; i < 8; i++) {
      float want_h = apx_f16_to_f32(in[i]), want_b = apx_bf16_to_f32(in[i]);
      bad += memcmp(&got_h[i], &want_h, 4) != 0 || memcmp(&got_b[i], &want_b, 4) != 0;
    }
  }
  return bad;
}
#endif

START_TEST(test_simd_conversions_exact) {
#if SI_HAVE_X86
  if (si_isa_level() < SI_ISA_AVX2) {
    fprintf(stderr, "# test_simd_conversions_exact: no AVX2/F16C here, nothing to compare\n");
    return;
  }
  int64_t bad = conversion_mismatches();
  ck_assert_msg(bad == 0, "%lld AVX2 conversions differ from apx_half.h", (long long)bad);
#else
  fprintf(stderr, "# test_simd_conversions_exact: not an x86-64 build\n");
#endif
}
END_TEST

static Suite *tilessm_suite(void) {
  Suite *s = suite_create("cpu_tilessm");
  TCase *tc = tcase_create("scan");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_scan_random_cases);
  tcase_add_test(tc, test_scan_every_mode);
  tcase_add_test(tc, test_scan_large);
  tcase_add_test(tc, test_scan_empty_steps);
  tcase_add_test(tc, test_scan_clamp_rounded_to_tokens_dtype);
  tcase_add_test(tc, test_simd_conversions_exact);
  tcase_add_test(tc, test_scan_thread_counts);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(tilessm_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
