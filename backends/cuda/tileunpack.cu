/* SPDX-License-Identifier: Apache-2.0 */
/* tileunpack on CUDA (docs/ops.md, tileunpack): out = base with the packed tiles
 * written back by priority key = (level, k); override: the highest key
 * covering a pixel wins; blend: the covering tiles are composed in
 * ascending key order, cur = (1-a)*cur + a*tile, in fp32, rounded once.
 *
 * No atomics on pixels and no launch per tile. With ids every tile sits on
 * exactly one cell of the tile grid, so a pre-pass takes the maximum key
 * per cell (atomicMax on a [B, gh*gw] map; the maximum does not depend on
 * the order): override needs nothing more, and blend uses it for cells
 * with one tile (it also counts tiles per cell). For cells with several
 * tiles (blend) and for free origins, every tile is entered into the t x t
 * cells it overlaps (up to four) with the sort key (cell, priority); one
 * radix sort orders all entries; a pass marks where each cell's run
 * starts. Then one output pass over the planes in address order: a thread
 * takes a vector of pixels of one row and either copies (blends) one tile
 * row segment or walks its cell's entries; override with ids takes four
 * such vectors per thread, their loads issued together (latency, see
 * unpack_cells_kernel). Small calls (ids, K <= 64) are one launch instead:
 * unpack_table_kernel (a per-block cell table, small tile grids) or
 * unpack_small_kernel. Same input, same bits. */
/* Layers: tileunpack.h (arguments of the kernels, launch tuning), the
 * kernels in tileunpack_index.cuh, tileunpack_cells.cuh,
 * tileunpack_small.cuh and tileunpack_table.cuh; here the launch switch
 * and the op's entry. */
#include "cuda_backend.h"

#include <cub/device/device_radix_sort.cuh>

#include <limits.h>

#include <string.h>

#include "tileunpack.h"
#include "tileunpack_index.cuh"
#include "tileunpack_cells.cuh"
#include "tileunpack_small.cuh"
#include "tileunpack_table.cuh"

/* A failed launch leaves its error for the caller's cudaGetLastError. */
template <typename T, int VEC>
static void launch_small(const cuda_state *st, int dev, const unpack_geometry &g,
                         const apx_tileunpack_args *a, const unpack_sources &src,
                         const cuda_inline_check &ic, float alpha, const int *bad,
                         cudaStream_t s) {
  int aliased = a->out->data == a->base->data;
  int blend = a->mode == APX_OVERLAP_BLEND;
  if (g.gh * g.gw <= UNPACK_TABLE_CELLS) { /* the seed form */
    cuda_geom2 l = cuda_geom_2d(
        g.planes, (g.plane_groups + UNPACK_TABLE_UNITS - 1) / UNPACK_TABLE_UNITS, UNPACK_THREADS);
    /* the cell words, rounded up to 16 bytes, then the staged slices */
    int64_t slices = g.K * (g.t * g.t / VEC);
    int staged = slices <= UNPACK_THREADS;
    size_t smem = (size_t)((g.gh * g.gw + 1) & ~(int64_t)1) * sizeof(unsigned long long) +
                  (staged ? (size_t)slices * sizeof(unpack_pack<T, VEC>) : 0);
    /* beside the check kernel when there is one (validate=device) */
    const int beside = bad != nullptr;
    (void)cuda_launch_after(
        st, dev, beside, l.grid, l.block, smem, s,
        blend ? unpack_table_kernel<T, VEC, 1> : unpack_table_kernel<T, VEC, 0>,
        (const T *)a->base->data, (const T *)a->packed->data, (T *)a->out->data, src, g, aliased,
        alpha, staged, ic, bad);
    return;
  }
  int units = blend ? UNPACK_SMALL_BLEND_UNITS : UNPACK_UNITS;
  cuda_geom2 l = cuda_geom_2d(g.planes, (g.plane_groups + units - 1) / units, UNPACK_THREADS);
  if (blend)
    unpack_small_kernel<T, VEC, 1, UNPACK_SMALL_BLEND_UNITS><<<l.grid, l.block, 0, s>>>(
        (const T *)a->base->data, (const T *)a->packed->data, (T *)a->out->data, src, g, aliased,
        alpha, ic, bad);
  else
    unpack_small_kernel<T, VEC, 0, UNPACK_UNITS><<<l.grid, l.block, 0, s>>>(
        (const T *)a->base->data, (const T *)a->packed->data, (T *)a->out->data, src, g, aliased,
        alpha, ic, bad);
}

static int bit_length(uint64_t v) {
  int n = 0;
  while (v) {
    n++;
    v >>= 1;
  }
  return n;
}

static unpack_geometry geometry(const apx_tileunpack_args *a) {
  unpack_geometry g;
  g.B = a->base->shape[0];
  g.C = a->base->shape[1];
  g.H = a->base->shape[2];
  g.W = a->base->shape[3];
  g.K = a->packed->shape[1];
  g.t = a->packed->shape[3];
  g.gh = g.H / g.t;
  g.gw = g.W / g.t;
  g.cells = g.B * g.gh * g.gw;
  g.entries_per_tile = a->origins ? 4 : 1;
  g.entries = g.B * g.K * g.entries_per_tile;
  /* docs/ops.md, tileunpack: order_bits = max(1, bit_length(K-1)) */
  int ob = g.K > 1 ? bit_length((uint64_t)(g.K - 1)) : 1;
  g.order_bits = ob < 1 ? 1 : ob;
  g.end_bit = 32 + bit_length((uint64_t)g.cells);
  size_t elem = apx_backend_dtype_size(a->base->dtype);
  int vec = (int)(16 / elem);
  while (vec > 1 && (g.t % vec != 0 || (uintptr_t)a->base->data % (vec * elem) != 0 ||
                     (uintptr_t)a->out->data % (vec * elem) != 0 ||
                     (uintptr_t)a->packed->data % (vec * elem) != 0))
    vec /= 2;
  g.vec = vec;
  g.planes = g.B * g.C;
  g.plane_groups = g.H * (g.W / vec);
  g.groups_per_row = cuda_fastdiv_make((uint32_t)(g.W / vec));
  g.tile = cuda_fastdiv_make((uint32_t)g.t);
  g.tiles_launch = cuda_geom_1d(g.B * g.K, 256);
  g.entries_launch = cuda_geom_1d(g.entries, 256);
  /* with ids the output pass reads the winner map (cuda_tileunpack:
   * use_win), the case of the several-groups-per-thread form */
  g.units = !a->idx ? 1 : (a->mode == APX_OVERLAP_OVERRIDE ? UNPACK_UNITS : UNPACK_BLEND_UNITS);
  g.out_launch =
      cuda_geom_2d(g.planes, (g.plane_groups + g.units - 1) / g.units, UNPACK_THREADS);
  return g;
}

template <typename T, int VEC, int BLEND, int UNITS>
static void launch_out_units(const unpack_geometry &g, const apx_tileunpack_args *a,
                             const unpack_cells_src &m, float alpha, const int *bad,
                             cudaStream_t s) {
  int aliased = a->out->data == a->base->data;
  unpack_cells_kernel<T, VEC, BLEND, UNITS><<<g.out_launch.grid, g.out_launch.block, 0, s>>>(
      (const T *)a->base->data, (const T *)a->packed->data, (T *)a->out->data, m, g, aliased,
      alpha, bad);
}

/* UNITS > 1 reads the winner map (and blend's counts): only with m.win
 * (ids); the grid was sized for g.units groups per thread. The one-group
 * form covers any grid (grid-stride loops). */
template <typename T, int VEC>
static void launch_out(const cuda_state *st, int dev, const unpack_geometry &g,
                       const apx_tileunpack_args *a, const unpack_cells_src &m,
                       const unpack_sources *small, const cuda_inline_check &ic, float alpha,
                       const int *bad, cudaStream_t s) {
  if (small)
    launch_small<T, VEC>(st, dev, g, a, *small, ic, alpha, bad, s);
  else if (a->mode == APX_OVERLAP_BLEND) {
    if (g.units == UNPACK_BLEND_UNITS && m.win && m.count && m.start) {
      int aliased = a->out->data == a->base->data;
      unpack_blend_ids_kernel<T, VEC, UNPACK_BLEND_UNITS>
          <<<g.out_launch.grid, g.out_launch.block, 0, s>>>(
              (const T *)a->base->data, (const T *)a->packed->data, (T *)a->out->data, m, g,
              aliased, alpha, bad);
    } else
      launch_out_units<T, VEC, 1, 1>(g, a, m, alpha, bad, s);
  } else {
    if (g.units == UNPACK_UNITS && m.win)
      launch_out_units<T, VEC, 0, UNPACK_UNITS>(g, a, m, alpha, bad, s);
    else
      launch_out_units<T, VEC, 0, 1>(g, a, m, alpha, bad, s);
  }
}

template <typename T>
static void launch_out_typed(const cuda_state *st, int dev, const unpack_geometry &g,
                             const apx_tileunpack_args *a, const unpack_cells_src &m,
                             const unpack_sources *small, const cuda_inline_check &ic,
                             float alpha, const int *bad, cudaStream_t s) {
  switch (g.vec) {
  case 8: launch_out<T, 8>(st, dev, g, a, m, small, ic, alpha, bad, s); break;
  case 4: launch_out<T, 4>(st, dev, g, a, m, small, ic, alpha, bad, s); break;
  case 2: launch_out<T, 2>(st, dev, g, a, m, small, ic, alpha, bad, s); break;
  default: launch_out<T, 1>(st, dev, g, a, m, small, ic, alpha, bad, s); break;
  }
}

/* The output pass for any dtype: the map/sort form (m), or the small-K
 * form when `small` gives its sources; alpha is rounded to the base dtype
 * first, as the reference does (a 0-d tensor). */
static void launch_out_any(const cuda_state *st, int dev, const unpack_geometry &g,
                           const apx_tileunpack_args *a, const unpack_cells_src &m,
                           const unpack_sources *small, const cuda_inline_check &ic,
                           const int *bad, cudaStream_t stream) {
  float alpha = (float)a->blend_alpha;
  switch (a->base->dtype) {
  case APX_DTYPE_F16:
    alpha = __half2float(__float2half_rn(alpha));
    launch_out_typed<__half>(st, dev, g, a, m, small, ic, alpha, bad, stream);
    break;
  case APX_DTYPE_BF16:
    alpha = __bfloat162float(__float2bfloat16_rn(alpha));
    launch_out_typed<__nv_bfloat16>(st, dev, g, a, m, small, ic, alpha, bad, stream);
    break;
  default: launch_out_typed<float>(st, dev, g, a, m, small, ic, alpha, bad, stream); break;
  }
}

/* The call's index check: ids or origins in range, the levels' span
 * within the int32 key. */
static void check_desc_of(const apx_tileunpack_args *a, const unpack_geometry &g,
                          cuda_check_desc *d) {
  if (a->idx) {
    cuda_check_init(d, APX_OP_TILEUNPACK, "idx", a->idx);
    d->lo = 0;
    d->hi = g.gh * g.gw - 1;
  } else {
    cuda_check_init(d, APX_OP_TILEUNPACK, "origins", a->origins);
    d->pairs = 1;
    d->count = g.B * g.K;
    d->lo = 0;
    d->hi = g.H - g.t;
    d->lo2 = 0;
    d->hi2 = g.W - g.t;
  }
  if (a->levels) {
    d->levels = a->levels->data;
    d->levels_is64 = a->levels->dtype == APX_DTYPE_I64;
    d->levels_count = g.B * g.K;
    d->order_bits = g.order_bits;
    d->key_k = g.K;
  }
}

/* The map/sort form (every call but small K with ids): the winner map
 * (ids) and/or the sorted entries in workspace, then the output pass. */
static apx_status run_sorted(cuda_state *st, int dev, const apx_tileunpack_args *a,
                             const unpack_geometry &g, const unpack_sources &src,
                             const cuda_inline_check &ic, const cuda_checked &chk,
                             cudaStream_t stream) {
  apx_status s;
  unpack_cells_src m;
  memset(&m, 0, sizeof m);
  cudaError_t err = cudaSuccess;
  /* ids: a winner map (override needs nothing else: the maximum key per
   * cell does not depend on the order); blend with ids also counts tiles
   * per cell and keeps the sorted entries for cells with several tiles;
   * origins: the sorted entries only */
  int use_win = a->idx != NULL;
  int use_count = use_win && a->mode == APX_OVERLAP_BLEND;
  int use_sort = !(use_win && a->mode == APX_OVERLAP_OVERRIDE);
  size_t n = (size_t)g.entries;
  size_t sort_bytes = 0;
  if (use_sort) {
    err = cub::DeviceRadixSort::SortPairs(
        nullptr, sort_bytes, (const unsigned long long *)nullptr, (unsigned long long *)nullptr,
        (const int *)nullptr, (int *)nullptr, (int64_t)n, 0, g.end_bit, stream);
    if (err != cudaSuccess) return cuda_fail(st, err, "tileunpack: sort size");
  }
  size_t win_bytes = use_win ? cuda_align_up((size_t)g.cells * sizeof(unsigned long long)) : 0;
  size_t count_bytes = use_count ? cuda_align_up((size_t)g.cells * sizeof(int)) : 0;
  size_t key_bytes = use_sort ? cuda_align_up(n * sizeof(unsigned long long)) : 0;
  size_t val_bytes = use_sort ? cuda_align_up(n * sizeof(int)) : 0;
  size_t origin_bytes = use_sort ? cuda_align_up((size_t)(g.B * g.K) * sizeof(int2)) : 0;
  size_t start_bytes = use_sort ? cuda_align_up((size_t)(g.cells + 1) * sizeof(int)) : 0;
  cuda_workspace ws;
  s = cuda_ws_alloc(st, stream,
                    win_bytes + count_bytes + 2 * key_bytes + 2 * val_bytes + origin_bytes +
                        start_bytes + (use_sort ? cuda_align_up(sort_bytes) : 0),
                    &ws, "tileunpack: workspace");
  if (s != APX_OK) return s;
  char *p = (char *)ws.ptr;
  unsigned long long *win = (unsigned long long *)p;
  p += win_bytes;
  int *count = (int *)p;
  p += count_bytes;
  unsigned long long *keys_in = (unsigned long long *)p;
  p += key_bytes;
  unsigned long long *keys_out = (unsigned long long *)p;
  p += key_bytes;
  int *vals_in = (int *)p;
  p += val_bytes;
  int *vals_out = (int *)p;
  p += val_bytes;
  int2 *origin32 = (int2 *)p;
  p += origin_bytes;
  int *start = (int *)p;
  p += start_bytes;
  void *sort_tmp = p;

  if (use_win) { /* the map and the counts are adjacent: one memset */
    err = cudaMemsetAsync(win, 0, win_bytes + count_bytes, stream);
    if (err == cudaSuccess) {
      unpack_winners_kernel<<<g.tiles_launch.blocks, g.tiles_launch.threads, 0, stream>>>(
          src, g, win, use_count ? count : nullptr);
      err = cudaGetLastError();
    }
    m.win = win;
    m.count = use_count ? count : nullptr;
    m.kmask = ((unsigned long long)1 << g.order_bits) - 1;
  }
  if (err == cudaSuccess && use_sort) {
    unpack_entries_kernel<<<g.tiles_launch.blocks, g.tiles_launch.threads, 0, stream>>>(
        src, g, keys_in, vals_in, origin32);
    err = cudaGetLastError();
    if (err == cudaSuccess)
      err = cub::DeviceRadixSort::SortPairs(sort_tmp, sort_bytes, keys_in, keys_out, vals_in,
                                            vals_out, (int64_t)n, 0, g.end_bit, stream);
    if (err == cudaSuccess) {
      unpack_starts_kernel<<<g.entries_launch.blocks, g.entries_launch.threads, 0, stream>>>(
          keys_out, g, start);
      err = cudaGetLastError();
    }
    m.start = start;
    m.vals = vals_out;
    m.origin32 = origin32;
  }
  if (err == cudaSuccess) {
    launch_out_any(st, dev, g, a, m, nullptr, ic, chk.bad, stream);
    err = cudaGetLastError();
  }
  cuda_ws_free(&ws);
  if (err != cudaSuccess) return cuda_fail(st, err, "tileunpack: launch");
  return APX_OK;
}

apx_status cuda_tileunpack(void *state, const apx_tileunpack_args *a, const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  int dev = a->base->device_index;
  apx_status s = cuda_use_device(st, dev);
  if (s != APX_OK) return s;
  cudaStream_t stream = cuda_stream(call);
  unpack_geometry g = geometry(a);
  size_t elem = apx_backend_dtype_size(a->base->dtype);
  int64_t numel = g.B * g.C * g.H * g.W;
  if (numel == 0) return APX_OK;
  int aliased = a->out->data == a->base->data;
  if (g.H * g.W > 0x7fffffffLL)
    return st->svc->set_error(APX_ERR_UNSUPPORTED,
                              "tileunpack: H*W = [%lld] is beyond the cuda backend's 2^31 "
                              "pixels per plane",
                              (long long)(g.H * g.W));
  if (g.K == 0) { /* output = copy of base (docs/ops.md, tileunpack) */
    if (!aliased)
      CUDA_TRY(st, cudaMemcpyAsync(a->out->data, a->base->data, (size_t)numel * elem,
                                   cudaMemcpyDeviceToDevice, stream),
               "tileunpack: copy");
    return APX_OK;
  }

  /* pre-pass: ids or origins in range, levels' span within the int32 key */
  cuda_check_desc d;
  check_desc_of(a, g, &d);
  /* small K with ids: the one-launch form, which needs no levels minimum */
  const int small = a->idx != NULL && g.K <= UNPACK_SMALL_K;
  const int table = small && g.gh * g.gw <= UNPACK_TABLE_CELLS;
  const int device_mode = st->validate_mode == APX_VALIDATE_DEVICE;
  /* validate=device, the table form and an entry a thread: the table
   * kernel checks in its table build (own_check, its ic from
   * cuda_check_inline below, which takes B*K <= 1024); with more entries
   * on sm_90 the check is a kernel of its own and the table kernel starts
   * beside it (launch_small), which cost less than cuda_block_check inside
   * the kernel at the seed profile */
  const int own_check = table && device_mode && g.B * g.K <= UNPACK_THREADS;
  const int check_beside = table && device_mode && !own_check && cuda_pdl_ok(st, dev);
  cuda_inline_check ic;
  memset(&ic, 0, sizeof ic);
  cuda_checked chk;
  memset(&chk, 0, sizeof chk);
  if (!small || check_beside || !cuda_check_inline(st, dev, &d, &ic)) {
    s = cuda_check_run(st, dev, stream, &d, a->levels != NULL && !small, &chk);
    if (s != APX_OK) return s;
  }

  unpack_sources src;
  src.idx = a->idx ? a->idx->data : nullptr;
  src.origins = a->origins ? a->origins->data : nullptr;
  src.placement_is64 = (a->idx ? a->idx->dtype : a->origins->dtype) == APX_DTYPE_I64;
  src.levels = a->levels ? a->levels->data : nullptr;
  src.levels_is64 = a->levels && a->levels->dtype == APX_DTYPE_I64;
  src.lmin = chk.lmin;
  unpack_cells_src m;
  memset(&m, 0, sizeof m);
  if (small) {
    launch_out_any(st, dev, g, a, m, &src, ic, chk.bad, stream);
    CUDA_LAUNCHED(st, "tileunpack: launch");
    return APX_OK;
  }
  return run_sorted(st, dev, a, g, src, ic, chk, stream);
}
