/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu backend's internals shared between its files: the state, one
 * function per op, the one ISA selector and thread policy (cpu.c), index
 * reads and the axis view of the indexing ops. */
#ifndef APX_CPU_H
#define APX_CPU_H

#ifdef HAVE_CONFIG_H
#include "config.h" /* _GNU_SOURCE and friends, before any system header */
#endif

#include <stddef.h>
#include <stdint.h>

#include <apexx/backend.h>

#include "apx_half.h"

struct cpu_ff_work;

typedef struct cpu_state {
  const apx_core_services *svc;
  int threads; /* OpenMP threads for kernels; >= 1 */
  /* ff_infer.c's work block, kept from one call to the next (NULL: none
   * yet; zero-initialised is valid). A call takes it, so that a concurrent
   * call finds none and allocates its own, and puts it back after. */
  _Atomic(struct cpu_ff_work *) ff_work;
} cpu_state;

/* ff_infer.c: frees the kept work block (at fini; no call may be running). */
void cpu_ff_work_free(cpu_state *st);

/* One function per op (docs/ops.md), each in <op>.c; arguments are
 * validated by the core. */
#define CPU_OP_DECL_(upper, lower)                                             \
  apx_status cpu_##lower(void *state, const apx_##lower##_args *args,          \
                         const apx_call *call);
APX_OP_MAP(CPU_OP_DECL_)
#undef CPU_OP_DECL_

/* tilessm_scan.c: the scan's parameters as its kernels use them (docs/ops.md,
 * tilessm_scan), shared with tilessm_scan_backward.c. The vectors [C] in
 * fp32, decay clamped (decay_passes, when not NULL: 1 where the clamp left
 * it alone); init [B][2][C] cast to the tokens dtype (0 without
 * init_state); the gate [rows][C] cast and clamped to [0, 1], 0.5 without
 * merge_gate (gate_passes, when not NULL: 1 where the clamp left it). */
void cpu_scan_vectors(const apx_tilessm_scan_args *args, float *decay, float *one_minus_decay,
                      float *input_gain, float *output_gain, float *state_bias,
                      float *decay_passes);
void cpu_scan_init(const apx_tilessm_scan_args *args, float *init);
void cpu_scan_gate(const apx_tilessm_scan_args *args, int64_t rows, float *gate,
                   float *gate_passes);

/* ---- instruction set ------------------------------------------------------ */

/* Which implementation the kernels use. */
typedef enum cpu_simd_level {
  CPU_SIMD_SCALAR = 0, /* portable apx_half.h loops */
  CPU_SIMD_AVX2 = 1,   /* AVX2 + F16C, 8 lanes */
  CPU_SIMD_AVX512 = 2  /* AVX-512F, 16 lanes */
} cpu_simd_level;

/* The level for this call: the best the CPU supports, capped by
 * $APEXX_CPU_ISA=portable|avx2 ($APEXX_CPU_SIMD=off: portable), read on
 * every call so that a test can run every path in one process. Every kernel
 * of the backend asks this one function. */
cpu_simd_level cpu_isa_level(void);
/* A set $APEXX_CPU_ISA or $APEXX_CPU_SIMD whose value names no level (it
 * is then ignored): 1 with a line naming the variable and the value, else
 * 0. The backend's init logs it as a warning. */
int cpu_isa_variable_warning(char *line, size_t size);

/* ---- threads -------------------------------------------------------------- */

/* Below this many elements (or element-sized steps) of work a call runs on
 * the calling thread: waking the team costs more than it saves. */
#define CPU_PARALLEL_MIN_WORK 32768

/* Threads for a call with `work` elements of work. */
static inline int cpu_team_size(const cpu_state *st, int64_t work) {
  if (work < CPU_PARALLEL_MIN_WORK) return 1;
  return st->threads > 0 ? st->threads : 1;
}

/* [begin, end) of `total` items for the calling thread of a parallel region
 * (the whole range outside one). Contiguous ranges keep rows streaming. */
void cpu_thread_range(int64_t total, int64_t *begin, int64_t *end);

#ifdef _OPENMP
#include <omp.h>
#define CPU_PRAGMA_(x) _Pragma(#x)
/* Parallel for over a loop of work items (each a band, a plane segment ...,
 * kilobytes of work) with the backend's thread count. Items are handed out
 * one at a time (dynamic): on a machine shared with other processes a
 * static split waits for its slowest, descheduled thread. `if` keeps tiny
 * calls (cpu_team_size's threshold) on the calling thread. */
#define CPU_OMP_FOR(threads, work) CPU_OMP_FOR_CHUNKED(threads, work, 1)
/* The same, handing out `chunk` consecutive items at a time (for items of
 * only a few kilobytes). */
#define CPU_OMP_FOR_CHUNKED(threads, work, chunk)                                                  \
  CPU_PRAGMA_(omp parallel for schedule(dynamic, chunk) num_threads(threads)                       \
                  if ((threads) > 1 && (work) >= CPU_PARALLEL_MIN_WORK))
/* A parallel region (CPU_OMP_PARALLEL) whose loop is shared out by
 * CPU_OMP_LOOP, for work that needs per-thread code after the loop. */
#define CPU_OMP_PARALLEL(threads, work)                                                            \
  CPU_PRAGMA_(                                                                                     \
      omp parallel num_threads(threads) if ((threads) > 1 && (work) >= CPU_PARALLEL_MIN_WORK))
#define CPU_OMP_LOOP CPU_PRAGMA_(omp for schedule(dynamic, 1))
#else
/* Without OpenMP the loops run on the calling thread; the arguments are
 * still evaluated (as statements before the loop) so nothing is unused. */
#define CPU_OMP_FOR(threads, work) CPU_OMP_FOR_CHUNKED(threads, work, 1)
#define CPU_OMP_FOR_CHUNKED(threads, work, chunk)                                                  \
  (void)(threads);                                                                                 \
  (void)(work);                                                                                    \
  (void)(chunk);
#define CPU_OMP_PARALLEL(threads, work)                                                            \
  (void)(threads);                                                                                 \
  (void)(work);
#define CPU_OMP_LOOP
#endif

/* for (int64_t I = 0; I < N; I++) { body } over the backend's team for
 * `work` items' worth of elements (cpu_team_size): a team of one runs the
 * loop on the calling thread without a parallel region (entering one costs
 * a team's setup even when its if clause is false), a larger team shares
 * the items out as CPU_OMP_FOR_CHUNKED(threads, work, CHUNK) does. */
#define CPU_FOR_ITEMS(st, work, CHUNK, I, N, ...)                                                  \
  do {                                                                                             \
    if (cpu_team_size((st), (work)) <= 1) {                                                        \
      for (int64_t I = 0; I < (N); I++) {                                                          \
        __VA_ARGS__;                                                                               \
      }                                                                                            \
    } else {                                                                                       \
      CPU_OMP_FOR_CHUNKED((st)->threads, (work), (CHUNK))                                          \
      for (int64_t I = 0; I < (N); I++) {                                                          \
        __VA_ARGS__;                                                                               \
      }                                                                                            \
    }                                                                                              \
  } while (0)

/* ---- streaming stores ---------------------------------------------------- */

/* Non-temporal stores are weakly ordered: each thread that streamed drains
 * them before the op returns (and another thread or the caller reads). */
static inline void cpu_stream_fence(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_ia32_sfence();
#endif
}

/* ---- index tensors -------------------------------------------------------- */

/* Element i of an i32|i64 index tensor's data. */
static inline int64_t cpu_index_at(const void *data, int is_i64, int64_t i) {
  return is_i64 ? ((const int64_t *)data)[i] : (int64_t)((const int32_t *)data)[i];
}

/* Rows ahead whose source row is prefetched (random rows: hide latency). */
#ifndef CPU_PREFETCH_ROWS_AHEAD
#define CPU_PREFETCH_ROWS_AHEAD 4
#endif

static inline void cpu_prefetch_bytes(const char *p, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 0);
}

/* ---- the indexing ops' view (docs/ops.md, Indexing ops) ------------------
 * gather, scatter_add and gather_backward view their index tensor as
 * [outer, steps, inner] around `dim` (outer = dims before dim, steps =
 * index.size(dim), inner = dims after). A data tensor (src, self) is reached
 * through its own strides, since the index may be smaller than it in every
 * dim but `dim`. */
typedef struct cpu_axis_view {
  int ndim, dim;
  int64_t outer, steps, inner;  /* the index's extents */
  int64_t stride[APX_MAX_DIMS]; /* the data tensor's strides (elements) */
  const int64_t *index_shape;
  /* offset of inner position j in the data tensor: j itself when the data
   * tensor's dims after `dim` equal the index's, else inner_offset[j] */
  int inner_contiguous;
  int64_t *inner_offset;
} cpu_axis_view;

static inline int cpu_normalize_dim(int dim, int ndim) { return dim < 0 ? dim + ndim : dim; }

/* Fill v for `index` over data tensor `data` (src, self or out). Returns 0
 * on allocation failure. */
int cpu_axis_view_init(cpu_axis_view *v, const apx_tensor *index, int dim,
                       const apx_tensor *data);
void cpu_axis_view_free(cpu_axis_view *v);
/* Data-tensor offset of outer position o (coordinates of the index's dims
 * before `dim`). */
int64_t cpu_axis_view_base(const cpu_axis_view *v, int64_t o);

static inline int64_t cpu_inner_off(const cpu_axis_view *v, int64_t j) {
  return v->inner_contiguous ? j : v->inner_offset[j];
}

/* scatter_add.c: out = self (NULL: zeros) with src added along `dim` at
 * index (scatter_add; gather_backward with self NULL). `op` names the op in
 * errors. */
apx_status cpu_scatter_accumulate(cpu_state *st, const char *op, const apx_tensor *self,
                                  const apx_tensor *index, const apx_tensor *src,
                                  const apx_tensor *out, int dim);

/* ---- the tile ops' shared rules (tileunpack.c; cpu.c) --------------------- */

/* blend_alpha as tileunpack (and ff_infer's blend) rounds it: to the
 * nearest value of dtype (f32, f16, bf16), directly from the double
 * (cpu.c). */
float cpu_round_double_to_dtype(double v, apx_dtype dtype);
/* docs/ops.md, tileunpack (priority): lmin over all of levels [B,K] and
 * order_bits = max(1, bit_length(K-1)); key[b,k] = ((level - lmin) <<
 * order_bits) + k. */
void cpu_unpack_priority(const apx_tensor *levels, int64_t *lmin, int *order_bits);

/* ---- float elements of the backward ops ---------------------------------- */

/* Element i of f32|f16|bf16 data as fp32. */
static inline float cpu_load_float(apx_dtype dt, const void *data, int64_t i) {
  if (dt == APX_DTYPE_F16) return apx_f16_to_f32(((const uint16_t *)data)[i]);
  if (dt == APX_DTYPE_BF16) return apx_bf16_to_f32(((const uint16_t *)data)[i]);
  return ((const float *)data)[i];
}

/* v rounded to dt (nearest even) and stored as element i. */
static inline void cpu_store_float(apx_dtype dt, void *data, int64_t i, float v) {
  if (dt == APX_DTYPE_F16)
    ((uint16_t *)data)[i] = apx_f32_to_f16(v);
  else if (dt == APX_DTYPE_BF16)
    ((uint16_t *)data)[i] = apx_f32_to_bf16(v);
  else
    ((float *)data)[i] = v;
}

#endif
