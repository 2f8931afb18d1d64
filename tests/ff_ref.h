/* SPDX-License-Identifier: Apache-2.0 */
/* Plain double-precision reference loops of the FF path's model pieces
 * (docs/ff_infer.md steps 2-8) for test_cpu_ff, each returning the value and
 * its magnitude (the sum of the absolute values of the formula's terms,
 * propagated through the chain) for the bound of docs/ops.md, Rounding and parity
 * |err| <= atol + rtol*mag. Values are rounded to the frame dtype where the
 * doc says rnd. */
#ifndef APX_TESTS_FF_REF_H
#define APX_TESTS_FF_REF_H

#include <apexx/backend.h>
#include <apexx/ff_backend.h>
#include <stdint.h>

#include "testutil.h"

/* Random FF weights of C channels (both levels) in malloc'd fp32 arrays,
 * scaled like PyTorch's default initialisation; free with ff_ref_free. */
apx_ff_params ff_ref_random_params(tu_rng *r, int64_t channels);
void ff_ref_free(apx_ff_params *params);

/* rnd() in double: round to the dtype (through fp32) and back. */
double ff_ref_rnd(apx_dtype dtype, double v);
/* One unit in the last place of the dtype at |v|. */
double ff_ref_ulp(apx_dtype dtype, double v);
/* Decision 3's atol = rtol for the dtype. */
double ff_ref_tol(apx_dtype dtype);

/* Derived scan vectors (6.B, rounded), s = 0 forward, 1 backward. */
double ff_ref_decay(apx_dtype dtype, float logit);
double ff_ref_gain(apx_dtype dtype, float raw);

/* Step 2 on tile [C][n]. */
void ff_ref_tokens(apx_dtype dtype, const float *tile, int64_t channels, int64_t n, double *tok,
                   double *mag);
/* Step 3 with the (already rounded and clamped) vectors given per
 * direction: decay, input gain, output gain, state bias, then the gate. */
typedef struct ff_ref_scan_vectors {
  const float *decay[2], *input_gain[2], *output_gain[2], *state_bias[2], *gate;
} ff_ref_scan_vectors;
void ff_ref_scan_merge(const ff_ref_scan_vectors *v, apx_dtype dtype, const float *tok,
                       int64_t steps, int64_t channels, double *mixed, double *mag);
/* Step 3 with scan_mode forward: the forward stream alone, y = y_f. */
void ff_ref_scan_forward(const ff_ref_scan_vectors *v, apx_dtype dtype, const float *tok,
                         int64_t steps, int64_t channels, double *y, double *mag);
/* Step 4 of one token, raw weights of the level. */
void ff_ref_film(const apx_ff_level_params *w, apx_dtype dtype, int64_t channels,
                 const float *mixed, double *gamma, double *gamma_mag, double *beta,
                 double *beta_mag);
/* Steps 5-6 on tile [C][t*t]. */
void ff_ref_refine(const apx_ff_level_params *w, apx_dtype dtype, int64_t channels, int64_t t,
                   const float *tile, const float *gamma, const float *beta, double *r,
                   double *mag);
/* Step 8's alpha on sanitised proxies (1.0 where absent). */
double ff_ref_alpha(const apx_ff_level_params *w, apx_dtype dtype, double bp, double up,
                    double *mag);

#endif
