/* SPDX-License-Identifier: Apache-2.0 */
/* Fault injection (docs/reliability.md): malloc, calloc, realloc,
 * aligned_alloc, posix_memalign and memalign are interposed and the Nth
 * allocation of the test's own thread fails, for every N until a run
 * completes without reaching N, across apx_open, every op's call (the
 * validation suites' valid case of each op), the tensor helpers and
 * apx_ff_weights_load / _seeded. Each failed run must return APX_OK or an
 * error with a message (APX_ERR_NO_MEMORY where an allocation of the core
 * failed), free every block it allocated (the interposer keeps the set of
 * blocks the call allocated and frees not freed again), and the context
 * must still give the reference result afterwards.
 * Skipped under sanitizers and valgrind, which own the allocator. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <link.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"
#include "test_validate_common.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FAULTS_UNAVAILABLE 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FAULTS_UNAVAILABLE 1
#endif
#endif

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static __thread long countdown; /* 0: off; else the allocation that fails */
static __thread int fault_hit;
static __thread int tracking;   /* this thread's allocations join the live set */
static int interposed;          /* set by any call of the interposer */

/* The live set: blocks allocated by the tracking thread and not freed
 * since (by any thread), with their sizes; open addressing, a tombstone
 * for a freed slot. Guarded by a spin lock (no allocation inside). */
#define LIVE_SLOTS (1 << 15)
#define LIVE_GONE ((void *)1)
static void *live_ptr[LIVE_SLOTS];
static size_t live_size[LIVE_SLOTS];
static long live_count, live_lost; /* blocks in the set; blocks the full set dropped */
static int live_lock, live_active;

static size_t live_hash(const void *p) {
  return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15u) & (LIVE_SLOTS - 1);
}
static void live_acquire(void) {
  while (__atomic_exchange_n(&live_lock, 1, __ATOMIC_ACQUIRE)) {
  }
}
static void live_release(void) { __atomic_store_n(&live_lock, 0, __ATOMIC_RELEASE); }

__attribute__((unused)) static void live_add(void *p, size_t n) {
  if (!p || !tracking) return;
  live_acquire();
  size_t i = live_hash(p);
  for (size_t probe = 0; probe < LIVE_SLOTS; probe++, i = (i + 1) & (LIVE_SLOTS - 1))
    if (live_ptr[i] == NULL || live_ptr[i] == LIVE_GONE) {
      live_ptr[i] = p;
      live_size[i] = n;
      live_count++;
      live_release();
      return;
    }
  live_lost++;
  live_release();
}
__attribute__((unused)) static void live_remove(void *p) {
  if (!p || !__atomic_load_n(&live_active, __ATOMIC_RELAXED)) return;
  live_acquire();
  size_t i = live_hash(p);
  for (size_t probe = 0; probe < LIVE_SLOTS && live_ptr[i]; probe++, i = (i + 1) & (LIVE_SLOTS - 1))
    if (live_ptr[i] == p) {
      live_ptr[i] = LIVE_GONE;
      live_count--;
      break;
    }
  live_release();
}

/* libgomp ends the process when an allocation fails (gomp_fatal): its
 * allocations are never failed. Neither its allocations nor the dynamic
 * linker's are tracked: libgomp's thread pool lives for the process, and
 * the linker keeps each name a loaded module was opened by (the core opens
 * modules by a fresh /proc/self/fd name, docs/reliability.md). */
static uintptr_t gomp_lo, gomp_hi, ldso_lo, ldso_hi;

static void object_range(struct dl_phdr_info *info, uintptr_t *lo_out, uintptr_t *hi_out) {
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_LOAD) {
      uintptr_t lo = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
      uintptr_t hi = lo + info->dlpi_phdr[i].p_memsz;
      if (!*lo_out || lo < *lo_out) *lo_out = lo;
      if (hi > *hi_out) *hi_out = hi;
    }
}

static int find_objects(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  (void)data;
  if (!info->dlpi_name) return 0;
  if (strstr(info->dlpi_name, "libgomp")) object_range(info, &gomp_lo, &gomp_hi);
  if (strstr(info->dlpi_name, "ld-linux")) object_range(info, &ldso_lo, &ldso_hi);
  return 0;
}

__attribute__((unused)) static int fail_now_from(uintptr_t caller) {
  interposed = 1;
  if (caller >= gomp_lo && caller < gomp_hi) return 0;
  if (countdown > 0 && --countdown == 0) {
    fault_hit = 1;
    errno = ENOMEM;
    if (getenv("FAULTS_TRACE")) {
      void *frames[32];
      backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
    }
    return 1;
  }
  return 0;
}

#ifndef FAULTS_UNAVAILABLE
#define CALLER ((uintptr_t)__builtin_return_address(0))
#define TRACKED(p, n)                                                                  \
  ((caller >= gomp_lo && caller < gomp_hi) || (caller >= ldso_lo && caller < ldso_hi)     \
       ? (void)0                                                                          \
       : live_add(p, n))
void *malloc(size_t n) {
  uintptr_t caller = CALLER;
  if (fail_now_from(caller)) return NULL;
  void *p = __libc_malloc(n);
  TRACKED(p, n);
  return p;
}
void *calloc(size_t n, size_t s) {
  uintptr_t caller = CALLER;
  if (fail_now_from(caller)) return NULL;
  void *p = __libc_calloc(n, s);
  TRACKED(p, n * s);
  return p;
}
void *realloc(void *old, size_t n) {
  uintptr_t caller = CALLER;
  if (fail_now_from(caller)) return NULL;
  void *p = __libc_realloc(old, n);
  if (p || n == 0) live_remove(old);
  TRACKED(p, n);
  return p;
}
void *aligned_alloc(size_t a, size_t n) {
  uintptr_t caller = CALLER;
  if (fail_now_from(caller)) return NULL;
  void *p = __libc_memalign(a, n);
  TRACKED(p, n);
  return p;
}
void *memalign(size_t a, size_t n) {
  uintptr_t caller = CALLER;
  if (fail_now_from(caller)) return NULL;
  void *p = __libc_memalign(a, n);
  TRACKED(p, n);
  return p;
}
int posix_memalign(void **out, size_t a, size_t n) {
  uintptr_t caller = CALLER;
  if (fail_now_from(caller)) return 12; /* ENOMEM */
  void *p = __libc_memalign(a, n);
  if (!p) return 12;
  TRACKED(p, n);
  *out = p;
  return 0;
}
void free(void *p) {
  live_remove(p);
  __libc_free(p);
}
#endif

static void need_interposer(void) {
#ifdef FAULTS_UNAVAILABLE
  printf("skipped: sanitizers own the allocator\n");
  exit(77);
#else
  free(malloc(1));
  if (!interposed) { /* valgrind replaces malloc in the executable too */
    printf("skipped: the allocator is replaced (valgrind)\n");
    exit(77);
  }
#endif
}

/* Start the live set: this thread's allocations from now on join it. */
static void track_begin(void) {
  live_acquire();
  memset(live_ptr, 0, sizeof live_ptr);
  live_count = live_lost = 0;
  __atomic_store_n(&live_active, 1, __ATOMIC_RELAXED);
  live_release();
  tracking = 1;
}
/* Stop adding; what the set still holds was allocated and not freed. */
static void track_pause(void) { tracking = 0; }
static void track_end(void) {
  tracking = 0;
  __atomic_store_n(&live_active, 0, __ATOMIC_RELAXED);
}

/* No block left from the tracked run: fails naming the blocks. */
static void expect_no_leak(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void expect_no_leak(const char *fmt, ...) {
  track_end();
  ck_assert_msg(live_lost == 0, "the live set overflowed");
  if (live_count == 0) return;
  char what[200], sizes[200] = "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  size_t used = 0, bytes = 0;
  for (size_t i = 0; i < LIVE_SLOTS; i++)
    if (live_ptr[i] && live_ptr[i] != LIVE_GONE) {
      bytes += live_size[i];
      if (used + 24 < sizeof sizes) used += (size_t)snprintf(sizes + used, sizeof sizes - used,
                                                            " %zu", live_size[i]);
    }
  ck_abort_msg("%s: %ld blocks (%zu bytes) not freed, sizes:%s", what, live_count, bytes, sizes);
}

/* Arm: the nth allocation from now on this thread fails. */
static void arm(long n) {
  if (!gomp_hi || !ldso_hi) dl_iterate_phdr(find_objects, NULL); /* once the backend has loaded them */
  fault_hit = 0;
  countdown = n;
}
static int disarm(void) {
  countdown = 0;
  return fault_hit;
}

/* APX_OK, or APX_ERR_NO_MEMORY with a message. */
static void expect_clean(apx_status st, const char *what, long n) {
  if (st == APX_OK) return;
  const char *msg = apx_last_error();
  ck_assert_msg(msg && msg[0], "%s, allocation %ld failing: %s with no message", what, n,
                apx_status_name(st));
  ck_assert_msg(st == APX_ERR_NO_MEMORY, "%s, allocation %ld failing: %s (%s), not no_memory",
                what, n, apx_status_name(st), msg);
}

/* ---- apx_open / apx_close ---- */
START_TEST(open_survives_every_failing_allocation) {
  apx_context *ctx = tu_open(); /* warm: modules mapped, lazy state made */
  apx_close(ctx);
  long n = 1;
  for (;; n++) {
    int hit = 0;
    apx_status st = APX_OK;
    for (int pass = 0; pass < 2; pass++) { /* the first makes lazy state */
      if (pass == 1) track_begin();
      ctx = NULL;
      arm(n);
      st = apx_open(&ctx, NULL);
      hit = disarm();
      if (st == APX_OK && pass == 0) apx_close(ctx);
    }
    /* a dlopen that failed for want of memory leaves its message in
     * glibc's per-thread dlerror buffer until the next dlerror() call:
     * glibc's, not apexx's */
    (void)dlerror();
    track_pause();
    expect_clean(st, "apx_open", n);
    if (st == APX_OK) {
      ck_assert_ptr_nonnull(ctx);
      apx_close(ctx);
    } else {
      ck_assert_ptr_null(ctx);
    }
    expect_no_leak("apx_open with allocation %ld failing, then apx_close", n);
    if (!hit) break;
  }
  printf("apx_open: %ld allocations, each failed once\n", n - 1);
  ck_assert_int_gt(n, 1);
}
END_TEST

/* ---- every op ---- */
static void op_case(apx_op_id op) {
  vt_case c;
  vt_make(&c, op, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_call call = {"cpu", NULL};
  /* reference outputs */
  apx_tensor ref[VT_MAX_SLOTS];
  ck_assert_int_eq(vt_call(op, &c.args, &call), APX_OK);
  for (int i = 0; i < c.count; i++)
    if (c.is_output[i]) ref[i] = tu_clone(&c.t[i]);
  long n = 1;
  for (;; n++) {
    int hit = 0;
    apx_status st = APX_OK;
    for (int pass = 0; pass < 2; pass++) { /* the first makes lazy state */
      if (pass == 1) track_begin();
      arm(n);
      st = vt_call(op, &c.args, &call);
      hit = disarm();
    }
    expect_no_leak("%s with allocation %ld failing", apx_op_name(op), n);
    expect_clean(st, apx_op_name(op), n);
    /* the context still works: the reference result again */
    for (int i = 0; i < c.count; i++)
      if (c.is_output[i]) tu_poison(&c.t[i]);
    ck_assert_int_eq(vt_call(op, &c.args, &call), APX_OK);
    for (int i = 0; i < c.count; i++)
      if (c.is_output[i])
        ck_assert_msg(tu_bytes_equal(&c.t[i], &ref[i]), "%s: %s differs after allocation %ld failed",
                      apx_op_name(op), c.names[i], n);
    if (!hit) break;
  }
  printf("%s: %ld allocations, each failed once\n", apx_op_name(op), n - 1);
  for (int i = 0; i < c.count; i++)
    if (c.is_output[i]) tu_free(&ref[i]);
  vt_free(&c);
}

START_TEST(every_op_survives_every_failing_allocation) {
  for (int op = 0; op < APX_OP_COUNT; op++) op_case((apx_op_id)op);
  /* tile_order allocates its sort entries */
  int64_t ids_data[6] = {5, 0, 3, 1, 4, 2}, out_data[6];
  apx_tensor ids = apx_tensor_host(ids_data, APX_DTYPE_I64, 1, (int64_t[]){6});
  apx_tensor out = apx_tensor_host(out_data, APX_DTYPE_I64, 1, (int64_t[]){6});
  apx_tile_order_args a = {&ids, 2, 3, APX_ORDER_HILBERT, &out};
  arm(1);
  apx_status st = apx_tile_order(vt_ctx, &a);
  ck_assert(disarm());
  ck_assert_int_eq(st, APX_ERR_NO_MEMORY);
  ck_assert_int_eq(apx_tile_order(vt_ctx, &a), APX_OK);
}
END_TEST

/* ---- tensor helpers and weights ---- */
START_TEST(helpers_and_weights_survive_every_failing_allocation) {
  int64_t shape[2] = {3, 5};
  apx_tensor t;
  arm(1);
  apx_status st = apx_tensor_alloc(vt_ctx, APX_DEVICE_HOST, 0, APX_DTYPE_F32, 2, shape, &t);
  ck_assert(disarm());
  ck_assert_int_eq(st, APX_ERR_NO_MEMORY);
  ck_assert_int_eq(apx_tensor_alloc(vt_ctx, APX_DEVICE_HOST, 0, APX_DTYPE_F32, 2, shape, &t),
                   APX_OK);
  apx_tensor src = tu_host2(APX_DTYPE_F32, 3, 5);
  arm(1);
  st = apx_tensor_copy(vt_ctx, &t, &src, NULL); /* host to host: no allocation */
  disarm();
  ck_assert_int_eq(st, APX_OK);
  ck_assert(tu_bytes_equal(&t, &src));
  ck_assert_int_eq(apx_tensor_free(vt_ctx, &t), APX_OK);
  tu_free(&src);

  char path[] = "/tmp/apexx-faults-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  apx_ff_weights *w = NULL;
  ck_assert_int_eq(apx_ff_weights_seeded(vt_ctx, 4, 3, &w), APX_OK);
  ck_assert_int_eq(apx_ff_weights_save(vt_ctx, w, path), APX_OK);
  apx_ff_weights_free(vt_ctx, w);
  const char *what[2] = {"apx_ff_weights_load", "apx_ff_weights_seeded"};
  for (int kind = 0; kind < 2; kind++) {
    long n = 1;
    for (;; n++) {
      int hit = 0;
      for (int pass = 0; pass < 2; pass++) { /* the first makes lazy state */
        if (pass == 1) track_begin();
        w = NULL;
        arm(n);
        st = kind == 0 ? apx_ff_weights_load(vt_ctx, path, &w)
                       : apx_ff_weights_seeded(vt_ctx, 4, 3, &w);
        hit = disarm();
        if (st == APX_OK && pass == 0) apx_ff_weights_free(vt_ctx, w);
      }
      track_pause();
      expect_clean(st, what[kind], n);
      if (st == APX_OK) apx_ff_weights_free(vt_ctx, w);
      expect_no_leak("%s with allocation %ld failing", what[kind], n);
      if (!hit) break;
    }
    printf("%s: %ld allocations, each failed once\n", what[kind], n - 1);
  }
  unlink(path);
}
END_TEST

/* ---- writing weights, timers, explain ---- */
static char *read_all(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc(n > 0 ? (size_t)n : 1);
  *size = fread(buf, 1, n > 0 ? (size_t)n : 0, f);
  fclose(f);
  return buf;
}

static int dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d)) != NULL;)
    n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

START_TEST(save_timer_explain_survive_every_failing_allocation) {
  /* apx_ff_weights_save over an older file: it holds the old bytes or
   * the new ones, and no temporary file is left beside it */
  char dir[] = "/tmp/apexx-faults-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[64];
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  apx_ff_weights *w_old = NULL, *w_new = NULL;
  ck_assert_int_eq(apx_ff_weights_seeded(vt_ctx, 4, 3, &w_old), APX_OK);
  ck_assert_int_eq(apx_ff_weights_seeded(vt_ctx, 4, 5, &w_new), APX_OK);
  size_t old_size, new_size;
  ck_assert_int_eq(apx_ff_weights_save(vt_ctx, w_new, path), APX_OK);
  char *new_bytes = read_all(path, &new_size);
  ck_assert_int_eq(apx_ff_weights_save(vt_ctx, w_old, path), APX_OK);
  char *old_bytes = read_all(path, &old_size);
  ck_assert(old_size != new_size || memcmp(old_bytes, new_bytes, old_size) != 0);
  long n = 1;
  for (;; n++) {
    int hit = 0;
    apx_status st = APX_OK;
    for (int pass = 0; pass < 2; pass++) {
      ck_assert_int_eq(apx_ff_weights_save(vt_ctx, w_old, path), APX_OK);
      if (pass == 1) track_begin();
      arm(n);
      st = apx_ff_weights_save(vt_ctx, w_new, path);
      hit = disarm();
    }
    expect_no_leak("apx_ff_weights_save with allocation %ld failing", n);
    expect_clean(st, "apx_ff_weights_save", n);
    size_t size;
    char *bytes = read_all(path, &size);
    ck_assert_ptr_nonnull(bytes);
    int is_new = size == new_size && memcmp(bytes, new_bytes, size) == 0;
    int is_old = size == old_size && memcmp(bytes, old_bytes, size) == 0;
    ck_assert_msg(st == APX_OK ? is_new : is_old,
                  "apx_ff_weights_save with allocation %ld failing (%s): the file holds "
                  "neither the old weights nor the new", n, apx_status_name(st));
    ck_assert_int_eq(dir_entries(dir), 1);
    free(bytes);
    if (!hit) break;
  }
  printf("apx_ff_weights_save: %ld allocations, each failed once\n", n - 1);
  unlink(path);
  rmdir(dir);
  free(old_bytes);
  free(new_bytes);
  apx_ff_weights_free(vt_ctx, w_old);
  apx_ff_weights_free(vt_ctx, w_new);

  for (n = 1;; n++) {
    int hit = 0;
    apx_status st = APX_OK;
    apx_timer *t = NULL;
    for (int pass = 0; pass < 2; pass++) {
      if (pass == 1) track_begin();
      arm(n);
      st = apx_timer_begin(vt_ctx, "cpu", NULL, &t);
      hit = disarm();
      if (st == APX_OK) {
        double ms = -1;
        ck_assert_int_eq(apx_timer_end(vt_ctx, t, &ms), APX_OK);
        ck_assert(ms >= 0);
      }
    }
    expect_no_leak("apx_timer_begin with allocation %ld failing", n);
    expect_clean(st, "apx_timer_begin", n);
    if (!hit) break;
  }
  printf("apx_timer_begin/end: %ld allocations, each failed once\n", n - 1);

  for (int op = 0; op < APX_OP_COUNT; op++) {
    vt_case c;
    vt_make(&c, (apx_op_id)op, APX_DTYPE_F32, APX_DTYPE_I64);
    apx_call call = {"cpu", NULL};
    for (n = 1;; n++) {
      int hit = 0;
      apx_status st = APX_OK;
      apx_explanation ex;
      for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) track_begin();
        arm(n);
        st = apx_explain(vt_ctx, (apx_op_id)op, &c.args, &call, &ex);
        hit = disarm();
      }
      expect_no_leak("apx_explain(%s) with allocation %ld failing", apx_op_name((apx_op_id)op), n);
      expect_clean(st, "apx_explain", n);
      if (st == APX_OK) ck_assert_str_eq(ex.backend, "cpu");
      if (!hit) break;
    }
    vt_free(&c);
  }
}
END_TEST

/* ---- apexx-bench's report writing (bench/report_json.c compiled in) ---- */
static char *text_of(const char *path) {
  size_t size;
  char *bytes = read_all(path, &size);
  if (bytes) bytes[size ? size - 1 : 0] = '\0'; /* the texts end in a newline */
  return bytes;
}

START_TEST(report_writing_survives_every_failing_allocation) {
  /* the JSON and Markdown pair as apexx-bench writes it (bench/main.c):
   * both temporaries, then both renames */
  char dir[] = "/tmp/apexx-faults-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char json_path[64], md_path[64];
  snprintf(json_path, sizeof json_path, "%s/r.json", dir);
  snprintf(md_path, sizeof md_path, "%s/r.md", dir);
  cJSON *report = cJSON_CreateObject();
  cJSON_AddStringToObject(report, "status", "ok");
  cJSON_AddNumberToObject(report, "p50_ms", 1.5);
  char err[512];
  long n = 1;
  for (;; n++) {
    int hit = 0, rc = 0, printed = 0;
    for (int pass = 0; pass < 2; pass++) {
      ck_assert_int_eq(bench_write_atomic(json_path, "{\"old\": 1}\n", err, sizeof err), 0);
      ck_assert_int_eq(bench_write_atomic(md_path, "old\n", err, sizeof err), 0);
      if (pass == 1) track_begin();
      arm(n);
      err[0] = '\0';
      char *json = bench_report_print(report);
      printed = json != NULL;
      bench_pending_file pj = {0}, pm = {0};
      rc = !json ? -1 : bench_write_temp(json_path, json, &pj, err, sizeof err);
      if (rc == 0 && bench_write_temp(md_path, "new\n", &pm, err, sizeof err) != 0) {
        bench_discard_temp(&pj);
        rc = -1;
      }
      if (rc == 0 && bench_commit_temp(&pj, err, sizeof err) != 0) {
        bench_discard_temp(&pm);
        rc = -1;
      }
      if (rc == 0 && bench_commit_temp(&pm, err, sizeof err) != 0) rc = -2;
      hit = disarm();
      free(json);
    }
    expect_no_leak("report writing with allocation %ld failing", n);
    char *j = text_of(json_path), *m = text_of(md_path);
    ck_assert_ptr_nonnull(j);
    ck_assert_ptr_nonnull(m);
    int json_new = strstr(j, "p50_ms") != NULL, md_new = strcmp(m, "new") == 0;
    ck_assert_msg(json_new || strcmp(j, "{\"old\": 1}") == 0, "allocation %ld: JSON [%s]", n, j);
    ck_assert_msg(md_new || strcmp(m, "old") == 0, "allocation %ld: Markdown [%s]", n, m);
    ck_assert_msg(rc == 0 ? json_new && md_new : !md_new,
                  "report writing with allocation %ld failing (rc %d, [%s]): JSON %s, Markdown %s",
                  n, rc, err, json_new ? "new" : "old", md_new ? "new" : "old");
    if (rc != 0 && printed) ck_assert_msg(err[0], "report writing, allocation %ld: no message", n);
    ck_assert_int_eq(dir_entries(dir), 2); /* no temporary left */
    free(j);
    free(m);
    if (!hit) break;
  }
  printf("report JSON and Markdown pair: %ld allocations, each failed once\n", n - 1);
  cJSON_Delete(report);
  unlink(json_path);
  unlink(md_path);
  rmdir(dir);
}
END_TEST

/* The configuration every context of this suite reads: the cpu backend
 * alone (the allocations counted are the core's and the cpu backend's; a
 * GPU runtime's own caches are not apexx's to account). */
static char cpu_only_ini[] = "/tmp/apexx-test-faults-XXXXXX";
static pid_t cpu_only_ini_owner;
/* only the process that wrote it (Check's forked tests exit too) */
static void remove_cpu_only_ini(void) {
  if (getpid() == cpu_only_ini_owner) unlink(cpu_only_ini);
}

int main(void) {
  int fd = mkstemp(cpu_only_ini);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    fprintf(stderr, "test_faults: cannot write %s\n", cpu_only_ini);
    return EXIT_FAILURE;
  }
  fputs("[apexx]\norder = cpu\n[backend cpu]\nlibrary = apexx-cpu.so\n", f);
  fclose(f);
  cpu_only_ini_owner = getpid();
  atexit(remove_cpu_only_ini);
  setenv("APEXX_CONFIG", cpu_only_ini, 1);
  need_interposer();
  Suite *s = suite_create("faults");
  TCase *tc = tcase_create("faults");
  tcase_add_checked_fixture(tc, vt_setup, vt_teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, open_survives_every_failing_allocation);
  tcase_add_test(tc, every_op_survives_every_failing_allocation);
  tcase_add_test(tc, helpers_and_weights_survive_every_failing_allocation);
  tcase_add_test(tc, save_timer_explain_survive_every_failing_allocation);
  tcase_add_test(tc, report_writing_survives_every_failing_allocation);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
