/* The cuda backend's internals shared between its files: state, error
 * reporting, launch geometry, dtype access in kernels, the device-side
 * index check (validation pre-pass) and stream-ordered workspace.
 * Op math: docs/ops.md; plugin contract: include/apexx/backend.h. */
#ifndef APX_CUDA_BACKEND_H
#define APX_CUDA_BACKEND_H

#include <apexx/backend.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include <pthread.h>

#include <atomic>

#define CUDA_MAX_DEVICES 16
/* Check slots per device, for the pre-pass (validate.cu): each pre-pass
 * takes the next one, round robin, for its blocks' partial results and its
 * verdict. A slot is reused only CUDA_CHECK_SLOTS pre-passes later, so
 * calls in flight on different streams never share one in practice. Known
 * limit: CUDA graphs hold the slots their capture took, so two graphs
 * captured CUDA_CHECK_SLOTS or more pre-passes apart may hold the same
 * slot; replayed at the same time on two streams they could mix their
 * verdicts (nothing waits on a slot, so nothing can hang). Checks inside
 * an op's kernel (cuda_check_own, cuda_block_check) use no slot. */
#define CUDA_CHECK_SLOTS 128
/* The check kernel's grid is capped so that its per-block partial results
 * fit in the slot (grid-stride loops cover any size). */
#define CUDA_CHECK_MAX_BLOCKS 1024
#define CUDA_CHECK_THREADS 256

/* n / d and n % d for n, d < 2^31 with a multiply and a shift
 * (Granlund-Montgomery, as PyTorch's IntDivider): 64-bit division by a
 * run-time value costs dozens of instructions per element. */
struct cuda_fastdiv {
  uint32_t d, m, s;
  __device__ __forceinline__ uint32_t div(uint32_t n) const {
    return (__umulhi(n, m) + n) >> s;
  }
  __device__ __forceinline__ uint32_t mod(uint32_t n) const { return n - div(n) * d; }
};

static inline cuda_fastdiv cuda_fastdiv_make(uint32_t d) {
  cuda_fastdiv f;
  f.d = d ? d : 1;
  f.s = 0;
  while (f.s < 32 && ((uint64_t)1 << f.s) < f.d) f.s++;
  f.m = (uint32_t)((((uint64_t)1 << 32) * (((uint64_t)1 << f.s) - f.d)) / f.d + 1);
  return f;
}

/* ---- device-side check records --------------------------------------- */

/* What a check found wrong (kinds of cuda_check_result.kind). */
enum cuda_check_kind {
  CUDA_BAD_NONE = 0,
  CUDA_BAD_RANGE = 1,      /* an id/index value outside [lo, hi] */
  CUDA_BAD_ORIGIN = 2,     /* an origin pair outside the image */
  CUDA_BAD_DUPLICATE = 3,  /* a repeated id in a batch row (require_unique) */
  CUDA_BAD_LEVEL_SPAN = 4, /* levels too far apart for the int32 key */
  CUDA_BAD_NAN = 5         /* a NaN float (ff_infer's utilities) */
};

/* One index tensor to check, passed by value to the check kernel. */
struct cuda_check_desc {
  int op;              /* apx_op_id, for the message */
  char arg[16];        /* argument name: "idx", "index", "origins" */
  const void *data;    /* device pointer; NULL = nothing to check */
  int is64;            /* i64 (else i32) */
  int ndim;            /* index tensor's ndim and shape, for the message */
  int64_t shape[APX_MAX_DIMS];
  int64_t count;       /* entries: elements, or (y0,x0) pairs for origins */
  int pairs;           /* 1: entries are (y0, x0) pairs (origins) */
  int64_t lo, hi;      /* inclusive range of a value (of y0 for pairs) */
  int64_t lo2, hi2;    /* inclusive range of x0 for pairs */
  int check_range;     /* 0 in validate=off: only statistics below */
  int64_t unique_row;  /* > 0: ids must be unique within rows of this length */
  int64_t const_row;   /* > 0: note whether rows of this length are constant */
  cuda_fastdiv row_div; /* const_row, when count < 2^31 (small_rows) */
  int small_rows;
  /* levels (tileunpack): min/max over the tensor, span checked against the
   * int32 priority key (docs/ops.md, tileunpack (priority)) when check_range. */
  const void *levels;
  int levels_is64;
  int64_t levels_count;
  int order_bits;
  int64_t key_k;       /* K, for the key bound */
  /* the call's id on its device (cuda_check_stamp): the error record
   * keeps one call's failure; 0 for a check with no id (ff_infer) */
  unsigned long long call;
  /* unique_row with a map (cuda_check_run sets it for few rows over a
   * small id range): [rows, hi - lo + 1] ints holding the least in-row
   * position of each id, so a repeat is one lookup instead of a scan of
   * the row's earlier entries */
  const int *unique_map;
};

/* A check's outcome, in the slot (EAGER reads it) and, in DEVICE mode, in
 * the per-device deferred record (the first failure since the last sync). */
struct cuda_check_result {
  int bad;              /* 1 when the checked call must write nothing */
  int kind;             /* cuda_check_kind */
  unsigned long long pos; /* linear position of the first bad entry */
  long long value[2];   /* its value (both components for pairs) */
  long long other;      /* duplicate: earlier position of the same id */
  long long lmin, lmax; /* levels statistics (0, 0 when none) */
  long long kat;        /* the largest k whose level is lmax */
  int rows_vary;        /* const_row: some row is not constant */
};

struct cuda_check_slot {
  cuda_check_result result;
  unsigned int blocks_done;
  unsigned long long partial_pos[CUDA_CHECK_MAX_BLOCKS];
  long long partial_lmin[CUDA_CHECK_MAX_BLOCKS];
  long long partial_lmax[CUDA_CHECK_MAX_BLOCKS];
  long long partial_kat[CUDA_CHECK_MAX_BLOCKS]; /* largest k at lmax */
  int partial_rows_vary[CUDA_CHECK_MAX_BLOCKS];
};

/* The deferred error of one device (validate=device): the first failing
 * call since the last sync holds it (`call`), and among that call's
 * publishers the least bad position wins (`pos_inv`, an atomic max of
 * ~position), so the message names the call's first bad entry in
 * row-major order whichever blocks saw bad entries, in whatever order.
 * All zero between syncs. */
struct cuda_error_record {
  unsigned long long call;    /* the holding call's desc.call + 1 (0: none) */
  unsigned long long pos_inv; /* ~(least bad position published), 1: a
                               * failure without a position (levels span) */
  int lock;             /* guards result and desc while one is written */
  int ready;            /* set once result and desc are complete */
  cuda_check_result result;
  cuda_check_desc desc; /* the failing check (pointers are stale) */
};

/* ---- state ------------------------------------------------------------ */

struct cuda_device_res {
  int created;              /* resources below made (under cuda_state.lock) */
  cudaError_t init_error;   /* result of creating them */
  cuda_error_record *record; /* device memory */
  cuda_check_slot *slots;    /* device memory, CUDA_CHECK_SLOTS of them */
  std::atomic<unsigned long long> next_call; /* ids of checked calls (desc.call) */
  /* the backend's own stream-ordered pool for op workspace: it keeps what
   * it has between calls (release threshold: never), as a framework's
   * caching allocator does, so a call's scratch is not mapped and unmapped
   * around every synchronisation; destroyed at fini */
  cudaMemPool_t pool;
  std::atomic<unsigned> next_slot;
  int sm_count;
  int cc_major;             /* compute capability (programmatic launches: 9+) */
  std::atomic<uint64_t> in_use_bytes;
  std::atomic<uint64_t> peak_bytes;
};

struct cuda_state {
  const apx_core_services *svc;
  int default_device;
  int device_count;
  apx_validate_mode validate_mode;
  int pdl; /* programmatic dependent launches allowed ($APEXX_CUDA_PDL != 0) */
  cuda_device_res dev[CUDA_MAX_DEVICES];
  pthread_mutex_t lock;  /* guards device setup and the size table */
  void *ff_graphs;       /* ff_infer.cu: the graph replay cache */
  /* Sizes of live allocations (open addressing on the pointer), so that
   * free can keep the in-use and peak counters right. */
  struct cuda_alloc_entry { void *ptr; size_t bytes; } *sizes;
  size_t sizes_cap, sizes_used;
};

/* ff_infer.cu: may the FF path run these args (channels, L0 grid)? And
 * the release of its graph replay cache at fini. */
int cuda_ff_supports(cuda_state *st, const apx_ff_infer_args *a, apx_pass_over_code *code,
                     char *reason, size_t reason_size);
void cuda_ff_fini(cuda_state *st);

/* graph.cu: capture of the backend's launches into a CUDA graph, shared by
 * apx_graph_* and ff_infer's graph replay. begin starts a thread-local
 * capture on `stream`, or on a new non-blocking stream when it is NULL
 * (*own = 1: the caller destroys it after end); a stream already being
 * captured is APX_ERR_INVALID_ARG. end ends the capture and instantiates it
 * into *exec; with launched != APX_OK (a launch inside failed) it only
 * discards the capture and returns launched. `what` prefixes messages. */
apx_status cuda_capture_begin(cuda_state *st, cudaStream_t stream, cudaStream_t *capture,
                              int *own, const char *what);
apx_status cuda_capture_end(cuda_state *st, cudaStream_t capture, apx_status launched,
                            cudaGraphExec_t *exec, const char *what);
/* The table's graph entries (include/apexx/backend.h). */
apx_status cuda_graph_begin(void *state, int device_index, void *stream, void **graph,
                            void **capture_stream);
apx_status cuda_graph_end(void *state, void *graph);
apx_status cuda_graph_replay(void *state, void *graph, void *stream);
void cuda_graph_free(void *state, void *graph);

/* ---- errors ------------------------------------------------------------ */

/* Report a CUDA error through the core (apx_last_error) and return the
 * status: out of memory -> APX_ERR_NO_MEMORY, sticky device faults ->
 * APX_ERR_DEVICE, anything else -> APX_ERR_BACKEND. `what` names the op
 * and the step ("tilepack: launch"). */
apx_status cuda_fail(const cuda_state *st, cudaError_t err, const char *what);

/* Evaluate a CUDA call; on error return cuda_fail(...) from the caller. */
#define CUDA_TRY(st, expr, what)                                               \
  do {                                                                         \
    cudaError_t cuda_try_err_ = (expr);                                        \
    if (cuda_try_err_ != cudaSuccess) return cuda_fail((st), cuda_try_err_, (what)); \
  } while (0)

/* After a kernel launch: the launch's own error (bad configuration ...). */
#define CUDA_LAUNCHED(st, what) CUDA_TRY(st, cudaGetLastError(), what)

/* Make `device_index` current for the calling thread and create its
 * resources (check slots, error record) on first use. */
apx_status cuda_use_device(cuda_state *st, int device_index);

static inline cudaStream_t cuda_stream(const apx_call *call) {
  return call ? (cudaStream_t)call->stream : (cudaStream_t)0;
}

/* ---- launch geometry ---------------------------------------------------- */

/* One 1-D launch over n work items: blocks of `threads`, the grid capped at
 * what the hardware takes; kernels loop with a grid stride so any n is
 * covered (docs/ops.md, Every output written: every output element is written). */
struct cuda_geom {
  unsigned blocks;
  unsigned threads;
};

static inline cuda_geom cuda_geom_1d(int64_t n, unsigned threads) {
  cuda_geom g;
  g.threads = threads;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > 0x7fffffffLL) blocks = 0x7fffffffLL;
  g.blocks = (unsigned)blocks;
  return g;
}

/* A 2-D launch: y runs over `outer` items (a grid-stride loop beyond
 * 65535), x over `inner` items, inner < 2^31, so that kernels decode their
 * position inside one outer item with 32-bit arithmetic. */
struct cuda_geom2 {
  dim3 grid, block;
};

static inline cuda_geom2 cuda_geom_2d(int64_t outer, int64_t inner, unsigned threads) {
  cuda_geom2 g;
  int64_t bx = (inner + threads - 1) / threads;
  if (bx < 1) bx = 1;
  if (bx > 0x7fffffffLL) bx = 0x7fffffffLL;
  int64_t by = outer < 1 ? 1 : (outer > 65535 ? 65535 : outer);
  g.grid = dim3((unsigned)bx, (unsigned)by, 1);
  g.block = dim3(threads, 1, 1);
  return g;
}

#define CUDA_FOR_OUTER(o, n) for (int64_t o = blockIdx.y; o < (n); o += gridDim.y)
#define CUDA_FOR_INNER(i, n)                                                   \
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < (uint32_t)(n);  \
       i += gridDim.x * blockDim.x)

/* Grid-stride loop over [0, n) with a 64-bit counter. */
#define CUDA_FOR(i, n)                                                         \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);    \
       i += (int64_t)gridDim.x * blockDim.x)

/* ---- dtype access in kernels ------------------------------------------ */

template <typename T> struct cuda_dt;
template <> struct cuda_dt<float> {
  static __device__ __forceinline__ float load(const float *p) { return *p; }
  static __device__ __forceinline__ float to_f(float v) { return v; }
  static __device__ __forceinline__ float from_f(float v) { return v; }
};
template <> struct cuda_dt<__half> {
  static __device__ __forceinline__ float load(const __half *p) { return __half2float(*p); }
  static __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half from_f(float v) { return __float2half_rn(v); }
};
template <> struct cuda_dt<__nv_bfloat16> {
  static __device__ __forceinline__ float load(const __nv_bfloat16 *p) {
    return __bfloat162float(*p);
  }
  static __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 from_f(float v) {
    return __float2bfloat16_rn(v);
  }
};

/* Load element i of a float tensor of runtime dtype dt as fp32 (exact). */
static __device__ __forceinline__ float cuda_load_any(const void *p, int dt, int64_t i) {
  switch (dt) {
  case APX_DTYPE_F16: return __half2float(((const __half *)p)[i]);
  case APX_DTYPE_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
  default: return ((const float *)p)[i];
  }
}

/* Round an fp32 value to storage dtype dt and back (a cast of an input). */
static __device__ __forceinline__ float cuda_round_any(float v, int dt) {
  switch (dt) {
  case APX_DTYPE_F16: return __half2float(__float2half_rn(v));
  case APX_DTYPE_BF16: return __bfloat162float(__float2bfloat16_rn(v));
  default: return v;
  }
}

/* Load an index of either width. */
static __device__ __forceinline__ int64_t cuda_load_index(const void *p, int is64, int64_t i) {
  return is64 ? ((const int64_t *)p)[i] : (int64_t)((const int32_t *)p)[i];
}

/* Main kernels of a validated call read the check's verdict first and
 * write nothing when it failed (validate=device; NULL otherwise). */
static __device__ __forceinline__ int cuda_call_failed(const int *bad) {
  /* written by the check kernel before this kernel started: constant here,
   * so the read-only cache serves it (a volatile read per thread would go
   * to L2 every time) */
  return bad != nullptr && __ldg(bad) != 0;
}

/* ---- programmatic dependent launch (sm_90) -------------------------------- */

/* A small call's second kernel may be launched while the first runs
 * (cuda_launch_after): the first lets it start (cuda_allow_dependents, at
 * its top), the second issues the loads that do not depend on the first,
 * then waits for the first's completion and the visibility of its writes
 * (cuda_wait_prerequisites) before it reads any of them or stores
 * anything. What the first wrote is read through L2 (__ldcg): the
 * read-only path (ld.global.nc, __ldg, __restrict__ const) assumes data
 * that stay constant while the kernel runs, and the second kernel was
 * running while the first wrote. Without a programmatic launch the wait
 * returns at once. No-ops before sm_90. */
static __device__ __forceinline__ void cuda_allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
static __device__ __forceinline__ void cuda_wait_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* cuda_call_failed for a kernel launched by cuda_launch_after, after
 * cuda_wait_prerequisites. */
static __device__ __forceinline__ int cuda_call_failed_after_wait(const int *bad) {
  return bad != nullptr && __ldcg(bad) != 0;
}

/* Can this device take programmatic launches (sm_90 and $APEXX_CUDA_PDL
 * not 0)? */
static inline int cuda_pdl_ok(const cuda_state *st, int device_index) {
  return st->pdl && st->dev[device_index].cc_major >= 9;
}

/* cudaLaunchKernelEx's configuration with the one launch attribute *attr
 * (which must outlive the launch). */
static inline cudaLaunchConfig_t cuda_launch_config(dim3 grid, dim3 block, size_t smem,
                                                    cudaStream_t s, cudaLaunchAttribute *attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

/* Launch `kernel` (smem: dynamic shared memory bytes) on the stream,
 * programmatically after the kernel before it when `programmatic` (and
 * cuda_pdl_ok), else plainly; a device or stream that refuses the
 * programmatic form gets the plain one. */
template <typename... KArgs, typename... Args>
static cudaError_t cuda_launch_after(const cuda_state *st, int device_index, int programmatic,
                                     dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                     void (*kernel)(KArgs...), Args... args) {
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = cuda_launch_config(grid, block, smem, s, &attr);
  cfg.numAttrs = programmatic && cuda_pdl_ok(st, device_index) ? 1 : 0;
  cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
  if (err != cudaSuccess && cfg.numAttrs > 0) {
    (void)cudaGetLastError();
    cfg.numAttrs = 0;
    err = cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
  }
  return err;
}

/* ---- a check's verdict, shared by the pre-pass and in-kernel checks ----- */

/* Is entry i out of range? The kind, 0 when fine. */
static __device__ __forceinline__ int cuda_entry_out_of_range(const cuda_check_desc &d,
                                                              int64_t i) {
  if (d.pairs) {
    int64_t y0 = cuda_load_index(d.data, d.is64, 2 * i);
    int64_t x0 = cuda_load_index(d.data, d.is64, 2 * i + 1);
    return y0 < d.lo || y0 > d.hi || x0 < d.lo2 || x0 > d.hi2 ? CUDA_BAD_ORIGIN : 0;
  }
  int64_t v = cuda_load_index(d.data, d.is64, i);
  return v < d.lo || v > d.hi ? CUDA_BAD_RANGE : 0;
}

/* A check's result from its reductions: pos, the first bad entry
 * (ULLONG_MAX: none); the levels' minimum, maximum and the largest k at
 * the maximum; the row note. A bad entry that is in range is a repeat
 * (require_unique): the earlier position of the same id is named. */
/* docs/ops.md, tileunpack (priority): ((level - lmin) << order_bits) + k <= 2^31-1
 * for every entry, given the levels' minimum, maximum and the largest k at
 * the maximum (the largest key): span = lmax - lmin, unsigned 64-bit. */
static __device__ __forceinline__ bool cuda_levels_fit(long long lmin, long long lmax,
                                                       long long kat, int order_bits) {
  const unsigned long long span = (unsigned long long)lmax - (unsigned long long)lmin;
  return span <= (0x7fffffffULL >> order_bits) &&
         (span << order_bits) + (unsigned long long)kat <= 0x7fffffffULL;
}

static __device__ cuda_check_result cuda_check_result_of(const cuda_check_desc &d,
                                                         unsigned long long pos, long long gmin,
                                                         long long gmax, long long gkat,
                                                         int gvary) {
  cuda_check_result r;
  memset(&r, 0, sizeof r);
  r.pos = pos;
  r.lmin = d.levels && d.levels_count > 0 ? gmin : 0;
  r.lmax = d.levels && d.levels_count > 0 ? gmax : 0;
  r.kat = gkat;
  r.rows_vary = gvary;
  if (pos != ~0ULL) {
    int64_t i = (int64_t)pos;
    r.bad = 1;
    r.kind = cuda_entry_out_of_range(d, i);
    if (d.pairs) {
      r.value[0] = cuda_load_index(d.data, d.is64, 2 * i);
      r.value[1] = cuda_load_index(d.data, d.is64, 2 * i + 1);
    } else {
      r.value[0] = cuda_load_index(d.data, d.is64, i);
    }
    if (!r.kind) { /* a repeated id: name the earlier position */
      r.kind = CUDA_BAD_DUPLICATE;
      int64_t row_start = i - i % d.unique_row;
      for (int64_t j = row_start; j < i; j++)
        if (cuda_load_index(d.data, d.is64, j) == r.value[0]) {
          r.other = j;
          break;
        }
    }
  } else if (d.check_range && d.levels && d.levels_count > 0) {
    /* docs/ops.md, tileunpack (priority): ((level - lmin) << order_bits) + k <= 2^31-1
     * for every entry; the largest key is the largest k at the top level */
    if (!cuda_levels_fit(gmin, gmax, gkat, d.order_bits)) {
      r.bad = 1;
      r.kind = CUDA_BAD_LEVEL_SPAN;
    }
  }
  return r;
}

/* A failure into the device's record (validate=device; apx_sync reports
 * it). The first failing call since the last sync takes the record; its
 * publishers (blocks or warps that saw bad entries, in any order) then
 * raise pos_inv, and the one that raises it writes its result under the
 * record's lock, so the record ends with the call's least bad position.
 * Only failures come here: the lock is taken by failing publishers alone,
 * each holds it for a few stores, and no thread waits for another to
 * reach a point (nothing like a grid barrier). */
static __device__ void cuda_check_publish(cuda_error_record *record, const cuda_check_desc &d,
                                          const cuda_check_result &r) {
  const unsigned long long token = d.call + 1;
  const unsigned long long held = atomicCAS(&record->call, 0ULL, token);
  if (held != 0 && held != token) return; /* an earlier call's failure holds it */
  const unsigned long long inv = r.pos == ~0ULL ? 1ULL : ~r.pos;
  if (atomicMax(&record->pos_inv, inv) >= inv) return; /* a lesser position is in */
  while (atomicCAS(&record->lock, 0, 1) != 0) {
  }
  __threadfence();
  if (*(volatile unsigned long long *)&record->pos_inv == inv) { /* still the least */
    record->result = r;
    record->desc = d;
    __threadfence();
    atomicExch(&record->ready, 1);
  }
  __threadfence();
  atomicExch(&record->lock, 0);
}

/* ---- checks inside an op's kernel (validate=device) --------------------- */

/* An op whose kernel checks the index entries it reads itself gets one of
 * these (cuda_check_own; record NULL: no check, e.g. validate=off or
 * eager, whose pre-pass has run). A kernel of an out-of-place call checks
 * only what it reads, clamps what it reads into range, and publishes the
 * least bad position it saw (cuda_warp_publish): no block waits for
 * another, and its stores happen or not (the output's values are
 * unspecified after a failure, docs/ops.md, Validation modes). */
struct cuda_inline_check {
  cuda_error_record *record; /* NULL: nothing to check in the kernel */
  cuda_check_desc desc;
};

/* Every lane of a warp (all 32 present): `first`, the lane's least bad
 * position (~0ULL: none). When any lane has one, the warp's least goes to
 * the record (the result is read from the index there, as the pre-pass
 * does, so the message is the pre-pass's). Costs one vote otherwise. */
static __device__ __forceinline__ void cuda_warp_publish(const cuda_inline_check &ic,
                                                         unsigned long long first) {
  if (!__any_sync(0xffffffffu, first != ~0ULL)) return;
  for (int off = 16; off > 0; off >>= 1) {
    const unsigned long long o = __shfl_down_sync(0xffffffffu, first, off);
    first = o < first ? o : first;
  }
  if ((threadIdx.x & 31) == 0)
    cuda_check_publish(ic.record, ic.desc,
                       cuda_check_result_of(ic.desc, first, LLONG_MAX, LLONG_MIN, -1, 0));
}

/* ---- in-kernel checks of small indices ----------------------------------- */

/* A small index (validate=device) of an op whose blocks must agree (an
 * aliased output, uniqueness, the levels' span) is checked by the main
 * kernel itself: every block checks all of it before its first store and
 * stores nothing when it is bad, so the call needs no pre-pass launch and
 * no flag read, and an aliased output stays untouched; block (0,0,0)
 * publishes the failure. The bounds keep each block's share small:
 * a few loads a thread, from L2 after the first block. */
#define CUDA_INLINE_CHECK_MAX 1024  /* entries (and levels) */
#define CUDA_INLINE_UNIQUE_MAX 64   /* row length of a uniqueness check */

/* The block's least bad position and the levels' (min, (max, k at max))
 * in thread 0: warp shuffles, then one slot a warp in shared memory (no
 * 64-bit shared atomics, one barrier). */
struct cuda_block_partial {
  unsigned long long pos;
  long long lmin, lmax, kat;
};

static __device__ __forceinline__ void cuda_partial_merge(cuda_block_partial &a,
                                                          const cuda_block_partial &b) {
  a.pos = b.pos < a.pos ? b.pos : a.pos;
  a.lmin = b.lmin < a.lmin ? b.lmin : a.lmin;
  if (b.lmax > a.lmax || (b.lmax == a.lmax && b.kat > a.kat)) {
    a.lmax = b.lmax;
    a.kat = b.kat;
  }
}

static __device__ cuda_block_partial cuda_block_reduce(cuda_block_partial v) {
  __shared__ cuda_block_partial s_warp[32];
  for (int off = 16; off > 0; off >>= 1) {
    cuda_block_partial o;
    o.pos = __shfl_down_sync(0xffffffffu, v.pos, off);
    o.lmin = __shfl_down_sync(0xffffffffu, v.lmin, off);
    o.lmax = __shfl_down_sync(0xffffffffu, v.lmax, off);
    o.kat = __shfl_down_sync(0xffffffffu, v.kat, off);
    cuda_partial_merge(v, o);
  }
  if ((threadIdx.x & 31) == 0) s_warp[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < (int)((blockDim.x + 31) >> 5); w++) cuda_partial_merge(v, s_warp[w]);
  return v;
}

/* The verdict of ic's check in every thread of the block (1: bad, write
 * nothing). Call it from every thread, before any store; blockDim.x is a
 * multiple of 32. All of the block's loads issue in one pass; a
 * uniqueness test then compares in-range ids staged in shared memory (a
 * loop of global loads per entry was a chain of dependent L1 round trips
 * before the first store, a third of fused's time at the seed profile). */
static __device__ int cuda_block_check(const cuda_inline_check &ic) {
  /* uniqueness: id - lo of in-range entries, -1 for the others */
  __shared__ int s_rel[CUDA_INLINE_CHECK_MAX];
  __shared__ int s_bad;
  if (!ic.record) return 0;
  const cuda_check_desc &d = ic.desc;
  const int count = (int)d.count, unique = (int)d.unique_row;
  cuda_block_partial mine;
  mine.pos = ~0ULL;
  mine.lmin = 0x7fffffffffffffffLL;
  mine.lmax = -0x7fffffffffffffffLL - 1;
  mine.kat = -1;
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    int bad = cuda_entry_out_of_range(d, i);
    if (unique > 0) s_rel[i] = bad ? -1 : (int)(cuda_load_index(d.data, d.is64, i) - d.lo);
    if (bad && (unsigned long long)i < mine.pos) mine.pos = (unsigned long long)i;
  }
  for (int i = threadIdx.x; i < (int)d.levels_count; i += blockDim.x) {
    long long v = (long long)cuda_load_index(d.levels, d.levels_is64, i);
    long long k = (long long)(i % (d.key_k > 0 ? d.key_k : 1));
    mine.lmin = v < mine.lmin ? v : mine.lmin;
    if (v > mine.lmax || (v == mine.lmax && k > mine.kat)) {
      mine.lmax = v;
      mine.kat = k;
    }
  }
  if (unique > 0) { /* block-uniform */
    __syncthreads(); /* s_rel complete */
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
      int v = s_rel[i];
      if (v < 0) continue; /* out of range: counted above */
      int repeat = 0;
#pragma unroll 8
      for (int j = i - i % unique; j < i; j++) repeat |= s_rel[j] == v;
      if (repeat && (unsigned long long)i < mine.pos) mine.pos = (unsigned long long)i;
    }
  }
  cuda_block_partial all = cuda_block_reduce(mine);
  if (threadIdx.x == 0) {
    cuda_check_result r = cuda_check_result_of(d, all.pos, all.lmin, all.lmax, all.kat, 0);
    s_bad = r.bad;
    if (r.bad && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)
      cuda_check_publish(ic.record, d, r); /* every block saw the same */
  }
  __syncthreads();
  return s_bad;
}

/* ---- index checks (validate.cu) ---------------------------------------- */

/* The outcome of launching a call's checks. */
struct cuda_checked {
  const int *bad;                 /* pass to main kernels (NULL: none) */
  const long long *lmin;          /* device pointer to the levels minimum */
  const int *rows_vary;           /* device pointer to the row flag */
  cuda_check_slot *slot;          /* the slot used (NULL: no check ran) */
};

/* Fill the common fields of a check description. */
void cuda_check_init(cuda_check_desc *d, apx_op_id op, const char *arg,
                     const apx_tensor *index);

/* The device's next check slot (round robin, CUDA_CHECK_SLOTS). */
cuda_check_slot *cuda_check_take_slot(cuda_state *st, int device_index);

/* Run the pre-pass for `desc` on the stream according to the validate
 * mode: DEVICE launches the check (the failure lands in the device record
 * for the next sync), EAGER launches it, waits and returns
 * APX_ERR_INVALID_ARG with the message, OFF skips the range checks but
 * still computes statistics that `need_stats` asks for (levels minimum,
 * row flag). Out: *out for the main kernels. */
apx_status cuda_check_run(cuda_state *st, int device_index, cudaStream_t stream,
                          cuda_check_desc *desc, int need_stats,
                          cuda_checked *out);

/* Wait for the stream and read the check's row flag (validate=eager only:
 * scatter_add then launches one path; otherwise the device decides).
 * Returns the flag in *rows_vary. */
apx_status cuda_check_read_rows_vary(cuda_state *st, cudaStream_t stream,
                                     const cuda_checked *chk, int *rows_vary);

/* Give `desc` the next call id of the device (desc->call): every check of
 * one call, pre-pass or in a kernel, carries the same one. */
void cuda_check_stamp(cuda_state *st, int device_index, cuda_check_desc *desc);

/* validate=device: fill *ic (stamped, the range checked) so that the op's
 * kernels check the entries they read (cuda_warp_publish) and return 1.
 * Otherwise ic->record = NULL and 0: eager runs cuda_check_run first, off
 * checks nothing. For out-of-place outputs only: an aliased output must
 * stay untouched, which takes every block's verdict before any store
 * (cuda_check_run, cuda_block_check). */
int cuda_check_own(cuda_state *st, int device_index, const cuda_check_desc *desc,
                   cuda_inline_check *ic);

/* validate=device and an index within the in-kernel bounds: fill *ic so
 * that the main kernel checks it (cuda_block_check) and return 1; no
 * pre-pass is launched then. Otherwise ic->record = NULL, return 0: run
 * cuda_check_run. */
int cuda_check_inline(cuda_state *st, int device_index, const cuda_check_desc *desc,
                      cuda_inline_check *ic);

/* Format a check failure as the user message ("gather: index[3][1] =
 * [-1] is outside [0, 7]") into buf. */
void cuda_check_message(const cuda_check_desc *d, const cuda_check_result *r,
                        char *buf, size_t size);

/* Read, report once and clear the device's deferred error (sync). */
apx_status cuda_check_take_deferred(cuda_state *st, int device_index,
                                    cudaStream_t stream);

/* ---- workspace ---------------------------------------------------------- */

/* Stream-ordered scratch memory from the device's pool
 * (cudaMallocFromPoolAsync), freed on the stream. */
struct cuda_workspace {
  void *ptr;
  cudaStream_t stream;
};
apx_status cuda_ws_alloc(cuda_state *st, cudaStream_t stream, size_t bytes,
                         cuda_workspace *ws, const char *what);
void cuda_ws_free(cuda_workspace *ws);

/* Bytes rounded up so that consecutive carve-outs stay 256-byte aligned. */
static inline size_t cuda_align_up(size_t n) { return (n + 255u) & ~(size_t)255u; }

/* ---- ops (one file each, <op>.cu) ------------------------------------------------ */
#define CUDA_OP_DECL_(upper, lower)                                            \
  apx_status cuda_##lower(void *state, const apx_##lower##_args *args,         \
                          const apx_call *call);
APX_OP_MAP(CUDA_OP_DECL_)
#undef CUDA_OP_DECL_

/* scatter_add.cu: out = self (NULL: zeros) with src added along `dim` at
 * index (scatter_add; gather_backward with self NULL, gather_backward.cu).
 * `op` names the op in errors and index checks. */
apx_status cuda_scatter_accumulate(cuda_state *st, apx_op_id op, const apx_tensor *self,
                                   const apx_tensor *index, const apx_tensor *src,
                                   const apx_tensor *out, int dim, const apx_call *call);

#endif /* APX_CUDA_BACKEND_H */
