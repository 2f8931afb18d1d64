/* SPDX-License-Identifier: Apache-2.0 */
/* index_select on CUDA (docs/ops.md, index_select): src viewed as [outer, M,
 * inner] around dim, out as [outer, N, inner]; out row (o, i) = src row (o,
 * index[i]), rows of inner elements. A pure copy of any dtype (bit-exact), in the widest
 * unit (16, 8, 4 or 2 bytes) that divides a row and both base addresses.
 * The output is never aliased, so with validate=device the kernel checks
 * the index values it reads itself (cuda_check_own); eager's pre-pass has
 * run before it. */
#include "cuda_backend.h"

struct index_select_geometry {
  int64_t outer, N, M, row_bytes;
  unsigned unit;
  int64_t units_per_row, work;
  int fast;                 /* work < 2^31: rows by fast division */
  cuda_fastdiv per_row;     /* units_per_row */
  cuda_geom launch;
};

/* Work items (out row of the outer * N, unit of the row) flattened, UNROLL a thread spaced
 * one block apart, so that a warp's items at each step are consecutive
 * units (one row, or the end of one and the start of the next): every
 * thread issues its index loads, then its source loads, then its stores,
 * UNROLL copy chains in flight. ic.record (validate=device): index values
 * are clamped into range for the loads, and each warp publishes the least
 * index position whose value is bad. */
#define INDEX_SELECT_THREADS 256

template <typename U, typename I, int UNROLL>
__global__ void __launch_bounds__(INDEX_SELECT_THREADS)
    index_select_kernel(const unsigned char *__restrict__ src, const I *__restrict__ index,
                        U *__restrict__ out, index_select_geometry g, cuda_inline_check ic) {
  const bool check = ic.record != nullptr;
  const int64_t v_max = g.M - 1;
  unsigned long long first = ~0ULL;
  const int64_t span = (int64_t)blockDim.x * UNROLL;
  for (int64_t w0 = (int64_t)blockIdx.x * span + threadIdx.x; w0 < g.work;
       w0 += (int64_t)gridDim.x * span) {
    int64_t row[UNROLL], u[UNROLL], o[UNROLL];
    U v[UNROLL];
#pragma unroll
    for (int j = 0; j < UNROLL; j++) { /* items past the end redo the last one */
      int64_t w = w0 + (int64_t)j * blockDim.x;
      w = w < g.work ? w : g.work - 1;
      row[j] = g.fast ? (int64_t)g.per_row.div((uint32_t)w) : w / g.units_per_row;
      u[j] = w - row[j] * g.units_per_row;
      o[j] = g.outer > 1 ? row[j] / g.N : 0; /* row becomes the index position */
      row[j] -= o[j] * g.N;
    }
    int64_t at[UNROLL];
#pragma unroll
    for (int j = 0; j < UNROLL; j++) {
      int64_t x = (int64_t)index[row[j]];
      if (check && (x < 0 || x > v_max)) {
        if ((unsigned long long)row[j] < first) first = (unsigned long long)row[j];
        x = x < 0 ? 0 : v_max; /* reads in bounds */
      }
      at[j] = x;
    }
#pragma unroll
    for (int j = 0; j < UNROLL; j++)
      v[j] = __ldg((const U *)(src + (o[j] * g.M + at[j]) * g.row_bytes) + u[j]);
#pragma unroll
    for (int j = 0; j < UNROLL; j++) {
      const int64_t w = w0 + (int64_t)j * blockDim.x;
      if (w < g.work) out[w] = v[j];
    }
  }
  if (check) cuda_warp_publish(ic, first);
}

static unsigned widest_unit(int64_t bytes, const void *a, const void *b) {
  static const unsigned units[] = {16, 8, 4, 2};
  for (unsigned i = 0; i < 4; i++)
    if (bytes % units[i] == 0 && (uintptr_t)a % units[i] == 0 && (uintptr_t)b % units[i] == 0)
      return units[i];
  return 1;
}

/* Items a thread: 4 where the grid still fills the GPU many times over,
 * else 1 (a small call's time is one chain's latency: more blocks). */
#define INDEX_SELECT_UNROLL_MIN_WORK (1 << 20)

static index_select_geometry index_select_geom(const apx_index_select_args *a) {
  index_select_geometry g;
  int64_t inner;
  apx_index_select_view(a->src, a->dim, &g.outer, &g.M, &inner);
  g.N = a->index->shape[0];
  g.row_bytes = inner * (int64_t)apx_backend_dtype_size(a->src->dtype);
  g.unit = widest_unit(g.row_bytes, a->src->data, a->out->data);
  g.units_per_row = g.row_bytes / g.unit;
  g.work = g.outer * g.N * g.units_per_row;
  g.fast = g.work < 0x7fffffffLL;
  g.per_row = cuda_fastdiv_make(g.fast ? (uint32_t)g.units_per_row : 1u);
  int unroll = g.work >= INDEX_SELECT_UNROLL_MIN_WORK ? 4 : 1;
  g.launch = cuda_geom_1d((g.work + unroll - 1) / unroll, INDEX_SELECT_THREADS);
  return g;
}

template <typename U, typename I>
static void launch_unit(const index_select_geometry &g, const apx_index_select_args *a,
                        const cuda_inline_check &ic, cudaStream_t s) {
  const unsigned char *src = (const unsigned char *)a->src->data;
  U *out = (U *)a->out->data;
  const I *index = (const I *)a->index->data;
  if (g.work >= INDEX_SELECT_UNROLL_MIN_WORK)
    index_select_kernel<U, I, 4><<<g.launch.blocks, g.launch.threads, 0, s>>>(src, index, out,
                                                                              g, ic);
  else
    index_select_kernel<U, I, 1><<<g.launch.blocks, g.launch.threads, 0, s>>>(src, index, out,
                                                                              g, ic);
}

template <typename I>
static void launch_index_select(const index_select_geometry &g, const apx_index_select_args *a,
                                const cuda_inline_check &ic, cudaStream_t s) {
  switch (g.unit) {
  case 16: launch_unit<uint4, I>(g, a, ic, s); break;
  case 8: launch_unit<uint2, I>(g, a, ic, s); break;
  case 4: launch_unit<uint32_t, I>(g, a, ic, s); break;
  default: launch_unit<uint16_t, I>(g, a, ic, s); break;
  }
}

apx_status cuda_index_select(void *state, const apx_index_select_args *a, const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  int dev = a->src->device_index;
  apx_status s = cuda_use_device(st, dev);
  if (s != APX_OK) return s;
  cudaStream_t stream = cuda_stream(call);
  index_select_geometry g = index_select_geom(a);
  if (g.work == 0) return APX_OK;
  cuda_check_desc d;
  cuda_check_init(&d, APX_OP_INDEX_SELECT, "index", a->index);
  d.lo = 0;
  d.hi = g.M - 1;
  cuda_inline_check ic;
  if (g.M == 0) { /* every value is bad and no row can be read: the check alone */
    cuda_checked chk;
    return cuda_check_run(st, dev, stream, &d, 0, &chk);
  }
  if (!cuda_check_own(st, dev, &d, &ic)) { /* eager: the pre-pass, waited for */
    cuda_checked chk;
    s = cuda_check_run(st, dev, stream, &d, 0, &chk);
    if (s != APX_OK) return s;
  }
  if (a->index->dtype == APX_DTYPE_I64)
    launch_index_select<int64_t>(g, a, ic, stream);
  else
    launch_index_select<int32_t>(g, a, ic, stream);
  CUDA_LAUNCHED(st, "index_select: launch");
  return APX_OK;
}
