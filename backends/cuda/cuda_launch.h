/* SPDX-License-Identifier: Apache-2.0 */
/* Launching the cuda backend's kernels programmatically after the kernel
 * before them (sm_90, $APEXX_CUDA_PDL): the device side (let the next
 * kernel start, wait for the one before) and cuda_launch_after. */
#ifndef APX_CUDA_LAUNCH_H
#define APX_CUDA_LAUNCH_H

#include "cuda_state.h"

/* ---- programmatic dependent launch (sm_90) -------------------------------- */

/* A small call's second kernel may be launched while the first runs
 * (cuda_launch_after): the first lets it start (cuda_allow_dependents, at
 * its top), the second issues the loads that do not depend on the first,
 * then waits for the first's completion and the visibility of its writes
 * (cuda_wait_prerequisites) before it reads any of them or stores
 * anything. What the first wrote is read through L2 (__ldcg): the
 * read-only path (ld.global.nc, __ldg, __restrict__ const) assumes data
 * that stay constant while the kernel runs, and the second kernel was
 * running while the first wrote. Without a programmatic launch the wait
 * returns at once. No-ops before sm_90. */
static __device__ __forceinline__ void cuda_allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
static __device__ __forceinline__ void cuda_wait_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Can this device take programmatic launches ($APEXX_CUDA_PDL not 0, and
 * code of sm_90 or later: a cc 9.0 card running compute_80 PTX has no
 * griddepcontrol in its kernels, so a kernel launched early would not wait)? */
static inline int cuda_pdl_ok(const cuda_state *st, int device_index) {
  return st->pdl && st->dev[device_index].code_arch >= 90;
}

/* cudaLaunchKernelEx's configuration with the one launch attribute *attr
 * (which must outlive the launch). */
static inline cudaLaunchConfig_t cuda_launch_config(dim3 grid, dim3 block, size_t smem,
                                                    cudaStream_t s, cudaLaunchAttribute *attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

/* Launch `kernel` (smem: dynamic shared memory bytes) on the stream,
 * programmatically after the kernel before it when `programmatic` (and
 * cuda_pdl_ok), else plainly; a device or stream that refuses the
 * programmatic form gets the plain one. */
template <typename... KArgs, typename... Args>
static cudaError_t cuda_launch_after(const cuda_state *st, int device_index, int programmatic,
                                     dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                     void (*kernel)(KArgs...), Args... args) {
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = cuda_launch_config(grid, block, smem, s, &attr);
  cfg.numAttrs = programmatic && cuda_pdl_ok(st, device_index) ? 1 : 0;
  cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
  if (err != cudaSuccess && cfg.numAttrs > 0) {
    (void)cudaGetLastError();
    cfg.numAttrs = 0;
    err = cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
  }
  return err;
}

#endif /* APX_CUDA_LAUNCH_H */
