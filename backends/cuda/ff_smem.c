/* SPDX-License-Identifier: Apache-2.0 */
/* The FF frame's shared memory a block (ff_smem.h). */
#include "ff_smem.h"

#include <stdio.h>

size_t cuda_ff_smem_room(size_t optin) {
  return optin > CUDA_FF_SMEM_STATIC ? optin - CUDA_FF_SMEM_STATIC : 0;
}

size_t cuda_ff_route_smem_bytes(int64_t G0, int64_t K0, int64_t P) {
  const int64_t nk = K0 > 4 * P ? K0 : 4 * P;
  return sizeof(double) * (size_t)(G0 + K0) + sizeof(int) * (size_t)(K0 + 4 * P + nk) +
         (G0 <= 4096 ? sizeof(float) * (size_t)G0 : 0);
}

unsigned cuda_ff_sf_threads(int64_t C) {
  const int64_t sf = (4 * C + 31) / 32 * 32;
  return (unsigned)(sf < 64 ? 64 : sf > FF_SF_THREADS ? FF_SF_THREADS : sf);
}

size_t cuda_ff_sf_smem_bytes(int64_t C) {
  const size_t C4 = (size_t)((C + 3) / 4 * 4);
  return sizeof(float) * (2 * C4 + cuda_ff_sf_threads(C) + 14 * C4);
}

size_t cuda_ff_conv_smem_bytes(int64_t C) { return sizeof(float) * (size_t)C * CUDA_FF_CHUNK; }

static int too_big(const char *kernel, size_t need, size_t optin, const char *what, char *reason,
                   size_t reason_size) {
  if (reason && reason_size)
    snprintf(reason, reason_size,
             "the %s kernel needs %zu bytes of shared memory a block (%s), the device offers "
             "%zu (%zu with the kernels' static arrays)",
             kernel, need, what, optin, cuda_ff_smem_room(optin));
  return 0;
}

int cuda_ff_smem_fits(int64_t C, int64_t G0, int64_t K0, int64_t P, size_t optin, char *reason,
                      size_t reason_size) {
  if (reason && reason_size) reason[0] = '\0';
  const size_t room = cuda_ff_smem_room(optin);
  char what[160];
  const size_t route = cuda_ff_route_smem_bytes(G0, K0, P);
  if (route > room) {
    snprintf(what, sizeof what, "%lld L0 tiles, %lld taken, %lld parents a row", (long long)G0,
             (long long)K0, (long long)P);
    return too_big("routing", route, optin, what, reason, reason_size);
  }
  const size_t sf = cuda_ff_sf_smem_bytes(C);
  if (sf > room) {
    snprintf(what, sizeof what, "%lld channels", (long long)C);
    return too_big("scan/FiLM", sf, optin, what, reason, reason_size);
  }
  const size_t conv = cuda_ff_conv_smem_bytes(C);
  if (conv > room) {
    snprintf(what, sizeof what, "%lld channels; at most %zu fit", (long long)C,
             room / (sizeof(float) * CUDA_FF_CHUNK));
    return too_big("refine", conv, optin, what, reason, reason_size);
  }
  return 1;
}
