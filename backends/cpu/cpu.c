/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu backend's shared helpers (cpu.h): the one ISA selector, the
 * thread split, the indexing ops' axis view and blend_alpha's rounding
 * (tileunpack and ff_infer's blend). */
#define _GNU_SOURCE /* secure_getenv */
#include "cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define CPU_HAVE_X86 1
#else
#define CPU_HAVE_X86 0
#endif

/* $APEXX_CPU_ISA and $APEXX_CPU_SIMD (secure_getenv where there is one). */
static void isa_variables(const char **isa, const char **simd) {
#ifdef HAVE_SECURE_GETENV
  *isa = secure_getenv("APEXX_CPU_ISA");
  *simd = secure_getenv("APEXX_CPU_SIMD");
#else
  *isa = getenv("APEXX_CPU_ISA");
  *simd = getenv("APEXX_CPU_SIMD");
#endif
}

int cpu_isa_variable_warning(char *line, size_t size) {
  const char *isa, *simd;
  isa_variables(&isa, &simd);
  int bad_isa = isa && *isa && strcmp(isa, "portable") != 0 && strcmp(isa, "avx2") != 0;
  int bad_simd = simd && *simd && strcmp(simd, "off") != 0 && strcmp(simd, "avx2") != 0;
  if (!bad_isa && !bad_simd) return 0;
  int n = 0;
  if (bad_isa)
    n = snprintf(line, size, "APEXX_CPU_ISA = [%s] is not one of portable, avx2", isa);
  if (bad_simd && n >= 0 && (size_t)n < size)
    n += snprintf(line + n, size - (size_t)n, "%sAPEXX_CPU_SIMD = [%s] is not one of off, avx2",
                  bad_isa ? "; " : "", simd);
  if (n >= 0 && (size_t)n < size)
    snprintf(line + n, size - (size_t)n, ": ignored, as if unset");
  return 1;
}

cpu_simd_level cpu_isa_level(void) {
  /* Read per call (a getenv is nothing next to an op) so that a test can
   * run every path in one process. $APEXX_CPU_ISA (portable | avx2) is the
   * knob the whole cpu backend shares; APEXX_CPU_SIMD=off is an alias of
   * portable. */
  const char *isa, *simd;
  isa_variables(&isa, &simd);
  if ((isa && !strcmp(isa, "portable")) || (simd && !strcmp(simd, "off")))
    return CPU_SIMD_SCALAR;
#if CPU_HAVE_X86
  static int cpu_best = -1; /* racy but idempotent */
  if (cpu_best < 0) {
    __builtin_cpu_init();
    int best = CPU_SIMD_SCALAR;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) {
      best = CPU_SIMD_AVX2;
      if (__builtin_cpu_supports("avx512f"))
        best = CPU_SIMD_AVX512;
    }
    cpu_best = best;
  }
  if (cpu_best == CPU_SIMD_AVX512 &&
      ((isa && !strcmp(isa, "avx2")) || (simd && !strcmp(simd, "avx2"))))
    return CPU_SIMD_AVX2;
  return (cpu_simd_level)cpu_best;
#endif
  return CPU_SIMD_SCALAR;
}

void cpu_thread_range(int64_t total, int64_t *begin, int64_t *end) {
  int64_t team = 1, me = 0;
#ifdef _OPENMP
  team = omp_get_num_threads();
  me = omp_get_thread_num();
#endif
  *begin = total * me / team;
  *end = total * (me + 1) / team;
}

int cpu_axis_view_init(cpu_axis_view *v, const apx_tensor *index, int dim,
                       const apx_tensor *data) {
  const int n = index->ndim;
  memset(v, 0, sizeof *v);
  v->ndim = n;
  v->dim = dim;
  v->index_shape = index->shape;
  v->outer = 1;
  v->inner = 1;
  for (int d = 0; d < dim; d++) v->outer *= index->shape[d];
  v->steps = n > 0 ? index->shape[dim] : 1;
  for (int d = dim + 1; d < n; d++) v->inner *= index->shape[d];
  int64_t s = 1;
  for (int d = n - 1; d >= 0; d--) {
    v->stride[d] = s;
    s *= data->shape[d];
  }
  v->inner_contiguous = 1;
  for (int d = dim + 1; d < n; d++)
    if (index->shape[d] != data->shape[d]) v->inner_contiguous = 0;
  if (!v->inner_contiguous) {
    v->inner_offset = malloc((size_t)(v->inner ? v->inner : 1) * sizeof(int64_t));
    if (!v->inner_offset) return 0;
    int64_t coord[APX_MAX_DIMS] = {0};
    for (int64_t j = 0; j < v->inner; j++) {
      int64_t off = 0;
      for (int d = dim + 1; d < n; d++) off += coord[d] * v->stride[d];
      v->inner_offset[j] = off;
      for (int d = n - 1; d > dim; d--) {
        if (++coord[d] < index->shape[d]) break;
        coord[d] = 0;
      }
    }
  }
  return 1;
}

void cpu_axis_view_free(cpu_axis_view *v) {
  free(v->inner_offset);
  v->inner_offset = NULL;
}

int64_t cpu_axis_view_base(const cpu_axis_view *v, int64_t o) {
  int64_t off = 0;
  for (int d = v->dim - 1; d >= 0; d--) {
    int64_t extent = v->index_shape[d];
    off += (o % extent) * v->stride[d];
    o /= extent;
  }
  return off;
}

/* Round a double to the nearest f16/bf16 value (ties to even) directly,
 * as torch materialises a 0-d tensor: (float)v first, then a one-step
 * correction where that double rounding missed. */
float cpu_round_double_to_dtype(double v, apx_dtype dtype) {
  if (dtype == APX_DTYPE_F32)
    return (float)v;
  const int bf16 = dtype == APX_DTYPE_BF16;
  uint16_t h = bf16 ? apx_f32_to_bf16((float)v) : apx_f32_to_f16((float)v);
  const uint16_t inf_bits = bf16 ? 0x7f80u : 0x7c00u;
  uint16_t sign = h & 0x8000u, mag = h & 0x7fffu;
  if (isnan(v) || mag >= inf_bits)
    return bf16 ? apx_bf16_to_f32(h) : apx_f16_to_f32(h);
  double target = fabs(v);
  uint16_t best = mag;
  for (int step = -1; step <= 1; step += 2) {
    if ((step < 0 && mag == 0) || (step > 0 && mag + 1 >= inf_bits))
      continue;
    uint16_t cand = (uint16_t)(mag + step);
    double best_value = bf16 ? apx_bf16_to_f32(best) : apx_f16_to_f32(best);
    double cand_value = bf16 ? apx_bf16_to_f32(cand) : apx_f16_to_f32(cand);
    double best_err = fabs(best_value - target), cand_err = fabs(cand_value - target);
    if (cand_err < best_err || (cand_err == best_err && !(cand & 1u)))
      best = cand;
  }
  h = (uint16_t)(sign | best);
  return bf16 ? apx_bf16_to_f32(h) : apx_f16_to_f32(h);
}
