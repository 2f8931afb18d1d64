/* SPDX-License-Identifier: Apache-2.0 */
/* Graph capture in the core (libapexx/graph.c, docs/graph.md): a backend
 * without graphs (cpu) answers APX_ERR_UNSUPPORTED, bad arguments are
 * rejected with a message, and against the host fixture that records
 * (tests/fixtures/backend_fixture.c FIXTURE_GRAPH): calls on the capture's
 * stream are recorded and replayed, and the calls that would wait for the
 * host inside a capture are refused without ending it. The device side is
 * tests/test_graph_cuda.c. */
#include <pthread.h>

#include "coretest.h"
#include "testutil.h"

#define MARKER 7.0f

/* $APEXX_BACKEND_DIR (the built backends), taken out of the environment so
 * that the files' backend_dir holds */
static char backend_dir[1024];

static const char *cpu_only_ini(void) {
  static char text[1200];
  const char *dir = backend_dir;
  ck_assert_msg(dir[0] != '\0', "APEXX_BACKEND_DIR is not set (run under make check)");
  snprintf(text, sizeof text,
           "[apexx]\nbackend_dir = %s\norder = cpu\n[backend cpu]\nlibrary = apexx-cpu.so\n", dir);
  return write_ini(text);
}

/* The recording fixture "rec" beside cpu, with the given validate mode. */
static apx_context *open_rec(const char *validate) {
  char fmt[1024];
  snprintf(fmt, sizeof fmt,
           "[apexx]\nbackend_dir = %%s\norder = rec\nvalidate = %s\n"
           "[backend rec]\nlibrary = fixture-graph.so\n",
           validate);
  return open_ok(write_ini_modules(fmt));
}

/* A tilepack of one 8x8 tile of a 1x1x8x8 f32 map: the fixture writes its
 * marker into out, or records out while capturing. */
typedef struct pack_case {
  apx_tensor features, idx, out;
  apx_tilepack_args args;
} pack_case;

static void pack_init(pack_case *p) {
  p->features = tu_host4(APX_DTYPE_F32, 1, 1, 8, 8);
  p->idx = tu_host2(APX_DTYPE_I32, 1, 1);
  p->out = tu_host5(APX_DTYPE_F32, 1, 1, 1, 8, 8);
  memset(p->features.data, 0, tu_bytes(&p->features));
  memset(p->idx.data, 0, tu_bytes(&p->idx));
  memset(p->out.data, 0, tu_bytes(&p->out));
  apx_tilepack_args a = APX_TILEPACK_ARGS_INIT;
  a.features = &p->features, a.idx = &p->idx, a.tile = 8, a.out = &p->out;
  p->args = a;
}

static int all_equal(const apx_tensor *t, double v) {
  for (int64_t i = 0; i < apx_tensor_numel(t); i++)
    if (tu_get(t, i) != v) return 0;
  return 1;
}

static void pack_free(pack_case *p) {
  tu_free(&p->features);
  tu_free(&p->idx);
  tu_free(&p->out);
}

START_TEST(cpu_cannot_capture) {
  apx_context *ctx = open_ok(cpu_only_ini());
  apx_graph *g = (apx_graph *)&g; /* must be cleared */
  apx_call call = {"cpu", NULL};
  ck_assert_int_eq(apx_graph_begin(ctx, &call, &g), APX_ERR_UNSUPPORTED);
  ck_assert_ptr_null(g);
  ck_assert_contains(apx_last_error(), "apx_graph_begin: backend cpu cannot capture graphs");
  ck_assert_int_eq(apx_graph_begin(ctx, NULL, &g), APX_ERR_UNSUPPORTED);
  ck_assert_ptr_null(g);
  ck_assert_contains(apx_last_error(),
                     "apx_graph_begin: no loaded backend can capture graphs (cpu: no graph capture)");
  apx_close(ctx);
}
END_TEST

START_TEST(bad_arguments) {
  apx_context *ctx = open_rec("device");
  apx_graph *g = NULL;
  ck_assert_int_eq(apx_graph_begin(NULL, NULL, &g), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "apx_graph_begin: ctx = [NULL]");
  ck_assert_int_eq(apx_graph_begin(ctx, NULL, NULL), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "apx_graph_begin: graph = [NULL]");
  apx_call nowhere = {"nowhere", NULL};
  ck_assert_int_eq(apx_graph_begin(ctx, &nowhere, &g), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "backend [nowhere] named by the call is not configured");
  ck_assert_int_eq(apx_graph_end(ctx, NULL), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "apx_graph_end: graph = [NULL]");
  ck_assert_int_eq(apx_graph_replay(ctx, NULL, NULL), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "apx_graph_replay: graph = [NULL]");
  ck_assert_ptr_null(apx_graph_call(NULL));
  apx_graph_free(ctx, NULL);
  apx_graph_free(NULL, NULL);

  /* a graph of another context */
  apx_context *other = open_rec("device");
  ck_assert_int_eq(apx_graph_begin(other, NULL, &g), APX_OK);
  ck_assert_int_eq(apx_graph_end(ctx, g), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "does not belong to this context");
  ck_assert_int_eq(apx_graph_replay(ctx, g, NULL), APX_ERR_INVALID_ARG);
  apx_graph_free(ctx, g); /* not ctx's: ignored */
  apx_graph_free(other, g);
  apx_close(other);
  apx_close(ctx);
}
END_TEST

START_TEST(capture_then_replay) {
  apx_context *ctx = open_rec("device");
  pack_case p;
  pack_init(&p);
  /* eager: the marker at once */
  ck_assert_int_eq(apx_tilepack(ctx, &p.args, NULL), APX_OK);
  ck_assert(all_equal(&p.out, MARKER));
  memset(p.out.data, 0, tu_bytes(&p.out));

  apx_graph *g = NULL;
  ck_assert_int_eq(apx_graph_begin(ctx, NULL, &g), APX_OK);
  const apx_call *gc = apx_graph_call(g);
  ck_assert_ptr_nonnull(gc);
  ck_assert_str_eq(gc->backend, "rec");
  ck_assert_ptr_nonnull(gc->stream); /* the graph's own stream */
  ck_assert_int_eq(apx_tilepack(ctx, &p.args, gc), APX_OK);
  ck_assert(all_equal(&p.out, 0.0)); /* recorded, not run */
  ck_assert_int_eq(apx_graph_replay(ctx, g, NULL), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "its capture is still open: call apx_graph_end");
  ck_assert_int_eq(apx_graph_end(ctx, g), APX_OK);
  ck_assert(all_equal(&p.out, 0.0));
  for (int r = 0; r < 2; r++) {
    ck_assert_int_eq(apx_graph_replay(ctx, g, NULL), APX_OK);
    ck_assert(all_equal(&p.out, MARKER));
    memset(p.out.data, 0, tu_bytes(&p.out));
  }
  ck_assert_int_eq(apx_graph_end(ctx, g), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "the graph is not capturing (it was ended already)");
  apx_call on_cpu = {"cpu", NULL};
  ck_assert_int_eq(apx_graph_replay(ctx, g, &on_cpu), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "call->backend = [cpu], but the graph was captured on rec");
  apx_graph_free(ctx, g);

  /* on the caller's stream: that stream is the capture's */
  int stream_token;
  apx_call mine = {"rec", &stream_token};
  ck_assert_int_eq(apx_graph_begin(ctx, &mine, &g), APX_OK);
  ck_assert_ptr_eq(apx_graph_call(g)->stream, &stream_token);
  ck_assert_int_eq(apx_tilepack(ctx, &p.args, &mine), APX_OK);
  ck_assert(all_equal(&p.out, 0.0));
  ck_assert_int_eq(apx_graph_end(ctx, g), APX_OK);
  ck_assert_int_eq(apx_graph_replay(ctx, g, &mine), APX_OK);
  ck_assert(all_equal(&p.out, MARKER));
  apx_graph_free(ctx, g);
  pack_free(&p);
  apx_close(ctx);
}
END_TEST

static void *end_elsewhere(void *arg) {
  apx_context **pair = arg;
  apx_status *st = malloc(sizeof *st);
  *st = apx_graph_end(pair[0], (apx_graph *)pair[1]);
  return st;
}

static void *sync_elsewhere(void *arg) {
  apx_status *st = malloc(sizeof *st);
  *st = apx_sync(arg, NULL);
  return st;
}

static apx_status joined(pthread_t t) {
  void *r = NULL;
  ck_assert_int_eq(pthread_join(t, &r), 0);
  apx_status st = *(apx_status *)r;
  free(r);
  return st;
}

START_TEST(waiting_calls_refused) {
  apx_context *ctx = open_rec("device");
  pack_case p;
  pack_init(&p);
  apx_graph *g = NULL;
  ck_assert_int_eq(apx_graph_begin(ctx, NULL, &g), APX_OK);
  const apx_call *gc = apx_graph_call(g);

  ck_assert_int_eq(apx_sync(ctx, gc), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "apx_sync: stream [");
  ck_assert_contains(apx_last_error(), "is being captured into a graph");
  ck_assert_int_eq(apx_sync(ctx, NULL), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "apx_sync: this thread is capturing a graph on rec");
  apx_timer *timer = NULL;
  ck_assert_int_eq(apx_timer_begin(ctx, "rec", gc, &timer), APX_ERR_INVALID_ARG);
  ck_assert_ptr_null(timer);
  ck_assert_contains(apx_last_error(), "a timer waits for its stream");
  apx_graph *second = NULL;
  ck_assert_int_eq(apx_graph_begin(ctx, gc, &second), APX_ERR_INVALID_ARG);
  ck_assert_ptr_null(second);
  ck_assert_contains(apx_last_error(), "is already being captured (one capture per stream");

  /* another thread is not capturing: its sync runs; it cannot end the capture */
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, sync_elsewhere, ctx), 0);
  ck_assert_int_eq(joined(t), APX_OK);
  void *pair[2] = {ctx, g};
  ck_assert_int_eq(pthread_create(&t, NULL, end_elsewhere, pair), 0);
  ck_assert_int_eq(joined(t), APX_ERR_INVALID_ARG);

  /* the capture survived every refusal */
  ck_assert_int_eq(apx_tilepack(ctx, &p.args, gc), APX_OK);
  ck_assert_int_eq(apx_graph_end(ctx, g), APX_OK);
  ck_assert_int_eq(apx_graph_replay(ctx, g, NULL), APX_OK);
  ck_assert(all_equal(&p.out, MARKER));
  /* ended: waiting is allowed again */
  ck_assert_int_eq(apx_sync(ctx, gc), APX_OK);
  apx_graph_free(ctx, g);
  pack_free(&p);
  apx_close(ctx);
}
END_TEST

START_TEST(eager_index_checks_refused) {
  apx_context *ctx = open_rec("eager");
  pack_case p;
  pack_init(&p);
  apx_graph *g = NULL;
  ck_assert_int_eq(apx_graph_begin(ctx, NULL, &g), APX_OK);
  ck_assert_int_eq(apx_tilepack(ctx, &p.args, apx_graph_call(g)), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "tilepack: stream [");
  ck_assert_contains(apx_last_error(), "validate = eager waits for the device to check the indices");
  ck_assert(all_equal(&p.out, 0.0));
  /* the capturing thread's eager call on the default stream would wait too */
  ck_assert_int_eq(apx_tilepack(ctx, &p.args, NULL), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "this thread is capturing a graph on rec");
  apx_graph_free(ctx, g); /* still capturing: ended and released */
  ck_assert_int_eq(apx_tilepack(ctx, &p.args, NULL), APX_OK);
  ck_assert(all_equal(&p.out, MARKER));
  pack_free(&p);
  apx_close(ctx);
}
END_TEST

START_TEST(close_frees_graphs_left) {
  apx_context *ctx = open_rec("device");
  pack_case p;
  pack_init(&p);
  apx_graph *open_one = NULL, *ended = NULL;
  int token;
  apx_call other = {"rec", &token};
  ck_assert_int_eq(apx_graph_begin(ctx, &other, &ended), APX_OK);
  ck_assert_int_eq(apx_tilepack(ctx, &p.args, &other), APX_OK);
  ck_assert_int_eq(apx_graph_end(ctx, ended), APX_OK);
  ck_assert_int_eq(apx_graph_begin(ctx, NULL, &open_one), APX_OK);
  apx_close(ctx); /* frees both (valgrind: no leak) */
  pack_free(&p);
}
END_TEST

START_TEST(failed_end_leaves_graph_to_free) {
  apx_context *ctx = open_rec("device");
  apx_graph *g = NULL;
  ck_assert_int_eq(apx_graph_begin(ctx, NULL, &g), APX_OK);
  /* the fixture fails a capture that recorded nothing */
  ck_assert_int_eq(apx_graph_end(ctx, g), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "fixture: the capture recorded nothing");
  ck_assert_int_eq(apx_graph_replay(ctx, g, NULL), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "the graph is not ready (its capture failed)");
  ck_assert_int_eq(apx_graph_end(ctx, g), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "(its capture failed)");
  /* no capture is open any more: syncs run */
  ck_assert_int_eq(apx_sync(ctx, NULL), APX_OK);
  apx_graph_free(ctx, g);
  apx_close(ctx);
}
END_TEST

int main(void) {
  const char *dir = getenv("APEXX_BACKEND_DIR");
  snprintf(backend_dir, sizeof backend_dir, "%s", dir ? dir : "");
  unsetenv("APEXX_BACKEND_DIR");
  Suite *s = suite_create("graph");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, cpu_cannot_capture);
  tcase_add_test(tc, bad_arguments);
  tcase_add_test(tc, capture_then_replay);
  tcase_add_test(tc, waiting_calls_refused);
  tcase_add_test(tc, eager_index_checks_refused);
  tcase_add_test(tc, close_frees_graphs_left);
  tcase_add_test(tc, failed_end_leaves_graph_to_free);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
