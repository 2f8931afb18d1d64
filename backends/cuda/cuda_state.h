/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda backend's state (backend.cu): the core's services, the
 * validate mode, each device's resources (check slots, the deferred error
 * record, the stream-ordered workspace pool, allocation counters), and
 * how a CUDA error is reported through the core. */
#ifndef APX_CUDA_STATE_H
#define APX_CUDA_STATE_H

#include <apexx/backend.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <pthread.h>

#include <atomic>

#include "cuda_check.h"

#define CUDA_MAX_DEVICES 16

/* ---- state ------------------------------------------------------------ */

struct cuda_device_res {
  int created;              /* resources below made (under cuda_state.lock) */
  cudaError_t init_error;   /* result of creating them */
  cuda_error_record *record; /* device memory */
  cuda_check_slot *slots;    /* device memory, CUDA_CHECK_SLOTS of them */
  std::atomic<unsigned long long> next_call; /* ids of checked calls (desc.call) */
  /* the backend's own stream-ordered pool for op workspace: it keeps what
   * it has between calls (release threshold: never), as a framework's
   * caching allocator does, so a call's scratch is not mapped and unmapped
   * around every synchronisation; destroyed at fini */
  cudaMemPool_t pool;
  std::atomic<unsigned> next_slot;
  int sm_count;
  int cc_major, cc_minor;   /* compute capability */
  /* the arch of the module's code this device runs (major * 10 + minor:
   * 90 for sm_90, 80 for compute_80 JIT-compiled on an H100): the sm_90
   * paths (programmatic launches, clusters) need 90 or more, whatever
   * the card */
  int code_arch;
  int no_code;              /* the module has no code this device runs */
  char no_code_reason[400]; /* why (arch_match.c, or the driver's refusal) */
  std::atomic<uint64_t> in_use_bytes;
  std::atomic<uint64_t> peak_bytes;
};

struct cuda_state {
  const apx_core_services *svc;
  int default_device;
  int device_count;
  apx_validate_mode validate_mode;
  int pdl; /* programmatic dependent launches allowed ($APEXX_CUDA_PDL != 0) */
  cuda_device_res dev[CUDA_MAX_DEVICES];
  pthread_mutex_t lock;  /* guards device setup and the size table */
  void *ff_graphs;       /* ff_infer.cu: the graph replay cache */
  /* Sizes of live allocations (open addressing on the pointer), so that
   * free can keep the in-use and peak counters right. */
  struct cuda_alloc_entry { void *ptr; size_t bytes; } *sizes;
  size_t sizes_cap, sizes_used;
};

/* ---- errors ------------------------------------------------------------ */

/* Report a CUDA error through the core (apx_last_error) and return the
 * status: out of memory -> APX_ERR_NO_MEMORY, sticky device faults ->
 * APX_ERR_DEVICE, anything else -> APX_ERR_BACKEND. `what` names the op
 * and the step ("tilepack: launch"). */
apx_status cuda_fail(const cuda_state *st, cudaError_t err, const char *what);

/* Evaluate a CUDA call; on error return cuda_fail(...) from the caller. */
#define CUDA_TRY(st, expr, what)                                               \
  do {                                                                         \
    cudaError_t cuda_try_err_ = (expr);                                        \
    if (cuda_try_err_ != cudaSuccess) return cuda_fail((st), cuda_try_err_, (what)); \
  } while (0)

/* After a kernel launch: the launch's own error (bad configuration ...). */
#define CUDA_LAUNCHED(st, what) CUDA_TRY(st, cudaGetLastError(), what)

/* Make `device_index` current for the calling thread and create its
 * resources (check slots, error record) on first use. */
apx_status cuda_use_device(cuda_state *st, int device_index);

static inline cudaStream_t cuda_stream(const apx_call *call) {
  return call ? (cudaStream_t)call->stream : (cudaStream_t)0;
}

#endif /* APX_CUDA_STATE_H */
