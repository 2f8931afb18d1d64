/* tilepack on CUDA (spec/ops.md 2.A): out[b,k,c,dy,dx] =
 * features[b,c,ty*t+dy,tx*t+dx], ids in the given order. A pure copy:
 * bit-exact, moved in the widest unit (16, 8, 4 or 2 bytes) that divides
 * a tile row, an image row and both base addresses.
 *
 * One thread copies one unit of one tile row. Threads run over
 * (b, c, k, dy, unit), k inside c, so that the tiles of one channel plane
 * are read together (neighbouring tiles share cache sectors) while each
 * tile's row is still written as one contiguous run. */
#include "cuda_backend.h"

struct tilepack_geometry {
  int64_t B, C, H, W, K, t;
  int64_t gw;
  unsigned unit;          /* bytes per copy unit */
  int64_t units_per_row;  /* t*elem / unit */
  int64_t work;           /* B*C*K*t*units_per_row */
  cuda_geom launch;
};

template <typename U, typename I>
__global__ void tilepack_kernel(const unsigned char *__restrict__ features,
                                const I *__restrict__ idx, unsigned char *__restrict__ out,
                                tilepack_geometry g, int elem, const int *bad) {
  if (cuda_call_failed(bad)) return;
  const int64_t row_bytes = g.t * elem;
  CUDA_FOR(w, g.work) {
    int64_t u = w % g.units_per_row;
    int64_t r = w / g.units_per_row;
    int64_t dy = r % g.t;
    r /= g.t;
    int64_t k = r % g.K;
    r /= g.K;
    int64_t c = r % g.C;
    int64_t b = r / g.C;
    int64_t id = (int64_t)idx[b * g.K + k];
    int64_t y = (id / g.gw) * g.t + dy, x0 = (id % g.gw) * g.t;
    const unsigned char *src =
        features + (((b * g.C + c) * g.H + y) * g.W + x0) * elem + u * (int64_t)sizeof(U);
    unsigned char *dst = out + (((b * g.K + k) * g.C + c) * g.t + dy) * row_bytes +
                         u * (int64_t)sizeof(U);
    *(U *)dst = __ldg((const U *)src);
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
  g.work = g.B * g.C * g.K * g.t * g.units_per_row;
  g.launch = cuda_geom_1d(g.work, 256);
  return g;
}

template <typename I>
static void launch(const tilepack_geometry &g, const apx_tilepack_args *a, int elem,
                   const int *bad, cudaStream_t s) {
  const unsigned char *f = (const unsigned char *)a->features->data;
  unsigned char *o = (unsigned char *)a->out->data;
  const I *idx = (const I *)a->idx->data;
  dim3 grid(g.launch.blocks), block(g.launch.threads);
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
  if (g.work == 0) return APX_OK; /* K = 0 or B = 0: nothing to write */
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
