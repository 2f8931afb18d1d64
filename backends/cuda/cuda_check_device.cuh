/* SPDX-License-Identifier: Apache-2.0 */
/* The device side of the cuda backend's index checks (cuda_check.h): a
 * call's verdict as its kernels read it, the verdict of one entry and of
 * a check's reductions, publishing a failure into the device's record,
 * and the checks a kernel runs itself (cuda_warp_publish,
 * cuda_block_check). Shared by the pre-pass (validate.cu) and the ops'
 * kernels. */
#ifndef APX_CUDA_CHECK_DEVICE_CUH
#define APX_CUDA_CHECK_DEVICE_CUH

#include <limits.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_dtype.cuh"

/* Main kernels of a validated call read the check's verdict first and
 * write nothing when it failed (validate=device; NULL otherwise). */
static __device__ __forceinline__ int cuda_call_failed(const int *bad) {
  /* written by the check kernel before this kernel started: constant here,
   * so the read-only cache serves it (a volatile read per thread would go
   * to L2 every time) */
  return bad != nullptr && __ldg(bad) != 0;
}

/* cuda_call_failed for a kernel launched by cuda_launch_after, after
 * cuda_wait_prerequisites. */
static __device__ __forceinline__ int cuda_call_failed_after_wait(const int *bad) {
  return bad != nullptr && __ldcg(bad) != 0;
}

/* ---- a check's verdict, shared by the pre-pass and in-kernel checks ----- */

/* Is entry i out of range? The kind, 0 when fine. */
static __device__ __forceinline__ int cuda_entry_out_of_range(const cuda_check_desc &d,
                                                              int64_t i) {
  if (d.pairs) {
    int64_t y0 = cuda_load_index(d.data, d.is64, 2 * i);
    int64_t x0 = cuda_load_index(d.data, d.is64, 2 * i + 1);
    return y0 < d.lo || y0 > d.hi || x0 < d.lo2 || x0 > d.hi2 ? CUDA_BAD_ORIGIN : 0;
  }
  int64_t v = cuda_load_index(d.data, d.is64, i);
  return v < d.lo || v > d.hi ? CUDA_BAD_RANGE : 0;
}

/* A check's result from its reductions: pos, the first bad entry
 * (ULLONG_MAX: none); the levels' minimum, maximum and the largest k at
 * the maximum; the row note. A bad entry that is in range is a repeat
 * (require_unique): the earlier position of the same id is named. */
/* docs/ops.md, tileunpack (priority): ((level - lmin) << order_bits) + k <= 2^31-1
 * for every entry, given the levels' minimum, maximum and the largest k at
 * the maximum (the largest key): span = lmax - lmin, unsigned 64-bit. */
static __device__ __forceinline__ bool cuda_levels_fit(long long lmin, long long lmax,
                                                       long long kat, int order_bits) {
  const unsigned long long span = (unsigned long long)lmax - (unsigned long long)lmin;
  return span <= (0x7fffffffULL >> order_bits) &&
         (span << order_bits) + (unsigned long long)kat <= 0x7fffffffULL;
}

static __device__ cuda_check_result cuda_check_result_of(const cuda_check_desc &d,
                                                         unsigned long long pos, long long gmin,
                                                         long long gmax, long long gkat,
                                                         int gvary) {
  cuda_check_result r;
  memset(&r, 0, sizeof r);
  r.pos = pos;
  r.lmin = d.levels && d.levels_count > 0 ? gmin : 0;
  r.lmax = d.levels && d.levels_count > 0 ? gmax : 0;
  r.kat = gkat;
  r.rows_vary = gvary;
  if (pos != ~0ULL) {
    int64_t i = (int64_t)pos;
    r.bad = 1;
    r.kind = cuda_entry_out_of_range(d, i);
    if (d.pairs) {
      r.value[0] = cuda_load_index(d.data, d.is64, 2 * i);
      r.value[1] = cuda_load_index(d.data, d.is64, 2 * i + 1);
    } else {
      r.value[0] = cuda_load_index(d.data, d.is64, i);
    }
    if (!r.kind) { /* a repeated id: name the earlier position */
      r.kind = CUDA_BAD_DUPLICATE;
      int64_t row_start = i - i % d.unique_row;
      for (int64_t j = row_start; j < i; j++)
        if (cuda_load_index(d.data, d.is64, j) == r.value[0]) {
          r.other = j;
          break;
        }
    }
  } else if (d.check_range && d.levels && d.levels_count > 0) {
    /* docs/ops.md, tileunpack (priority): ((level - lmin) << order_bits) + k <= 2^31-1
     * for every entry; the largest key is the largest k at the top level */
    if (!cuda_levels_fit(gmin, gmax, gkat, d.order_bits)) {
      r.bad = 1;
      r.kind = CUDA_BAD_LEVEL_SPAN;
    }
  }
  return r;
}

/* A failure into the device's record (validate=device; apx_sync reports
 * it). The first failing call since the last sync takes the record; its
 * publishers (blocks or warps that saw bad entries, in any order) then
 * raise pos_inv, and the one that raises it writes its result under the
 * record's lock, so the record ends with the call's least bad position.
 * Only failures come here: the lock is taken by failing publishers alone,
 * each holds it for a few stores, and no thread waits for another to
 * reach a point (nothing like a grid barrier). */
static __device__ void cuda_check_publish(cuda_error_record *record, const cuda_check_desc &d,
                                          const cuda_check_result &r) {
  const unsigned long long token = d.call + 1;
  const unsigned long long held = atomicCAS(&record->call, 0ULL, token);
  if (held != 0 && held != token) return; /* an earlier call's failure holds it */
  const unsigned long long inv = r.pos == ~0ULL ? 1ULL : ~r.pos;
  if (atomicMax(&record->pos_inv, inv) >= inv) return; /* a lesser position is in */
  while (atomicCAS(&record->lock, 0, 1) != 0) {
  }
  __threadfence();
  if (*(volatile unsigned long long *)&record->pos_inv == inv) { /* still the least */
    record->result = r;
    record->desc = d;
    __threadfence();
    atomicExch(&record->ready, 1);
  }
  __threadfence();
  atomicExch(&record->lock, 0);
}

/* ---- checks inside an op's kernel (validate=device; cuda_inline_check) ---- */


/* Every lane of a warp (all 32 present): `first`, the lane's least bad
 * position (~0ULL: none). When any lane has one, the warp's least goes to
 * the record (the result is read from the index there, as the pre-pass
 * does, so the message is the pre-pass's). Costs one vote otherwise. */
static __device__ __forceinline__ void cuda_warp_publish(const cuda_inline_check &ic,
                                                         unsigned long long first) {
  if (!__any_sync(0xffffffffu, first != ~0ULL)) return;
  for (int off = 16; off > 0; off >>= 1) {
    const unsigned long long o = __shfl_down_sync(0xffffffffu, first, off);
    first = o < first ? o : first;
  }
  if ((threadIdx.x & 31) == 0)
    cuda_check_publish(ic.record, ic.desc,
                       cuda_check_result_of(ic.desc, first, LLONG_MAX, LLONG_MIN, -1, 0));
}

/* ---- in-kernel checks of small indices (bounds: cuda_check.h) ------------ */

/* The block's least bad position and the levels' (min, (max, k at max))
 * in thread 0: warp shuffles, then one slot a warp in shared memory (no
 * 64-bit shared atomics, one barrier). */
struct cuda_block_partial {
  unsigned long long pos;
  long long lmin, lmax, kat;
};

static __device__ __forceinline__ void cuda_partial_merge(cuda_block_partial &a,
                                                          const cuda_block_partial &b) {
  a.pos = b.pos < a.pos ? b.pos : a.pos;
  a.lmin = b.lmin < a.lmin ? b.lmin : a.lmin;
  if (b.lmax > a.lmax || (b.lmax == a.lmax && b.kat > a.kat)) {
    a.lmax = b.lmax;
    a.kat = b.kat;
  }
}

static __device__ cuda_block_partial cuda_block_reduce(cuda_block_partial v) {
  __shared__ cuda_block_partial s_warp[32];
  for (int off = 16; off > 0; off >>= 1) {
    cuda_block_partial o;
    o.pos = __shfl_down_sync(0xffffffffu, v.pos, off);
    o.lmin = __shfl_down_sync(0xffffffffu, v.lmin, off);
    o.lmax = __shfl_down_sync(0xffffffffu, v.lmax, off);
    o.kat = __shfl_down_sync(0xffffffffu, v.kat, off);
    cuda_partial_merge(v, o);
  }
  if ((threadIdx.x & 31) == 0) s_warp[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < (int)((blockDim.x + 31) >> 5); w++) cuda_partial_merge(v, s_warp[w]);
  return v;
}

/* The verdict of ic's check in every thread of the block (1: bad, write
 * nothing). Call it from every thread, before any store; blockDim.x is a
 * multiple of 32. All of the block's loads issue in one pass; a
 * uniqueness test then compares in-range ids staged in shared memory (a
 * loop of global loads per entry was a chain of dependent L1 round trips
 * before the first store, a third of fused's time at the seed profile). */
static __device__ int cuda_block_check(const cuda_inline_check &ic) {
  /* uniqueness: id - lo of in-range entries, -1 for the others */
  __shared__ int s_rel[CUDA_INLINE_CHECK_MAX];
  __shared__ int s_bad;
  if (!ic.record) return 0;
  const cuda_check_desc &d = ic.desc;
  const int count = (int)d.count, unique = (int)d.unique_row;
  cuda_block_partial mine;
  mine.pos = ~0ULL;
  mine.lmin = 0x7fffffffffffffffLL;
  mine.lmax = -0x7fffffffffffffffLL - 1;
  mine.kat = -1;
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    int bad = cuda_entry_out_of_range(d, i);
    if (unique > 0) s_rel[i] = bad ? -1 : (int)(cuda_load_index(d.data, d.is64, i) - d.lo);
    if (bad && (unsigned long long)i < mine.pos) mine.pos = (unsigned long long)i;
  }
  for (int i = threadIdx.x; i < (int)d.levels_count; i += blockDim.x) {
    long long v = (long long)cuda_load_index(d.levels, d.levels_is64, i);
    long long k = (long long)(i % (d.key_k > 0 ? d.key_k : 1));
    mine.lmin = v < mine.lmin ? v : mine.lmin;
    if (v > mine.lmax || (v == mine.lmax && k > mine.kat)) {
      mine.lmax = v;
      mine.kat = k;
    }
  }
  if (unique > 0) { /* block-uniform */
    __syncthreads(); /* s_rel complete */
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
      int v = s_rel[i];
      if (v < 0) continue; /* out of range: counted above */
      int repeat = 0;
#pragma unroll 8
      for (int j = i - i % unique; j < i; j++) repeat |= s_rel[j] == v;
      if (repeat && (unsigned long long)i < mine.pos) mine.pos = (unsigned long long)i;
    }
  }
  cuda_block_partial all = cuda_block_reduce(mine);
  if (threadIdx.x == 0) {
    cuda_check_result r = cuda_check_result_of(d, all.pos, all.lmin, all.lmax, all.kat, 0);
    s_bad = r.bad;
    if (r.bad && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)
      cuda_check_publish(ic.record, d, r); /* every block saw the same */
  }
  __syncthreads();
  return s_bad;
}

#endif /* APX_CUDA_CHECK_DEVICE_CUH */
