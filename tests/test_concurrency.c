/* SPDX-License-Identifier: Apache-2.0 */
/* Concurrency and determinism (docs/reliability.md): every op the cpu
 * backend provides (APX_OP_MAP, ff_infer with seeded weights shared by all
 * threads) and apx_tile_order, called from 8 threads at once on ONE
 * context, must give the bytes of a single-thread run; each op called 100
 * times in a row must give the same bytes every time; apx_last_error is the
 * calling thread's own. Inputs are the validation suites' valid cases
 * (small shapes); each thread writes its own outputs. Run under
 * ThreadSanitizer by the --enable-tsan tree. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_validate_common.h"
#include "testutil.h"

#define THREADS 8
#define THREAD_ROUNDS 50 /* calls of each op per thread */
#define REPEATS 100      /* calls of each op in a row, single thread */

/* One op's case: the shared inputs, the single-thread reference outputs,
 * and each thread's own output tensors and argument struct. */
typedef struct op_run {
  apx_op_id op;
  int used; /* the cpu backend runs it */
  vt_case c;
  apx_tensor ref[VT_MAX_SLOTS];
  apx_tensor out[THREADS][VT_MAX_SLOTS];
  vt_args args[THREADS];
} op_run;

static op_run runs[APX_OP_COUNT];
static const apx_call cpu_call = {"cpu", NULL};

/* tile_order: the ids of a 16 x 16 grid shuffled, every mode */
#define ORDER_N 256
#define MODES 6
static int64_t order_ids[ORDER_N], order_ref[MODES][ORDER_N];
static const apx_order_mode order_modes[MODES] = {APX_ORDER_HILBERT, APX_ORDER_L2R,
                                                  APX_ORDER_R2L,     APX_ORDER_U2D,
                                                  APX_ORDER_D2U,     APX_ORDER_MULTI_DIRECTION};

static apx_status order_call(int mode, int64_t *out_data) {
  apx_tensor ids = apx_tensor_host(order_ids, APX_DTYPE_I64, 1, (int64_t[]){ORDER_N});
  apx_tensor out = apx_tensor_host(out_data, APX_DTYPE_I64, 1, (int64_t[]){ORDER_N});
  apx_tile_order_args a = {&ids, 16, 16, order_modes[mode], &out};
  return apx_tile_order(vt_ctx, &a);
}

/* The args of thread t: the case's, with every output slot pointing at the
 * thread's own tensor. */
static void thread_args(op_run *r, int t) {
  r->args[t] = r->c.args;
  for (int i = 0; i < r->c.count; i++) {
    if (!r->c.is_output[i]) continue;
    size_t at = (size_t)((const char *)r->c.field[i] - (const char *)&r->c.args);
    const apx_tensor *p = &r->out[t][i];
    memcpy((char *)&r->args[t] + at, &p, sizeof p);
  }
}

static int outputs_match(const op_run *r, const apx_tensor *out) {
  for (int i = 0; i < r->c.count; i++)
    if (r->c.is_output[i] && !tu_bytes_equal(&out[i], &r->ref[i])) return 0;
  return 1;
}

static void poison_outputs(const op_run *r, const apx_tensor *out) {
  for (int i = 0; i < r->c.count; i++)
    if (r->c.is_output[i]) tu_poison(&out[i]);
}

static void setup_runs(void) {
  vt_setup();
  for (int op = 0; op < APX_OP_COUNT; op++) {
    op_run *r = &runs[op];
    memset(r, 0, sizeof *r);
    r->op = (apx_op_id)op;
    vt_make(&r->c, r->op, APX_DTYPE_F32, APX_DTYPE_I64);
    apx_explanation ex;
    r->used = apx_explain(vt_ctx, r->op, &r->c.args, &cpu_call, &ex) == APX_OK && ex.backend &&
              strcmp(ex.backend, "cpu") == 0;
    if (!r->used) continue;
    ck_assert_msg(vt_call(r->op, &r->c.args, &cpu_call) == APX_OK, "%s: %s",
                  apx_op_name(r->op), apx_last_error());
    for (int i = 0; i < r->c.count; i++)
      if (r->c.is_output[i]) {
        r->ref[i] = tu_clone(&r->c.t[i]);
        for (int t = 0; t < THREADS; t++) r->out[t][i] = tu_clone(&r->c.t[i]);
      }
    for (int t = 0; t < THREADS; t++) thread_args(r, t);
  }
  tu_rng rng = {tu_seed()};
  for (int i = 0; i < ORDER_N; i++) order_ids[i] = i;
  for (int i = ORDER_N - 1; i > 0; i--) {
    int j = (int)tu_int(&rng, 0, i);
    int64_t v = order_ids[i];
    order_ids[i] = order_ids[j];
    order_ids[j] = v;
  }
  for (int m = 0; m < MODES; m++) ck_assert_int_eq(order_call(m, order_ref[m]), APX_OK);
}

static void teardown_runs(void) {
  for (int op = 0; op < APX_OP_COUNT; op++) {
    op_run *r = &runs[op];
    for (int i = 0; i < r->c.count; i++)
      if (r->used && r->c.is_output[i]) {
        tu_free(&r->ref[i]);
        for (int t = 0; t < THREADS; t++) tu_free(&r->out[t][i]);
      }
    vt_free(&r->c);
  }
  vt_teardown();
}

/* ---- 8 threads, one context ---- */
typedef struct worker {
  int index;
  pthread_barrier_t *barrier;
  char failure[512]; /* the first failure, "" when none */
} worker;

static void *work(void *arg) {
  worker *w = arg;
  int t = w->index;
  pthread_barrier_wait(w->barrier);
  for (int round = 0; round < THREAD_ROUNDS && !w->failure[0]; round++) {
    /* each thread starts at a different op, so different ops overlap too */
    for (int k = 0; k < APX_OP_COUNT + 1 && !w->failure[0]; k++) {
      int op = (k + t + round) % (APX_OP_COUNT + 1);
      if (op == APX_OP_COUNT) {
        int64_t out[ORDER_N];
        int m = (t + round) % MODES;
        apx_status st = order_call(m, out);
        if (st != APX_OK || memcmp(out, order_ref[m], sizeof out) != 0)
          snprintf(w->failure, sizeof w->failure, "thread %d round %d: tile_order mode %d: %s", t,
                   round, m, st != APX_OK ? apx_last_error() : "differs from one thread's");
        continue;
      }
      op_run *r = &runs[op];
      if (!r->used) continue;
      poison_outputs(r, r->out[t]);
      apx_status st = vt_call(r->op, &r->args[t], &cpu_call);
      if (st != APX_OK)
        snprintf(w->failure, sizeof w->failure, "thread %d round %d: %s: %s", t, round,
                 apx_op_name(r->op), apx_last_error());
      else if (!outputs_match(r, r->out[t]))
        snprintf(w->failure, sizeof w->failure,
                 "thread %d round %d: %s differs from the single-thread result", t, round,
                 apx_op_name(r->op));
    }
  }
  /* apx_last_error: each thread's own message survives the others' */
  struct apx_backend_info info;
  int bad = 100 + t;
  apx_status st = apx_backend_info(vt_ctx, bad, &info);
  pthread_barrier_wait(w->barrier); /* every thread has set its error */
  char want[32];
  snprintf(want, sizeof want, "[%d]", bad);
  if (!w->failure[0] && (st != APX_ERR_INVALID_ARG || !strstr(apx_last_error(), want)))
    snprintf(w->failure, sizeof w->failure, "thread %d: apx_last_error [%s] lacks %s", t,
             apx_last_error(), want);
  pthread_barrier_wait(w->barrier);
  /* a successful call clears it, for this thread only */
  if (!w->failure[0] && t % 2 == 0) {
    op_run *r = &runs[APX_OP_GATHER];
    if (r->used && vt_call(r->op, &r->args[t], &cpu_call) == APX_OK && apx_last_error()[0])
      snprintf(w->failure, sizeof w->failure, "thread %d: apx_last_error [%s] after a success", t,
               apx_last_error());
  }
  pthread_barrier_wait(w->barrier);
  if (!w->failure[0] && t % 2 == 1 && !strstr(apx_last_error(), want))
    snprintf(w->failure, sizeof w->failure,
             "thread %d: apx_last_error [%s] lost %s when other threads succeeded", t,
             apx_last_error(), want);
  return NULL;
}

START_TEST(eight_threads_on_one_context_match_one_thread) {
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, THREADS);
  pthread_t threads[THREADS];
  worker workers[THREADS];
  for (int t = 0; t < THREADS; t++) {
    workers[t] = (worker){.index = t, .barrier = &barrier};
    ck_assert_int_eq(pthread_create(&threads[t], NULL, work, &workers[t]), 0);
  }
  for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
  pthread_barrier_destroy(&barrier);
  int used = 0;
  for (int op = 0; op < APX_OP_COUNT; op++) used += runs[op].used;
  printf("%d threads x %d rounds x (%d cpu ops + tile_order)\n", THREADS, THREAD_ROUNDS, used);
  ck_assert_int_eq(used, APX_OP_COUNT); /* the cpu backend provides every op */
  for (int t = 0; t < THREADS; t++) ck_assert_msg(!workers[t].failure[0], "%s", workers[t].failure);
}
END_TEST

/* ---- one thread, 100 calls in a row ---- */
START_TEST(every_op_gives_the_same_bits_100_times) {
  for (int op = 0; op < APX_OP_COUNT; op++) {
    op_run *r = &runs[op];
    if (!r->used) continue;
    for (int k = 0; k < REPEATS; k++) {
      poison_outputs(r, r->out[0]);
      ck_assert_int_eq(vt_call(r->op, &r->args[0], &cpu_call), APX_OK);
      ck_assert_msg(outputs_match(r, r->out[0]), "%s: call %d differs from the first",
                    apx_op_name(r->op), k + 2);
    }
  }
  for (int m = 0; m < MODES; m++)
    for (int k = 0; k < REPEATS; k++) {
      int64_t out[ORDER_N];
      ck_assert_int_eq(order_call(m, out), APX_OK);
      ck_assert_msg(memcmp(out, order_ref[m], sizeof out) == 0, "tile_order mode %d: call %d differs",
                    m, k + 2);
    }
}
END_TEST

int main(void) {
  Suite *s = suite_create("concurrency");
  TCase *tc = tcase_create("concurrency");
  tcase_add_checked_fixture(tc, setup_runs, teardown_runs);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, eight_threads_on_one_context_match_one_thread);
  tcase_add_test(tc, every_op_gives_the_same_bits_100_times);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
