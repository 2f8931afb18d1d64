/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu backend's fused_pack_op_unpack (docs/ops.md, fused_pack_op_unpack) against the
 * reference composition of ref_tile.c (pack -> affine + ReGLU with R-model
 * rounding -> unpack), bit for bit, through the public API with the cpu
 * backend forced: random shapes, every float dtype x both index dtypes,
 * unique ids and (require_unique = 0) duplicates, out aliasing features
 * (a duplicated tile must still be transformed once), random scalars and
 * the FF selector's gate_scale 0 / gate_bias 1, inputs with inf, NaN, -0
 * and subnormals. Each case runs twice on fresh inputs with a poisoned
 * output, once per instruction-set path. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "ref_tile.h"
#include "testutil.h"

static const apx_call cpu_call = {"cpu", NULL};
static const apx_dtype float_dtypes[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};
static const apx_dtype index_dtypes[] = {APX_DTYPE_I32, APX_DTYPE_I64};

typedef struct fused_case {
  apx_dtype dtype, index_dtype;
  int64_t B, C, gh, gw, t, K;
  int unique, alias, specials;
  double value_scale, value_bias, gate_scale, gate_bias;
} fused_case;

static void set_index(const apx_tensor *t, int64_t i, int64_t v) {
  if (t->dtype == APX_DTYPE_I64)
    ((int64_t *)t->data)[i] = v;
  else
    ((int32_t *)t->data)[i] = (int32_t)v;
}

/* Distinct ids per batch row (a partial Fisher-Yates over the grid). */
static void fill_unique_ids(tu_rng *r, const apx_tensor *idx, int64_t tiles) {
  int64_t B = idx->shape[0], K = idx->shape[1];
  int64_t *perm = malloc(sizeof(int64_t) * (size_t)tiles);
  for (int64_t b = 0; b < B; b++) {
    for (int64_t i = 0; i < tiles; i++)
      perm[i] = i;
    for (int64_t k = 0; k < K; k++) {
      int64_t j = tu_int(r, k, tiles - 1), s = perm[k];
      perm[k] = perm[j];
      perm[j] = s;
      set_index(idx, b * K + k, perm[k]);
    }
  }
  free(perm);
}

static void fill_features(tu_rng *r, const apx_tensor *t, int specials) {
  int64_t n = apx_tensor_numel(t);
  if (n > 1000000 && !specials) { /* cheaper for the big cases */
    tu_fill_uniform(r, t, -4.0, 4.0);
    return;
  }
  double tiny = t->dtype == APX_DTYPE_F16 ? 3e-6 : 1e-39;
  for (int64_t i = 0; i < n; i++) {
    double v = 2.0 * tu_normal(r);
    if (specials)
      switch (tu_int(r, 0, 15)) {
      case 0:
        v = INFINITY;
        break;
      case 1:
        v = -INFINITY;
        break;
      case 2:
        v = NAN;
        break;
      case 3:
        v = -0.0;
        break;
      case 4:
        v = tiny * (tu_uniform(r) - 0.5);
        break;
      default:
        break;
      }
    tu_set(t, i, v);
  }
}

static void run_case(apx_context *ctx, tu_rng *r, const fused_case *fc) {
  const int64_t B = fc->B, C = fc->C, t = fc->t, K = fc->K;
  const int64_t H = fc->gh * t, W = fc->gw * t;
  apx_tensor features = tu_host4(fc->dtype, B, C, H, W);
  apx_tensor idx = tu_host2(fc->index_dtype, B, K);
  apx_tensor out = tu_host4(fc->dtype, B, C, H, W);
  apx_tensor want = tu_host4(fc->dtype, B, C, H, W);
  char what[320];
  snprintf(what, sizeof what,
           "%s idx %s B=%lld C=%lld grid %lldx%lld t=%lld K=%lld unique=%d alias=%d "
           "specials=%d vs=%g vb=%g gs=%g gb=%g",
           apx_dtype_name(fc->dtype), apx_dtype_name(fc->index_dtype), (long long)B, (long long)C,
           (long long)fc->gh, (long long)fc->gw, (long long)t, (long long)K, fc->unique, fc->alias,
           fc->specials, fc->value_scale, fc->value_bias, fc->gate_scale, fc->gate_bias);
  for (int path = 0; path < REF_ISA_PATHS; path++) {
    ref_use_isa_path(path);
    for (int call = 0; call < 2; call++) {
      fill_features(r, &features, fc->specials);
      if (fc->unique)
        fill_unique_ids(r, &idx, fc->gh * fc->gw);
      else
        tu_fill_int(r, &idx, 0, fc->gh * fc->gw - 1);
      apx_fused_pack_op_unpack_args args = APX_FUSED_PACK_OP_UNPACK_ARGS_INIT;
      args.features = &features;
      args.idx = &idx;
      args.tile = t;
      args.value_scale = fc->value_scale;
      args.value_bias = fc->value_bias;
      args.gate_scale = fc->gate_scale;
      args.gate_bias = fc->gate_bias;
      args.require_unique = fc->unique;
      args.out = &want;
      ref_fused_pack_op_unpack(&args);
      if (fc->alias) {
        args.out = &features;
      } else {
        tu_poison(&out);
        args.out = &out;
      }
      apx_status st = apx_fused_pack_op_unpack(ctx, &args, &cpu_call);
      ck_assert_msg(st == APX_OK, "fused %s: %s: %s", what, apx_status_name(st), apx_last_error());
      const apx_tensor *got = fc->alias ? &features : &out;
      int64_t bad = ref_first_mismatch(got, &want, 0);
      ck_assert_msg(bad < 0, "fused %s path %s call %d: element %lld differs (got %g, want %g)",
                    what, ref_isa_path_name(path), call, (long long)bad,
                    bad < 0 ? 0.0 : tu_get(got, bad), bad < 0 ? 0.0 : tu_get(&want, bad));
    }
  }
  tu_free(&features);
  tu_free(&idx);
  tu_free(&out);
  tu_free(&want);
}

START_TEST(test_fused_random) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() ^ 0xf5e1u};
  static const int64_t tiles[] = {1, 2, 3, 4, 8, 16, 24};
  for (int di = 0; di < 3; di++)
    for (int combo = 0; combo < 16; combo++) {
      fused_case fc = {0};
      fc.dtype = float_dtypes[di];
      fc.index_dtype = index_dtypes[combo & 1];
      fc.unique = (combo >> 1) & 1;
      fc.alias = (combo >> 2) & 1;
      fc.specials = (combo >> 3) & 1;
      fc.t = tiles[tu_int(&r, 0, 6)];
      fc.B = tu_int(&r, 1, 3);
      fc.C = 2 * tu_int(&r, 0, 3) + 1;
      fc.gh = tu_int(&r, 1, 4);
      fc.gw = tu_int(&r, 1, 6);
      fc.K = combo < 2 ? 0 : tu_int(&r, 1, fc.unique ? fc.gh * fc.gw : 2 * fc.gh * fc.gw);
      if (combo % 4 == 3) { /* the FF selector's form: gate = 1 */
        fc.value_scale = 1.0 + 0.1 * tu_normal(&r);
        fc.value_bias = 0.1 * tu_normal(&r);
        fc.gate_scale = 0.0;
        fc.gate_bias = 1.0;
      } else {
        fc.value_scale = tu_normal(&r);
        fc.value_bias = tu_normal(&r);
        fc.gate_scale = tu_normal(&r);
        fc.gate_bias = tu_normal(&r);
      }
      run_case(ctx, &r, &fc);
    }
  /* empty batch, no channels */
  for (int64_t empty = 0; empty < 2; empty++) {
    fused_case fc = {APX_DTYPE_BF16,
                     APX_DTYPE_I32,
                     empty ? 2 : 0,
                     empty ? 0 : 3,
                     2,
                     2,
                     4,
                     2,
                     1,
                     0,
                     0,
                     1.0,
                     0.0,
                     1.0,
                     0.0};
    run_case(ctx, &r, &fc);
  }
  apx_close(ctx);
}
END_TEST

/* Big enough for the OpenMP path; duplicates in place. */
START_TEST(test_fused_large) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() ^ 0xf5e2u};
  for (int di = 0; di < 3; di++)
    for (int alias = 0; alias < 2; alias++) {
      fused_case fc = {float_dtypes[di],
                       index_dtypes[alias],
                       2,
                       7,
                       16,
                       20,
                       8,
                       300,
                       0,
                       alias,
                       0,
                       1.25,
                       -0.5,
                       0.75,
                       0.125};
      run_case(ctx, &r, &fc);
    }
  apx_close(ctx);
}
END_TEST

/* 8 MiB outputs, with duplicates, in place or not. */
START_TEST(test_fused_big) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() ^ 0xf5e3u};
  for (int alias = 0; alias < 2; alias++) {
    fused_case fc = {alias ? APX_DTYPE_F16 : APX_DTYPE_F32,
                     APX_DTYPE_I64,
                     1,
                     alias ? 64 : 32,
                     32,
                     32,
                     8,
                     600,
                     alias,
                     alias,
                     0,
                     0.75,
                     0.25,
                     -1.5,
                     0.5};
    run_case(ctx, &r, &fc);
  }
  apx_close(ctx);
}
END_TEST

/* The threaded path with 1 and 3 threads (the default is the core count). */
START_TEST(test_fused_thread_counts) {
  static const int counts[] = {1, 3};
  for (int i = 0; i < 2; i++) {
    apx_context *ctx = tu_open_cpu_threads(counts[i]);
    ck_assert_msg(ctx != NULL, "apx_open with threads = %d: %s", counts[i], apx_last_error());
    tu_rng r = {tu_seed() ^ (0xf5e4u + (uint64_t)i)};
    for (int alias = 0; alias < 2; alias++) {
      fused_case fc = {APX_DTYPE_BF16, APX_DTYPE_I32, 2,    7,    16, 20, 8, 300, 0, alias, 0,
                       1.25,           -0.5,          0.75, 0.125};
      run_case(ctx, &r, &fc);
    }
    apx_close(ctx);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu_fused");
  TCase *tc = tcase_create("parity");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_fused_random);
  tcase_add_test(tc, test_fused_large);
  tcase_add_test(tc, test_fused_big);
  tcase_add_test(tc, test_fused_thread_counts);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
