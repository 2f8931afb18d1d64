/* SPDX-License-Identifier: Apache-2.0 */
/* tilepack on CUDA (docs/ops.md, tilepack): out[b,k,c,dy,dx] =
 * features[b,c,ty*t+dy,tx*t+dx], ids in the given order. A pure copy:
 * bit-exact, moved in the widest unit (16, 8, 4 or 2 bytes) that divides
 * a tile row, an image row and both base addresses. The output is never
 * aliased, so with validate=device the kernels check the ids they read
 * themselves (cuda_check_own): ids are clamped for the loads and the least
 * bad position is published; eager's pre-pass has run before them.
 *
 * The grid's y runs over the channel planes (b, c), x over the work items
 * (k, dy, unit) of one plane, so that the tiles of one plane are read
 * together (neighbouring tiles share cache sectors) while each tile's row
 * is still written as one contiguous run. A copy unit's chain is three
 * dependent steps (id load, feature load, store); with one unit per
 * thread the SMs most likely wait on that latency rather than on DRAM
 * (well below copy bandwidth, docs/performance.md). Each
 * thread therefore takes TILEPACK_UNITS items spaced one block apart
 * (w0 + j*blockDim.x, j < TILEPACK_UNITS) and issues all their id loads,
 * then all feature loads, then all stores: the chains overlap, while at
 * every step j a warp still touches 32 consecutive items, the addresses
 * of one warp of the one-unit form.
 *
 * Large K: the tiles of a plane are taken in ascending id (spatial) order,
 * not in k order. DRAM serves the 64-byte pieces that neighbouring tiles
 * share while they are open, instead of reopening them at random: at the
 * large profile (K 2048 of 4096 tiles, t 8 fp16) ids in spatial order
 * raised the kernel's share of copy bandwidth by about ten points
 * (docs/performance.md). A kernel of one block a batch row sorts the row's
 * (id, k) pairs first (stable: equal ids keep k order); each work item
 * then loads its pair instead of its id, so its chain is no longer. */
#include "cuda_backend.h"

#include <cub/block/block_radix_sort.cuh>

struct tilepack_geometry {
  int64_t B, C, H, W, K, t;
  int64_t gw;
  unsigned unit;          /* bytes per copy unit */
  int64_t units_per_row;  /* t*elem / unit */
  int64_t planes;         /* B*C: the outer loop */
  int64_t plane_work;     /* K*t*units_per_row: the inner loop, < 2^31 */
  cuda_fastdiv per_tile;  /* t*units_per_row */
  cuda_fastdiv per_row;   /* units_per_row */
  cuda_fastdiv grid_w;    /* gw: tile id -> (ty, tx) */
  cuda_geom2 launch;
};

/* Work items per thread (independent copy chains in flight). */
#define TILEPACK_UNITS 4
#define TILEPACK_THREADS 256
/* The spatial order for K in [TILEPACK_SORT_MIN_K, TILEPACK_SORT_THREADS *
 * TILEPACK_SORT_MAX_ITEMS]; below, a sort launch costs more than it saves
 * (the seed profile's K 32 calls are a few microseconds in all). */
#define TILEPACK_SORT_MIN_K 512
#define TILEPACK_SORT_THREADS 256
#define TILEPACK_SORT_MAX_ITEMS 16

/* Batch row blockIdx.x's (id, k) pairs by ascending id into order[b*K ..]:
 * the ids as 32-bit keys (as the copy kernel reads them; a bad id's place
 * only changes the order, and the copy kernel clamps it), their low
 * key_bits bits sorted; places past K sort last. ic.record
 * (validate=device): this kernel reads every id once, so it checks them
 * (the copy kernel then only clamps) and each warp publishes its least
 * bad position. */
template <typename I, int ITEMS>
__global__ void __launch_bounds__(TILEPACK_SORT_THREADS)
    tilepack_order_kernel(const I *__restrict__ idx, int64_t K, int key_bits, uint2 *order,
                          cuda_inline_check ic) {
  typedef cub::BlockRadixSort<uint32_t, TILEPACK_SORT_THREADS, ITEMS, uint32_t> sort_t;
  __shared__ typename sort_t::TempStorage tmp;
  const int64_t b = blockIdx.x;
  uint32_t key[ITEMS], val[ITEMS];
  unsigned long long first = ~0ULL;
#pragma unroll
  for (int j = 0; j < ITEMS; j++) { /* blocked: place threadIdx.x * ITEMS + j */
    const int64_t k = (int64_t)threadIdx.x * ITEMS + j;
    const int64_t id = k < K ? (int64_t)idx[b * K + k] : 0;
    if (ic.record && (id < ic.desc.lo || id > ic.desc.hi) && first == ~0ULL)
      first = (unsigned long long)(b * K + k);
    key[j] = k < K ? (uint32_t)id : 0xffffffffu;
    val[j] = (uint32_t)k;
  }
  if (ic.record) cuda_warp_publish(ic, first);
  sort_t(tmp).SortBlockedToStriped(key, val, 0, key_bits);
#pragma unroll
  for (int j = 0; j < ITEMS; j++) { /* striped: rank j * THREADS + threadIdx.x */
    const int64_t r = (int64_t)j * TILEPACK_SORT_THREADS + threadIdx.x;
    if (r < K) order[b * K + r] = make_uint2(key[j], val[j]);
  }
}

template <typename U, typename I>
__global__ void __launch_bounds__(TILEPACK_THREADS)
    tilepack_kernel(const unsigned char *__restrict__ features, const I *__restrict__ idx,
                    unsigned char *__restrict__ out, tilepack_geometry g, int elem,
                    const uint2 *__restrict__ order, cuda_inline_check ic) {
  const int64_t row_bytes = g.t * elem;
  const bool check = ic.record != nullptr;
  const uint32_t id_max = (uint32_t)ic.desc.hi; /* with check: >= 0 */
  unsigned long long first = ~0ULL;
  /* n < 2^31 and the grid stride (gridDim.x*span, the first multiple of
   * span >= n) is at most 2^31, so w0 + j*blockDim.x and w0 + stride stay
   * below 2^32 in 32 bits */
  const uint32_t n = (uint32_t)g.plane_work;
  const uint32_t span = blockDim.x * TILEPACK_UNITS;
  CUDA_FOR_OUTER(plane, g.planes) {
    int64_t b = plane / g.C, c = plane % g.C;
    const I *plane_idx = idx + b * g.K;
    const uint2 *plane_order = order ? order + b * g.K : nullptr;
    /* block bx covers items [bx*span, bx*span + span) of each grid stride;
     * thread x takes x + j*blockDim.x of it: every item exactly once */
    for (uint32_t w0 = blockIdx.x * span + threadIdx.x; w0 < n; w0 += gridDim.x * span) {
      /* items past n are clamped to n - 1 (n >= 1: the host launches
       * nothing for n = 0), so that the loads need no branch; only their
       * stores are skipped */
      uint32_t k[TILEPACK_UNITS], r[TILEPACK_UNITS], id[TILEPACK_UNITS];
      unsigned char *dst[TILEPACK_UNITS];
      U v[TILEPACK_UNITS];
#pragma unroll
      for (int j = 0; j < TILEPACK_UNITS; j++) { /* 1: the ids (and k, in id order) */
        uint32_t w = min(w0 + j * blockDim.x, n - 1);
        const uint32_t rank = g.per_tile.div(w);
        r[j] = w - rank * g.per_tile.d;
        if (plane_order) { /* checked by the order kernel: clamped only */
          const uint2 p = plane_order[rank];
          id[j] = check && p.x > id_max ? id_max : p.x;
          k[j] = p.y;
        } else {
          k[j] = rank;
          const int64_t v = (int64_t)plane_idx[rank];
          id[j] = (uint32_t)v;
          if (check && (v < 0 || v > (int64_t)id_max)) { /* reads in bounds */
            const unsigned long long pos = (unsigned long long)(b * g.K + rank);
            first = pos < first ? pos : first;
            id[j] = v < 0 ? 0u : id_max;
          }
        }
      }
#pragma unroll
      for (int j = 0; j < TILEPACK_UNITS; j++) { /* 2: the feature units */
        uint32_t dy = g.per_row.div(r[j]), u = r[j] - dy * g.per_row.d;
        uint32_t ty = g.grid_w.div(id[j]);
        int64_t y = (int64_t)ty * g.t + dy, x0 = (int64_t)(id[j] - ty * g.grid_w.d) * g.t;
        v[j] = __ldg((const U *)(features + ((plane * g.H + y) * g.W + x0) * elem +
                                 u * (int64_t)sizeof(U)));
        dst[j] = out + (((b * g.K + k[j]) * g.C + c) * g.t + dy) * row_bytes +
                 u * (int64_t)sizeof(U);
      }
#pragma unroll
      for (int j = 0; j < TILEPACK_UNITS; j++) /* 3: the stores */
        if (w0 + j * blockDim.x < n) *(U *)dst[j] = v[j];
    }
  }
  if (check) cuda_warp_publish(ic, first); /* blocks are whole warps */
}

/* The widest unit that divides every byte offset the kernel forms. */
static unsigned copy_unit(int64_t row_bytes, int64_t line_bytes, const void *a, const void *b) {
  static const unsigned units[] = {16, 8, 4, 2};
  for (unsigned i = 0; i < sizeof units / sizeof units[0]; i++) {
    unsigned u = units[i];
    if (row_bytes % u == 0 && line_bytes % u == 0 && (uintptr_t)a % u == 0 &&
        (uintptr_t)b % u == 0)
      return u;
  }
  return 1;
}

static tilepack_geometry geometry(const apx_tilepack_args *a, size_t elem) {
  tilepack_geometry g;
  g.B = a->features->shape[0];
  g.C = a->features->shape[1];
  g.H = a->features->shape[2];
  g.W = a->features->shape[3];
  g.K = a->idx->shape[1];
  g.t = a->tile;
  g.gw = g.W / g.t;
  g.unit = copy_unit(g.t * (int64_t)elem, g.W * (int64_t)elem, a->features->data, a->out->data);
  g.units_per_row = g.t * (int64_t)elem / g.unit;
  g.planes = g.B * g.C;
  g.plane_work = g.K * g.t * g.units_per_row;
  g.per_tile = cuda_fastdiv_make((uint32_t)(g.t * g.units_per_row));
  g.per_row = cuda_fastdiv_make((uint32_t)g.units_per_row);
  g.grid_w = cuda_fastdiv_make((uint32_t)g.gw);
  /* x: spans of TILEPACK_UNITS items per thread (the kernel's loop) */
  g.launch = cuda_geom_2d(g.planes, (g.plane_work + TILEPACK_UNITS - 1) / TILEPACK_UNITS,
                          TILEPACK_THREADS);
  return g;
}

/* order: NULL (k order) or the (id, k) pairs by id, filled here. */
template <typename I>
static void launch(const tilepack_geometry &g, const apx_tilepack_args *a, int elem,
                   uint2 *order, const cuda_inline_check &ic, cudaStream_t s) {
  const unsigned char *f = (const unsigned char *)a->features->data;
  unsigned char *o = (unsigned char *)a->out->data;
  const I *idx = (const I *)a->idx->data;
  if (order) {
    int64_t tiles = (g.H / g.t) * g.gw, items = (g.K + TILEPACK_SORT_THREADS - 1) /
                                                TILEPACK_SORT_THREADS;
    int key_bits = 1;
    while (key_bits < 32 && (tiles - 1) >> key_bits) key_bits++;
    const unsigned nb = (unsigned)g.B;
    if (items <= 2)
      tilepack_order_kernel<I, 2><<<nb, TILEPACK_SORT_THREADS, 0, s>>>(idx, g.K, key_bits, order, ic);
    else if (items <= 4)
      tilepack_order_kernel<I, 4><<<nb, TILEPACK_SORT_THREADS, 0, s>>>(idx, g.K, key_bits, order, ic);
    else if (items <= 8)
      tilepack_order_kernel<I, 8><<<nb, TILEPACK_SORT_THREADS, 0, s>>>(idx, g.K, key_bits, order, ic);
    else
      tilepack_order_kernel<I, 16><<<nb, TILEPACK_SORT_THREADS, 0, s>>>(idx, g.K, key_bits,
                                                                         order, ic);
  }
  const uint2 *ord = order;
  dim3 grid = g.launch.grid, block = g.launch.block;
  switch (g.unit) {
  case 16: tilepack_kernel<uint4, I><<<grid, block, 0, s>>>(f, idx, o, g, elem, ord, ic); break;
  case 8: tilepack_kernel<uint2, I><<<grid, block, 0, s>>>(f, idx, o, g, elem, ord, ic); break;
  case 4:
    tilepack_kernel<uint32_t, I><<<grid, block, 0, s>>>(f, idx, o, g, elem, ord, ic);
    break;
  case 2:
    tilepack_kernel<uint16_t, I><<<grid, block, 0, s>>>(f, idx, o, g, elem, ord, ic);
    break;
  default:
    tilepack_kernel<uint8_t, I><<<grid, block, 0, s>>>(f, idx, o, g, elem, ord, ic);
    break;
  }
}

apx_status cuda_tilepack(void *state, const apx_tilepack_args *a, const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  int dev = a->features->device_index;
  apx_status s = cuda_use_device(st, dev);
  if (s != APX_OK) return s;
  cudaStream_t stream = cuda_stream(call);
  size_t elem = apx_backend_dtype_size(a->features->dtype);
  tilepack_geometry g = geometry(a, elem);
  if (g.planes * g.plane_work == 0) return APX_OK; /* K = 0 or B = 0: nothing to write */
  if (g.plane_work > 0x7fffffffLL)
    return st->svc->set_error(APX_ERR_UNSUPPORTED,
                              "tilepack: K*t*t = [%lld] elements per channel is beyond the cuda "
                              "backend's 2^31 per plane",
                              (long long)(g.K * g.t * g.t));
  cuda_check_desc d;
  cuda_check_init(&d, APX_OP_TILEPACK, "idx", a->idx);
  d.lo = 0;
  d.hi = apx_tile_id_max(a->features, a->tile); /* include/apexx/op_rules.h */
  cuda_inline_check ic;
  if (d.hi < 0 || !cuda_check_own(st, dev, &d, &ic)) {
    /* eager: the pre-pass, waited for; no tile at all: the check alone */
    cuda_checked chk;
    s = cuda_check_run(st, dev, stream, &d, 0, &chk);
    if (s != APX_OK || d.hi < 0) return s;
  }
  /* large K: the spatial order, its pairs in stream-ordered workspace */
  cuda_workspace ws;
  ws.ptr = nullptr;
  if (g.K >= TILEPACK_SORT_MIN_K && g.K <= TILEPACK_SORT_THREADS * TILEPACK_SORT_MAX_ITEMS) {
    s = cuda_ws_alloc(st, stream, (size_t)(g.B * g.K) * sizeof(uint2), &ws,
                      "tilepack: tile order");
    if (s != APX_OK) return s;
  }
  if (a->idx->dtype == APX_DTYPE_I64)
    launch<int64_t>(g, a, (int)elem, (uint2 *)ws.ptr, ic, stream);
  else
    launch<int32_t>(g, a, (int)elem, (uint2 *)ws.ptr, ic, stream);
  cudaError_t err = cudaGetLastError();
  if (ws.ptr) cuda_ws_free(&ws); /* stream-ordered: after the copy kernel */
  if (err != cudaSuccess) return cuda_fail(st, err, "tilepack: launch");
  return APX_OK;
}
