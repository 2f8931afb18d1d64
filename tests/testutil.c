/* SPDX-License-Identifier: Apache-2.0 */
#include "testutil.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "apx_half.h"
#include "apx_splitmix.h"

#include <unistd.h>

uint64_t tu_next(tu_rng *r) { return apx_splitmix64(&r->s); }

double tu_uniform(tu_rng *r) { return apx_splitmix64_uniform(&r->s); }

double tu_normal(tu_rng *r) {
  double u1 = tu_uniform(r), u2 = tu_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int64_t tu_int(tu_rng *r, int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  uint64_t span = (uint64_t)(hi - lo) + 1u;
  return lo + (int64_t)(tu_next(r) % span);
}

uint64_t tu_seed(void) {
  static int printed;
  const char *env = getenv("APEXX_TEST_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 0) : 20261126u;
  if (!printed) {
    fprintf(stderr, "# test seed %llu (set APEXX_TEST_SEED to replay)\n",
            (unsigned long long)seed);
    printed = 1;
  }
  return seed;
}

size_t tu_bytes(const apx_tensor *t) {
  return (size_t)apx_tensor_numel(t) * apx_dtype_size(t->dtype);
}

apx_tensor tu_host(apx_dtype dtype, int ndim, const int64_t *shape) {
  apx_tensor t = apx_tensor_host(NULL, dtype, ndim, shape);
  size_t bytes = tu_bytes(&t);
  size_t rounded = (bytes + 63u) / 64u * 64u;
  t.data = aligned_alloc(64, rounded ? rounded : 64);
  if (!t.data) abort();
  return t;
}

apx_tensor tu_host1(apx_dtype dt, int64_t d0) {
  int64_t s[1] = {d0};
  return tu_host(dt, 1, s);
}
apx_tensor tu_host2(apx_dtype dt, int64_t d0, int64_t d1) {
  int64_t s[2] = {d0, d1};
  return tu_host(dt, 2, s);
}
apx_tensor tu_host3(apx_dtype dt, int64_t d0, int64_t d1, int64_t d2) {
  int64_t s[3] = {d0, d1, d2};
  return tu_host(dt, 3, s);
}
apx_tensor tu_host4(apx_dtype dt, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  int64_t s[4] = {d0, d1, d2, d3};
  return tu_host(dt, 4, s);
}
apx_tensor tu_host5(apx_dtype dt, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                    int64_t d4) {
  int64_t s[5] = {d0, d1, d2, d3, d4};
  return tu_host(dt, 5, s);
}

void tu_free(apx_tensor *t) {
  free(t->data);
  t->data = NULL;
}

double tu_get(const apx_tensor *t, int64_t i) {
  switch (t->dtype) {
  case APX_DTYPE_F32: return ((const float *)t->data)[i];
  case APX_DTYPE_F16: return apx_f16_to_f32(((const uint16_t *)t->data)[i]);
  case APX_DTYPE_BF16: return apx_bf16_to_f32(((const uint16_t *)t->data)[i]);
  case APX_DTYPE_I32: return ((const int32_t *)t->data)[i];
  case APX_DTYPE_I64: return (double)((const int64_t *)t->data)[i];
  default: abort();
  }
}

void tu_set(const apx_tensor *t, int64_t i, double v) {
  switch (t->dtype) {
  case APX_DTYPE_F32: ((float *)t->data)[i] = (float)v; break;
  case APX_DTYPE_F16: ((uint16_t *)t->data)[i] = apx_f32_to_f16((float)v); break;
  case APX_DTYPE_BF16: ((uint16_t *)t->data)[i] = apx_f32_to_bf16((float)v); break;
  case APX_DTYPE_I32: ((int32_t *)t->data)[i] = (int32_t)v; break;
  case APX_DTYPE_I64: ((int64_t *)t->data)[i] = (int64_t)v; break;
  default: abort();
  }
}

void tu_fill_normal(tu_rng *r, const apx_tensor *t) {
  int64_t n = apx_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) tu_set(t, i, tu_normal(r));
}

void tu_fill_uniform(tu_rng *r, const apx_tensor *t, double lo, double hi) {
  int64_t n = apx_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) tu_set(t, i, lo + (hi - lo) * tu_uniform(r));
}

void tu_fill_int(tu_rng *r, const apx_tensor *t, int64_t lo, int64_t hi) {
  int64_t n = apx_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    int64_t v = tu_int(r, lo, hi);
    if (t->dtype == APX_DTYPE_I64)
      ((int64_t *)t->data)[i] = v;
    else
      tu_set(t, i, (double)v);
  }
}

void tu_poison(const apx_tensor *t) { memset(t->data, 0xA5, tu_bytes(t)); }

int tu_is_poisoned(const apx_tensor *t) {
  const unsigned char *p = t->data;
  size_t n = tu_bytes(t);
  for (size_t i = 0; i < n; i++)
    if (p[i] != 0xA5) return 0;
  return 1;
}

int tu_bytes_equal(const apx_tensor *a, const apx_tensor *b) {
  if (a->dtype != b->dtype || apx_tensor_numel(a) != apx_tensor_numel(b)) return 0;
  return memcmp(a->data, b->data, tu_bytes(a)) == 0;
}

apx_tensor tu_clone(const apx_tensor *src) {
  apx_tensor t = tu_host(src->dtype, src->ndim, src->shape);
  memcpy(t.data, src->data, tu_bytes(src));
  return t;
}

apx_context *tu_open(void) {
  apx_context *ctx = NULL;
  apx_status st = apx_open(&ctx, NULL);
  if (st != APX_OK) {
    fprintf(stderr, "apx_open failed: %s: %s\n", apx_status_name(st), apx_last_error());
    abort();
  }
  return ctx;
}

apx_context *tu_open_ini(const char *text) {
  char path[] = "/tmp/apexx-test-ini-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return NULL;
  FILE *f = fdopen(fd, "w");
  if (!f) {
    close(fd);
    unlink(path);
    return NULL;
  }
  fputs(text, f);
  fclose(f);
  apx_context *ctx = NULL;
  apx_status st = apx_open(&ctx, path);
  unlink(path);
  if (st != APX_OK) {
    fprintf(stderr, "apx_open(%s): %s: %s\n", path, apx_status_name(st), apx_last_error());
    return NULL;
  }
  return ctx;
}

apx_context *tu_open_cpu_threads(int threads) {
  char text[128];
  snprintf(text, sizeof text,
           "[apexx]\norder = cpu\n[backend cpu]\nlibrary = apexx-cpu.so\nthreads = %d\n",
           threads);
  return tu_open_ini(text);
}

apx_context *tu_open_cuda_or_skip(const char **device_name) {
  apx_context *ctx = tu_open();
  struct apx_backend_info info;
  int found = 0;
  for (int i = 0; !found && i < apx_backend_count(ctx); i++)
    found = apx_backend_info(ctx, i, &info) == APX_OK && strcmp(info.name, "cuda") == 0;
  if (!found || info.state != APX_BACKEND_OK) {
    printf("SKIP: cuda backend %s: %s\n", found ? apx_backend_state_name(info.state) : "absent",
           found ? info.reason : "not in the configuration");
    apx_close(ctx);
    exit(77);
  }
  *device_name = info.device_name;
  return ctx;
}

apx_context *tu_open_cuda_eager(void) {
  apx_context *ctx = tu_open_ini("[apexx]\norder = cuda, cpu\nvalidate = eager\n"
                                 "[backend cpu]\nlibrary = apexx-cpu.so\n"
                                 "[backend cuda]\nlibrary = apexx-cuda.so\n");
  if (!ctx) exit(EXIT_FAILURE);
  return ctx;
}

char tu_error_text[512];

apx_status tu_set_error(apx_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tu_error_text, sizeof tu_error_text, fmt, ap);
  va_end(ap);
  return status;
}
