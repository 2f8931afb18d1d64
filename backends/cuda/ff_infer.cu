/* SPDX-License-Identifier: Apache-2.0 */
/* cuda backend: the end-to-end FF path (docs/ff_infer.md; docs/ops.md,
 * ff_infer): the weights' device form (made once per dtype and device through the
 * core's cache), the frame's scratch, its launches (routing, the pixels
 * outside every tile, level 0, level 1), the routing statistics, and graph
 * replay (docs/ff_infer.md "Graph replay").
 *
 * A frame neither allocates with cudaMalloc nor waits for the host unless
 * the call asks for stats or runs under validate = eager: its scratch comes
 * from the device's stream-ordered pool (or, for graph replay, from the
 * cache entry, sized once per key). */
#include "cuda_ff.h"

#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <new>
#include <vector>

/* ---- weights ---------------------------------------------------------------- */

static float round_host(float v, apx_dtype dt) {
  switch (dt) {
  case APX_DTYPE_F16: return __half2float(__float2half_rn(v));
  case APX_DTYPE_BF16: return __bfloat162float(__float2bfloat16_rn(v));
  default: return v;
  }
}

/* v rounded from the double straight to dt (nearest even), as tileunpack's
 * blend_alpha (docs/ops.md, tileunpack, Blend) */
static float round_double(double v, apx_dtype dt) {
  switch (dt) {
  case APX_DTYPE_F16: return __half2float(__double2half(v));
  case APX_DTYPE_BF16: return __bfloat162float(__double2bfloat16(v));
  default: return (float)v;
  }
}

/* Append n floats (16-byte aligned start) to the host image; returns the
 * offset in floats. */
static size_t put(std::vector<float> &img, size_t n) {
  size_t at = (img.size() + 3) & ~(size_t)3;
  img.resize(at + n, 0.0f);
  return at;
}

struct level_offsets {
  size_t decay[2], ig[2], og[2], sb[2], gate, ln_w, ln_b, w0t, b0, w2t, b2, dw, dwb, pwt, pwb,
      nw, nb, pwf; /* pwf: 0 where the level has none */
};

static void level_image(std::vector<float> &img, level_offsets &o, const apx_ff_level_params &p,
                        int64_t C, apx_dtype dt) {
  for (int s = 0; s < 2; s++) {
    o.decay[s] = put(img, (size_t)C);
    o.ig[s] = put(img, (size_t)C);
    o.og[s] = put(img, (size_t)C);
    o.sb[s] = put(img, (size_t)C);
    for (int64_t c = 0; c < C; c++) {
      img[o.decay[s] + c] = round_host(apx_ff_decay(p.scan_decay_logit[s][c]), dt);
      img[o.ig[s] + c] = round_host(apx_ff_gain(p.scan_input_gain_raw[s][c]), dt);
      img[o.og[s] + c] = round_host(apx_ff_gain(p.scan_output_gain_raw[s][c]), dt);
      img[o.sb[s] + c] = round_host(p.scan_state_bias[s][c], dt);
    }
  }
  o.gate = put(img, (size_t)C);
  for (int64_t c = 0; c < C; c++)
    img[o.gate + c] = round_host(apx_sigmoidf(p.merge_gate_logit[c]), dt);
  auto copy = [&](size_t &off, const float *src, size_t n) {
    off = put(img, n);
    for (size_t i = 0; i < n; i++) img[off + i] = src[i];
  };
  copy(o.ln_w, p.token_norm_weight, (size_t)C);
  copy(o.ln_b, p.token_norm_bias, (size_t)C);
  o.w0t = put(img, (size_t)(C * C));
  for (int64_t oo = 0; oo < C; oo++)
    for (int64_t c = 0; c < C; c++) img[o.w0t + c * C + oo] = p.mlp0_weight[oo * C + c];
  copy(o.b0, p.mlp0_bias, (size_t)C);
  o.w2t = put(img, (size_t)(2 * C * C));
  for (int64_t oo = 0; oo < 2 * C; oo++)
    for (int64_t c = 0; c < C; c++) img[o.w2t + c * 2 * C + oo] = p.mlp2_weight[oo * C + c];
  copy(o.b2, p.mlp2_bias, (size_t)(2 * C));
  copy(o.dw, p.dw_weight, (size_t)(9 * C));
  copy(o.dwb, p.dw_bias, (size_t)C);
  o.pwt = put(img, (size_t)(2 * C * C));
  for (int64_t oo = 0; oo < 2 * C; oo++)
    for (int64_t c = 0; c < C; c++) img[o.pwt + c * 2 * C + oo] = p.pw_weight[oo * C + c];
  copy(o.pwb, p.pw_bias, (size_t)(2 * C));
  /* the tensor-core copy (cuda_ff_level.pwf): 8 words a lane and step */
  o.pwf = 0;
  if ((dt == APX_DTYPE_F16 || dt == APX_DTYPE_BF16) && C % 16 == 0) {
    const int64_t KT = C / 16, MT = 2 * C / 16;
    o.pwf = put(img, (size_t)(MT * KT * 32 * 8));
    for (int64_t mt = 0; mt < MT; mt++)
      for (int64_t ks = 0; ks < KT; ks++)
        for (int l = 0; l < 32; l++)
          for (int r = 0; r < 4; r++) {
            uint32_t hw[2], lw[2];
            for (int h = 0; h < 2; h++) {
              const int64_t row = mt * 16 + CUDA_FF_PWF_ROW(l, r);
              const int64_t col = ks * 16 + CUDA_FF_PWF_COL(l, r) + h;
              const float w = p.pw_weight[row * C + col];
              const __nv_bfloat16 hi = __float2bfloat16_rn(w);
              const __nv_bfloat16 lo = __float2bfloat16_rn(w - __bfloat162float(hi));
              unsigned short hb, lb;
              memcpy(&hb, &hi, 2);
              memcpy(&lb, &lo, 2);
              hw[h] = hb;
              lw[h] = lb;
            }
            const uint32_t hv = hw[0] | hw[1] << 16, lv = lw[0] | lw[1] << 16;
            float *at = &img[o.pwf + (size_t)(((mt * KT + ks) * 32 + l) * 8)];
            memcpy(at + r, &hv, 4);
            memcpy(at + 4 + r, &lv, 4);
          }
  }
  copy(o.nw, p.norm_weight, (size_t)(2 * C));
  copy(o.nb, p.norm_bias, (size_t)(2 * C));
}

/* The prepared weights' key in the core's cache (services.cache): the
 * frame's dtype and the device. */
static uint64_t ff_key(apx_dtype dtype, int device_index) {
  return (uint64_t)(uint32_t)device_index << 8 | (uint64_t)dtype;
}

static apx_status ff_make(void *state, const void *content, uint64_t key, void **prepared) {
  cuda_state *st = (cuda_state *)state;
  const apx_ff_params *params = (const apx_ff_params *)content;
  const apx_dtype dtype = (apx_dtype)(key & 0xff);
  const int device_index = (int)(key >> 8);
  *prepared = NULL;
  apx_status s = cuda_use_device(st, device_index);
  if (s != APX_OK) return s;
  const int64_t C = params->channels;
  std::vector<float> img;
  level_offsets off[2];
  try {
    for (int l = 0; l < 2; l++) level_image(img, off[l], params->level[l], C, dtype);
  } catch (...) {
    return st->svc->set_error(APX_ERR_NO_MEMORY, "ff_infer: no host memory for the weights");
  }
  cuda_ff_prepared *w = new (std::nothrow) cuda_ff_prepared();
  if (!w) return st->svc->set_error(APX_ERR_NO_MEMORY, "ff_infer: out of host memory");
  w->channels = C;
  w->bytes = img.size() * sizeof(float);
  cudaError_t err = cudaMalloc(&w->dev, w->bytes ? w->bytes : 16);
  if (err == cudaSuccess) err = cudaMemcpy(w->dev, img.data(), w->bytes, cudaMemcpyHostToDevice);
  if (err != cudaSuccess) {
    if (w->dev) cudaFree(w->dev);
    delete w;
    return cuda_fail(st, err, "ff_infer: uploading the weights");
  }
  const float *base = (const float *)w->dev;
  for (int l = 0; l < 2; l++) {
    cuda_ff_level &lv = w->level[l];
    const level_offsets &o = off[l];
    for (int d = 0; d < 2; d++) {
      lv.decay[d] = base + o.decay[d];
      lv.ig[d] = base + o.ig[d];
      lv.og[d] = base + o.og[d];
      lv.sb[d] = base + o.sb[d];
    }
    lv.gate = base + o.gate;
    lv.ln_w = base + o.ln_w;
    lv.ln_b = base + o.ln_b;
    lv.w0t = base + o.w0t;
    lv.b0 = base + o.b0;
    lv.w2t = base + o.w2t;
    lv.b2 = base + o.b2;
    lv.dw = base + o.dw;
    lv.dwb = base + o.dwb;
    lv.pwt = base + o.pwt;
    lv.pwb = base + o.pwb;
    lv.pwf = o.pwf ? (const uint4 *)(base + o.pwf) : NULL;
    lv.nw = base + o.nw;
    lv.nb = base + o.nb;
    const apx_ff_level_params &p = params->level[l];
    lv.wb = apx_softplusf(p.boundary_log_weight);
    lv.wu = apx_softplusf(p.uncertainty_log_weight);
    lv.gb = p.gate_bias;
  }
  *prepared = w;
  return APX_OK;
}

static void ff_release(void *state, uint64_t key, void *prepared) {
  (void)state;
  cuda_ff_prepared *w = (cuda_ff_prepared *)prepared;
  if (!w) return;
  cudaSetDevice((int)(key >> 8));
  cudaFree(w->dev);
  delete w;
}

static int services_have_ff(const apx_core_services *svc) {
  return svc->size >= offsetof(apx_core_services, cache) + sizeof svc->cache && svc->cache;
}

/* ---- the frame ------------------------------------------------------------------ */

static void frame_of(const apx_ff_infer_args *a, cuda_ff_frame *f) {
  memset(f, 0, sizeof *f); /* the graph key compares the bytes */
  const apx_tensor *d = a->dense;
  f->dt = d->dtype;
  f->B = d->shape[0];
  f->C = d->shape[1];
  f->H = d->shape[2];
  f->W = d->shape[3];
  f->t0 = a->tile_l0;
  f->t1 = a->tile_l1;
  f->gh0 = f->H / f->t0;
  f->gw0 = f->W / f->t0;
  f->G0 = f->gh0 * f->gw0;
  f->kmax0 = a->kmax_l0;
  f->kmax1 = a->kmax_l1;
  f->delta = apx_ff_tile_cost(a);
  f->b1 = a->budget_b1;
  f->b2 = a->budget_b2;
  /* every tile costs delta (every parent 1): the walks take the same count
   * in every row, the prefix of the sorted candidates (include/apexx/
   * ff_backend.h, the rules of the host's walk) */
  int64_t n = 0, p = 0;
  apx_ff_walk_counts(a, &n, &p);
  f->K0 = n;
  f->split_on = apx_ff_nesting(a) && n > 0;
  f->P = p;
  f->K1 = 4 * p;
  f->dense = d->data;
  f->util = a->utilities->data;
  f->util_dt = a->utilities->dtype;
  if (a->split_utilities) {
    f->split = a->split_utilities->data;
    f->split_dt = a->split_utilities->dtype;
  }
  if (a->boundary) {
    f->bp = a->boundary->data;
    f->bp_dt = a->boundary->dtype;
  }
  if (a->uncertainty) {
    f->up = a->uncertainty->data;
    f->up_dt = a->uncertainty->dtype;
  }
  f->heavy = a->heavy->data;
  f->detail = a->detail->data;
  f->alpha = a->alpha->data;
  /* the options (docs/ff_infer.md, Options); blend_alpha enters only in
   * blend mode, so that override frames share a graph whatever it is */
  f->order = (int)a->order_mode;
  f->scan_fwd = a->scan_mode == APX_SCAN_FORWARD;
  f->blend = a->overlap_mode == APX_OVERLAP_BLEND;
  if (f->blend) {
    f->blend_a = round_double(a->blend_alpha, f->dt);
    f->blend_om = round_host(1.0f - f->blend_a, f->dt);
  }
}

/* The scratch's carve-outs (byte offsets from its start). */
struct frame_layout {
  size_t stats, stats_bytes; /* l0_count .. l1_ids, contiguous */
  size_t nan_pos, l0h, l1h, tiles;
  size_t tok, tok1, film, p, partials;
  size_t total;
};

static frame_layout layout_of(const cuda_ff_frame *f) {
  frame_layout L;
  size_t at = 0;
  const size_t B = (size_t)f->B;
  L.stats = at;
  L.stats_bytes = 8 * (4 * B + B * (size_t)f->kmax0 + B * (size_t)f->kmax1);
  at += cuda_align_up(L.stats_bytes);
  L.nan_pos = at;
  at += cuda_align_up(16 * B);
  L.l0h = at;
  at += cuda_align_up(4 * B * (size_t)f->kmax0);
  L.l1h = at;
  at += cuda_align_up(4 * B * (size_t)f->kmax1);
  L.tiles = at;
  at += cuda_align_up(4 * B * (size_t)f->G0);
  const size_t kmax = (size_t)(f->K0 > f->K1 ? f->K0 : f->K1), C = (size_t)f->C;
  const size_t ntok = (size_t)(f->K0 > 0 ? (f->G0 > f->K1 ? f->G0 : f->K1) : f->K1);
  L.tok = at;
  at += cuda_align_up(4 * B * ntok * C);
  L.tok1 = at; /* level 1's tokens by tile id, from level 0's refine */
  at += cuda_align_up(f->K1 > 0 ? 4 * B * 4 * (size_t)f->G0 * C : 0);
  L.film = at;
  at += cuda_align_up(8 * B * kmax * C);
  const size_t tt0 = (size_t)(f->t0 * f->t0), tt1 = (size_t)(f->t1 * f->t1);
  /* the two-kernel refine's pointwise output and chunk statistics */
  size_t p0 = f->cw[0] ? 0 : B * (size_t)f->K0 * 2 * C * tt0;
  size_t p1 = f->cw[1] ? 0 : B * (size_t)f->K1 * 2 * C * tt1;
  L.p = at;
  at += cuda_align_up(4 * (p0 > p1 ? p0 : p1));
  size_t n0 = f->cw[0] ? 0 : B * (size_t)f->K0 * ((tt0 + CUDA_FF_CHUNK - 1) / CUDA_FF_CHUNK);
  size_t n1 = f->cw[1] ? 0 : B * (size_t)f->K1 * ((tt1 + CUDA_FF_CHUNK - 1) / CUDA_FF_CHUNK);
  L.partials = at;
  at += cuda_align_up(12 * (n0 > n1 ? n0 : n1));
  L.total = at;
  return L;
}

static cuda_ff_route_dev route_of(const cuda_ff_frame *f, const frame_layout &L, char *base) {
  cuda_ff_route_dev r;
  const size_t B = (size_t)f->B;
  int64_t *s64 = (int64_t *)(base + L.stats);
  r.l0_count = s64;
  r.l1_count = s64 + B;
  r.b1_spent = (double *)(s64 + 2 * B);
  r.b2_spent = (double *)(s64 + 3 * B);
  r.l0_greedy = s64 + 4 * B;
  r.l1_ids = r.l0_greedy + B * (size_t)f->kmax0;
  r.nan_pos = (unsigned long long *)(base + L.nan_pos);
  r.l0_order = (int *)(base + L.l0h);
  r.l1_order = (int *)(base + L.l1h);
  r.tile_state = (int *)(base + L.tiles);
  return r;
}

/* Routing and level 0's tokens of every tile: the first launch of every
 * frame. */
static apx_status launch_route(cuda_state *st, int dev, cudaStream_t s, const cuda_ff_frame *f,
                               const frame_layout &L, char *scratch) {
  if (f->B <= 0 || f->G0 <= 0) return APX_OK;
  cuda_ff_route_dev r = route_of(f, L, scratch);
  return cuda_ff_route(st, dev, s, f, &r, (float *)(scratch + L.tok));
}

/* Everything after the routing. */
static apx_status launch_compute(cuda_state *st, cudaStream_t s, const cuda_ff_frame *f,
                                 const cuda_ff_prepared *w, const frame_layout &L,
                                 char *scratch) {
  if (f->B <= 0 || f->C <= 0 || f->H * f->W <= 0) return APX_OK;
  cuda_ff_route_dev r = route_of(f, L, scratch);
  apx_status rc = APX_OK;
  /* the outside pass rides on level 1's scan launch where there is one
   * (beside its few scan blocks, off level 0's chain), else on level 0's */
  const int l0 = f->K0 > 0 && f->B > 0, l1 = l0 && f->K1 > 0;
  if (!l0) rc = cuda_ff_outside(st, s, f, w, r.tile_state);
  if (rc != APX_OK) return rc;
  cuda_ff_level_scratch sc;
  sc.tok = (float *)(scratch + L.tok);
  sc.tok1 = (float *)(scratch + L.tok1);
  sc.film = (float *)(scratch + L.film);
  sc.p = (float *)(scratch + L.p);
  sc.partials = (float *)(scratch + L.partials);
  rc = cuda_ff_level_run(st, s, f, w, 0, f->K1 > 0 ? CUDA_FF_STORE_L0 : CUDA_FF_STORE_SINGLE,
                         f->dense, f->t0, f->gw0, r.l0_order, f->kmax0, f->K0, r.tile_state,
                         &sc, f->G0, !l1);
  if (rc != APX_OK) return rc;
  /* level 1's tokens: from level 0's refine where it writes them, else
   * level 1's own tokens kernel */
  const int tok1 = l1 && cuda_ff_tok1(f, w);
  cuda_ff_level_scratch sc1 = sc;
  if (tok1) sc1.tok = sc.tok1;
  return cuda_ff_level_run(st, s, f, w, 1, CUDA_FF_STORE_L1, f->detail, f->t1, 2 * f->gw0,
                           r.l1_order, f->kmax1, f->K1, r.tile_state, &sc1,
                           tok1 ? 4 * f->G0 : 0, l1);
}

/* validate = eager: the routing's NaN verdict, read after a wait. */
static apx_status eager_verdict(cuda_state *st, cudaStream_t s, const cuda_ff_frame *f,
                                const frame_layout &L, char *scratch) {
  const size_t n = 2 * (size_t)f->B;
  std::vector<unsigned long long> h(n ? n : 1);
  if (n == 0 || f->G0 <= 0) return APX_OK;
  CUDA_TRY(st, cudaMemcpyAsync(h.data(), scratch + L.nan_pos, n * 8, cudaMemcpyDeviceToHost, s),
           "ff_infer: reading the utilities check");
  CUDA_TRY(st, cudaStreamSynchronize(s), "ff_infer: reading the utilities check");
  for (int which = 0; which < 2; which++)
    for (int64_t b = 0; b < f->B; b++) {
      unsigned long long pos = h[2 * b + which];
      if (pos != ~0ULL)
        return st->svc->set_error(APX_ERR_INVALID_ARG, "ff_infer: %s[%lld][%lld] = [nan] is not a number",
                                  which ? "split_utilities" : "utilities",
                                  (long long)(pos / (unsigned long long)f->G0),
                                  (long long)(pos % (unsigned long long)f->G0));
    }
  return APX_OK;
}

/* stats: copy the routing to the host, wait, fill the caller's arrays. */
static apx_status fill_stats(cuda_state *st, cudaStream_t s, const cuda_ff_frame *f,
                             const frame_layout &L, char *scratch, apx_ff_stats *stats) {
  const size_t B = (size_t)f->B;
  std::vector<int64_t> h(L.stats_bytes / 8 + 1);
  if (L.stats_bytes)
    CUDA_TRY(st, cudaMemcpyAsync(h.data(), scratch + L.stats, L.stats_bytes,
                                 cudaMemcpyDeviceToHost, s),
             "ff_infer: reading the routing");
  CUDA_TRY(st, cudaStreamSynchronize(s), "ff_infer: reading the routing");
  if (f->G0 <= 0) { /* no tile: no routing ran */
    for (size_t i = 0; i < B; i++) h[i] = h[B + i] = 0;
    for (size_t i = 2 * B; i < 4 * B; i++) {
      double z = 0.0;
      memcpy(&h[i], &z, 8);
    }
  }
  const int64_t *l0c = h.data(), *l1c = l0c + B, *greedy = l0c + 4 * B;
  const int64_t *l1 = greedy + B * (size_t)f->kmax0;
  for (size_t b = 0; b < B; b++) {
    if (stats->selected_l0) stats->selected_l0[b] = l0c[b];
    if (stats->selected_l1) stats->selected_l1[b] = l1c[b];
    if (stats->budget_b1_spent) memcpy(&stats->budget_b1_spent[b], &h[2 * B + b], 8);
    if (stats->budget_b2_spent) memcpy(&stats->budget_b2_spent[b], &h[3 * B + b], 8);
  }
  if (stats->l0_ids) memcpy(stats->l0_ids, greedy, 8 * B * (size_t)f->kmax0);
  if (stats->l1_ids) memcpy(stats->l1_ids, l1, 8 * B * (size_t)f->kmax1);
  return APX_OK;
}

/* ---- graph replay ------------------------------------------------------------------- */

struct graph_key {
  cuda_ff_frame f;
  cuda_ff_level level[2]; /* the weights' device pointers and gate scalars */
  double cost_heavy, cost_cheap;
  int enable_nesting;
  int validate;
};

struct graph_entry {
  cudaStream_t stream; /* the caller's */
  int device;
  graph_key key;
  cudaGraphExec_t exec;
  void *scratch;       /* cudaMalloc'd, sized for key */
  graph_entry *next;
};

struct graph_cache {
  pthread_mutex_t lock;
  graph_entry *head;
};

static graph_cache *graphs_of(cuda_state *st) {
  pthread_mutex_lock(&st->lock);
  if (!st->ff_graphs) {
    graph_cache *g = new (std::nothrow) graph_cache();
    if (g) {
      pthread_mutex_init(&g->lock, NULL);
      g->head = NULL;
      st->ff_graphs = g;
    }
  }
  graph_cache *g = (graph_cache *)st->ff_graphs;
  pthread_mutex_unlock(&st->lock);
  return g;
}

static void entry_clear(graph_entry *e) {
  cudaSetDevice(e->device);
  if (e->exec) cudaGraphExecDestroy(e->exec);
  if (e->scratch) cudaFree(e->scratch);
  e->exec = NULL;
  e->scratch = NULL;
}

void cuda_ff_fini(cuda_state *st) {
  graph_cache *g = (graph_cache *)st->ff_graphs;
  if (!g) return;
  for (graph_entry *e = g->head; e;) {
    graph_entry *n = e->next;
    entry_clear(e);
    delete e;
    e = n;
  }
  pthread_mutex_destroy(&g->lock);
  delete g;
  st->ff_graphs = NULL;
}

/* Capture the frame's launches into e->exec (key changed or first call). */
static apx_status capture(cuda_state *st, int dev, cudaStream_t s, graph_entry *e,
                          const cuda_ff_frame *f, const cuda_ff_prepared *w,
                          const frame_layout &L) {
  if (e->exec || e->scratch) {
    /* the old graph may still run on the stream */
    CUDA_TRY(st, cudaStreamSynchronize(s), "ff_infer: graph replay: waiting for the old graph");
    entry_clear(e);
  }
  CUDA_TRY(st, cudaMalloc(&e->scratch, L.total ? L.total : 256), "ff_infer: graph scratch");
  /* capture on a private stream (graph.cu; the legacy default stream
   * cannot be captured); the graph is launched on the caller's */
  cudaStream_t cap;
  int own = 0;
  apx_status rc = cuda_capture_begin(st, NULL, &cap, &own, "ff_infer: graph replay");
  if (rc != APX_OK) return rc;
  rc = launch_route(st, dev, cap, f, L, (char *)e->scratch);
  if (rc == APX_OK) rc = launch_compute(st, cap, f, w, L, (char *)e->scratch);
  rc = cuda_capture_end(st, cap, rc, &e->exec, "ff_infer: graph replay");
  if (own) cudaStreamDestroy(cap);
  return rc;
}

static apx_status run_graph(cuda_state *st, int dev, cudaStream_t s, const apx_ff_infer_args *a,
                            const cuda_ff_frame *f, const cuda_ff_prepared *w,
                            const frame_layout &L) {
  graph_cache *g = graphs_of(st);
  if (!g) return st->svc->set_error(APX_ERR_NO_MEMORY, "ff_infer: out of host memory");
  graph_key key;
  memset(&key, 0, sizeof key);
  key.f = *f;
  memcpy(key.level, w->level, sizeof key.level);
  key.cost_heavy = a->cost_heavy;
  key.cost_cheap = a->cost_cheap;
  key.enable_nesting = a->enable_nesting;
  key.validate = (int)st->validate_mode;
  pthread_mutex_lock(&g->lock);
  graph_entry *e = g->head;
  while (e && !(e->stream == s && e->device == dev)) e = e->next;
  if (!e) {
    e = new (std::nothrow) graph_entry();
    if (!e) {
      pthread_mutex_unlock(&g->lock);
      return st->svc->set_error(APX_ERR_NO_MEMORY, "ff_infer: out of host memory");
    }
    memset(e, 0, sizeof *e);
    e->stream = s;
    e->device = dev;
    e->next = g->head;
    g->head = e;
  }
  apx_status rc = APX_OK;
  if (!e->exec || memcmp(&e->key, &key, sizeof key) != 0) {
    rc = capture(st, dev, s, e, f, w, L);
    if (rc == APX_OK) e->key = key;
    else memset(&e->key, 0, sizeof e->key);
  }
  if (rc == APX_OK) {
    cudaError_t err = cudaGraphLaunch(e->exec, s);
    if (err != cudaSuccess) rc = cuda_fail(st, err, "ff_infer: cudaGraphLaunch");
  }
  if (rc == APX_OK && a->stats) rc = fill_stats(st, s, f, L, (char *)e->scratch, a->stats);
  pthread_mutex_unlock(&g->lock);
  return rc;
}

/* ---- the op ------------------------------------------------------------------------- */

int cuda_ff_supports(cuda_state *st, const apx_ff_infer_args *a, apx_pass_over_code *code,
                     char *reason, size_t reason_size) {
  const apx_core_services *svc = st->svc;
  if (!services_have_ff(svc)) {
    *code = APX_PASS_OP_UNSUPPORTED;
    snprintf(reason, reason_size, "op_unsupported:the core offers no cache service");
    return 0;
  }
  /* validated: the weights have dense's C channels */
  const int64_t channels = a && a->dense && a->dense->ndim == 4 ? a->dense->shape[1] : 0;
  if (channels > CUDA_FF_MAX_C) {
    *code = APX_PASS_OP_UNSUPPORTED;
    snprintf(reason, reason_size, "op_unsupported:cuda ff_infer takes at most %d channels, not %lld",
             CUDA_FF_MAX_C, (long long)channels);
    return 0;
  }
  /* every order_mode, overlap_mode and scan_mode the core accepts runs
   * (docs/ff_infer.md, Options): no check of them here */
  if (a && a->dense && a->dense->ndim == 4 && a->tile_l0 > 0) {
    int64_t G0 = (a->dense->shape[2] / a->tile_l0) * (a->dense->shape[3] / a->tile_l0);
    if (G0 > CUDA_FF_MAX_G0) {
      *code = APX_PASS_OP_UNSUPPORTED;
      snprintf(reason, reason_size, "op_unsupported:cuda ff_infer routes at most %d L0 tiles, not %lld",
               CUDA_FF_MAX_G0, (long long)G0);
      return 0;
    }
    /* the kernels without a smaller form against the device's shared
     * memory a block (64 KiB on cc 7.5, 99 KiB on 8.6, 8.9 and 12.x) */
    const int dev = a->dense->device_index;
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      return 1; /* the call reports the device's error */
    }
    int64_t k0 = 0, parents = 0;
    apx_ff_walk_counts(a, &k0, &parents);
    char why[300];
    if (!cuda_ff_smem_fits(channels, G0, k0, parents, (size_t)optin, why, sizeof why)) {
      *code = APX_PASS_OP_UNSUPPORTED;
      snprintf(reason, reason_size, "op_unsupported:cuda ff_infer on device %d: %s", dev, why);
      return 0;
    }
  }
  return 1;
}

static apx_status ff_frame(void *state, const apx_ff_infer_args *args, const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  const apx_core_services *svc = st->svc;
  if (!services_have_ff(svc))
    return svc->set_error(APX_ERR_UNSUPPORTED, "ff_infer: the core offers no cache service");
  const int dev = args->dense->device_index;
  apx_status rc = cuda_use_device(st, dev);
  if (rc != APX_OK) return rc;
  void *prep = NULL;
  rc = svc->cache(svc->core, args->weights, ff_key(args->dense->dtype, dev), ff_make, ff_release,
                  st, &prep);
  if (rc != APX_OK) return rc;
  const cuda_ff_prepared *w = (const cuda_ff_prepared *)prep;
  cuda_ff_frame f;
  frame_of(args, &f);
  f.dev = dev;
  f.cw[0] = cuda_ff_fused_width(st, dev, &f, f.t0, f.K0);
  f.cw[1] = cuda_ff_fused_width(st, dev, &f, f.t1, f.K1);
  if (w->channels != f.C)
    return svc->set_error(APX_ERR_INVALID_ARG,
                          "ff_infer: weights have [%lld] channels, dense has [%lld]",
                          (long long)w->channels, (long long)f.C);
  const frame_layout L = layout_of(&f);
  cudaStream_t s = cuda_stream(call);
  const int eager = st->validate_mode == APX_VALIDATE_EAGER;

  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  CUDA_TRY(st, cudaStreamIsCapturing(s, &cs), "ff_infer: cudaStreamIsCapturing");
  const int capturing = cs != cudaStreamCaptureStatusNone;
  if (capturing && (args->stats || eager))
    return svc->set_error(APX_ERR_INVALID_ARG,
                          "ff_infer: stream is being captured: stats and validate = eager wait "
                          "for the stream; leave stats NULL in captured frames");
  if (args->graph_replay && !capturing && !eager) return run_graph(st, dev, s, args, &f, w, L);

  cuda_workspace ws;
  rc = cuda_ws_alloc(st, s, L.total, &ws, "ff_infer: scratch");
  if (rc != APX_OK) return rc;
  char *scratch = (char *)ws.ptr;
  rc = launch_route(st, dev, s, &f, L, scratch);
  if (rc == APX_OK && eager) rc = eager_verdict(st, s, &f, L, scratch);
  if (rc == APX_OK) rc = launch_compute(st, s, &f, w, L, scratch);
  if (rc == APX_OK && args->stats) rc = fill_stats(st, s, &f, L, scratch, args->stats);
  cuda_ws_free(&ws);
  return rc;
}

#ifdef APEXX_FF_TIMELINE
/* The diagnostic build's timeline: the calls numbered in
 * $APEXX_FF_TIMELINE_AT (1-based, comma-separated; not captured ones) clear
 * the records before the frame and, after it, wait and write a summary of
 * each kind's blocks to $APEXX_FF_TIMELINE.N (N the call's number): their
 * count and the first, median and last start, wait and end, in us from
 * the frame's first start; then every record. */
static const char *const tl_names[FF_TL_KINDS] = {
    "route", "route_tokens", "tokens", "scan_l0", "scan_l1", "outside_early",
    "refine_l0", "refine_l1", "outside"};

static void tl_write(const char *path, long call_no) {
  std::vector<ff_tl_rec> a(FF_TL_KINDS * FF_TL_SLOTS), b(FF_TL_KINDS * FF_TL_SLOTS);
  if (!cuda_ff_tl_route_read(a.data()) || !cuda_ff_tl_refine_read(b.data())) return;
  for (size_t i = 0; i < a.size(); i++)
    if (b[i].used) a[i] = b[i];
  unsigned long long t0 = ~0ULL, t1 = 0;
  for (const ff_tl_rec &r : a)
    if (r.used) {
      t0 = r.start < t0 ? r.start : t0;
      t1 = r.end > t1 ? r.end : t1;
    }
  char name[4096];
  snprintf(name, sizeof name, "%s.%ld", path, call_no);
  FILE *fp = fopen(name, "w");
  if (!fp) return;
  fprintf(fp, "# call %ld: blocks' first start to last end %.2f us\n", call_no, (t1 - t0) / 1e3);
  fprintf(fp, "# kind blocks | start first median last | waited first median last | end first median last | phases 0-5 median (us)\n");
  for (int k = 0; k < FF_TL_KINDS; k++) {
    std::vector<double> st, wt, en;
    for (int i = 0; i < FF_TL_SLOTS; i++) {
      const ff_tl_rec &r = a[(size_t)k * FF_TL_SLOTS + i];
      if (!r.used) continue;
      st.push_back((r.start - t0) / 1e3);
      if (r.waited) wt.push_back((r.waited - t0) / 1e3);
      en.push_back(r.end ? (r.end - t0) / 1e3 : -1.0);
    }
    if (st.empty()) continue;
    std::sort(st.begin(), st.end());
    std::sort(wt.begin(), wt.end());
    std::sort(en.begin(), en.end());
    fprintf(fp, "%-13s %5zu | %7.2f %7.2f %7.2f", tl_names[k], st.size(), st.front(),
            st[st.size() / 2], st.back());
    if (wt.empty()) fprintf(fp, " |       -       -       -");
    else fprintf(fp, " | %7.2f %7.2f %7.2f", wt.front(), wt[wt.size() / 2], wt.back());
    fprintf(fp, " | %7.2f %7.2f %7.2f |", en.front(), en[en.size() / 2], en.back());
    for (int q = 0; q < 6; q++) { /* each phase's median */
      std::vector<double> ph;
      for (int i = 0; i < FF_TL_SLOTS; i++) {
        const ff_tl_rec &r = a[(size_t)k * FF_TL_SLOTS + i];
        if (r.used && r.ph[q]) ph.push_back((r.ph[q] - t0) / 1e3);
      }
      std::sort(ph.begin(), ph.end());
      if (ph.empty()) fprintf(fp, "       -");
      else fprintf(fp, " %7.2f", ph[ph.size() / 2]);
    }
    std::vector<double> mhz; /* thread 0's clock over its last phase */
    for (int i = 0; i < FF_TL_SLOTS; i++) {
      const ff_tl_rec &r = a[(size_t)k * FF_TL_SLOTS + i];
      for (int q = 5; q >= 0 && r.used; q--)
        if (r.ph[q] > r.start) {
          mhz.push_back((double)(r.cph[q] - r.cstart) / (double)(r.ph[q] - r.start) * 1e3);
          break;
        }
    }
    std::sort(mhz.begin(), mhz.end());
    if (!mhz.empty()) fprintf(fp, " | %4.0f MHz", mhz[mhz.size() / 2]);
    fprintf(fp, "\n");
  }
  fprintf(fp, "# kind block sm start waited end (us)\n");
  for (int k = 0; k < FF_TL_KINDS; k++)
    for (int i = 0; i < FF_TL_SLOTS; i++) {
      const ff_tl_rec &r = a[(size_t)k * FF_TL_SLOTS + i];
      if (!r.used) continue;
      fprintf(fp, "%s %d %u %.3f %.3f %.3f\n", tl_names[k], i, r.sm, (r.start - t0) / 1e3,
              r.waited ? (r.waited - t0) / 1e3 : -1.0, r.end ? (r.end - t0) / 1e3 : -1.0);
    }
  fclose(fp);
}

apx_status cuda_ff_infer(void *state, const apx_ff_infer_args *args, const apx_call *call) {
  static long calls = 0;
  const char *path = getenv("APEXX_FF_TIMELINE"), *at = getenv("APEXX_FF_TIMELINE_AT");
  const long n = ++calls;
  int on = 0;
  if (path && at)
    for (const char *q = at; *q;) {
      char *e;
      long v = strtol(q, &e, 10);
      if (e == q) break;
      if (v == n) on = 1;
      q = *e ? e + 1 : e;
    }
  cudaStream_t s = cuda_stream(call);
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (on && (cudaStreamIsCapturing(s, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone))
    on = 0;
  if (on) {
    cuda_ff_tl_route_clear(s);
    cuda_ff_tl_refine_clear(s);
  }
  apx_status rc = ff_frame(state, args, call);
  if (on && rc == APX_OK && cudaStreamSynchronize(s) == cudaSuccess) tl_write(path, n);
  return rc;
}
#else
apx_status cuda_ff_infer(void *state, const apx_ff_infer_args *args, const apx_call *call) {
  return ff_frame(state, args, call);
}
#endif
