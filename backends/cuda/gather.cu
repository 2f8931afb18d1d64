/* SPDX-License-Identifier: Apache-2.0 */
/* gather on CUDA (docs/ops.md, gather): out[p] = src[p with coordinate
 * `dim` replaced by index[p]]. A pure copy of any dtype (bit-exact). The
 * output is never aliased, so with validate=device the kernel checks the
 * index values it reads itself (cuda_check_own): it reads in bounds
 * whatever they are and publishes the least bad position it saw; eager's
 * pre-pass has run before it. */
#include "cuda_backend.h"

/* The index/out shape with adjacent non-`dim` dimensions merged where the
 * source is contiguous across them, and the source strides. */
struct gather_geometry {
  int ndim, dim;
  int64_t shape[APX_MAX_DIMS];  /* index (= out) extents */
  int64_t stride[APX_MAX_DIMS]; /* source strides in elements */
  int64_t n;
  int64_t rows, row_len; /* the 2-D form: rows of the last (merged) dim */
  int64_t dim_extent;    /* src.shape[dim]: valid index values are [0, dim_extent) */
  cuda_geom2 launch;
};

/* VEC consecutive outputs per thread along the last dimension (when that
 * is not `dim`, so the source is contiguous there too): one wide store.
 * ic.record (validate=device): index values are clamped into range for
 * the loads, and each warp publishes the least position of a bad value
 * among its entries (a thread's positions ascend, so its first is its
 * least). */
template <typename E, typename I, int VEC>
__global__ void gather_kernel(const E *__restrict__ src, const I *__restrict__ index,
                              E *__restrict__ out, gather_geometry g, cuda_inline_check ic) {
  struct alignas(sizeof(E) * VEC) pack { E v[VEC]; };
  const int64_t v_max = g.dim_extent - 1;
  const bool check = ic.record != nullptr;
  unsigned long long first = ~0ULL;
  const int last = g.ndim - 1;
  const int64_t groups = g.row_len / VEC;
  CUDA_FOR_OUTER(r, g.rows) {
    /* the source offset of the row's coordinates (all dims but the last) */
    int64_t rest = r, base = 0;
    int dim_outer = 0;
    for (int d = last - 1; d >= 0; d--) {
      int64_t c = rest % g.shape[d];
      rest /= g.shape[d];
      if (d == g.dim)
        dim_outer = 1;
      else
        base += c * g.stride[d];
    }
    const int64_t p0 = r * g.row_len;
    CUDA_FOR_INNER(gi, groups) {
      int64_t j0 = (int64_t)gi * VEC;
      pack o;
#pragma unroll
      for (int q = 0; q < VEC; q++) {
        int64_t j = j0 + q, v = (int64_t)index[p0 + j];
        if (check && (v < 0 || v > v_max)) {
          if (first == ~0ULL) first = (unsigned long long)(p0 + j);
          v = v < 0 ? 0 : v_max; /* reads in bounds */
        }
        int64_t off = base + (last == g.dim ? v * g.stride[last] : j * g.stride[last]);
        if (dim_outer) off += v * g.stride[g.dim];
        o.v[q] = src[off];
      }
      *(pack *)(out + p0 + j0) = o;
    }
  }
  if (check) cuda_warp_publish(ic, first); /* blocks are whole warps */
}

/* Merge dims d and d+1 (neither is `dim`) when the index covers the
 * source's full extent of d+1: then they address the source as one. */
static gather_geometry gather_geom(const apx_tensor *src, const apx_tensor *index, int dim) {
  int64_t sstride[APX_MAX_DIMS];
  int64_t s = 1;
  for (int d = src->ndim - 1; d >= 0; d--) {
    sstride[d] = s;
    s *= src->shape[d];
  }
  gather_geometry g;
  g.ndim = 0;
  g.dim = -1;
  for (int d = 0; d < index->ndim; d++) {
    int can_merge = g.ndim > 0 && d != dim && g.ndim - 1 != g.dim &&
                    index->shape[d] == src->shape[d];
    if (can_merge) {
      g.shape[g.ndim - 1] *= index->shape[d];
      g.stride[g.ndim - 1] = sstride[d];
    } else {
      if (d == dim) g.dim = g.ndim;
      g.shape[g.ndim] = index->shape[d];
      g.stride[g.ndim] = sstride[d];
      g.ndim++;
    }
  }
  g.n = apx_backend_numel(index);
  g.row_len = g.shape[g.ndim - 1];
  g.rows = g.row_len > 0 ? g.n / g.row_len : 0;
  g.launch = cuda_geom_2d(g.rows, g.row_len, g.row_len >= 256 ? 256 : 64);
  return g;
}

/* Outputs per thread: a 4- to 8-byte store when the last dimension allows. */
static int gather_vec(const gather_geometry &g, const apx_tensor *out, size_t elem) {
  int vec = elem == 8 ? 2 : 4;
  while (vec > 1 && (g.row_len % vec != 0 || (uintptr_t)out->data % (vec * elem) != 0))
    vec /= 2;
  return vec;
}

template <typename E, typename I>
static cudaError_t launch_gather_typed(gather_geometry g, const apx_gather_args *a,
                                       const cuda_inline_check &ic, cudaStream_t s) {
  int vec = gather_vec(g, a->out, sizeof(E));
  g.launch = cuda_geom_2d(g.rows, g.row_len / vec, g.row_len / vec >= 256 ? 256 : 64);
  dim3 grid = g.launch.grid, block = g.launch.block;
  const E *src = (const E *)a->src->data;
  const I *index = (const I *)a->index->data;
  E *out = (E *)a->out->data;
  switch (vec) {
  case 4: gather_kernel<E, I, 4><<<grid, block, 0, s>>>(src, index, out, g, ic); break;
  case 2: gather_kernel<E, I, 2><<<grid, block, 0, s>>>(src, index, out, g, ic); break;
  default: gather_kernel<E, I, 1><<<grid, block, 0, s>>>(src, index, out, g, ic); break;
  }
  return cudaGetLastError();
}

template <typename I>
static cudaError_t launch_gather(const gather_geometry &g, const apx_gather_args *a,
                                 const cuda_inline_check &ic, cudaStream_t s) {
  switch (apx_backend_dtype_size(a->src->dtype)) {
  case 2: return launch_gather_typed<uint16_t, I>(g, a, ic, s);
  case 8: return launch_gather_typed<uint64_t, I>(g, a, ic, s);
  default: return launch_gather_typed<uint32_t, I>(g, a, ic, s);
  }
}

apx_status cuda_gather(void *state, const apx_gather_args *a, const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  int dev = a->src->device_index;
  apx_status s = cuda_use_device(st, dev);
  if (s != APX_OK) return s;
  cudaStream_t stream = cuda_stream(call);
  int dim = a->dim < 0 ? a->dim + a->src->ndim : a->dim;
  gather_geometry g = gather_geom(a->src, a->index, dim);
  g.dim_extent = a->src->shape[dim];
  if (g.n == 0) return APX_OK;
  if (g.row_len > 0x7fffffffLL)
    return st->svc->set_error(APX_ERR_UNSUPPORTED,
                              "gather: a last dimension of [%lld] is beyond the cuda backend's "
                              "2^31",
                              (long long)g.row_len);
  cuda_check_desc d;
  cuda_check_init(&d, APX_OP_GATHER, "index", a->index);
  d.lo = 0;
  d.hi = a->src->shape[dim] - 1;
  cuda_inline_check ic;
  if (g.dim_extent == 0) { /* every value is bad and nothing can be read: the check alone */
    cuda_checked chk;
    return cuda_check_run(st, dev, stream, &d, 0, &chk);
  }
  if (!cuda_check_own(st, dev, &d, &ic)) { /* eager: the pre-pass, waited for */
    cuda_checked chk;
    s = cuda_check_run(st, dev, stream, &d, 0, &chk);
    if (s != APX_OK) return s;
  }
  cudaError_t err = a->index->dtype == APX_DTYPE_I64 ? launch_gather<int64_t>(g, a, ic, stream)
                                                     : launch_gather<int32_t>(g, a, ic, stream);
  if (err != cudaSuccess) return cuda_fail(st, err, "gather: launch");
  return APX_OK;
}
