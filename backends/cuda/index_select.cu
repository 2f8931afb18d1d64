/* index_select on CUDA (docs/ops.md, index_select): out[i, :] =
 * src[index[i], :]. A pure copy of any dtype (bit-exact); index values are
 * checked by the pre-pass (validate.cu) before any element is written. */
#include "cuda_backend.h"

struct index_select_geometry {
  int64_t N, M, row_bytes;
  unsigned unit;
  int64_t units_per_row, work;
  cuda_geom2 launch; /* y: output rows, x: units of a row */
};

template <typename U, typename I>
__global__ void index_select_kernel(const unsigned char *__restrict__ src,
                                    const I *__restrict__ index, unsigned char *__restrict__ out,
                                    index_select_geometry g, const int *bad) {
  if (cuda_call_failed(bad)) return;
  CUDA_FOR_OUTER(i, g.N) {
    const U *from = (const U *)(src + (int64_t)index[i] * g.row_bytes);
    U *to = (U *)(out + i * g.row_bytes);
    CUDA_FOR_INNER(u, g.units_per_row) to[u] = __ldg(from + u);
  }
}

static unsigned widest_unit(int64_t bytes, const void *a, const void *b) {
  static const unsigned units[] = {16, 8, 4, 2};
  for (unsigned i = 0; i < 4; i++)
    if (bytes % units[i] == 0 && (uintptr_t)a % units[i] == 0 && (uintptr_t)b % units[i] == 0)
      return units[i];
  return 1;
}

static index_select_geometry index_select_geom(const apx_index_select_args *a) {
  index_select_geometry g;
  g.N = a->index->shape[0];
  g.M = a->src->shape[0];
  g.row_bytes = a->src->shape[1] * (int64_t)apx_backend_dtype_size(a->src->dtype);
  g.unit = widest_unit(g.row_bytes, a->src->data, a->out->data);
  g.units_per_row = g.row_bytes / g.unit;
  g.work = g.N * g.units_per_row;
  g.launch = cuda_geom_2d(g.N, g.units_per_row, g.units_per_row >= 256 ? 256 : 64);
  return g;
}

template <typename I>
static void launch_index_select(const index_select_geometry &g, const apx_index_select_args *a,
                                const int *bad, cudaStream_t s) {
  const unsigned char *src = (const unsigned char *)a->src->data;
  unsigned char *out = (unsigned char *)a->out->data;
  const I *index = (const I *)a->index->data;
  dim3 grid = g.launch.grid, block = g.launch.block;
  switch (g.unit) {
  case 16: index_select_kernel<uint4, I><<<grid, block, 0, s>>>(src, index, out, g, bad); break;
  case 8: index_select_kernel<uint2, I><<<grid, block, 0, s>>>(src, index, out, g, bad); break;
  case 4: index_select_kernel<uint32_t, I><<<grid, block, 0, s>>>(src, index, out, g, bad); break;
  default: index_select_kernel<uint16_t, I><<<grid, block, 0, s>>>(src, index, out, g, bad); break;
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
  if (g.units_per_row > 0x7fffffffLL)
    return st->svc->set_error(APX_ERR_UNSUPPORTED,
                              "index_select: a row of [%lld] bytes is beyond the cuda backend's "
                              "2^31 units",
                              (long long)g.row_bytes);
  cuda_check_desc d;
  cuda_check_init(&d, APX_OP_INDEX_SELECT, "index", a->index);
  d.lo = 0;
  d.hi = g.M - 1;
  cuda_checked chk;
  s = cuda_check_run(st, dev, stream, &d, 0, &chk);
  if (s != APX_OK) return s;
  if (a->index->dtype == APX_DTYPE_I64)
    launch_index_select<int64_t>(g, a, chk.bad, stream);
  else
    launch_index_select<int32_t>(g, a, chk.bad, stream);
  CUDA_LAUNCHED(st, "index_select: launch");
  return APX_OK;
}
