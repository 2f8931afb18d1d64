/* tilepack on CUDA (spec/ops.md 2.A): out[b,k,c,dy,dx] =
 * features[b,c,ty*t+dy,tx*t+dx], ids in the given order. A pure copy:
 * bit-exact, moved in the widest unit (16, 8, 4 or 2 bytes) that divides
 * a tile row, an image row and both base addresses.
 *
 * One thread copies one unit of one tile row. The grid's y runs over the
 * channel planes (b, c), x over (k, dy, unit) inside a plane, so that the
 * tiles of one plane are read together (neighbouring tiles share cache
 * sectors) while each tile's row is still written as one contiguous run. */
#include "cuda_backend.h"

struct tilepack_geometry {
  int64_t B, C, H, W, K, t;
  int64_t gw;
  unsigned unit;          /* bytes per copy unit */
  int64_t units_per_row;  /* t*elem / unit */
  int64_t planes;         /* B*C: the outer loop */
  int64_t plane_work;     /* K*t*units_per_row: the inner loop, < 2^31 */
  cuda_fastdiv per_tile;  /* t*units_per_row */
  cuda_fastdiv per_row;   /* units_per_row */
  cuda_fastdiv grid_w;    /* gw: tile id -> (ty, tx) */
  cuda_geom2 launch;
};

template <typename U, typename I>
__global__ void tilepack_kernel(const unsigned char *__restrict__ features,
                                const I *__restrict__ idx, unsigned char *__restrict__ out,
                                tilepack_geometry g, int elem, const int *bad) {
  if (cuda_call_failed(bad)) return;
  const int64_t row_bytes = g.t * elem;
  CUDA_FOR_OUTER(plane, g.planes) {
    int64_t b = plane / g.C, c = plane % g.C;
    CUDA_FOR_INNER(w, g.plane_work) {
      uint32_t k = g.per_tile.div(w), r = w - k * g.per_tile.d;
      uint32_t dy = g.per_row.div(r), u = r - dy * g.per_row.d;
      uint32_t id = (uint32_t)idx[b * g.K + k], ty = g.grid_w.div(id);
      int64_t y = (int64_t)ty * g.t + dy, x0 = (int64_t)(id - ty * g.grid_w.d) * g.t;
      const unsigned char *src =
          features + ((plane * g.H + y) * g.W + x0) * elem + u * (int64_t)sizeof(U);
      unsigned char *dst = out + (((b * g.K + k) * g.C + c) * g.t + dy) * row_bytes +
                           u * (int64_t)sizeof(U);
      *(U *)dst = __ldg((const U *)src);
    }
  }
}

/* The widest unit that divides every byte offset the kernel forms. */
static unsigned copy_unit(int64_t row_bytes, int64_t line_bytes, const void *a, const void *b) {
  static const unsigned units[] = {16, 8, 4, 2};
  for (unsigned i = 0; i < sizeof units / sizeof units[0]; i++) {
    unsigned u = units[i];
    if (row_bytes % u == 0 && line_bytes % u == 0 && (uintptr_t)a % u == 0 &&
        (uintptr_t)b % u == 0)
      return u;
  }
  return 1;
}

static tilepack_geometry geometry(const apx_tilepack_args *a, size_t elem) {
  tilepack_geometry g;
  g.B = a->features->shape[0];
  g.C = a->features->shape[1];
  g.H = a->features->shape[2];
  g.W = a->features->shape[3];
  g.K = a->idx->shape[1];
  g.t = a->tile;
  g.gw = g.W / g.t;
  g.unit = copy_unit(g.t * (int64_t)elem, g.W * (int64_t)elem, a->features->data, a->out->data);
  g.units_per_row = g.t * (int64_t)elem / g.unit;
  g.planes = g.B * g.C;
  g.plane_work = g.K * g.t * g.units_per_row;
  g.per_tile = cuda_fastdiv_make((uint32_t)(g.t * g.units_per_row));
  g.per_row = cuda_fastdiv_make((uint32_t)g.units_per_row);
  g.grid_w = cuda_fastdiv_make((uint32_t)g.gw);
  g.launch = cuda_geom_2d(g.planes, g.plane_work, 256);
  return g;
}

template <typename I>
static void launch(const tilepack_geometry &g, const apx_tilepack_args *a, int elem,
                   const int *bad, cudaStream_t s) {
  const unsigned char *f = (const unsigned char *)a->features->data;
  unsigned char *o = (unsigned char *)a->out->data;
  const I *idx = (const I *)a->idx->data;
  dim3 grid = g.launch.grid, block = g.launch.block;
  switch (g.unit) {
  case 16: tilepack_kernel<uint4, I><<<grid, block, 0, s>>>(f, idx, o, g, elem, bad); break;
  case 8: tilepack_kernel<uint2, I><<<grid, block, 0, s>>>(f, idx, o, g, elem, bad); break;
  case 4: tilepack_kernel<uint32_t, I><<<grid, block, 0, s>>>(f, idx, o, g, elem, bad); break;
  case 2: tilepack_kernel<uint16_t, I><<<grid, block, 0, s>>>(f, idx, o, g, elem, bad); break;
  default: tilepack_kernel<uint8_t, I><<<grid, block, 0, s>>>(f, idx, o, g, elem, bad); break;
  }
}

apx_status cuda_tilepack(void *state, const apx_tilepack_args *a, const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  int dev = a->features->device_index;
  apx_status s = cuda_use_device(st, dev);
  if (s != APX_OK) return s;
  cudaStream_t stream = cuda_stream(call);
  size_t elem = cuda_dtype_size(a->features->dtype);
  tilepack_geometry g = geometry(a, elem);
  if (g.planes * g.plane_work == 0) return APX_OK; /* K = 0 or B = 0: nothing to write */
  if (g.plane_work > 0x7fffffffLL)
    return st->svc->set_error(APX_ERR_UNSUPPORTED,
                              "tilepack: K*t*t = [%lld] elements per channel is beyond the cuda "
                              "backend's 2^31 per plane",
                              (long long)(g.K * g.t * g.t));
  cuda_check_desc d;
  cuda_check_init(&d, APX_OP_TILEPACK, "idx", a->idx);
  d.lo = 0;
  d.hi = (g.H / g.t) * g.gw - 1;
  cuda_checked chk;
  s = cuda_check_run(st, dev, stream, &d, 0, &chk);
  if (s != APX_OK) return s;
  if (a->idx->dtype == APX_DTYPE_I64)
    launch<int64_t>(g, a, (int)elem, chk.bad, stream);
  else
    launch<int32_t>(g, a, (int)elem, chk.bad, stream);
  CUDA_LAUNCHED(st, "tilepack: launch");
  return APX_OK;
}
