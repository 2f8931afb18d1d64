/* SPDX-License-Identifier: Apache-2.0 */
/* Device-side index checks: the validation pre-pass of ops whose index
 * values live in device memory (include/apexx/backend.h validate_mode;
 * docs/ops.md, Validation modes), the message formatter and the device's
 * error record. validate=eager runs the pre-pass and waits for it;
 * validate=device runs it for an aliased output (which must stay
 * untouched, so every block needs the verdict before any store), for a
 * large index of an op whose blocks must agree (uniqueness, the levels'
 * span), and where the op needs the statistics anyway (scatter_add's row
 * note); an out-of-place call's own kernel checks the entries it reads
 * instead (cuda_check_own, cuda_warp_publish).
 *
 * One kernel checks one index tensor on the call's stream: ranges of ids
 * or origins, uniqueness per batch row (fused_pack_op_unpack's
 * require_unique), the levels' span (tileunpack's int32 priority key), and
 * a row-constancy note that scatter_add uses to pick its path. Each block
 * reduces its share and leaves it in the call's slot; the last block to
 * finish combines them, so the verdict needs no second launch. The main
 * kernels read the verdict first and write nothing when it is bad. */
#include "cuda_backend.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

void cuda_check_init(cuda_check_desc *d, apx_op_id op, const char *arg,
                     const apx_tensor *index) {
  memset(d, 0, sizeof *d);
  d->op = (int)op;
  snprintf(d->arg, sizeof d->arg, "%s", arg);
  if (!index) return;
  d->data = index->data;
  d->is64 = index->dtype == APX_DTYPE_I64;
  d->ndim = index->ndim;
  for (int i = 0; i < index->ndim && i < APX_MAX_DIMS; i++) d->shape[i] = index->shape[i];
  d->count = apx_backend_numel(index);
}

static __device__ __forceinline__ int64_t row_start_of(const cuda_check_desc &d, int64_t i) {
  if (d.small_rows) return (int64_t)d.row_div.div((uint32_t)i) * d.const_row;
  return i - i % d.const_row;
}

/* Thread 0 of the verdict's block: the call's result into the slot, and
 * (validate=device) the first failure since the last sync into the record. */
static __device__ void check_finish(const cuda_check_desc &d, cuda_check_slot *slot,
                                    cuda_error_record *record, int publish,
                                    unsigned long long pos, long long gmin, long long gmax,
                                    long long gkat, int gvary) {
  cuda_check_result r = cuda_check_result_of(d, pos, gmin, gmax, gkat, gvary);
  slot->result = r;
  slot->blocks_done = 0; /* ready for the slot's next call */
  if (publish && r.bad) cuda_check_publish(record, d, r);
  /* no fence here: the main kernels that read the verdict come after this
   * kernel on the stream, and a kernel's end orders its writes before them
   * (a device-wide fence per call cost half of a small check's time) */
}

/* The least in-row position of every (row, id) (require_unique with a
 * map): ids outside [lo, hi] are the range check's and left out. */
template <typename I>
__global__ void unique_map_kernel(cuda_check_desc d, int *map) {
  const I *data = (const I *)d.data;
  const int64_t range = d.hi - d.lo + 1;
  CUDA_FOR(i, d.count) {
    int64_t v = (int64_t)data[i];
    if (v < d.lo || v > d.hi) continue;
    int64_t row = i / d.unique_row;
    atomicMin(&map[row * range + (v - d.lo)], (int)(i - row * d.unique_row));
  }
}

__global__ void __launch_bounds__(CUDA_CHECK_THREADS)
    check_kernel(cuda_check_desc d, cuda_check_slot *slot, cuda_error_record *record,
                 int publish) {
  __shared__ long long s_ids[CUDA_CHECK_THREADS]; /* a tile of ids (uniqueness) */
  __shared__ int s_last;
  cuda_allow_dependents(); /* a small call's main kernel may start beside it */

  const int t = threadIdx.x;
  unsigned long long first_bad = ULLONG_MAX;
  long long lmin = LLONG_MAX, lmax = LLONG_MIN, kat = -1;
  int vary = 0;
  if (d.data && (d.unique_row == 0 || d.unique_map)) {
    /* plain range checks (and repeats by a map lookup): a grid-stride
     * loop, unrolled for loads in flight */
#pragma unroll 4
    CUDA_FOR(i, d.count) {
      int bad = d.check_range && cuda_entry_out_of_range(d, i);
      if (!bad && d.unique_map) { /* in range: the map has its id */
        int64_t row = i / d.unique_row;
        int64_t v = cuda_load_index(d.data, d.is64, i);
        bad = __ldg(&d.unique_map[row * (d.hi - d.lo + 1) + (v - d.lo)]) !=
              (int)(i - row * d.unique_row);
      }
      if (bad && (unsigned long long)i < first_bad)
        first_bad = (unsigned long long)i;
      if (d.const_row > 0 && !vary &&
          cuda_load_index(d.data, d.is64, i) !=
              cuda_load_index(d.data, d.is64, row_start_of(d, i)))
        vary = 1;
    }
  } else if (d.data) {
    /* block-sized chunks of consecutive entries (the uniqueness test walks
     * the chunk's rows tile by tile through shared memory) */
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t base = (int64_t)blockIdx.x * blockDim.x; base < d.count; base += step) {
      int64_t i = base + t;
      int in = i < d.count;
      int bad = in && d.check_range ? cuda_entry_out_of_range(d, i) : 0;
      if (d.unique_row > 0) { /* only with check_range; block-uniform */
        long long v = in ? (long long)cuda_load_index(d.data, d.is64, i) : 0;
        int64_t my_row = in ? i - i % d.unique_row : 0;
        int64_t from = base - base % d.unique_row;
        int64_t to = base + blockDim.x < d.count ? base + blockDim.x : d.count;
        for (int64_t t0 = from; t0 < to - 1; t0 += blockDim.x) {
          __syncthreads();
          int64_t j = t0 + t;
          s_ids[t] = j < d.count ? (long long)cuda_load_index(d.data, d.is64, j) : 0;
          __syncthreads();
          if (in && !bad) {
            int64_t n = to - t0 < (int64_t)blockDim.x ? to - t0 : (int64_t)blockDim.x;
            for (int q = 0; q < n; q++) {
              int64_t jj = t0 + q;
              if (jj >= i) break;
              if (jj >= my_row && s_ids[q] == v) {
                bad = CUDA_BAD_DUPLICATE;
                break;
              }
            }
          }
        }
      }
      if (bad && (unsigned long long)i < first_bad) first_bad = (unsigned long long)i;
      if (in && d.const_row > 0 && !vary &&
          cuda_load_index(d.data, d.is64, i) !=
              cuda_load_index(d.data, d.is64, row_start_of(d, i)))
        vary = 1;
    }
  }
  if (d.levels) {
    CUDA_FOR(i, d.levels_count) {
      long long v = (long long)cuda_load_index(d.levels, d.levels_is64, i);
      long long k = (long long)(i % (d.key_k > 0 ? d.key_k : 1));
      lmin = v < lmin ? v : lmin;
      if (v > lmax || (v == lmax && k > kat)) {
        lmax = v;
        kat = k;
      }
    }
  }
  /* the block's partials in thread 0: warp shuffles and one barrier (a
   * shared-memory tree of eight barriers was most of a one-block check's
   * tail, which a kernel beside it waits for) */
  cuda_block_partial mine;
  mine.pos = first_bad;
  mine.lmin = lmin;
  mine.lmax = lmax;
  mine.kat = kat;
  int any_vary = __syncthreads_or(vary);
  cuda_block_partial all = cuda_block_reduce(mine);
  /* One block: its reduction is the verdict. Several: the last one to
   * finish combines every block's partials. */
  if (gridDim.x > 1) {
    if (t == 0) {
      slot->partial_pos[blockIdx.x] = all.pos;
      slot->partial_lmin[blockIdx.x] = all.lmin;
      slot->partial_lmax[blockIdx.x] = all.lmax;
      slot->partial_kat[blockIdx.x] = all.kat;
      slot->partial_rows_vary[blockIdx.x] = any_vary;
      __threadfence();
      unsigned ticket = atomicAdd(&slot->blocks_done, 1u);
      s_last = ticket == gridDim.x - 1;
    }
    __syncthreads();
    if (!s_last) return;

    /* The last block combines every block's partials (each written before
     * its block's fence and ticket), all threads at once. */
    __threadfence();
    volatile cuda_check_slot *vs = slot;
    cuda_block_partial share; /* this thread's share of the partials */
    share.pos = ULLONG_MAX;
    share.lmin = LLONG_MAX;
    share.lmax = LLONG_MIN;
    share.kat = -1;
    int share_vary = 0;
    for (unsigned b = t; b < gridDim.x; b += blockDim.x) {
      cuda_block_partial p;
      p.pos = vs->partial_pos[b];
      p.lmin = vs->partial_lmin[b];
      p.lmax = vs->partial_lmax[b];
      p.kat = vs->partial_kat[b];
      cuda_partial_merge(share, p);
      share_vary |= vs->partial_rows_vary[b];
    }
    any_vary = __syncthreads_or(share_vary);
    all = cuda_block_reduce(share);
  }
  if (t != 0) return;
  check_finish(d, slot, record, publish, all.pos, all.lmin, all.lmax, all.kat, any_vary);
}

/* The plain range check and the row note (no uniqueness or levels), the
 * common case: every thread issues CUDA_CHECK_UNROLL loads before it
 * compares any, with no branch in the loop, so a large index streams at
 * memory bandwidth (the general kernel's data-dependent branches kept
 * about one load per thread in flight); the grid is sized so that each
 * thread has that many entries, so a small index takes one block or a few
 * and a cheap combine. ROWS: the row note too (d.const_row > 0; each
 * entry against its row's first, which the cache serves), and the range
 * only when d.check_range (validate=off asks for the note alone). */
#define CUDA_CHECK_UNROLL 8
/* The largest uniqueness map, in ints (16 MB) */
#define CUDA_UNIQUE_MAP_MAX ((int64_t)1 << 22)

/* The least of every thread's v, in thread 0 (a warp shuffle, then the
 * warps' results through `scratch`, one slot a warp). */
static __device__ __forceinline__ unsigned long long block_min(unsigned long long v,
                                                               unsigned long long *scratch) {
  for (int off = 16; off > 0; off >>= 1) {
    unsigned long long o = __shfl_down_sync(0xffffffffu, v, off);
    v = o < v ? o : v;
  }
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) v = scratch[w] < v ? scratch[w] : v;
  return v;
}

template <typename I, int PAIRS, int ROWS>
__global__ void __launch_bounds__(CUDA_CHECK_THREADS)
    check_range_kernel(cuda_check_desc d, cuda_check_slot *slot, cuda_error_record *record,
                       int publish) {
  __shared__ unsigned long long s_min[CUDA_CHECK_THREADS / 32];
  __shared__ int s_last;
  cuda_allow_dependents(); /* a small call's main kernel may start beside it */
  const I *data = (const I *)d.data;
  const int t = threadIdx.x;
  const int64_t span = (int64_t)blockDim.x * CUDA_CHECK_UNROLL;
  unsigned long long first = ULLONG_MAX;
  int vary = 0;
  for (int64_t base = (int64_t)blockIdx.x * span + t; base < d.count;
       base += (int64_t)gridDim.x * span) {
    I v[CUDA_CHECK_UNROLL], v2[CUDA_CHECK_UNROLL];
#pragma unroll
    for (int j = 0; j < CUDA_CHECK_UNROLL; j++) {
      /* entries past the end re-read the last one (count >= 1) */
      int64_t i = base + (int64_t)j * blockDim.x;
      int64_t at = i < d.count ? i : d.count - 1;
      if (PAIRS) {
        v[j] = __ldg(data + 2 * at);
        v2[j] = __ldg(data + 2 * at + 1);
      } else if (ROWS) {
        v[j] = __ldg(data + at);
        v2[j] = __ldg(data + row_start_of(d, at));
      } else {
        v[j] = __ldg(data + at);
      }
    }
#pragma unroll
    for (int j = 0; j < CUDA_CHECK_UNROLL; j++) {
      int64_t i = base + (int64_t)j * blockDim.x;
      int64_t a = (int64_t)v[j];
      bool bad = a < d.lo || a > d.hi;
      if (PAIRS) {
        int64_t b = (int64_t)v2[j];
        bad = bad || b < d.lo2 || b > d.hi2;
      }
      if (ROWS) {
        vary |= v[j] != v2[j];
        bad = bad && d.check_range;
      }
      /* a thread's entries come in increasing order: its first is its least */
      if (bad && i < d.count && (unsigned long long)i < first) first = (unsigned long long)i;
    }
  }
  int any_vary = ROWS ? __syncthreads_or(vary) : 0;
  first = block_min(first, s_min); /* the block's least bad position (thread 0) */
  if (t == 0) {
    s_last = 1;
    if (gridDim.x > 1) { /* several blocks: the last to finish combines */
      slot->partial_pos[blockIdx.x] = first;
      if (ROWS) slot->partial_rows_vary[blockIdx.x] = any_vary;
      __threadfence();
      s_last = atomicAdd(&slot->blocks_done, 1u) == gridDim.x - 1;
    }
  }
  __syncthreads();
  if (!s_last) return;
  if (gridDim.x > 1) {
    __threadfence();
    volatile cuda_check_slot *vs = slot;
    first = ULLONG_MAX;
    int share_vary = 0;
    for (unsigned b = t; b < gridDim.x; b += blockDim.x) {
      unsigned long long p = vs->partial_pos[b];
      first = p < first ? p : first;
      if (ROWS) share_vary |= vs->partial_rows_vary[b];
    }
    if (ROWS) any_vary = __syncthreads_or(share_vary);
    first = block_min(first, s_min); /* the sync before s_last's test ended its first use */
  }
  if (t == 0) check_finish(d, slot, record, publish, first, LLONG_MAX, LLONG_MIN, -1, any_vary);
}

/* Launch geometry of the check: enough blocks to cover the entries, at most
 * CUDA_CHECK_MAX_BLOCKS (the slot's partials), grid-stride beyond. */
static cuda_geom check_geometry(const cuda_check_desc *d) {
  int64_t n = d->count > d->levels_count ? d->count : d->levels_count;
  cuda_geom g = cuda_geom_1d(n, CUDA_CHECK_THREADS);
  if (g.blocks > CUDA_CHECK_MAX_BLOCKS) g.blocks = CUDA_CHECK_MAX_BLOCKS;
  return g;
}

cuda_check_slot *cuda_check_take_slot(cuda_state *st, int device_index) {
  cuda_device_res *res = &st->dev[device_index];
  return &res->slots[res->next_slot.fetch_add(1u) % CUDA_CHECK_SLOTS];
}

apx_status cuda_check_run(cuda_state *st, int device_index, cudaStream_t stream,
                          cuda_check_desc *desc, int need_stats, cuda_checked *out) {
  memset(out, 0, sizeof *out);
  apx_validate_mode mode = st->validate_mode;
  if (mode == APX_VALIDATE_OFF && !need_stats) return APX_OK;
  if (!desc->call) cuda_check_stamp(st, device_index, desc);
  if (!desc->data) desc->count = 0;
  if (!desc->levels) desc->levels_count = 0;
  if (desc->count == 0 && desc->levels_count == 0) return APX_OK;
  desc->check_range = mode != APX_VALIDATE_OFF;
  if (!desc->check_range) desc->unique_row = 0;
  desc->small_rows = desc->const_row > 0 && desc->count < 0x7fffffffLL;
  if (desc->small_rows) desc->row_div = cuda_fastdiv_make((uint32_t)desc->const_row);
  cuda_device_res *res = &st->dev[device_index];
  cuda_check_slot *slot = cuda_check_take_slot(st, device_index);
  cuda_geom g = check_geometry(desc);
  int publish = mode == APX_VALIDATE_DEVICE;
  if (desc->unique_row == 0 && desc->levels_count == 0 &&
      (desc->const_row == 0 ? desc->check_range : !desc->pairs)) {
    int64_t per_block = (int64_t)CUDA_CHECK_THREADS * CUDA_CHECK_UNROLL;
    int64_t blocks = (desc->count + per_block - 1) / per_block;
    g.blocks = (unsigned)(blocks < CUDA_CHECK_MAX_BLOCKS ? blocks : CUDA_CHECK_MAX_BLOCKS);
    g.threads = CUDA_CHECK_THREADS;
    cuda_check_desc &dd = *desc;
    cuda_error_record *rec = res->record;
    if (desc->const_row > 0) {
      if (desc->is64)
        check_range_kernel<int64_t, 0, 1><<<g.blocks, g.threads, 0, stream>>>(dd, slot, rec,
                                                                             publish);
      else
        check_range_kernel<int32_t, 0, 1><<<g.blocks, g.threads, 0, stream>>>(dd, slot, rec,
                                                                             publish);
    } else if (desc->is64 && desc->pairs)
      check_range_kernel<int64_t, 1, 0><<<g.blocks, g.threads, 0, stream>>>(dd, slot, rec,
                                                                           publish);
    else if (desc->is64)
      check_range_kernel<int64_t, 0, 0><<<g.blocks, g.threads, 0, stream>>>(dd, slot, rec,
                                                                           publish);
    else if (desc->pairs)
      check_range_kernel<int32_t, 1, 0><<<g.blocks, g.threads, 0, stream>>>(dd, slot, rec,
                                                                           publish);
    else
      check_range_kernel<int32_t, 0, 0><<<g.blocks, g.threads, 0, stream>>>(dd, slot, rec,
                                                                           publish);
  } else {
    /* require_unique over a small id range: a map of each id's first
     * position per row (one memset and one pass), then one lookup per
     * entry; without it each entry scans its row's earlier entries through
     * shared memory, far slower for long rows (docs/performance.md) */
    cuda_workspace map_ws;
    map_ws.ptr = nullptr;
    int64_t range = desc->hi - desc->lo + 1;
    int64_t rows = desc->unique_row > 0 ? (desc->count + desc->unique_row - 1) / desc->unique_row
                                        : 0;
    if (desc->check_range && desc->unique_row > 0 && desc->unique_row < 0x7fffffffLL &&
        range > 0 && range <= CUDA_UNIQUE_MAP_MAX && rows <= CUDA_UNIQUE_MAP_MAX / range) {
      size_t map_bytes = (size_t)(rows * range) * sizeof(int);
      apx_status s = cuda_ws_alloc(st, stream, map_bytes, &map_ws, "index check: id map");
      if (s != APX_OK) return s;
      /* 0x7f7f7f7f: above every in-row position (rows < 2^31) */
      cudaError_t err = cudaMemsetAsync(map_ws.ptr, 0x7f, map_bytes, stream);
      if (err == cudaSuccess) {
        cuda_geom mg = cuda_geom_1d(desc->count, 256);
        if (mg.blocks > 4096) mg.blocks = 4096;
        desc->unique_map = (const int *)map_ws.ptr;
        if (desc->is64)
          unique_map_kernel<int64_t><<<mg.blocks, mg.threads, 0, stream>>>(*desc,
                                                                           (int *)map_ws.ptr);
        else
          unique_map_kernel<int32_t><<<mg.blocks, mg.threads, 0, stream>>>(*desc,
                                                                           (int *)map_ws.ptr);
        err = cudaGetLastError();
      }
      if (err != cudaSuccess) {
        cuda_ws_free(&map_ws);
        return cuda_fail(st, err, "index check: id map");
      }
    }
    check_kernel<<<g.blocks, g.threads, 0, stream>>>(*desc, slot, res->record, publish);
    if (map_ws.ptr) cuda_ws_free(&map_ws); /* stream-ordered: after the check */
    desc->unique_map = nullptr;            /* the record's copy must not name it */
  }
  char what[64];
  snprintf(what, sizeof what, "%s: index check launch", apx_backend_op_name((apx_op_id)desc->op));
  CUDA_LAUNCHED(st, what);
  out->slot = slot;
  out->lmin = &slot->result.lmin;
  out->rows_vary = &slot->result.rows_vary;
  if (mode == APX_VALIDATE_DEVICE) out->bad = &slot->result.bad;
  if (mode == APX_VALIDATE_EAGER) {
    cuda_check_result r;
    snprintf(what, sizeof what, "%s: index check", apx_backend_op_name((apx_op_id)desc->op));
    CUDA_TRY(st, cudaMemcpyAsync(&r, &slot->result, sizeof r, cudaMemcpyDeviceToHost, stream),
             what);
    CUDA_TRY(st, cudaStreamSynchronize(stream), what);
    if (r.bad) {
      char msg[512];
      cuda_check_message(desc, &r, msg, sizeof msg);
      return st->svc->set_error(APX_ERR_INVALID_ARG, "%s", msg);
    }
  }
  return APX_OK;
}

void cuda_check_stamp(cuda_state *st, int device_index, cuda_check_desc *desc) {
  desc->call = st->dev[device_index].next_call.fetch_add(1u) + 1u;
}

int cuda_check_own(cuda_state *st, int device_index, const cuda_check_desc *desc,
                   cuda_inline_check *ic) {
  memset(ic, 0, sizeof *ic);
  if (st->validate_mode != APX_VALIDATE_DEVICE) return 0;
  ic->desc = *desc;
  if (!ic->desc.data) ic->desc.count = 0;
  ic->desc.check_range = 1;
  if (!ic->desc.call) cuda_check_stamp(st, device_index, &ic->desc);
  ic->record = st->dev[device_index].record;
  return 1;
}

int cuda_check_inline(cuda_state *st, int device_index, const cuda_check_desc *desc,
                      cuda_inline_check *ic) {
  memset(ic, 0, sizeof *ic);
  if (st->validate_mode != APX_VALIDATE_DEVICE) return 0;
  int64_t count = desc->data ? desc->count : 0;
  int64_t levels = desc->levels ? desc->levels_count : 0;
  if (count > CUDA_INLINE_CHECK_MAX || levels > CUDA_INLINE_CHECK_MAX ||
      desc->unique_row > CUDA_INLINE_UNIQUE_MAX || desc->const_row > 0 ||
      (desc->unique_row > 0 && desc->hi - desc->lo > INT_MAX)) /* ids staged as int */
    return 0;
  ic->desc = *desc;
  ic->desc.count = count;
  ic->desc.levels_count = levels;
  ic->desc.check_range = 1;
  if (!ic->desc.call) cuda_check_stamp(st, device_index, &ic->desc);
  ic->record = st->dev[device_index].record;
  return 1;
}

/* Waits for the host: only validate=eager (which has waited for the check
 * already) may call it; in the other modes scatter_add's kernels read the
 * note on the device, so that no call synchronises (CUDA graph capture). */
apx_status cuda_check_read_rows_vary(cuda_state *st, cudaStream_t stream,
                                     const cuda_checked *chk, int *rows_vary) {
  *rows_vary = 1;
  if (!chk->rows_vary) return APX_OK;
  int v = 1;
  CUDA_TRY(st, cudaMemcpyAsync(&v, chk->rows_vary, sizeof v, cudaMemcpyDeviceToHost, stream),
           "scatter_add: reading the index row flag");
  CUDA_TRY(st, cudaStreamSynchronize(stream), "scatter_add: reading the index row flag");
  *rows_vary = v;
  return APX_OK;
}

/* "[3][1]" for linear position pos over the first `ndim` dims of shape. */
static void format_position(char *buf, size_t size, const int64_t *shape, int ndim,
                            unsigned long long pos) {
  int64_t coord[APX_MAX_DIMS];
  unsigned long long rest = pos;
  for (int d = ndim - 1; d >= 0; d--) {
    int64_t extent = shape[d] > 0 ? shape[d] : 1;
    coord[d] = (int64_t)(rest % (unsigned long long)extent);
    rest /= (unsigned long long)extent;
  }
  size_t used = 0;
  buf[0] = '\0';
  for (int d = 0; d < ndim && used < size; d++)
    used += (size_t)snprintf(buf + used, size - used, "[%lld]", (long long)coord[d]);
}

void cuda_check_message(const cuda_check_desc *d, const cuda_check_result *r, char *buf,
                        size_t size) {
  const char *op = apx_backend_op_name((apx_op_id)d->op);
  if (!op) op = "?";
  char where[160];
  switch (r->kind) {
  case CUDA_BAD_ORIGIN:
    /* origins [B,K,2]: the position is the pair's (b, k) */
    format_position(where, sizeof where, d->shape, d->ndim - 1, r->pos);
    snprintf(buf, size, "%s: %s%s = [%lld, %lld] is outside [%lld, %lld] x [%lld, %lld]", op,
             d->arg, where, r->value[0], r->value[1], (long long)d->lo, (long long)d->hi,
             (long long)d->lo2, (long long)d->hi2);
    break;
  case CUDA_BAD_DUPLICATE: {
    char earlier[160];
    format_position(where, sizeof where, d->shape, d->ndim, r->pos);
    format_position(earlier, sizeof earlier, d->shape, d->ndim, (unsigned long long)r->other);
    snprintf(buf, size,
             "%s: %s%s = [%lld] repeats %s%s; ids must be unique per batch row "
             "(require_unique)",
             op, d->arg, where, r->value[0], d->arg, earlier);
    break;
  }
  case CUDA_BAD_NAN:
    format_position(where, sizeof where, d->shape, d->ndim, r->pos);
    snprintf(buf, size, "%s: %s%s = [nan] is not a number", op, d->arg, where);
    break;
  case CUDA_BAD_LEVEL_SPAN:
    snprintf(buf, size,
             "%s: levels span [%lld, %lld]: the priority key ((level - lmin) << %d) + k "
             "overflows int32 at level [%lld], k = [%lld]; reduce the level range or K",
             op, r->lmin, r->lmax, d->order_bits, r->lmax, r->kat);
    break;
  default:
    format_position(where, sizeof where, d->shape, d->ndim, r->pos);
    snprintf(buf, size, "%s: %s%s = [%lld] is outside [%lld, %lld]", op, d->arg, where,
             r->value[0], (long long)d->lo, (long long)d->hi);
    break;
  }
}

apx_status cuda_check_take_deferred(cuda_state *st, int device_index, cudaStream_t stream) {
  cuda_device_res *res = &st->dev[device_index];
  cuda_error_record h;
  CUDA_TRY(st, cudaMemcpyAsync(&h, res->record, sizeof h, cudaMemcpyDeviceToHost, stream),
           "sync: reading the device error record");
  CUDA_TRY(st, cudaStreamSynchronize(stream), "sync: reading the device error record");
  if (!h.call || !h.ready) return APX_OK;
  char msg[512];
  cuda_check_message(&h.desc, &h.result, msg, sizeof msg);
  CUDA_TRY(st, cudaMemsetAsync(res->record, 0, sizeof h, stream),
           "sync: clearing the device error record");
  CUDA_TRY(st, cudaStreamSynchronize(stream), "sync: clearing the device error record");
  return st->svc->set_error(APX_ERR_DEVICE, "%s", msg);
}

/* ---- the latch: deferred failures for callers that never sync (trt plugins) ----
 * Under validate = device a failing call's check lands in the device's
 * record, which apx_sync reads. A caller with no sync of its own (a
 * TensorRT plugin's enqueue, possibly inside a captured CUDA graph) puts
 * apx__cuda_latch_enqueue after its calls instead: a kernel that moves a
 * published failure into host-mapped memory (the first one until taken)
 * and clears the record; apx__cuda_latch_take reads it on the host without
 * a sync. Layout of the latch: an int flag, then the record at offset 16. */

#define CUDA_LATCH_RECORD 16

__global__ void cuda_latch_kernel(cuda_error_record *rec, unsigned char *latch) {
  if (rec->call == 0 || !rec->ready) return;
  volatile int *set = (volatile int *)latch;
  if (*set == 0) {
    const unsigned *src = (const unsigned *)rec;
    volatile unsigned *dst = (volatile unsigned *)(latch + CUDA_LATCH_RECORD);
    for (size_t i = 0; i < sizeof(cuda_error_record) / sizeof(unsigned); i++) dst[i] = src[i];
    __threadfence_system();
    *set = 1;
  }
  unsigned *r = (unsigned *)rec;
  for (size_t i = 0; i < sizeof(cuda_error_record) / sizeof(unsigned); i++) r[i] = 0;
}

extern "C" size_t apx__cuda_latch_size(void) {
  return CUDA_LATCH_RECORD + sizeof(cuda_error_record);
}

extern "C" apx_status apx__cuda_latch_enqueue(void *state, int device_index, void *stream,
                                              void *latch_device) {
  cuda_state *st = (cuda_state *)state;
  apx_status s = cuda_use_device(st, device_index);
  if (s != APX_OK) return s; /* (it makes the device's record) */
  cuda_latch_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(st->dev[device_index].record,
                                                       (unsigned char *)latch_device);
  CUDA_LAUNCHED(st, "latch: the device's error record");
  return APX_OK;
}

extern "C" int apx__cuda_latch_take(void *latch_host, char *msg, size_t msg_size) {
  volatile int *set = (volatile int *)latch_host;
  if (*set == 0) return 0;
  __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the record was written before the flag */
  cuda_error_record h;
  memcpy(&h, (const unsigned char *)latch_host + CUDA_LATCH_RECORD, sizeof h);
  __atomic_thread_fence(__ATOMIC_RELEASE); /* read before the latch is free again */
  *set = 0;
  cuda_check_message(&h.desc, &h.result, msg, msg_size);
  return 1;
}
