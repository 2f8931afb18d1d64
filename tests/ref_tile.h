/* SPDX-License-Identifier: Apache-2.0 */
/* Plain reference loops of the tile ops (docs/ops.md, tilepack to fused_pack_op_unpack),
 * written per element from the spec with apx_half.h rounding, independently
 * of the cpu backend: the tests compare every backend with these. Each
 * function reads the args struct the public API takes and writes args->out
 * (through a temporary, so out may alias an input as the API allows).
 * The loops need no context and link nothing but libm; the helpers at the
 * end open contexts and set the environment for the tests. */
#ifndef APX_TESTS_REF_TILE_H
#define APX_TESTS_REF_TILE_H

#include <apexx/apexx.h>

void ref_tilepack(const apx_tilepack_args *args);
void ref_tileunpack(const apx_tileunpack_args *args);
void ref_fused_pack_op_unpack(const apx_fused_pack_op_unpack_args *args);
void ref_fusiongate_alpha(const apx_fusiongate_alpha_args *args);
void ref_fusiongate_fuse(const apx_fusiongate_fuse_args *args);

/* Element access in float (exact widening) and R-model rounding. */
float ref_get(const apx_tensor *t, int64_t i);
void ref_set(const apx_tensor *t, int64_t i, float v);
float ref_fl(apx_dtype dtype, float v);
int64_t ref_index(const apx_tensor *t, int64_t i);
int64_t ref_numel(const apx_tensor *t);

/* Distance in units in the last place of `dtype` between two stored
 * elements (0 when bit-identical; NaN equals any NaN; -0 and +0 are one
 * step apart so a sign slip shows). */
int64_t ref_ulp_distance(apx_dtype dtype, const void *a, const void *b, int64_t i);

/* First element where got and want (same dtype and numel) are more than
 * tol_ulp apart (see ref_ulp_distance), or -1. */
int64_t ref_first_mismatch(const apx_tensor *got, const apx_tensor *want, int64_t tol_ulp);

/* The instruction-set paths of the cpu backend's tile kernels, selected
 * per call through $APEXX_CPU_ISA: index 0 = portable loops, 1 = at most
 * AVX2, 2 = the best the CPU has (AVX-512F where present). */
#define REF_ISA_PATHS 3
void ref_use_isa_path(int path);
const char *ref_isa_path_name(int path);


#endif
