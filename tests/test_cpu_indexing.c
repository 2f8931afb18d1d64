/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu backend's indexing ops (docs/ops.md, Indexing ops) against the plain reference
 * loops of ref_scan_index.c, bit for bit, through the public API: 1-D to
 * 4-D shapes, every dim (also negative), index smaller than the data in
 * other dims and longer along dim, every data dtype and both index dtypes,
 * duplicate indices, expanded (row-constant) indices, in-place scatter_add.
 * Each case runs twice on fresh inputs with poisoned outputs, once per
 * instruction-set path ($APEXX_CPU_ISA = portable, then native). */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apx_half.h"
#include "ref_scan_index.h"
#include "testutil.h"

static const apx_call cpu_call = {"cpu", NULL};
static const char *const isa_paths[] = {"portable", NULL}; /* NULL: native */
#define ISA_PATHS (sizeof isa_paths / sizeof isa_paths[0])

static void use_isa(const char *isa) {
  if (isa)
    setenv("APEXX_CPU_ISA", isa, 1);
  else
    unsetenv("APEXX_CPU_ISA");
}


static const char *isa_label(size_t path) {
  return isa_paths[path] ? isa_paths[path] : "native";
}

static apx_dtype random_dtype(tu_rng *r) { return (apx_dtype)tu_int(r, 0, APX_DTYPE_COUNT - 1); }
static apx_dtype random_index_dtype(tu_rng *r) {
  return tu_int(r, 0, 1) ? APX_DTYPE_I64 : APX_DTYPE_I32;
}

static int64_t first_diff(const apx_tensor *a, const apx_tensor *b) {
  size_t es = apx_dtype_size(a->dtype);
  int64_t n = apx_tensor_numel(a);
  for (int64_t i = 0; i < n; i++)
    if (memcmp((const char *)a->data + i * es, (const char *)b->data + i * es, es))
      return i;
  return -1;
}

static void shape_str(const apx_tensor *t, char *buf, size_t size) {
  size_t used = (size_t)snprintf(buf, size, "[");
  for (int d = 0; d < t->ndim && used < size; d++)
    used += (size_t)snprintf(buf + used, size - used, d ? ",%lld" : "%lld",
                             (long long)t->shape[d]);
  if (used < size) snprintf(buf + used, size - used, "]");
}

/* Arbitrary bits for copies (NaN payloads included for floats). */
static void fill_bits(tu_rng *r, const apx_tensor *t) {
  unsigned char *p = t->data;
  size_t n = tu_bytes(t);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = tu_next(r);
    memcpy(p + i, &v, n - i < 8 ? n - i : 8);
  }
}

/* Values to add: normal floats; integers over their whole range so that
 * sums wrap. */
static void fill_addends(tu_rng *r, const apx_tensor *t) {
  int64_t n = apx_tensor_numel(t);
  if (t->dtype == APX_DTYPE_I32) {
    for (int64_t i = 0; i < n; i++) ((int32_t *)t->data)[i] = (int32_t)(uint32_t)tu_next(r);
  } else if (t->dtype == APX_DTYPE_I64) {
    for (int64_t i = 0; i < n; i++) ((int64_t *)t->data)[i] = (int64_t)tu_next(r);
  } else {
    for (int64_t i = 0; i < n; i++) tu_set(t, i, 8.0 * tu_normal(r));
  }
}

static void set_index(const apx_tensor *t, int64_t i, int64_t v) {
  if (t->dtype == APX_DTYPE_I64)
    ((int64_t *)t->data)[i] = v;
  else
    ((int32_t *)t->data)[i] = (int32_t)v;
}

/* Index values in [0, range). expanded: one value per (dims up to dim),
 * repeated along the dims after it (torch's idx[:, None].expand). */
static void fill_index(tu_rng *r, const apx_tensor *t, int dim, int64_t range, int expanded) {
  int64_t n = apx_tensor_numel(t), inner = 1;
  for (int d = dim + 1; d < t->ndim; d++) inner *= t->shape[d];
  int64_t v = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!expanded || inner == 0 || i % inner == 0) v = tu_int(r, 0, range - 1);
    set_index(t, i, v);
  }
}

/* A random shape of ndim dims, each in [lo, hi]. */
static void random_shape(tu_rng *r, int ndim, int64_t lo, int64_t hi, int64_t *shape) {
  for (int d = 0; d < ndim; d++) shape[d] = tu_int(r, lo, hi);
}

/* ---- gather ------------------------------------------------------------ */

static void run_gather(apx_context *ctx, tu_rng *r, int ndim, const int64_t *src_shape,
                       const int64_t *index_shape, int dim_arg, apx_dtype dt,
                       apx_dtype idt, int expanded) {
  int dim = dim_arg < 0 ? dim_arg + ndim : dim_arg;
  apx_tensor src = tu_host(dt, ndim, src_shape);
  apx_tensor index = tu_host(idt, ndim, index_shape);
  apx_tensor out = tu_host(dt, ndim, index_shape), want = tu_host(dt, ndim, index_shape);
  char ss[64], is[64], what[256];
  shape_str(&src, ss, sizeof ss);
  shape_str(&index, is, sizeof is);
  snprintf(what, sizeof what, "gather src %s %s dim %d index %s %s%s", ss,
           apx_dtype_name(dt), dim_arg, is, apx_dtype_name(idt), expanded ? " expanded" : "");
  apx_gather_args args = APX_GATHER_ARGS_INIT;
  args.src = &src;
  args.dim = dim_arg;
  args.index = &index;
  for (size_t path = 0; path < ISA_PATHS; path++) {
    use_isa(isa_paths[path]);
    for (int round = 0; round < 2; round++) {
      fill_bits(r, &src);
      if (src_shape[dim] > 0) fill_index(r, &index, dim, src_shape[dim], expanded);
      args.out = &want;
      ref_gather(&args);
      tu_poison(&out);
      args.out = &out;
      apx_status st = apx_gather(ctx, &args, &cpu_call);
      ck_assert_msg(st == APX_OK, "%s: %s: %s", what, apx_status_name(st), apx_last_error());
      int64_t at = first_diff(&out, &want);
      ck_assert_msg(at < 0, "%s isa=%s round %d: out[%lld] differs from the reference",
                    what, isa_label(path), round, (long long)at);
    }
  }
  use_isa(NULL);
  tu_free(&src);
  tu_free(&index);
  tu_free(&out);
  tu_free(&want);
}

START_TEST(test_gather_random) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() + 7001};
  for (int i = 0; i < 200; i++) {
    int ndim = (int)tu_int(&r, 1, 4);
    int dim = (int)tu_int(&r, 0, ndim - 1);
    int64_t src_shape[4], index_shape[4];
    random_shape(&r, ndim, 1, ndim <= 2 ? 13 : 6, src_shape);
    for (int d = 0; d < ndim; d++)
      index_shape[d] = d == dim ? tu_int(&r, 0, 2 * src_shape[d] + 2) /* may exceed */
                                : (tu_int(&r, 0, 2) ? src_shape[d] : tu_int(&r, 0, src_shape[d]));
    int dim_arg = tu_int(&r, 0, 1) ? dim - ndim : dim;
    run_gather(ctx, &r, ndim, src_shape, index_shape, dim_arg, random_dtype(&r),
               random_index_dtype(&r), (int)tu_int(&r, 0, 2) == 0);
  }
  apx_close(ctx);
}
END_TEST

/* 3-D along each dim (also negative), index longer than src along dim. */
START_TEST(test_gather_3d_each_dim) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() + 7002};
  const int64_t src_shape[3] = {4, 5, 11};
  for (int dim = -3; dim < 3; dim++)
    for (int expanded = 0; expanded < 2; expanded++) {
      int d = dim < 0 ? dim + 3 : dim;
      int64_t index_shape[3] = {3, 5, 9};
      index_shape[d] = src_shape[d] + 4;
      run_gather(ctx, &r, 3, src_shape, index_shape, dim, random_dtype(&r),
                 random_index_dtype(&r), expanded);
    }
  apx_close(ctx);
}
END_TEST

/* Sizes for the threaded path; expanded rows take the row-copy path. */
START_TEST(test_gather_large) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() + 7003};
  const int64_t src_shape[2] = {300, 257}, index_shape[2] = {400, 257};
  const int64_t index_short[2] = {400, 100}, index_wide[2] = {300, 400};
  for (int expanded = 0; expanded < 2; expanded++) {
    run_gather(ctx, &r, 2, src_shape, index_shape, 0, APX_DTYPE_F16, APX_DTYPE_I64, expanded);
    run_gather(ctx, &r, 2, src_shape, index_short, 0, APX_DTYPE_F32, APX_DTYPE_I32, expanded);
    run_gather(ctx, &r, 2, src_shape, index_wide, -1, APX_DTYPE_I64, APX_DTYPE_I32, expanded);
  }
  apx_close(ctx);
}
END_TEST

/* ---- index_select ------------------------------------------------------ */

static void run_index_select(apx_context *ctx, tu_rng *r, int64_t M, int64_t D, int64_t N,
                             apx_dtype dt, apx_dtype idt) {
  apx_tensor src = tu_host2(dt, M, D), index = tu_host1(idt, N);
  apx_tensor out = tu_host2(dt, N, D), want = tu_host2(dt, N, D);
  apx_index_select_args args = APX_INDEX_SELECT_ARGS_INIT;
  args.src = &src;
  args.index = &index;
  for (size_t path = 0; path < ISA_PATHS; path++) {
    use_isa(isa_paths[path]);
    for (int round = 0; round < 2; round++) {
      fill_bits(r, &src);
      if (M > 0) fill_index(r, &index, 0, M, 0);
      args.out = &want;
      ref_index_select(&args);
      tu_poison(&out);
      args.out = &out;
      apx_status st = apx_index_select(ctx, &args, &cpu_call);
      ck_assert_msg(st == APX_OK, "index_select: %s: %s", apx_status_name(st), apx_last_error());
      int64_t at = first_diff(&out, &want);
      ck_assert_msg(at < 0,
                    "index_select src [%lld,%lld] %s index [%lld] %s isa=%s round %d: "
                    "out[%lld] differs",
                    (long long)M, (long long)D, apx_dtype_name(dt), (long long)N,
                    apx_dtype_name(idt), isa_label(path), round, (long long)at);
    }
  }
  use_isa(NULL);
  tu_free(&src);
  tu_free(&index);
  tu_free(&out);
  tu_free(&want);
}

/* docs/ops.md, index_select: along any dim of an ndim 1..4 src, dim given
 * from either end, against the reference's per-element loop. */
START_TEST(test_index_select_any_dim) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() + 7005};
  for (int n = 0; n < 200; n++) {
    const int ndim = (int)tu_int(&r, 1, 4);
    int64_t shape[4], out_shape[4];
    for (int d = 0; d < ndim; d++)
      shape[d] = tu_int(&r, n % 17 == 0 ? 0 : 1, 5);
    const int dim = (int)tu_int(&r, 0, ndim - 1);
    const int64_t M = shape[dim], N = M > 0 ? tu_int(&r, 0, 2 * M + 3) : 0;
    memcpy(out_shape, shape, sizeof shape);
    out_shape[dim] = N;
    const apx_dtype dt = random_dtype(&r);
    apx_tensor src = tu_host(dt, ndim, shape), index = tu_host1(random_index_dtype(&r), N);
    apx_tensor out = tu_host(dt, ndim, out_shape), want = tu_host(dt, ndim, out_shape);
    fill_bits(&r, &src);
    if (M > 0) fill_index(&r, &index, 0, M, 0);
    apx_index_select_args args = APX_INDEX_SELECT_ARGS_INIT;
    args.src = &src;
    args.index = &index;
    args.dim = n % 2 ? dim - ndim : dim;
    args.out = &want;
    ref_index_select(&args);
    tu_poison(&out);
    args.out = &out;
    apx_status st = apx_index_select(ctx, &args, &cpu_call);
    ck_assert_msg(st == APX_OK, "index_select: %s: %s", apx_status_name(st), apx_last_error());
    int64_t at = first_diff(&out, &want);
    ck_assert_msg(at < 0, "index_select ndim %d dim %d N %lld: out[%lld] differs", ndim, args.dim,
                  (long long)N, (long long)at);
    tu_free(&src);
    tu_free(&index);
    tu_free(&out);
    tu_free(&want);
  }
  apx_close(ctx);
}
END_TEST

START_TEST(test_index_select_random) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() + 7004};
  for (int i = 0; i < 100; i++) {
    int64_t M = tu_int(&r, 1, 20);
    run_index_select(ctx, &r, M, tu_int(&r, 0, 20), tu_int(&r, 0, 2 * M + 3),
                     random_dtype(&r), random_index_dtype(&r));
  }
  run_index_select(ctx, &r, 1000, 67, 3000, APX_DTYPE_BF16, APX_DTYPE_I64);
  run_index_select(ctx, &r, 1000, 67, 3000, APX_DTYPE_I32, APX_DTYPE_I32);
  apx_close(ctx);
}
END_TEST

/* ---- scatter_add and gather_backward ----------------------------------- */

typedef struct scatter_shape {
  int ndim, dim_arg;
  int64_t self_shape[4], index_shape[4], src_shape[4];
} scatter_shape;

static void run_scatter_add(apx_context *ctx, tu_rng *r, const scatter_shape *sh,
                            apx_dtype dt, apx_dtype idt, int expanded, int in_place) {
  const int ndim = sh->ndim, dim = sh->dim_arg < 0 ? sh->dim_arg + ndim : sh->dim_arg;
  apx_tensor self = tu_host(dt, ndim, sh->self_shape);
  apx_tensor index = tu_host(idt, ndim, sh->index_shape);
  apx_tensor src = tu_host(dt, ndim, sh->src_shape);
  apx_tensor out = tu_host(dt, ndim, sh->self_shape), want = tu_host(dt, ndim, sh->self_shape);
  char ss[64], is[64], rs[64], what[320];
  shape_str(&self, ss, sizeof ss);
  shape_str(&index, is, sizeof is);
  shape_str(&src, rs, sizeof rs);
  snprintf(what, sizeof what, "scatter_add self %s %s dim %d index %s %s src %s%s%s", ss,
           apx_dtype_name(dt), sh->dim_arg, is, apx_dtype_name(idt), rs,
           expanded ? " expanded" : "", in_place ? " in place" : "");
  apx_scatter_add_args args = APX_SCATTER_ADD_ARGS_INIT;
  args.dim = sh->dim_arg;
  args.index = &index;
  args.src = &src;
  for (size_t path = 0; path < ISA_PATHS; path++) {
    use_isa(isa_paths[path]);
    for (int round = 0; round < 2; round++) {
      fill_addends(r, &self);
      fill_addends(r, &src);
      if (sh->self_shape[dim] > 0) fill_index(r, &index, dim, sh->self_shape[dim], expanded);
      args.self = &self;
      args.out = &want;
      ref_scatter_add(&args);
      apx_status st;
      if (in_place) {
        args.out = &self;
        st = apx_scatter_add(ctx, &args, &cpu_call);
        memcpy(out.data, self.data, tu_bytes(&self));
      } else {
        tu_poison(&out);
        args.out = &out;
        st = apx_scatter_add(ctx, &args, &cpu_call);
      }
      ck_assert_msg(st == APX_OK, "%s: %s: %s", what, apx_status_name(st), apx_last_error());
      int64_t at = first_diff(&out, &want);
      ck_assert_msg(at < 0, "%s isa=%s round %d: out[%lld] = %.9g, reference %.9g", what,
                    isa_label(path), round, (long long)at, at < 0 ? 0.0 : tu_get(&out, at),
                    at < 0 ? 0.0 : tu_get(&want, at));
    }
  }
  use_isa(NULL);
  tu_free(&self);
  tu_free(&index);
  tu_free(&src);
  tu_free(&out);
  tu_free(&want);
}

static void run_gather_backward(apx_context *ctx, tu_rng *r, const scatter_shape *sh,
                                apx_dtype dt, apx_dtype idt, int expanded) {
  const int ndim = sh->ndim, dim = sh->dim_arg < 0 ? sh->dim_arg + ndim : sh->dim_arg;
  apx_tensor index = tu_host(idt, ndim, sh->index_shape);
  apx_tensor grad_out = tu_host(dt, ndim, sh->index_shape);
  apx_tensor grad_src = tu_host(dt, ndim, sh->self_shape);
  apx_tensor want = tu_host(dt, ndim, sh->self_shape);
  char ss[64], is[64];
  shape_str(&grad_src, ss, sizeof ss);
  shape_str(&index, is, sizeof is);
  apx_gather_backward_args args = APX_GATHER_BACKWARD_ARGS_INIT;
  args.dim = sh->dim_arg;
  args.index = &index;
  args.grad_out = &grad_out;
  for (size_t path = 0; path < ISA_PATHS; path++) {
    use_isa(isa_paths[path]);
    for (int round = 0; round < 2; round++) {
      fill_addends(r, &grad_out);
      if (sh->self_shape[dim] > 0) fill_index(r, &index, dim, sh->self_shape[dim], expanded);
      args.grad_src = &want;
      ref_gather_backward(&args);
      tu_poison(&grad_src);
      args.grad_src = &grad_src;
      apx_status st = apx_gather_backward(ctx, &args, &cpu_call);
      ck_assert_msg(st == APX_OK, "gather_backward: %s: %s", apx_status_name(st),
                    apx_last_error());
      int64_t at = first_diff(&grad_src, &want);
      ck_assert_msg(at < 0,
                    "gather_backward grad_src %s %s dim %d index %s %s%s isa=%s round %d: "
                    "grad_src[%lld] = %.9g, reference %.9g",
                    ss, apx_dtype_name(dt), sh->dim_arg, is, apx_dtype_name(idt),
                    expanded ? " expanded" : "", isa_label(path), round, (long long)at,
                    at < 0 ? 0.0 : tu_get(&grad_src, at), at < 0 ? 0.0 : tu_get(&want, at));
    }
  }
  use_isa(NULL);
  tu_free(&index);
  tu_free(&grad_out);
  tu_free(&grad_src);
  tu_free(&want);
}

/* self, index and src shapes by docs/ops.md, scatter_add: index <= src in every
 * dim, index <= self except along dim, where it may be longer. With
 * `exact` the index covers self and src outside dim (the row algorithm's
 * shape), else it is often smaller. */
static scatter_shape random_scatter_shape(tu_rng *r, int exact) {
  scatter_shape sh;
  memset(&sh, 0, sizeof sh);
  sh.ndim = (int)tu_int(r, 1, 4);
  int dim = (int)tu_int(r, 0, sh.ndim - 1);
  sh.dim_arg = tu_int(r, 0, 1) ? dim - sh.ndim : dim;
  random_shape(r, sh.ndim, 1, sh.ndim <= 2 ? 12 : 5, sh.self_shape);
  for (int d = 0; d < sh.ndim; d++) {
    if (d == dim)
      sh.index_shape[d] = tu_int(r, 0, 2 * sh.self_shape[d] + 3);
    else
      sh.index_shape[d] = exact || tu_int(r, 0, 1) ? sh.self_shape[d] : tu_int(r, 0, sh.self_shape[d]);
    sh.src_shape[d] = sh.index_shape[d] + (exact && d != dim ? 0 : tu_int(r, 0, 2));
  }
  return sh;
}

START_TEST(test_scatter_add_random) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() + 7005};
  for (int i = 0; i < 200; i++) {
    int exact = (int)tu_int(&r, 0, 1);
    scatter_shape sh = random_scatter_shape(&r, exact);
    run_scatter_add(ctx, &r, &sh, random_dtype(&r), random_index_dtype(&r),
                    exact && tu_int(&r, 0, 1), (int)tu_int(&r, 0, 3) == 0);
  }
  apx_close(ctx);
}
END_TEST

START_TEST(test_gather_backward_random) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() + 7006};
  for (int i = 0; i < 150; i++) {
    int exact = (int)tu_int(&r, 0, 1);
    scatter_shape sh = random_scatter_shape(&r, exact);
    /* grad_out has the index's shape */
    memcpy(sh.src_shape, sh.index_shape, sizeof sh.src_shape);
    run_gather_backward(ctx, &r, &sh, random_dtype(&r), random_index_dtype(&r),
                        exact && tu_int(&r, 0, 1));
  }
  apx_close(ctx);
}
END_TEST

/* 3-D along each dim, every dtype, expanded and not, in place and not. */
START_TEST(test_scatter_add_3d_each_dim) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() + 7007};
  for (int dim = -3; dim < 3; dim++)
    for (int dt = 0; dt < APX_DTYPE_COUNT; dt++)
      for (int variant = 0; variant < 3; variant++) {
        int d = dim < 0 ? dim + 3 : dim;
        scatter_shape sh = {3, dim, {4, 6, 10}, {4, 6, 10}, {4, 6, 10}};
        sh.index_shape[d] = 2 * sh.self_shape[d] + 1; /* duplicates certain */
        sh.src_shape[d] = sh.index_shape[d] + 1;
        if (variant == 2) { /* index smaller than self and src elsewhere */
          for (int e = 0; e < 3; e++)
            if (e != d) sh.index_shape[e] -= 1;
        }
        run_scatter_add(ctx, &r, &sh, (apx_dtype)dt, random_index_dtype(&r), variant == 1,
                        variant == 0);
        memcpy(sh.src_shape, sh.index_shape, sizeof sh.src_shape);
        run_gather_backward(ctx, &r, &sh, (apx_dtype)dt, random_index_dtype(&r), variant == 1);
      }
  apx_close(ctx);
}
END_TEST

/* Sizes for the threaded paths of both algorithms. */
START_TEST(test_scatter_add_large) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() + 7008};
  for (int dt = 0; dt < APX_DTYPE_COUNT; dt++)
    for (int expanded = 0; expanded < 2; expanded++) {
      scatter_shape rows = {2, 0, {500, 129}, {700, 129}, {701, 129}};
      run_scatter_add(ctx, &r, &rows, (apx_dtype)dt, APX_DTYPE_I64, expanded, expanded);
      scatter_shape last = {2, -1, {300, 20}, {300, 150}, {300, 151}};
      run_scatter_add(ctx, &r, &last, (apx_dtype)dt, APX_DTYPE_I32, expanded, 0);
      scatter_shape flat = {1, 0, {700}, {40000}, {40000}};
      run_scatter_add(ctx, &r, &flat, (apx_dtype)dt, APX_DTYPE_I32, 0, 0);
      scatter_shape many = {3, 1, {200, 9, 30}, {200, 12, 30}, {200, 12, 30}};
      run_gather_backward(ctx, &r, &many, (apx_dtype)dt, APX_DTYPE_I64, expanded);
    }
  apx_close(ctx);
}
END_TEST

/* docs/ops.md, scatter_add (verified on PyTorch CPU): duplicates accumulate in a
 * wider type and round once: fp16 0 + 2048 + 1 + 1 = 2050 (per-add
 * rounding would give 2048), bf16 0 + 256 + 1 + 1 = 258. */
START_TEST(test_scatter_add_rounds_once) {
  apx_context *ctx = tu_open();
  static const struct {
    apx_dtype dtype;
    double big, want;
  } cases[] = {{APX_DTYPE_F16, 2048.0, 2050.0}, {APX_DTYPE_BF16, 256.0, 258.0}};
  for (size_t i = 0; i < 2; i++) {
    for (int expanded = 0; expanded < 2; expanded++) {
      /* 1-D (expanded = 0) and a 2-D expanded index of 3 columns */
      int64_t cols = expanded ? 3 : 1;
      int64_t self_shape[2] = {2, cols}, idx_shape[2] = {3, cols};
      int ndim = expanded ? 2 : 1;
      apx_tensor self = tu_host(cases[i].dtype, ndim, self_shape);
      apx_tensor src = tu_host(cases[i].dtype, ndim, idx_shape);
      apx_tensor index = tu_host(APX_DTYPE_I64, ndim, idx_shape);
      apx_tensor out = tu_host(cases[i].dtype, ndim, self_shape);
      apx_tensor want = tu_host(cases[i].dtype, ndim, self_shape);
      for (int64_t c = 0; c < cols; c++) {
        tu_set(&self, 0 * cols + c, 0.0);
        tu_set(&self, 1 * cols + c, 5.0);
        tu_set(&src, 0 * cols + c, cases[i].big);
        tu_set(&src, 1 * cols + c, 1.0);
        tu_set(&src, 2 * cols + c, 1.0);
        for (int64_t k = 0; k < 3; k++) set_index(&index, k * cols + c, 0);
      }
      apx_scatter_add_args args = APX_SCATTER_ADD_ARGS_INIT;
      args.self = &self;
      args.index = &index;
      args.src = &src;
      args.out = &want;
      ref_scatter_add(&args);
      tu_poison(&out);
      args.out = &out;
      ck_assert_int_eq(apx_scatter_add(ctx, &args, &cpu_call), APX_OK);
      ck_assert_msg(tu_bytes_equal(&out, &want), "%s: differs from the reference",
                    apx_dtype_name(cases[i].dtype));
      for (int64_t c = 0; c < cols; c++) {
        ck_assert_msg(tu_get(&out, c) == cases[i].want, "%s: out[0][%lld] = %g, expected %g",
                      apx_dtype_name(cases[i].dtype), (long long)c, tu_get(&out, c),
                      cases[i].want);
        ck_assert_msg(tu_get(&out, cols + c) == 5.0, "untouched row changed");
      }
      tu_free(&self);
      tu_free(&src);
      tu_free(&index);
      tu_free(&out);
      tu_free(&want);
    }
  }
  apx_close(ctx);
}
END_TEST

/* Outputs of 16 MiB and more are written with non-temporal stores: sizes
 * past that threshold for every op. */
START_TEST(test_large_outputs_streamed) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() + 7009};
  const int64_t src_shape[2] = {3000, 64}, index_shape[2] = {70000, 64};
  run_gather(ctx, &r, 2, src_shape, index_shape, 0, APX_DTYPE_F32, APX_DTYPE_I32, 1);
  run_gather(ctx, &r, 2, src_shape, index_shape, 0, APX_DTYPE_F32, APX_DTYPE_I32, 0);
  run_index_select(ctx, &r, 3000, 64, 70000, APX_DTYPE_F32, APX_DTYPE_I64);
  scatter_shape rows = {2, 0, {140000, 64}, {3000, 64}, {3000, 64}};
  run_scatter_add(ctx, &r, &rows, APX_DTYPE_F16, APX_DTYPE_I64, 1, 0);
  run_scatter_add(ctx, &r, &rows, APX_DTYPE_F32, APX_DTYPE_I32, 1, 0);
  run_gather_backward(ctx, &r, &rows, APX_DTYPE_BF16, APX_DTYPE_I32, 1);
  apx_close(ctx);
}
END_TEST

/* The threaded paths with 1 and 3 threads (the default is the core count). */
START_TEST(test_thread_counts) {
  static const int counts[] = {1, 3};
  for (int c = 0; c < 2; c++) {
    apx_context *ctx = tu_open_cpu_threads(counts[c]);
    ck_assert_msg(ctx != NULL, "apx_open with threads = %d: %s", counts[c], apx_last_error());
    tu_rng r = {tu_seed() + 7010 + (uint64_t)c};
    const int64_t src_shape[2] = {300, 257}, index_shape[2] = {400, 257};
    run_gather(ctx, &r, 2, src_shape, index_shape, 0, APX_DTYPE_BF16, APX_DTYPE_I64, 0);
    run_gather(ctx, &r, 2, src_shape, index_shape, 0, APX_DTYPE_F32, APX_DTYPE_I32, 1);
    run_index_select(ctx, &r, 1000, 67, 3000, APX_DTYPE_F16, APX_DTYPE_I32);
    for (int expanded = 0; expanded < 2; expanded++) {
      scatter_shape rows = {2, 0, {500, 129}, {700, 129}, {701, 129}};
      run_scatter_add(ctx, &r, &rows, APX_DTYPE_F16, APX_DTYPE_I64, expanded, 0);
      run_scatter_add(ctx, &r, &rows, APX_DTYPE_I32, APX_DTYPE_I32, expanded, 1);
      scatter_shape flat = {1, 0, {700}, {40000}, {40000}};
      run_scatter_add(ctx, &r, &flat, APX_DTYPE_BF16, APX_DTYPE_I32, 0, 0);
      scatter_shape many = {3, 1, {200, 9, 30}, {200, 12, 30}, {200, 12, 30}};
      run_gather_backward(ctx, &r, &many, APX_DTYPE_F32, APX_DTYPE_I64, expanded);
    }
    apx_close(ctx);
  }
}
END_TEST

static Suite *indexing_suite(void) {
  Suite *s = suite_create("cpu_indexing");
  TCase *tc = tcase_create("indexing");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_gather_random);
  tcase_add_test(tc, test_gather_3d_each_dim);
  tcase_add_test(tc, test_gather_large);
  tcase_add_test(tc, test_index_select_random);
  tcase_add_test(tc, test_index_select_any_dim);
  tcase_add_test(tc, test_scatter_add_random);
  tcase_add_test(tc, test_gather_backward_random);
  tcase_add_test(tc, test_scatter_add_3d_each_dim);
  tcase_add_test(tc, test_scatter_add_large);
  tcase_add_test(tc, test_scatter_add_rounds_once);
  tcase_add_test(tc, test_large_outputs_streamed);
  tcase_add_test(tc, test_thread_counts);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(indexing_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
