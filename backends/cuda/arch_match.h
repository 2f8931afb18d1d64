/* SPDX-License-Identifier: Apache-2.0 */
/* Which of the cuda backend's code a device runs (docs/gpus.md): the
 * module's arch list (configure's APEXX_CUDA_ARCHS, e.g. "sm_80 sm_90
 * compute_90") against the device's compute capability, by CUDA's
 * compatibility rules. Plain C without CUDA, so make check tests it on
 * machines without a GPU; the probe (backend.cu) asks it first and then
 * confirms with the driver. */
#ifndef APX_CUDA_ARCH_MATCH_H
#define APX_CUDA_ARCH_MATCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The code a device of compute capability major.minor runs from `carried`
 * (space-separated sm_XY / compute_XY entries, XY possibly ending in a or
 * f):
 *   sm_XY      SASS: runs on cc X.y' with the same major and y' >= its
 *              minor (sm_XYa: on X.Y only);
 *   compute_XY PTX, JIT-compiled by the driver: on any cc >= XY
 *              (compute_XYa: X.Y only; compute_XYf: its major only).
 * SASS is preferred over PTX, then the newest of each. Returns 1 and
 * writes the entry chosen into `chosen` and its arch (major * 10 + minor,
 * the __CUDA_ARCH__ / 10 of the code that runs) into *code_arch; returns
 * 0 and writes why into `reason` (naming the device's cc and the list)
 * when nothing fits, or when `carried` is empty or holds an entry that is
 * not of that form. Buffers may be NULL or of size 0. */
int cuda_arch_match(int major, int minor, const char *carried, char *chosen, size_t chosen_size,
                    int *code_arch, char *reason, size_t reason_size);

#ifdef __cplusplus
}
#endif

#endif /* APX_CUDA_ARCH_MATCH_H */
