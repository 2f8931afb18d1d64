/* SPDX-License-Identifier: Apache-2.0 */
/* libapexx dlopen'ed with RTLD_LOCAL (Python's ctypes default, a plugin host
 * that links it privately): its symbols are then invisible to the modules
 * it loads, so a backend that leans on them fails to load. This program
 * links no apexx library: it dlopens the build tree's libapexx.so with
 * RTLD_LOCAL, opens a context on $APEXX_CONFIG, and runs TilePack on every
 * backend that is ok (host tensors on host backends, device copies on
 * device backends), comparing with the expected copy. A backend that did
 * not load because of an undefined symbol fails the test. Exit 0 pass,
 * 1 fail. */
#include <apexx/apexx.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FN(name) static __typeof__(name) *p_##name
FN(apx_open);
FN(apx_close);
FN(apx_backend_count);
FN(apx_backend_info);
FN(apx_last_error);
FN(apx_status_name);
FN(apx_tilepack);
FN(apx_tensor_alloc);
FN(apx_tensor_free);
FN(apx_tensor_copy);
FN(apx_sync);

static void *lib;

static int load(void **slot, const char *name) {
  *slot = dlsym(lib, name);
  if (!*slot) fprintf(stderr, "FAIL: dlsym %s: %s\n", name, dlerror());
  return *slot != NULL;
}

/* TilePack of a 1x2x4x4 f32 map into 2 tiles of 2x2 on backend b. */
static int run_tilepack(apx_context *ctx, const struct apx_backend_info *b) {
  float features[32], packed[16];
  int32_t ids[2] = {3, 0};
  for (int i = 0; i < 32; i++) features[i] = (float)i + 0.5f;
  memset(packed, 0xA5, sizeof packed);
  const int64_t fshape[4] = {1, 2, 4, 4}, ishape[2] = {1, 2}, oshape[5] = {1, 2, 2, 2, 2};
  apx_tensor hf = {features, APX_DTYPE_F32, APX_DEVICE_HOST, 0, 4, {0}};
  apx_tensor hi = {ids, APX_DTYPE_I32, APX_DEVICE_HOST, 0, 2, {0}};
  apx_tensor ho = {packed, APX_DTYPE_F32, APX_DEVICE_HOST, 0, 5, {0}};
  memcpy(hf.shape, fshape, sizeof fshape);
  memcpy(hi.shape, ishape, sizeof ishape);
  memcpy(ho.shape, oshape, sizeof oshape);
  apx_tensor f = hf, ix = hi, o = ho;
  apx_call call = APX_CALL_INIT;
  call.backend = b->name;
  apx_status st = APX_OK;
  int device = b->device != APX_DEVICE_HOST;
  if (device) {
    memset(&f, 0, sizeof f), memset(&ix, 0, sizeof ix), memset(&o, 0, sizeof o);
    st = p_apx_tensor_alloc(ctx, b->device, 0, APX_DTYPE_F32, 4, fshape, &f);
    if (st == APX_OK) st = p_apx_tensor_alloc(ctx, b->device, 0, APX_DTYPE_I32, 2, ishape, &ix);
    if (st == APX_OK) st = p_apx_tensor_alloc(ctx, b->device, 0, APX_DTYPE_F32, 5, oshape, &o);
    if (st == APX_OK) st = p_apx_tensor_copy(ctx, &f, &hf, NULL);
    if (st == APX_OK) st = p_apx_tensor_copy(ctx, &ix, &hi, NULL);
  }
  apx_tilepack_args a = APX_TILEPACK_ARGS_INIT;
  a.features = &f, a.idx = &ix, a.tile = 2, a.out = &o;
  if (st == APX_OK) st = p_apx_tilepack(ctx, &a, &call);
  if (st == APX_OK) st = p_apx_sync(ctx, &call);
  if (st == APX_OK && device) st = p_apx_tensor_copy(ctx, &ho, &o, NULL);
  if (device) {
    p_apx_tensor_free(ctx, &f), p_apx_tensor_free(ctx, &ix), p_apx_tensor_free(ctx, &o);
  }
  if (st != APX_OK) {
    fprintf(stderr, "FAIL: backend %s: tilepack: %s: %s\n", b->name, p_apx_status_name(st),
            p_apx_last_error());
    return 0;
  }
  /* tile 3 of a 2x2 grid: rows 2-3, columns 2-3; then tile 0 */
  for (int k = 0; k < 2; k++) {
    int ty = ids[k] / 2, tx = ids[k] % 2;
    for (int c = 0; c < 2; c++)
      for (int dy = 0; dy < 2; dy++)
        for (int dx = 0; dx < 2; dx++) {
          float want = features[(c * 4 + ty * 2 + dy) * 4 + tx * 2 + dx];
          float got = packed[((k * 2 + c) * 2 + dy) * 2 + dx];
          if (got != want) {
            fprintf(stderr, "FAIL: backend %s: packed[%d][%d][%d][%d] = [%g], expected %g\n",
                    b->name, k, c, dy, dx, (double)got, (double)want);
            return 0;
          }
        }
  }
  return 1;
}

int main(void) {
  const char *builddir = getenv("APEXX_BUILDDIR");
  if (!builddir) {
    fprintf(stderr, "FAIL: run under make check (APEXX_BUILDDIR unset)\n");
    return 1;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/libapexx/.libs/libapexx.so", builddir);
  lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "FAIL: dlopen %s: %s\n", path, dlerror());
    return 1;
  }
  if (dlsym(RTLD_DEFAULT, "apx_open")) {
    fprintf(stderr, "FAIL: apx_open is globally visible: the test must not link libapexx\n");
    return 1;
  }
  int ok = load((void **)&p_apx_open, "apx_open") & load((void **)&p_apx_close, "apx_close") &
           load((void **)&p_apx_backend_count, "apx_backend_count") &
           load((void **)&p_apx_backend_info, "apx_backend_info") &
           load((void **)&p_apx_last_error, "apx_last_error") &
           load((void **)&p_apx_status_name, "apx_status_name") &
           load((void **)&p_apx_tilepack, "apx_tilepack") &
           load((void **)&p_apx_tensor_alloc, "apx_tensor_alloc") &
           load((void **)&p_apx_tensor_free, "apx_tensor_free") &
           load((void **)&p_apx_tensor_copy, "apx_tensor_copy") &
           load((void **)&p_apx_sync, "apx_sync");
  if (!ok) return 1;
  apx_context *ctx = NULL;
  apx_status st = p_apx_open(&ctx, NULL);
  if (st != APX_OK) {
    fprintf(stderr, "FAIL: apx_open: %s: %s\n", p_apx_status_name(st), p_apx_last_error());
    return 1;
  }
  int failures = 0, ran = 0;
  for (int i = 0; i < p_apx_backend_count(ctx); i++) {
    struct apx_backend_info b;
    p_apx_backend_info(ctx, i, &b);
    if (b.state == APX_BACKEND_OK) {
      if (run_tilepack(ctx, &b)) {
        printf("ok: backend %s loaded with RTLD_LOCAL and ran tilepack\n", b.name);
        ran++;
      } else {
        failures++;
      }
      continue;
    }
    printf("backend %s: %s: %s\n", b.name, b.state == APX_BACKEND_UNAVAILABLE ? "unavailable"
                                           : b.state == APX_BACKEND_NOT_FOUND  ? "not_found"
                                           : b.state == APX_BACKEND_DISABLED   ? "disabled"
                                                                               : "not loaded",
           b.reason);
    if (strstr(b.reason, "undefined symbol")) {
      fprintf(stderr, "FAIL: backend %s needs a symbol it does not link: %s\n", b.name, b.reason);
      failures++;
    }
  }
  p_apx_close(ctx);
  dlclose(lib);
  if (ran == 0) {
    fprintf(stderr, "FAIL: no backend ran (the cpu backend must)\n");
    failures++;
  }
  printf("%d passed, %d failed\n", ran, failures);
  return failures ? 1 : 0;
}
