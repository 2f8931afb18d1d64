/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu-vs-cuda harness of the test_cuda_* suites (cuda_case.h). */
#include "cuda_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

apx_context *ctx;
apx_context *ctx_eager;
tu_rng rng;
const apx_call on_cpu = {"cpu", NULL};
const apx_call on_gpu = {"cuda", NULL};
const apx_dtype float_dtypes[3] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};
const apx_dtype index_dtypes[2] = {APX_DTYPE_I32, APX_DTYPE_I64};
const apx_dtype data_dtypes[5] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16, APX_DTYPE_I32,
                                  APX_DTYPE_I64};

/* ---- device tensors --------------------------------------------------------- */

apx_tensor dev_alloc(apx_context *c, apx_dtype dt, int ndim, const int64_t *shape) {
  apx_tensor t;
  CHECK_OK(apx_tensor_alloc(c, APX_DEVICE_CUDA, 0, dt, ndim, shape, &t), "dev_alloc");
  return t;
}

apx_tensor to_dev(apx_context *c, const apx_tensor *h) {
  apx_tensor d = dev_alloc(c, h->dtype, h->ndim, h->shape);
  CHECK_OK(apx_tensor_copy(c, &d, h, NULL), "to_dev");
  return d;
}

apx_tensor to_host(apx_context *c, const apx_tensor *d) {
  apx_tensor h = tu_host(d->dtype, d->ndim, d->shape);
  CHECK_OK(apx_tensor_copy(c, &h, d, NULL), "to_host");
  return h;
}

/* Fill a device tensor with 0xA5 bytes (NaN for every float dtype). */
void dev_poison(apx_context *c, const apx_tensor *d) {
  apx_tensor h = tu_host(d->dtype, d->ndim, d->shape);
  tu_poison(&h);
  CHECK_OK(apx_tensor_copy(c, d, &h, NULL), "dev_poison");
  tu_free(&h);
}

int dev_is_poisoned(apx_context *c, const apx_tensor *d) {
  apx_tensor h = to_host(c, d);
  int p = tu_is_poisoned(&h);
  tu_free(&h);
  return p;
}

void dev_free(apx_context *c, apx_tensor *d) { apx_tensor_free(c, d); }

apx_tensor dev_view(const apx_tensor *buf, int64_t off, int ndim, const int64_t *shape) {
  apx_tensor v = *buf;
  v.data = (char *)buf->data + (size_t)off * apx_dtype_size(buf->dtype);
  v.ndim = ndim;
  for (int d = 0; d < ndim; d++) v.shape[d] = shape[d];
  return v;
}

/* Every element of the 1-D device buffer `buf` outside [off, off + n) still
 * holds dev_poison's 0xA5 bytes: a call on a view of it (dev_view) wrote
 * nothing around the view. */
void expect_untouched_around(apx_context *c, const apx_tensor *buf, int64_t off, int64_t n,
                             const char *what) {
  apx_tensor whole = to_host(c, buf);
  const size_t es = apx_dtype_size(buf->dtype);
  const unsigned char *raw = (const unsigned char *)whole.data;
  for (int64_t i = 0; i < buf->shape[0]; i++) {
    if (i >= off && i < off + n) continue;
    for (size_t byte = 0; byte < es; byte++)
      ck_assert_msg(raw[(size_t)i * es + byte] == 0xA5,
                    "%s: element %lld of the buffer, outside the view, written", what,
                    (long long)i);
  }
  tu_free(&whole);
}

/* ---- comparisons ------------------------------------------------------------ */

double tol_of(apx_dtype dt) {
  return dt == APX_DTYPE_F32 ? 1e-5 : dt == APX_DTYPE_F16 ? 2e-3 : 1.6e-2;
}

/* One unit in the last place of dtype dt at magnitude |v|. */
double ulp_of(apx_dtype dt, double v) {
  int e;
  frexp(fabs(v) > 0 ? fabs(v) : 1e-30, &e); /* |v| = m * 2^e, m in [0.5, 1) */
  int mant = dt == APX_DTYPE_F32 ? 23 : dt == APX_DTYPE_F16 ? 10 : 7;
  int emin = dt == APX_DTYPE_F16 ? -13 : -125;
  if (e < emin) e = emin;
  return ldexp(1.0, e - 1 - mant);
}

void expect_exact(const apx_tensor *got, const apx_tensor *want, const char *what) {
  int64_t n = apx_tensor_numel(want);
  size_t es = apx_dtype_size(want->dtype);
  for (int64_t i = 0; i < n; i++)
    if (memcmp((const char *)got->data + i * es, (const char *)want->data + i * es, es) != 0)
      ck_abort_msg("%s: element %lld differs: cuda %.9g, cpu %.9g", what, (long long)i,
                   tu_get(got, i), tu_get(want, i));
}

/* |got - want| <= 2*(atol + rtol*mag) + extra_ulps*ulp (docs/ops.md, Rounding and parity, both
 * sides' errors); mag NULL means |want|. NaN must meet NaN, inf itself. */
void expect_close(const apx_tensor *got, const apx_tensor *want, const double *mag,
                  double extra_ulps, const char *what) {
  int64_t n = apx_tensor_numel(want);
  double tol = tol_of(want->dtype);
  for (int64_t i = 0; i < n; i++) {
    double g = tu_get(got, i), w = tu_get(want, i);
    if (isnan(w) || isnan(g)) {
      ck_assert_msg(isnan(w) && isnan(g), "%s: element %lld: cuda %g, cpu %g", what,
                    (long long)i, g, w);
      continue;
    }
    if (isinf(w) || isinf(g)) {
      ck_assert_msg(g == w, "%s: element %lld: cuda %g, cpu %g", what, (long long)i, g, w);
      continue;
    }
    double m = mag ? mag[i] : fabs(w);
    double bound = 2.0 * (tol + tol * m) + extra_ulps * ulp_of(want->dtype, w);
    ck_assert_msg(fabs(g - w) <= bound, "%s: element %lld: cuda %.9g, cpu %.9g (bound %.3g)",
                  what, (long long)i, g, w, bound);
  }
}

void set_index(const apx_tensor *t, int64_t i, int64_t v) {
  if (t->dtype == APX_DTYPE_I64)
    ((int64_t *)t->data)[i] = v;
  else
    ((int32_t *)t->data)[i] = (int32_t)v;
}

int64_t get_index(const apx_tensor *t, int64_t i) {
  return t->dtype == APX_DTYPE_I64 ? ((int64_t *)t->data)[i] : ((int32_t *)t->data)[i];
}

/* Distinct ids per batch row in [0, tiles). */
void fill_unique(const apx_tensor *idx, int64_t tiles) {
  int64_t B = idx->shape[0], K = idx->shape[1];
  int64_t *perm = malloc(sizeof(int64_t) * (size_t)(tiles > 0 ? tiles : 1));
  for (int64_t b = 0; b < B; b++) {
    for (int64_t i = 0; i < tiles; i++) perm[i] = i;
    for (int64_t k = 0; k < K; k++) {
      int64_t j = tu_int(&rng, k, tiles - 1), s = perm[k];
      perm[k] = perm[j];
      perm[j] = s;
      set_index(idx, b * K + k, perm[k]);
    }
  }
  free(perm);
}

/* When set (test_copy_ops_move_bits), fill_values also writes raw bit
 * patterns no arithmetic path keeps: signaling and quiet NaNs with
 * payloads (either sign), +-0 and subnormals, so that a copy op moving
 * values through fp32 anywhere shows as a bitwise difference. */
int bit_specials;

static void put_bit_special(const apx_tensor *t, int64_t i) {
  static const uint32_t f32[] = {0x7f800001u, 0xff812345u, 0x7fc00abcu, 0xffffffffu,
                                 0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu};
  static const uint16_t f16[] = {0x7c01u, 0xfd55u, 0x7e3fu, 0xffffu,
                                 0x0000u, 0x8000u, 0x0001u, 0x83ffu};
  static const uint16_t bf16[] = {0x7f81u, 0xff9au, 0x7fc1u, 0xffffu,
                                  0x0000u, 0x8000u, 0x0001u, 0x807fu};
  int k = (int)tu_int(&rng, 0, 7);
  if (t->dtype == APX_DTYPE_F32)
    memcpy((char *)t->data + 4 * i, &f32[k], 4);
  else if (t->dtype == APX_DTYPE_F16)
    memcpy((char *)t->data + 2 * i, &f16[k], 2);
  else if (t->dtype == APX_DTYPE_BF16)
    memcpy((char *)t->data + 2 * i, &bf16[k], 2);
}

/* N(0,1) values with a sprinkle of NaN, +-inf, -0 when specials. */
void fill_values(const apx_tensor *t, int specials) {
  int64_t n = apx_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    double v = tu_normal(&rng);
    if (specials) switch (tu_int(&rng, 0, 23)) {
      case 0: v = INFINITY; break;
      case 1: v = -INFINITY; break;
      case 2: v = NAN; break;
      case 3: v = -0.0; break;
      default: break;
      }
    tu_set(t, i, v);
    if (bit_specials && tu_int(&rng, 0, 3) == 0) put_bit_special(t, i);
  }
}

void fill_data(const apx_tensor *t) {
  if (t->dtype == APX_DTYPE_I32 || t->dtype == APX_DTYPE_I64)
    tu_fill_int(&rng, t, -1000000, 1000000);
  else
    fill_values(t, 0);
}

/* Levels in [lo, lo + (INT32_MAX >> order_bits)] with both ends present
 * (they fit exactly: docs/ops.md, tileunpack (priority)), or with `past` one level a
 * step above that (rejected); returns the position of the largest. */
int64_t fill_levels_at_limit(const apx_tensor *levels, int64_t lo, int past) {
  int64_t n = levels->shape[0] * levels->shape[1], K = levels->shape[1];
  int ob = 1;
  while (K > 1 && ((int64_t)1 << ob) < K) ob++; /* max(1, bit_length(K-1)) */
  int64_t span = INT32_MAX >> ob;
  for (int64_t i = 0; i < n; i++) set_index(levels, i, lo + tu_int(&rng, 0, span - 1));
  int64_t at_min = tu_int(&rng, 0, n - 1);
  int64_t at_max = n > 1 ? (at_min + tu_int(&rng, 1, n - 1)) % n : 0;
  if (n > 1) set_index(levels, at_min, lo);
  set_index(levels, at_max, lo + span + (past ? 1 : 0));
  return at_max;
}

void expect_close_flat(const apx_tensor *got, const apx_tensor *want, double m, double extra_ulps,
                       const char *what) {
  int64_t n = apx_tensor_numel(want);
  double *mag = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  ck_assert_ptr_nonnull(mag);
  for (int64_t i = 0; i < n; i++) mag[i] = m;
  expect_close(got, want, mag, extra_ulps, what);
  free(mag);
}

/* ---- the case helper ---------------------------------------------------------- */

apx_status cc_call_op(apx_context *c, apx_op_id op, const void *args, const apx_call *call) {
  switch (op) {
#define CC_CALL_(upper, lower)                                                 \
  case APX_OP_##upper:                                                         \
    return apx_##lower(c, (const apx_##lower##_args *)args, call);
    APX_OP_MAP(CC_CALL_)
#undef CC_CALL_
  default:
    break;
  }
  ck_abort_msg("cc_call_op: op [%d] is not an op of APX_OP_MAP", (int)op);
  return APX_ERR_INVALID_ARG;
}

/* APEXX_TEST_CUDA_REPEATS: how many more times each out-of-place case's
 * device call runs (0: only cases marked `repeat`, once more). */
int cc_repeats(void) {
  static int n = -1;
  if (n < 0) {
    const char *e = getenv("APEXX_TEST_CUDA_REPEATS");
    long v = e ? strtol(e, NULL, 10) : 0;
    n = v > 0 && v < 100000 ? (int)v : 0;
  }
  return n;
}

void cc_run(const cc_case *c, apx_tensor got[CC_MAX_OUTPUTS]) {
  const apx_tensor *host_in[CC_MAX_INPUTS] = {NULL}, *host_out[CC_MAX_OUTPUTS] = {NULL};
  apx_tensor dev_in[CC_MAX_INPUTS], dev_out[CC_MAX_OUTPUTS];
  int own_out[CC_MAX_OUTPUTS] = {0};
  CHECK_OK(cc_call_op(ctx, c->op, c->args, &on_cpu), c->what);
  for (int i = 0; i < CC_MAX_INPUTS && c->inputs[i]; i++) {
    host_in[i] = *c->inputs[i];
    if (!host_in[i]) continue;
    dev_in[i] = to_dev(ctx, host_in[i]);
    *c->inputs[i] = &dev_in[i];
  }
  for (int o = 0; o < CC_MAX_OUTPUTS && c->outputs[o]; o++) {
    host_out[o] = *c->outputs[o];
    if (!host_out[o]) continue;
    if (o == 0 && c->alias >= 0) {
      ck_assert_msg(host_in[c->alias] != NULL, "%s: the aliased input is absent", c->what);
      *c->outputs[o] = &dev_in[c->alias];
      continue;
    }
    dev_out[o] = dev_alloc(ctx, host_out[o]->dtype, host_out[o]->ndim, host_out[o]->shape);
    own_out[o] = 1;
    dev_poison(ctx, &dev_out[o]);
    *c->outputs[o] = &dev_out[o];
  }
  CHECK_OK(cc_call_op(ctx, c->op, c->args, &on_gpu), c->what);
  CHECK_OK(apx_sync(ctx, &on_gpu), c->what);
  for (int o = 0; o < CC_MAX_OUTPUTS; o++) {
    memset(&got[o], 0, sizeof got[o]);
    if (host_out[o]) got[o] = to_host(ctx, *c->outputs[o]);
  }
  /* run-to-run: the same device inputs again give the same bits; a case
   * with `repeat` once more, every out-of-place case cc_repeats() times
   * more when APEXX_TEST_CUDA_REPEATS asks (the determinism step of
   * bench/gpu/run-all.sh) */
  int again_runs = c->alias >= 0 ? 0 : cc_repeats() > 0 ? cc_repeats() : c->repeat ? 1 : 0;
  for (int run = 0; run < again_runs; run++) {
    for (int o = 0; o < CC_MAX_OUTPUTS; o++)
      if (own_out[o]) dev_poison(ctx, &dev_out[o]);
    CHECK_OK(cc_call_op(ctx, c->op, c->args, &on_gpu), c->what);
    CHECK_OK(apx_sync(ctx, &on_gpu), c->what);
    for (int o = 0; o < CC_MAX_OUTPUTS; o++) {
      if (!own_out[o]) continue;
      apx_tensor again = to_host(ctx, &dev_out[o]);
      ck_assert_msg(tu_bytes_equal(&again, &got[o]), "%s: run %d of the same call differs bitwise",
                    c->what, run + 2);
      tu_free(&again);
    }
  }
  for (int i = 0; i < CC_MAX_INPUTS && c->inputs[i]; i++) {
    *c->inputs[i] = host_in[i];
    if (host_in[i]) dev_free(ctx, &dev_in[i]);
  }
  for (int o = 0; o < CC_MAX_OUTPUTS && c->outputs[o]; o++) {
    *c->outputs[o] = host_out[o];
    if (own_out[o]) dev_free(ctx, &dev_out[o]);
  }
}

/* ---- main ------------------------------------------------------------------------ */

TCase *cc_tcase(Suite *s, const char *name) {
  TCase *tc = tcase_create(name);
  tcase_set_timeout(tc, 600);
  suite_add_tcase(s, tc);
  return tc;
}

int cc_main(const char *suite_name, void (*add_tests)(Suite *s)) {
  const char *device_name = NULL;
  ctx = tu_open_cuda_or_skip(&device_name);
  printf("# cuda device: %s\n", device_name);
  ctx_eager = tu_open_cuda_eager();
  rng.s = tu_seed() ^ 0xc0dau;
  Suite *s = suite_create(suite_name);
  add_tests(s);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK); /* CUDA does not survive fork */
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  apx_close(ctx_eager);
  apx_close(ctx);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
