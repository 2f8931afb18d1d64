/* Fault injection (docs/reliability.md): malloc, calloc, realloc,
 * aligned_alloc, posix_memalign and memalign are interposed and the Nth
 * allocation of the test's own thread fails, for every N until a run
 * completes without reaching N, across apx_open, every op's call (the
 * validation suites' valid case of each op), the tensor helpers and
 * apx_ff_weights_load / _seeded. Each failed run must return APX_OK or an
 * error with a message (APX_ERR_NO_MEMORY where an allocation of the core
 * failed), leave the heap as it found it (glibc mallinfo2: bytes in use),
 * and the context must still give the reference result afterwards.
 * Skipped under sanitizers and valgrind, which own the allocator. */
#define _GNU_SOURCE
#include <check.h>
#include <execinfo.h>
#include <link.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static __thread long countdown; /* 0: off; else the allocation that fails */
static __thread int fault_hit;
static int interposed;          /* set by any call of the interposer */

/* libgomp ends the process when an allocation fails (gomp_fatal): its
 * allocations are never failed. */
static uintptr_t gomp_lo, gomp_hi;

static int find_gomp(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  (void)data;
  if (!info->dlpi_name || !strstr(info->dlpi_name, "libgomp")) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_LOAD) {
      uintptr_t lo = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
      uintptr_t hi = lo + info->dlpi_phdr[i].p_memsz;
      if (!gomp_lo || lo < gomp_lo) gomp_lo = lo;
      if (hi > gomp_hi) gomp_hi = hi;
    }
  return 1;
}

__attribute__((unused)) static int fail_now_from(uintptr_t caller) {
  interposed = 1;
  if (caller >= gomp_lo && caller < gomp_hi) return 0;
  if (countdown > 0 && --countdown == 0) {
    fault_hit = 1;
    if (getenv("FAULTS_TRACE")) {
      void *frames[32];
      backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
    }
    return 1;
  }
  return 0;
}
#define fail_now() fail_now_from((uintptr_t)__builtin_return_address(0))

#ifndef FAULTS_UNAVAILABLE
void *malloc(size_t n) { return fail_now() ? NULL : __libc_malloc(n); }
void *calloc(size_t n, size_t s) { return fail_now() ? NULL : __libc_calloc(n, s); }
void *realloc(void *p, size_t n) { return fail_now() ? NULL : __libc_realloc(p, n); }
void *aligned_alloc(size_t a, size_t n) { return fail_now() ? NULL : __libc_memalign(a, n); }
void *memalign(size_t a, size_t n) { return fail_now() ? NULL : __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
  if (fail_now()) return 12; /* ENOMEM */
  void *p = __libc_memalign(a, n);
  if (!p) return 12;
  *out = p;
  return 0;
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

static size_t in_use(void) { return mallinfo2().uordblks; }

/* Growth of the heap across a repeated failing run, printed (not asserted:
 * glibc's bytes-in-use figure moves by tens of bytes between identical
 * runs, so leaks are judged by the valgrind and LeakSanitizer runs). */
static long growth_reports;
static void note_growth(int grew, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_growth(int grew, const char *fmt, ...) {
  if (!grew || growth_reports++ >= 20) return;
  va_list ap;
  va_start(ap, fmt);
  printf("heap grew: ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
}

/* Arm: the nth allocation from now on this thread fails. */
static void arm(long n) {
  if (!gomp_hi) dl_iterate_phdr(find_gomp, NULL); /* once the backend has loaded it */
  fault_hit = 0;
  countdown = n;
}
static int disarm(void) {
  countdown = 0;
  return fault_hit;
}

static void expect_clean(apx_status st, const char *what, long n) {
  if (st == APX_OK) return;
  const char *msg = apx_last_error();
  ck_assert_msg(msg && msg[0], "%s, allocation %ld failing: %s with no message", what, n,
                apx_status_name(st));
}

/* ---- apx_open / apx_close ---- */
START_TEST(open_survives_every_failing_allocation) {
  apx_context *ctx = tu_open(); /* warm: modules mapped, lazy state made */
  apx_close(ctx);
  long n = 1;
  for (;; n++) {
    size_t before = 0;
    int hit = 0;
    apx_status st = APX_OK;
    for (int pass = 0; pass < 2; pass++) { /* the first makes lazy state */
      if (pass == 1) before = in_use();
      ctx = NULL;
      arm(n);
      st = apx_open(&ctx, NULL);
      hit = disarm();
      if (st == APX_OK && pass == 0) apx_close(ctx);
    }
    expect_clean(st, "apx_open", n);
    if (st == APX_OK) {
      ck_assert_ptr_nonnull(ctx);
      apx_close(ctx);
    } else {
      ck_assert_ptr_null(ctx);
    }
    note_growth(in_use() > before, "apx_open with allocation %ld failing grew %zu bytes", n,
                in_use() - before);
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
    size_t before = 0;
    int hit = 0;
    apx_status st = APX_OK;
    for (int pass = 0; pass < 2; pass++) { /* the first makes lazy state */
      if (pass == 1) before = in_use();
      arm(n);
      st = vt_call(op, &c.args, &call);
      hit = disarm();
    }
    expect_clean(st, apx_op_name(op), n);
    note_growth(in_use() > before, "%s with allocation %ld failing grew %zu bytes",
                  apx_op_name(op), n, in_use() - before);
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
      size_t before = 0;
      int hit = 0;
      for (int pass = 0; pass < 2; pass++) { /* the first makes lazy state */
        if (pass == 1) before = in_use();
        w = NULL;
        arm(n);
        st = kind == 0 ? apx_ff_weights_load(vt_ctx, path, &w)
                       : apx_ff_weights_seeded(vt_ctx, 4, 3, &w);
        hit = disarm();
        if (st == APX_OK && pass == 0) apx_ff_weights_free(vt_ctx, w);
      }
      expect_clean(st, what[kind], n);
      if (st == APX_OK) apx_ff_weights_free(vt_ctx, w);
      note_growth(in_use() > before, "%s with allocation %ld failing grew %zu bytes",
                    what[kind], n, in_use() - before);
      if (!hit) break;
    }
    printf("%s: %ld allocations, each failed once\n", what[kind], n - 1);
  }
  unlink(path);
}
END_TEST

int main(void) {
  need_interposer();
  Suite *s = suite_create("faults");
  TCase *tc = tcase_create("faults");
  tcase_add_checked_fixture(tc, vt_setup, vt_teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, open_survives_every_failing_allocation);
  tcase_add_test(tc, every_op_survives_every_failing_allocation);
  tcase_add_test(tc, helpers_and_weights_survive_every_failing_allocation);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
