/* SPDX-License-Identifier: Apache-2.0 */
/* splitmix64 (Steele, Lea, Flood 2014): the seeded generator the tests
 * (tests/testutil.c, tu_rng) and the bench (bench/inputs.c, bench_rng;
 * apexx-bench(1), INPUTS) draw their data from, and the stream of
 * apx_ff_weights_seeded (docs/ff_weights.md). Header-only, shared by the
 * core, the bench and the tests (common/); not installed. */
#ifndef APX_SPLITMIX_H
#define APX_SPLITMIX_H

#include <stdint.h>

/* The next 64 bits of the stream at *state (advanced). */
static inline uint64_t apx_splitmix64(uint64_t *state) {
  uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* The top 53 bits of the next value: uniform in [0, 1). */
static inline double apx_splitmix64_uniform(uint64_t *state) {
  return (double)(apx_splitmix64(state) >> 11) * 0x1.0p-53;
}

#endif /* APX_SPLITMIX_H */
