/* SPDX-License-Identifier: Apache-2.0 */
/* Graph capture (apx_graph_*; docs/graph.md): the core keeps the context's
 * graphs in a list, chooses the capturing backend, and refuses the calls
 * that would wait for the host inside a capture (validate = eager index
 * checks, apx_sync, timers, synchronous copies from the capturing thread)
 * before they reach the backend, so a capture is never broken by them.
 * The recording and replay are the backend's (graph_* table entries). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct apx_graph {
  apx__backend *backend;
  void *handle;      /* the backend's */
  apx_call call;     /* the capture's backend and stream */
  pthread_t owner;   /* the thread that began the capture */
  int capturing;     /* between begin and end */
  int ready;         /* end succeeded */
  struct apx_graph *next;
};

/* 1 when the table's size covers the graph entries and all four are set. */
static int backend_has_graphs(const apx__backend *b) {
  const apx_backend_table *t = b->table;
  if (!t || b->state != APX_BACKEND_OK) return 0;
  if (t->size < offsetof(apx_backend_table, graph_free) + sizeof t->graph_free) return 0;
  return t->graph_begin && t->graph_end && t->graph_replay && t->graph_free;
}

static apx_status choose_backend(apx_context *ctx, const apx_call *call, apx__backend **out) {
  const char *named = call && call->backend ? call->backend : ctx->config.forced_backend;
  const char *named_by = call && call->backend ? "the call" : "APEXX_BACKEND";
  *out = NULL;
  if (named) {
    apx__backend *b = apx__backend_find(ctx, named);
    if (!b)
      return apx__error(APX_ERR_INVALID_ARG,
                        "apx_graph_begin: backend [%s] named by %s is not configured", named,
                        named_by);
    if (b->state != APX_BACKEND_OK)
      return apx__error(APX_ERR_UNSUPPORTED, "apx_graph_begin: backend %s is %s: %s", named,
                        apx_backend_state_name(b->state), b->reason);
    if (!backend_has_graphs(b))
      return apx__error(APX_ERR_UNSUPPORTED,
                        "apx_graph_begin: backend %s cannot capture graphs (its calls run "
                        "when they are made)",
                        named);
    *out = b;
    return APX_OK;
  }
  char reasons[1024] = "";
  size_t len = 0;
  for (int i = 0; i < ctx->backend_count; i++) {
    apx__backend *b = &ctx->backends[i];
    if (backend_has_graphs(b)) {
      *out = b;
      return APX_OK;
    }
    const char *why = b->state != APX_BACKEND_OK ? b->reason : "no graph capture";
    if (len < sizeof reasons) {
      int w = snprintf(reasons + len, sizeof reasons - len, "%s%s: %s%s%s", len ? "; " : "",
                       b->config->name,
                       b->state != APX_BACKEND_OK ? apx_backend_state_name(b->state) : "",
                       b->state != APX_BACKEND_OK ? ": " : "", why);
      if (w > 0) len += (size_t)w;
    }
  }
  return apx__error(APX_ERR_UNSUPPORTED, "apx_graph_begin: no loaded backend can capture graphs (%s)",
                    len ? reasons : "no backends configured");
}

/* The open capture on stream of backend b, or NULL (under ctx->lock). */
static apx_graph *capture_on(apx_context *ctx, const apx__backend *b, void *stream) {
  for (apx_graph *g = ctx->graphs; g; g = g->next)
    if (g->capturing && g->call.stream == stream && (!b || g->backend == b)) return g;
  return NULL;
}

APX_API apx_status apx_graph_begin(apx_context *ctx, const apx_call *call, apx_graph **graph) {
  apx__clear_error();
  if (!graph) return apx__error(APX_ERR_INVALID_ARG, "apx_graph_begin: graph = [NULL]");
  *graph = NULL;
  if (!ctx) return apx__error(APX_ERR_INVALID_ARG, "apx_graph_begin: ctx = [NULL]");
  apx__backend *b;
  apx_status st = choose_backend(ctx, call, &b);
  if (st != APX_OK) return st;
  void *stream = call ? call->stream : NULL;
  pthread_mutex_lock(&ctx->lock);
  int busy = stream && capture_on(ctx, b, stream) != NULL;
  pthread_mutex_unlock(&ctx->lock);
  if (busy)
    return apx__error(APX_ERR_INVALID_ARG,
                      "apx_graph_begin: stream [%p] is already being captured (one capture "
                      "per stream; end it with apx_graph_end first)",
                      stream);
  apx_graph *g = calloc(1, sizeof *g);
  if (!g) return apx__error(APX_ERR_NO_MEMORY, "apx_graph_begin: out of memory");
  void *capture_stream = NULL;
  st = b->table->graph_begin(b->state_ptr, b->config->device_index, stream, &g->handle,
                             &capture_stream);
  if (st != APX_OK) {
    if (!apx_last_error()[0])
      apx__error(st, "apx_graph_begin: backend %s failed with %s", b->config->name,
                 apx_status_name(st));
    free(g);
    return st;
  }
  g->backend = b;
  g->call.backend = b->config->name;
  g->call.stream = capture_stream;
  g->owner = pthread_self();
  g->capturing = 1;
  pthread_mutex_lock(&ctx->lock);
  g->next = ctx->graphs;
  ctx->graphs = g;
  __atomic_add_fetch(&ctx->captures_open, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&ctx->lock);
  *graph = g;
  return APX_OK;
}

APX_API const apx_call *apx_graph_call(const apx_graph *graph) {
  return graph ? &graph->call : NULL;
}

/* 1 when graph is one of ctx's (under ctx->lock). */
static int graph_listed(apx_context *ctx, const apx_graph *graph) {
  for (apx_graph *g = ctx->graphs; g; g = g->next)
    if (g == graph) return 1;
  return 0;
}

static apx_status graph_checked(apx_context *ctx, apx_graph *graph, const char *fn) {
  if (!ctx) return apx__error(APX_ERR_INVALID_ARG, "%s: ctx = [NULL]", fn);
  if (!graph) return apx__error(APX_ERR_INVALID_ARG, "%s: graph = [NULL]", fn);
  pthread_mutex_lock(&ctx->lock);
  int listed = graph_listed(ctx, graph);
  pthread_mutex_unlock(&ctx->lock);
  if (!listed)
    return apx__error(APX_ERR_INVALID_ARG, "%s: graph [%p] does not belong to this context", fn,
                      (void *)graph);
  return APX_OK;
}

/* Close the capture (under ctx->lock): no longer counted as open. */
static void capture_closed(apx_context *ctx, apx_graph *g) {
  if (!g->capturing) return;
  g->capturing = 0;
  __atomic_sub_fetch(&ctx->captures_open, 1, __ATOMIC_RELEASE);
}

APX_API apx_status apx_graph_end(apx_context *ctx, apx_graph *graph) {
  apx__clear_error();
  apx_status st = graph_checked(ctx, graph, "apx_graph_end");
  if (st != APX_OK) return st;
  if (!graph->capturing)
    return apx__error(APX_ERR_INVALID_ARG, "apx_graph_end: the graph is not capturing (%s)",
                      graph->ready ? "it was ended already" : "its capture failed");
  if (!pthread_equal(graph->owner, pthread_self()))
    return apx__error(APX_ERR_INVALID_ARG,
                      "apx_graph_end: called from another thread than apx_graph_begin (a "
                      "capture is ended by the thread that began it)");
  apx__backend *b = graph->backend;
  st = b->table->graph_end(b->state_ptr, graph->handle);
  pthread_mutex_lock(&ctx->lock);
  capture_closed(ctx, graph);
  pthread_mutex_unlock(&ctx->lock);
  if (st != APX_OK) {
    if (!apx_last_error()[0])
      apx__error(st, "apx_graph_end: backend %s failed with %s", b->config->name,
                 apx_status_name(st));
    return st;
  }
  graph->ready = 1;
  return APX_OK;
}

APX_API apx_status apx_graph_replay(apx_context *ctx, apx_graph *graph, const apx_call *call) {
  apx__clear_error();
  apx_status st = graph_checked(ctx, graph, "apx_graph_replay");
  if (st != APX_OK) return st;
  if (!graph->ready)
    return apx__error(APX_ERR_INVALID_ARG, "apx_graph_replay: the graph is not ready (%s)",
                      graph->capturing ? "its capture is still open: call apx_graph_end"
                                       : "its capture failed");
  apx__backend *b = graph->backend;
  if (call && call->backend && strcmp(call->backend, b->config->name) != 0)
    return apx__error(APX_ERR_INVALID_ARG,
                      "apx_graph_replay: call->backend = [%s], but the graph was captured on %s",
                      call->backend, b->config->name);
  void *stream = call ? call->stream : NULL;
  if (stream && __atomic_load_n(&ctx->captures_open, __ATOMIC_ACQUIRE) > 0) {
    pthread_mutex_lock(&ctx->lock);
    int busy = capture_on(ctx, b, stream) != NULL;
    pthread_mutex_unlock(&ctx->lock);
    if (busy)
      return apx__error(APX_ERR_INVALID_ARG,
                        "apx_graph_replay: stream [%p] is being captured by another graph "
                        "(graphs do not nest)",
                        stream);
  }
  st = b->table->graph_replay(b->state_ptr, graph->handle, stream);
  if (st != APX_OK && !apx_last_error()[0])
    apx__error(st, "apx_graph_replay: backend %s failed with %s", b->config->name,
               apx_status_name(st));
  return st;
}

static void graph_release(apx_context *ctx, apx_graph *g) {
  apx__backend *b = g->backend;
  b->table->graph_free(b->state_ptr, g->handle);
  (void)ctx;
  free(g);
}

APX_API void apx_graph_free(apx_context *ctx, apx_graph *graph) {
  if (!ctx || !graph) return;
  pthread_mutex_lock(&ctx->lock);
  int found = 0;
  for (apx_graph **p = &ctx->graphs; *p; p = &(*p)->next) {
    if (*p == graph) {
      *p = graph->next;
      found = 1;
      break;
    }
  }
  if (found) capture_closed(ctx, graph);
  pthread_mutex_unlock(&ctx->lock);
  if (found) graph_release(ctx, graph);
}

void apx__graph_close_all(apx_context *ctx) {
  pthread_mutex_lock(&ctx->lock);
  apx_graph *g = ctx->graphs;
  ctx->graphs = NULL;
  pthread_mutex_unlock(&ctx->lock);
  while (g) {
    apx_graph *next = g->next;
    if (g->capturing) __atomic_sub_fetch(&ctx->captures_open, 1, __ATOMIC_RELEASE);
    graph_release(ctx, g);
    g = next;
  }
}

apx_status apx__graph_waits_refused(apx_context *ctx, const char *fn, const char *backend,
                                    void *stream, const char *what) {
  if (__atomic_load_n(&ctx->captures_open, __ATOMIC_ACQUIRE) == 0) return APX_OK;
  apx__backend *b = backend ? apx__backend_find(ctx, backend) : NULL;
  pthread_mutex_lock(&ctx->lock);
  const char *capturing_on = NULL;
  for (apx_graph *g = ctx->graphs; g && !capturing_on; g = g->next) {
    if (!g->capturing || (b && g->backend != b)) continue;
    if (stream ? g->call.stream == stream : pthread_equal(g->owner, pthread_self()))
      capturing_on = g->call.backend;
  }
  pthread_mutex_unlock(&ctx->lock);
  if (!capturing_on) return APX_OK;
  if (stream)
    return apx__error(APX_ERR_INVALID_ARG,
                      "%s: stream [%p] is being captured into a graph (apx_graph_begin) and %s, "
                      "which a capture cannot hold; end the capture first",
                      fn, stream, what);
  return apx__error(APX_ERR_INVALID_ARG,
                    "%s: this thread is capturing a graph on %s (apx_graph_begin) and %s, "
                    "which would break the capture; end the capture first",
                    fn, capturing_on, what);
}
