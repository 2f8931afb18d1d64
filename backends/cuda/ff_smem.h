/* SPDX-License-Identifier: Apache-2.0 */
/* The shared memory a block of the FF frame's kernels needs (docs/gpus.md,
 * docs/ff_infer.md), against what the device offers a block. Plain C
 * without CUDA, so make check tests it on machines without a GPU
 * (tests/test_cuda_ff_smem); the kernels' launches (ff_route.cu,
 * ff_refine.cu) size their dynamic shared memory with these functions and
 * cuda_ff_supports passes a frame over when one of them cannot fit. */
#ifndef APX_CUDA_FF_SMEM_H
#define APX_CUDA_FF_SMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Pixels of a tile one block of the two-kernel refine handles. */
#define CUDA_FF_CHUNK 32
/* The scan + FiLM kernel's threads at most (ff_scan_film_kernel). */
#define FF_SF_THREADS 512
/* Bytes of a block's shared memory kept for the kernels' static arrays
 * (at most 136 bytes in any of them). */
#define CUDA_FF_SMEM_STATIC 1024

/* Dynamic shared memory a block may take on a device that offers `optin`
 * bytes a block (cudaDevAttrMaxSharedMemoryPerBlockOptin): optin less
 * CUDA_FF_SMEM_STATIC, 0 when optin is smaller. */
size_t cuda_ff_smem_room(size_t optin);

/* The routing block (ff_route_kernel): the scores of the G0 tiles and the
 * K0 taken ones (double), the walks' ids (int), and the G0 utilities as
 * float where G0 <= 4096. K0 L0 tiles and P parents a row. */
size_t cuda_ff_route_smem_bytes(int64_t G0, int64_t K0, int64_t P);

/* ff_scan_film_kernel's threads for C channels: about four an output of the
 * C -> C layer, a multiple of 32 in [64, FF_SF_THREADS]. */
unsigned cuda_ff_sf_threads(int64_t C);

/* ff_scan_film_kernel's dynamic shared memory without any staging: the
 * LayerNorm'd token, the hidden layer, the reduction scratch and the 2C
 * FiLM parameters of one token. */
size_t cuda_ff_sf_smem_bytes(int64_t C);

/* ff_conv_kernel's dynamic shared memory: a chunk's C depthwise outputs. */
size_t cuda_ff_conv_smem_bytes(int64_t C);

/* Does every kernel a frame must run fit a device offering `optin` bytes a
 * block? C channels, G0 L0 tiles, K0 L0 tiles and P parents a row (the
 * fused and tensor-core refines and the staging are chosen only where they
 * fit, so the kernels without a smaller form decide: the routing, the
 * scan/FiLM kernel unstaged and the two-kernel refine). Returns 1, or 0
 * with a sentence naming the kernel, the bytes it needs, the device's
 * bytes and what would fit into `reason` (may be NULL or of size 0). */
int cuda_ff_smem_fits(int64_t C, int64_t G0, int64_t K0, int64_t P, size_t optin, char *reason,
                      size_t reason_size);

#ifdef __cplusplus
}
#endif

#endif /* APX_CUDA_FF_SMEM_H */
