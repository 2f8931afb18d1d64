/* coop_probe: what a grid-wide verdict costs at the seed profile's size,
 * apart from any op (bench/results/cuda/NOTES.md, run 35). Not part of the
 * library; build and run on a GPU machine:
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90 bench/gpu/coop_probe.cu -o coop_probe && ./coop_probe
 *
 * Each variant is a kernel of 16 checker blocks and 128 tile blocks of 512
 * threads (scatter_add's direct path at the seed shape): a tile block
 * loads 16 bytes a thread and stores them; a checker block loads four
 * 8-byte entries a thread. 20 launches are captured into a CUDA graph and
 * replayed; the figure is GPU time per launch.
 *   plain            tiles only, no checker work, plain launch
 *   coop             the same, cooperative launch
 *   verdict/plain    checkers count themselves done (red.release); one
 *                    thread a tile polls the count (ld.acquire) before the
 *                    stores; tiles count themselves out with red.release
 *                    and the last checker clears the counters
 *   verdict/coop     the same, cooperative launch
 *   verdict+ret      as verdict/coop, but tiles count out with a
 *                    fetch_add whose result the thread waits for (the
 *                    last tile clears)
 *   nowait/coop      checkers run, tiles do not wait (the checkers' cost)
 */
#include <cuda/atomic>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 512
#define CHECKERS 16
#define TILES 128
#define CALLS 20
#define REPLAYS 200

struct counters {
  unsigned checked, exits;
};

typedef cuda::atomic_ref<unsigned, cuda::thread_scope_device> u32;

enum { PLAIN = 0, VERDICT = 1, VERDICT_RET = 2, NOWAIT = 3 };

template <int MODE>
__global__ void __launch_bounds__(THREADS)
    probe_kernel(const int4 *in, int4 *out, const long long *index, counters *c) {
  __shared__ int s_bad;
  const int t = threadIdx.x;
  if (MODE != PLAIN && (int)blockIdx.x < CHECKERS) {
    long long v[4];
#pragma unroll
    for (int j = 0; j < 4; j++) v[j] = index[(blockIdx.x * 4 + j) * THREADS + t];
    int bad = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) bad |= v[j] < 0 || v[j] >= 4096;
    bad = __syncthreads_or(bad);
    if (t != 0) return;
    unsigned done = u32(c->checked).fetch_add(1u, cuda::memory_order_acq_rel);
    if (MODE == VERDICT && done == CHECKERS - 1) {
      while (u32(c->exits).load(cuda::memory_order_acquire) < TILES) {
      }
      u32(c->checked).store(0, cuda::memory_order_relaxed);
      u32(c->exits).store(0, cuda::memory_order_relaxed);
    }
    if (MODE == NOWAIT && done == CHECKERS - 1) u32(c->checked).store(0, cuda::memory_order_relaxed);
    (void)bad;
    return;
  }
  const int b = MODE == PLAIN ? blockIdx.x : blockIdx.x - CHECKERS;
  const int4 v = in[b * THREADS + t];
  unsigned ticket = 0;
  if ((MODE == VERDICT || MODE == VERDICT_RET) && t == THREADS - 1) {
    while (u32(c->checked).load(cuda::memory_order_acquire) < CHECKERS) {
    }
    s_bad = 0;
    if (MODE == VERDICT) u32(c->exits).fetch_add(1u, cuda::memory_order_release);
    else ticket = u32(c->exits).fetch_add(1u, cuda::memory_order_acq_rel);
  }
  __syncthreads();
  if (MODE != PLAIN && MODE != NOWAIT && s_bad) return;
  out[b * THREADS + t] = v;
  if (MODE == VERDICT_RET && t == THREADS - 1 && ticket == TILES - 1) {
    u32(c->checked).store(0, cuda::memory_order_relaxed);
    u32(c->exits).store(0, cuda::memory_order_relaxed);
  }
}

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                 \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

template <int MODE>
static double run(const char *name, int coop, const int4 *in, int4 *out, const long long *index,
                  counters *c, cudaStream_t s) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(MODE == PLAIN ? TILES : TILES + CHECKERS);
  cfg.blockDim = dim3(THREADS);
  cfg.stream = s;
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = coop ? 1 : 0;
  CK(cudaLaunchKernelEx(&cfg, probe_kernel<MODE>, in, out, index, c)); /* warm */
  CK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < CALLS; i++) CK(cudaLaunchKernelEx(&cfg, probe_kernel<MODE>, in, out, index, c));
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, s));
  CK(cudaStreamSynchronize(s));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0, s));
  for (int r = 0; r < REPLAYS; r++) CK(cudaGraphLaunch(ge, s));
  CK(cudaEventRecord(e1, s));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  double us = ms * 1000.0 / (REPLAYS * CALLS);
  printf("%-14s %s  %6.2f us a launch\n", name, coop ? "coop " : "plain", us);
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return us;
}

int main(void) {
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  printf("coop_probe on %s (%d SMs), %d launches a graph, %d replays\n", p.name,
         p.multiProcessorCount, CALLS, REPLAYS);
  int4 *in, *out;
  long long *index;
  counters *c;
  CK(cudaMalloc(&in, sizeof(int4) * TILES * THREADS));
  CK(cudaMalloc(&out, sizeof(int4) * TILES * THREADS));
  CK(cudaMalloc(&index, sizeof(long long) * CHECKERS * 4 * THREADS));
  CK(cudaMalloc(&c, sizeof(counters)));
  CK(cudaMemset(in, 1, sizeof(int4) * TILES * THREADS));
  CK(cudaMemset(index, 0, sizeof(long long) * CHECKERS * 4 * THREADS));
  CK(cudaMemset(c, 0, sizeof(counters)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int rep = 0; rep < 2; rep++) {
    run<PLAIN>("plain", 0, in, out, index, c, s);
    run<PLAIN>("plain", 1, in, out, index, c, s);
    run<NOWAIT>("nowait", 0, in, out, index, c, s);
    run<NOWAIT>("nowait", 1, in, out, index, c, s);
    run<VERDICT>("verdict", 0, in, out, index, c, s);
    run<VERDICT>("verdict", 1, in, out, index, c, s);
    run<VERDICT_RET>("verdict+ret", 1, in, out, index, c, s);
  }
  return 0;
}
