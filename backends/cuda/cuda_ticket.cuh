/* SPDX-License-Identifier: Apache-2.0 */
/* One launch for a reduction over blocks (the backward ops' scalar sums):
 * every block leaves its partial sums, takes a ticket, and the block that
 * takes the last one adds the partials in block order and writes the
 * result, so the sum needs no second kernel and has one order (the same
 * bits run to run). The ticket counters live in the module (one set per
 * .cu that includes this header, per device), start at zero when the
 * module loads and are set back to zero by the last block of each launch,
 * so no memset precedes a launch. A call takes the next of
 * CUDA_TICKETS counters, round robin (cuda_ticket_take), so calls in
 * flight on different streams do not share one in practice; as with the
 * check slots (cuda_check.h), CUDA graphs keep the counter their capture
 * took, and two graphs captured CUDA_TICKETS calls apart replayed at the
 * same time on two streams could mix their counts. Each counter comes
 * with CUDA_TICKET_PARTIALS floats of partials, for launches of few blocks
 * (larger ones pass workspace instead). */
#ifndef APX_CUDA_TICKET_CUH
#define APX_CUDA_TICKET_CUH

#include <atomic>

#define CUDA_TICKETS 32
#define CUDA_TICKET_PARTIALS 4096

/* blocks of each ticket's current launch that have finished (zero
 * between launches: initialised here, reset by each launch's last block) */
static __device__ unsigned cuda_ticket_done[CUDA_TICKETS] = {0};
/* each ticket's partials */
static __device__ float cuda_ticket_partial[CUDA_TICKETS][CUDA_TICKET_PARTIALS];

/* The next counter for a launch (host side). */
static inline unsigned cuda_ticket_take() {
  static std::atomic<unsigned> next(0);
  return next.fetch_add(1u) % CUDA_TICKETS;
}

/* The partials of `ticket`, or `ws` when given (more than
 * CUDA_TICKET_PARTIALS of them). */
static __device__ __forceinline__ float *cuda_ticket_partials(unsigned ticket, float *ws) {
  return ws ? ws : cuda_ticket_partial[ticket];
}

/* Every thread of every block calls it once, after its block's partials
 * are stored (by any of the block's threads). Returns 1 in every thread
 * of the block that finished last, 0 in the others; the last block then
 * sees every block's partials (read them with __ldcg: they were written
 * while this kernel ran) and the counter is back at zero. */
static __device__ int cuda_ticket_last_block(unsigned ticket) {
  __shared__ int s_last;
  __threadfence(); /* this thread's partials before the block's ticket */
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
    /* atomicInc wraps to 0 at blocks - 1: the last block resets it */
    s_last = atomicInc(&cuda_ticket_done[ticket], blocks - 1u) == blocks - 1u;
  }
  __syncthreads();
  if (s_last) __threadfence();
  return s_last;
}

/* A block's sum of each thread's v, in thread 0 (a fixed tree: warp
 * shuffles, then the warps in order). 1-D blocks of a multiple of 32
 * threads; every thread calls it. */
static __device__ float cuda_block_sum(float v) {
  __shared__ float s_warp[32];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  __syncthreads(); /* s_warp free from a previous call */
  if ((threadIdx.x & 31) == 0) s_warp[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    v = 0.0f;
    for (unsigned w = 0; w < blockDim.x / 32; w++) v += s_warp[w];
  }
  return v;
}

/* The sum of the n partials p[i * stride], i in [0, n), in thread 0: each
 * thread adds i = tid, tid + blockDim.x, ... in order, then
 * cuda_block_sum. For the last block (cuda_ticket_last_block). */
static __device__ float cuda_ticket_sum(const float *p, unsigned n, unsigned stride) {
  float v = 0.0f;
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) v += __ldcg(p + (size_t)i * stride);
  return cuda_block_sum(v);
}

#endif /* APX_CUDA_TICKET_CUH */
