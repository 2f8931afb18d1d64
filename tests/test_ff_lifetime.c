/* SPDX-License-Identifier: Apache-2.0 */
/* FF weights handles shared between threads and contexts (libapexx/ff/weights.c,
 * docs/ff_weights.md, Lifetime; issue 30 items 1, 2, 9, 13): a handle is
 * found among its context's open handles before it is read, so a freed
 * one or another context's is refused without being touched; a free waits
 * for the calls using the handle; apx_close waits for a load in progress;
 * error positions stay right under concurrent loads. The stress case runs
 * under ASan and ThreadSanitizer in those trees. */
#define _GNU_SOURCE
#include <check.h>
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define ck_assert_contains(hay, needle)                                                            \
  ck_assert_msg(strstr((hay), (needle)) != NULL, "expected [%s] in [%s]", (needle), (hay))

static const apx_call cpu_call = {"cpu", NULL};

/* ---- pread, held on request: the test stops a load inside the library ---- */

static atomic_int hold_next_read; /* 1: the next pread waits for read_release */
static sem_t read_entered, read_release;

ssize_t pread(int fd, void *buf, size_t count, off_t offset) {
  static ssize_t (*next_pread)(int, void *, size_t, off_t);
  if (!next_pread)
    *(void **)&next_pread = dlsym(RTLD_NEXT, "pread");
  if (atomic_exchange(&hold_next_read, 0)) {
    sem_post(&read_entered);
    while (sem_wait(&read_release) != 0)
      ;
  }
  return next_pread(fd, buf, count, offset);
}

/* ---- one small ff_infer call on the cpu backend ---- */

#define C 8
#define HW 32

typedef struct frame {
  apx_tensor dense, util, heavy, detail, alpha;
  apx_ff_infer_args args;
} frame;

static void frame_make(frame *f, uint64_t seed) {
  tu_rng r = {seed};
  f->dense = tu_host4(APX_DTYPE_F32, 1, C, HW, HW);
  f->util = tu_host2(APX_DTYPE_F32, 1, (HW / 16) * (HW / 16));
  f->heavy = tu_host4(APX_DTYPE_F32, 1, C, HW, HW);
  f->detail = tu_host4(APX_DTYPE_F32, 1, C, HW, HW);
  f->alpha = tu_host4(APX_DTYPE_F32, 1, 1, HW, HW);
  tu_fill_normal(&r, &f->dense);
  tu_fill_normal(&r, &f->util);
  apx_ff_infer_args a = APX_FF_INFER_ARGS_INIT;
  a.dense = &f->dense;
  a.utilities = &f->util;
  a.kmax_l0 = 4;
  a.kmax_l1 = 16;
  a.heavy = &f->heavy;
  a.detail = &f->detail;
  a.alpha = &f->alpha;
  f->args = a;
}

static void frame_free(frame *f) {
  tu_free(&f->dense);
  tu_free(&f->util);
  tu_free(&f->heavy);
  tu_free(&f->detail);
  tu_free(&f->alpha);
}

static apx_status frame_run(apx_context *ctx, frame *f, const apx_ff_weights *w) {
  f->args.weights = w;
  tu_poison(&f->heavy);
  return apx_ff_infer(ctx, &f->args, &cpu_call);
}

/* ---- item 9: another context's weights; freed weights ---- */

static char logged[1024];
static void keep_log(void *user, apx_log_level level, const char *message) {
  (void)user, (void)level;
  snprintf(logged, sizeof logged, "%s", message);
}

START_TEST(test_weights_of_another_context_are_refused) {
  apx_context *a = tu_open(), *b = tu_open();
  apx_ff_weights *w = NULL;
  ck_assert_int_eq(apx_ff_weights_seeded(a, C, 5, &w), APX_OK);
  frame f;
  frame_make(&f, tu_seed() + 1);
  ck_assert_int_eq(frame_run(b, &f, w), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "ff_infer: weights [");
  ck_assert_contains(apx_last_error(), "are not an open handle of this context");
  apx_explanation ex;
  ck_assert_int_eq(apx_explain(b, APX_OP_FF_INFER, &f.args, &cpu_call, &ex), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "are not an open handle of this context");
  ck_assert_int_eq(apx_ff_weights_save(b, w, "/nonexistent/x"), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "are not an open handle of this context");
  /* b leaves nothing in w's cache: a's calls and the free after b is
   * gone touch none of b's memory */
  apx_close(b);
  ck_assert_msg(frame_run(a, &f, w) == APX_OK, "%s", apx_last_error());
  ck_assert(!tu_is_poisoned(&f.heavy));
  apx_ff_weights_free(a, w);
  frame_free(&f);
  apx_close(a);
}
END_TEST

START_TEST(test_freed_weights_are_refused_untouched) {
  apx_context *ctx = tu_open();
  apx_set_log(ctx, keep_log, NULL);
  apx_ff_weights *w = NULL, *other = NULL;
  ck_assert_int_eq(apx_ff_weights_seeded(ctx, C, 5, &w), APX_OK);
  ck_assert_int_eq(apx_ff_weights_seeded(ctx, C, 6, &other), APX_OK);
  apx_ff_weights_free(ctx, w);
  frame f;
  frame_make(&f, tu_seed() + 2);
  if (w != other) { /* the allocator may hand w's address to a new handle */
    ck_assert_int_eq(frame_run(ctx, &f, w), APX_ERR_INVALID_ARG);
    ck_assert_contains(apx_last_error(), "are not an open handle of this context");
    ck_assert_int_eq(apx_ff_weights_save(ctx, w, "/nonexistent/x"), APX_ERR_INVALID_ARG);
    ck_assert_contains(apx_last_error(), "are not an open handle of this context");
    logged[0] = '\0';
    apx_ff_weights_free(ctx, w); /* twice: left alone, with a warning */
    ck_assert_contains(logged, "apx_ff_weights_free: weights [");
    ck_assert_contains(logged, "left alone");
  }
  ck_assert_int_eq(frame_run(ctx, &f, other), APX_OK);
  apx_ff_weights_free(ctx, other);
  frame_free(&f);
  apx_close(ctx);
}
END_TEST

/* ---- item 1: apx_close while a load is inside the library ---- */

typedef struct load_job {
  apx_context *ctx;
  const char *path;
  apx_status status;
  char message[1024];
  apx_ff_weights *w;
} load_job;

static void *load_thread(void *p) {
  load_job *j = p;
  j->status = apx_ff_weights_load(j->ctx, j->path, &j->w);
  snprintf(j->message, sizeof j->message, "%s", apx_last_error());
  return NULL;
}

static atomic_int close_returned;
static void *close_thread(void *p) {
  apx_close(p);
  atomic_store(&close_returned, 1);
  return NULL;
}

START_TEST(test_close_waits_for_a_load_in_progress) {
  char dir[] = "/tmp/apexx-fflife-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[64];
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  apx_context *ctx = tu_open();
  apx_ff_weights *w = NULL;
  ck_assert_int_eq(apx_ff_weights_seeded(ctx, C, 7, &w), APX_OK);
  ck_assert_int_eq(apx_ff_weights_save(ctx, w, path), APX_OK);
  apx_ff_weights_free(ctx, w);

  sem_init(&read_entered, 0, 0);
  sem_init(&read_release, 0, 0);
  atomic_store(&close_returned, 0);
  atomic_store(&hold_next_read, 1);
  load_job job = {ctx, path, APX_OK, "", NULL};
  pthread_t loader, closer;
  ck_assert_int_eq(pthread_create(&loader, NULL, load_thread, &job), 0);
  while (sem_wait(&read_entered) != 0)
    ;
  /* the load is inside apx_ff_weights_load, reading the file */
  ck_assert_int_eq(pthread_create(&closer, NULL, close_thread, ctx), 0);
  struct timespec pause = {0, 200 * 1000 * 1000};
  nanosleep(&pause, NULL);
  int returned_early = atomic_load(&close_returned);
  sem_post(&read_release);
  pthread_join(loader, NULL);
  pthread_join(closer, NULL);
  ck_assert_msg(!returned_early, "apx_close returned while a load was in progress");
  ck_assert_int_eq(job.status, APX_ERR_INVALID_ARG);
  ck_assert_contains(job.message, "apx_ff_weights_load: the context was closed during the call");
  ck_assert_ptr_null(job.w);
  sem_destroy(&read_entered);
  sem_destroy(&read_release);
  unlink(path);
  rmdir(dir);
}
END_TEST

/* ---- item 2: free while other threads run ff_infer with the handle ---- */

#define INFER_THREADS 3
#define ROUNDS 150

static apx_context *stress_ctx;
static _Atomic(apx_ff_weights *) current;
static apx_tensor reference_heavy;
static atomic_int replacing;

typedef struct infer_job {
  frame f;
  int ok, refused;
  char bad[512];
} infer_job;

static void *infer_thread(void *p) {
  infer_job *j = p;
  for (int round = 0; round < ROUNDS && !j->bad[0]; round++) {
    apx_status st = frame_run(stress_ctx, &j->f, atomic_load(&current));
    if (st == APX_OK && tu_bytes_equal(&j->f.heavy, &reference_heavy))
      j->ok++;
    else if (st == APX_ERR_INVALID_ARG && strstr(apx_last_error(), "not an open handle"))
      j->refused++;
    else
      snprintf(j->bad, sizeof j->bad, "round %d: %s: %s%s", round, apx_status_name(st),
               apx_last_error(), st == APX_OK ? " (heavy differs from the reference)" : "");
  }
  return NULL;
}

static void *replace_thread(void *p) {
  (void)p;
  int replaced = 0;
  while (atomic_load(&replacing)) {
    apx_ff_weights *fresh = NULL;
    ck_assert_int_eq(apx_ff_weights_seeded(stress_ctx, C, 11, &fresh), APX_OK);
    apx_ff_weights_free(stress_ctx, atomic_exchange(&current, fresh));
    replaced++;
  }
  return (void *)(intptr_t)replaced;
}

START_TEST(test_free_during_infer_stress) {
  stress_ctx = tu_open();
  apx_ff_weights *first = NULL;
  ck_assert_int_eq(apx_ff_weights_seeded(stress_ctx, C, 11, &first), APX_OK);
  atomic_store(&current, first);
  static infer_job jobs[INFER_THREADS];
  for (int t = 0; t < INFER_THREADS; t++) {
    memset(&jobs[t], 0, sizeof jobs[t]);
    frame_make(&jobs[t].f, tu_seed() + 3); /* the same inputs in every thread */
  }
  ck_assert_int_eq(frame_run(stress_ctx, &jobs[0].f, first), APX_OK);
  reference_heavy = tu_clone(&jobs[0].f.heavy);

  atomic_store(&replacing, 1);
  pthread_t infer[INFER_THREADS], replacer;
  ck_assert_int_eq(pthread_create(&replacer, NULL, replace_thread, NULL), 0);
  for (int t = 0; t < INFER_THREADS; t++)
    ck_assert_int_eq(pthread_create(&infer[t], NULL, infer_thread, &jobs[t]), 0);
  int ok = 0, refused = 0;
  for (int t = 0; t < INFER_THREADS; t++) {
    pthread_join(infer[t], NULL);
    ok += jobs[t].ok;
    refused += jobs[t].refused;
  }
  atomic_store(&replacing, 0);
  void *replaced;
  pthread_join(replacer, &replaced);
  printf("# %d calls: %d ran, %d refused a freed handle; %d frees\n", INFER_THREADS * ROUNDS, ok,
         refused, (int)(intptr_t)replaced);
  for (int t = 0; t < INFER_THREADS; t++)
    ck_assert_msg(!jobs[t].bad[0], "thread %d: %s", t, jobs[t].bad);
  ck_assert_int_eq(ok + refused, INFER_THREADS * ROUNDS);
  ck_assert_int_gt(ok, 0);
  apx_ff_weights_free(stress_ctx, atomic_load(&current));
  for (int t = 0; t < INFER_THREADS; t++)
    frame_free(&jobs[t].f);
  tu_free(&reference_heavy);
  apx_close(stress_ctx);
}
END_TEST

/* ---- item 13: error positions under concurrent loads ---- */

#define LOAD_THREADS 4
#define LOADS 1500

typedef struct position_job {
  const char *path;
  long want;
  int wrong;
  char first_wrong[1024];
} position_job;

static apx_context *position_ctx;

static void *position_thread(void *p) {
  position_job *j = p;
  for (int i = 0; i < LOADS; i++) {
    apx_ff_weights *w = NULL;
    apx_status st = apx_ff_weights_load(position_ctx, j->path, &w);
    const char *msg = apx_last_error(), *at = strstr(msg, "byte ");
    long got = at ? strtol(at + 5, NULL, 10) : -1;
    if (st != APX_ERR_INVALID_ARG || got != j->want) {
      if (!j->wrong++)
        snprintf(j->first_wrong, sizeof j->first_wrong, "%s", msg);
    }
  }
  return NULL;
}

START_TEST(test_error_positions_under_concurrent_loads) {
  char dir[] = "/tmp/apexx-fflife-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  position_ctx = tu_open();
  static char paths[LOAD_THREADS][64];
  position_job jobs[LOAD_THREADS];
  for (int t = 0; t < LOAD_THREADS; t++) {
    /* thread t's header: {"a":[ then 7*t + 1 zeros, then a stray '}' */
    char header[256];
    size_t n = (size_t)snprintf(header, sizeof header, "{\"a\":[");
    for (int k = 0; k <= 7 * t; k++)
      n += (size_t)snprintf(header + n, sizeof header - n, "%s0", k ? "," : "");
    long bad_at = (long)n;
    n += (size_t)snprintf(header + n, sizeof header - n, "}}");
    while (n % 8)
      header[n++] = ' ';
    snprintf(paths[t], sizeof paths[t], "%s/bad%d.safetensors", dir, t);
    FILE *fp = fopen(paths[t], "wb");
    ck_assert_ptr_nonnull(fp);
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
      len[i] = (unsigned char)((uint64_t)n >> (8 * i));
    ck_assert_uint_eq(fwrite(len, 1, 8, fp), 8);
    ck_assert_uint_eq(fwrite(header, 1, n, fp), n);
    ck_assert_int_eq(fclose(fp), 0);
    jobs[t] = (position_job){paths[t], bad_at, 0, ""};
  }
  pthread_t threads[LOAD_THREADS];
  for (int t = 0; t < LOAD_THREADS; t++)
    ck_assert_int_eq(pthread_create(&threads[t], NULL, position_thread, &jobs[t]), 0);
  int wrong = 0;
  for (int t = 0; t < LOAD_THREADS; t++) {
    pthread_join(threads[t], NULL);
    wrong += jobs[t].wrong;
  }
  for (int t = 0; t < LOAD_THREADS; t++)
    ck_assert_msg(jobs[t].wrong == 0, "%d of %d loads reported a wrong position (thread %d: %s)",
                  wrong, LOAD_THREADS * LOADS, t, jobs[t].first_wrong);
  apx_close(position_ctx);
  for (int t = 0; t < LOAD_THREADS; t++)
    unlink(paths[t]);
  rmdir(dir);
}
END_TEST

static Suite *ff_lifetime_suite(void) {
  Suite *s = suite_create("ff_lifetime");
  TCase *tc = tcase_create("lifetime");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_weights_of_another_context_are_refused);
  tcase_add_test(tc, test_freed_weights_are_refused_untouched);
  tcase_add_test(tc, test_close_waits_for_a_load_in_progress);
  tcase_add_test(tc, test_free_during_infer_stress);
  tcase_add_test(tc, test_error_positions_under_concurrent_loads);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(ff_lifetime_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
