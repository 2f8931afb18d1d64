/* SPDX-License-Identifier: Apache-2.0 */
/* Bad device indices on the cuda backend (docs/ops.md, Validation modes;
 * docs/config.md, validate): every indexed op with bad values. validate =
 * device reports APX_ERR_DEVICE at the next apx_sync (once) naming the
 * first bad entry in row-major order, whichever check found it (the
 * pre-pass, a kernel's own, the check beside it) and however many blocks
 * saw bad entries; an aliased output (out = self, base or features) is
 * left untouched, an out-of-place one holds unspecified values (not
 * tested). validate = eager returns APX_ERR_INVALID_ARG at once with the
 * same message and nothing written. Skipped (exit 77, the reason on
 * stdout) where the cuda backend cannot run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_case.h"

/* ---- bad device indices ------------------------------------------------------- */

/* Is the output aliased to an input? Then validate=device leaves it
 * untouched; out-of-place outputs are unspecified after a failure. */
enum { OUT_OF_PLACE = 0, ALIASED = 1 };

/* One op with bad device index values, under validate=device
 * (APX_ERR_DEVICE at the next sync naming `needle`, then cleared; an
 * aliased output untouched) and validate=eager (APX_ERR_INVALID_ARG at
 * once, nothing written). */
static void expect_rejected(const char *what, apx_op_id op, void *args_device,
                            void *args_eager, const apx_tensor *out_device,
                            const apx_tensor *out_eager, const char *needle, int aliased) {
  dev_poison(ctx, out_device);
  apx_status st = cc_call_op(ctx, op, args_device, &on_gpu);
  if (st == APX_OK) {
    st = apx_sync(ctx, &on_gpu);
    ck_assert_msg(st == APX_ERR_DEVICE, "%s (device): sync gave %s, want APX_ERR_DEVICE", what,
                  apx_status_name(st));
  } else {
    ck_abort_msg("%s (device): the call gave %s: %s", what, apx_status_name(st),
                 apx_last_error());
  }
  ck_assert_msg(strstr(apx_last_error(), needle) != NULL, "%s (device): message [%s] lacks [%s]",
                what, apx_last_error(), needle);
  if (aliased)
    ck_assert_msg(dev_is_poisoned(ctx, out_device), "%s (device): aliased output was written",
                  what);
  CHECK_OK(apx_sync(ctx, &on_gpu), "the device error is reported once");

  dev_poison(ctx_eager, out_eager);
  st = cc_call_op(ctx_eager, op, args_eager, &on_gpu);
  ck_assert_msg(st == APX_ERR_INVALID_ARG, "%s (eager): gave %s, want APX_ERR_INVALID_ARG",
                what, apx_status_name(st));
  ck_assert_msg(strstr(apx_last_error(), needle) != NULL, "%s (eager): message [%s] lacks [%s]",
                what, apx_last_error(), needle);
  ck_assert_msg(dev_is_poisoned(ctx_eager, out_eager), "%s (eager): output was written", what);
  CHECK_OK(apx_sync(ctx_eager, &on_gpu), "eager leaves no deferred error");
}

/* Device tensors of one shape in both contexts. */
typedef struct twin {
  apx_tensor dev, eager;
} twin;

static twin twin_of(const apx_tensor *h) {
  twin t = {to_dev(ctx, h), to_dev(ctx_eager, h)};
  return t;
}

static void twin_free(twin *t) {
  dev_free(ctx, &t->dev);
  dev_free(ctx_eager, &t->eager);
}

/* scatter_add with index [N, cols] over self [M, cols] in f32, values in
 * range but -1 at `first` and M + 1 at `second`, which comes first in
 * row-major order: rejected in both modes with `message`; out = self when
 * `aliased` (then left untouched). */
static void scatter_first_of_two(apx_dtype it, int64_t M, int64_t N, int64_t cols,
                                 int64_t first, int64_t second, const char *message,
                                 int aliased) {
  apx_tensor widx = tu_host2(it, N, cols), wsrc = tu_host2(APX_DTYPE_F32, N, cols);
  apx_tensor wself = tu_host2(APX_DTYPE_F32, M, cols);
  tu_fill_int(&rng, &widx, 0, M - 1);
  set_index(&widx, first, -1);
  set_index(&widx, second, M + 1);
  fill_values(&wsrc, 0);
  fill_values(&wself, 0);
  twin twidx = twin_of(&widx), twsrc = twin_of(&wsrc), twself = twin_of(&wself);
  twin twout = twin_of(&wself);
  apx_scatter_add_args wd = APX_SCATTER_ADD_ARGS_INIT, we;
  wd.self = &twself.dev;
  wd.index = &twidx.dev;
  wd.src = &twsrc.dev;
  wd.out = aliased ? &twself.dev : &twout.dev;
  we = wd;
  we.self = &twself.eager;
  we.index = &twidx.eager;
  we.src = &twsrc.eager;
  we.out = aliased ? &twself.eager : &twout.eager;
  expect_rejected(aliased ? "scatter_add first of two (aliased)" : "scatter_add first of two",
                  APX_OP_SCATTER_ADD, &wd, &we, wd.out, we.out, message, aliased);
  twin_free(&twidx);
  twin_free(&twsrc);
  twin_free(&twself);
  twin_free(&twout);
  tu_free(&widx);
  tu_free(&wsrc);
  tu_free(&wself);
}

/* tileunpack with ids idx [B,K] (and levels) on a 4x4 grid of 4x4 tiles,
 * fp16, C = 2: rejected in both modes with `needle`; out = base when
 * `aliased` (then left untouched). B*K <= 256: the
 * table kernel's own check (validate=device); above: the check kernel
 * beside it. */
static void tileunpack_rejected(const char *what, const apx_tensor *idx,
                                const apx_tensor *levels, apx_overlap_mode mode,
                                const char *needle, int aliased) {
  int64_t B = idx->shape[0], K = idx->shape[1];
  apx_tensor base = tu_host4(APX_DTYPE_F16, B, 2, 16, 16);
  apx_tensor packed = tu_host5(APX_DTYPE_F16, B, K, 2, 4, 4);
  fill_values(&base, 0);
  fill_values(&packed, 0);
  twin tb = twin_of(&base), tp = twin_of(&packed), ti = twin_of(idx), to = twin_of(&base);
  twin tl = levels ? twin_of(levels) : tb;
  apx_tileunpack_args d = APX_TILEUNPACK_ARGS_INIT, e;
  d.base = &tb.dev;
  d.packed = &tp.dev;
  d.idx = &ti.dev;
  d.levels = levels ? &tl.dev : NULL;
  d.mode = mode;
  d.out = aliased ? &tb.dev : &to.dev;
  e = d;
  e.base = &tb.eager;
  e.packed = &tp.eager;
  e.idx = &ti.eager;
  e.levels = levels ? &tl.eager : NULL;
  e.out = aliased ? &tb.eager : &to.eager;
  expect_rejected(what, APX_OP_TILEUNPACK, &d, &e, d.out, e.out, needle, aliased);
  if (levels) twin_free(&tl);
  twin_free(&tb);
  twin_free(&tp);
  twin_free(&ti);
  twin_free(&to);
  tu_free(&base);
  tu_free(&packed);
}

/* The table kernel's own check (validate=device, B*K <= 256: each warp
 * reduces its entries, every thread merges the warps' shares) against
 * the exact check's verdict and message: the bad entry in the last warp,
 * K not a multiple of 32, the first of two bad ids, levels one step past
 * the key's limit (i32 and i64, near the dtypes' ends), a bad id beside a
 * bad span (the id is named), and the same beyond 256 entries (the check
 * kernel beside). Good inputs at the limit: test_tileunpack_limits. */
START_TEST(test_tileunpack_own_check) {
  char msg[256];
  for (int i = 0; i < 2; i++) {
    apx_dtype it = index_dtypes[i];
    apx_overlap_mode mode = i ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE;
    const int64_t shapes[3][2] = {{4, 64}, {3, 37}, {5, 52}}; /* 256, 111, 260 entries */
    for (int s = 0; s < 3; s++) {
      int64_t B = shapes[s][0], K = shapes[s][1];
      apx_tensor idx = tu_host2(it, B, K), levels = tu_host2(it, B, K);
      char what[96];
      /* an id past the grid at the very last entry */
      tu_fill_int(&rng, &idx, 0, 15);
      set_index(&idx, B * K - 1, 16);
      snprintf(what, sizeof what, "own check B%lld K%lld last id", (long long)B, (long long)K);
      snprintf(msg, sizeof msg, "idx[%lld][%lld] = [16] is outside [0, 15]", (long long)(B - 1),
               (long long)(K - 1));
      tileunpack_rejected(what, &idx, NULL, mode, msg, s % 2);
      /* two bad ids: the first in row-major order is named */
      tu_fill_int(&rng, &idx, 0, 15);
      set_index(&idx, 1 * K + 5, -1);
      set_index(&idx, (B - 1) * K + K - 2, 99);
      snprintf(what, sizeof what, "own check B%lld K%lld first of two", (long long)B,
               (long long)K);
      tileunpack_rejected(what, &idx, NULL, mode, "idx[1][5] = [-1] is outside [0, 15]",
                          (s + 1) % 2);
      /* levels one step past the int32 key near the bottom of their dtype */
      tu_fill_int(&rng, &idx, 0, 15);
      int64_t lo = it == APX_DTYPE_I64 ? INT64_MIN + 3 : INT32_MIN + 3;
      int64_t at_max = fill_levels_at_limit(&levels, lo, 1);
      int ob = 1;
      while (((int64_t)1 << ob) < K) ob++;
      long long top = (long long)(lo + (INT32_MAX >> ob) + 1);
      snprintf(what, sizeof what, "own check B%lld K%lld span", (long long)B, (long long)K);
      snprintf(msg, sizeof msg,
               "levels span [%lld, %lld]: the priority key ((level - lmin) << %d) + k "
               "overflows int32 at level [%lld], k = [%lld]",
               (long long)lo, top, ob, top, (long long)(at_max % K));
      tileunpack_rejected(what, &idx, &levels, mode, msg, s % 2);
      /* a bad id and a bad span: the id is named */
      set_index(&idx, 2 * K + 3, 16);
      snprintf(what, sizeof what, "own check B%lld K%lld id and span", (long long)B,
               (long long)K);
      tileunpack_rejected(what, &idx, &levels, mode, "idx[2][3] = [16] is outside [0, 15]",
                          (s + 1) % 2);
      tu_free(&idx);
      tu_free(&levels);
    }
    /* the widest spans: the dtype's two ends (i64: lmax - lmin wraps in
     * int64), one warp (the seed's K = 32) and one tile a row */
    const int64_t few[2][2] = {{1, 32}, {2, 1}};
    for (int s = 0; s < 2; s++) {
      int64_t B = few[s][0], K = few[s][1];
      apx_tensor idx = tu_host2(it, B, K), levels = tu_host2(it, B, K);
      tu_fill_int(&rng, &idx, 0, 15);
      tu_fill_int(&rng, &levels, -2, 3);
      int64_t lmin = it == APX_DTYPE_I64 ? INT64_MIN : INT32_MIN;
      int64_t lmax = it == APX_DTYPE_I64 ? INT64_MAX : INT32_MAX;
      set_index(&levels, 0, lmax);
      set_index(&levels, B * K - 1, lmin);
      snprintf(msg, sizeof msg, "levels span [%lld, %lld]", (long long)lmin, (long long)lmax);
      tileunpack_rejected("own check dtype ends", &idx, &levels, mode, msg, s % 2);
      tu_free(&idx);
      tu_free(&levels);
    }
  }
}
END_TEST

START_TEST(test_bad_indices) {
  for (int i = 0; i < 2; i++) {
    apx_dtype it = index_dtypes[i];
    /* tilepack: idx[1][2] = 12 on a 3x4 grid */
    apx_tensor f = tu_host4(APX_DTYPE_F16, 2, 3, 12, 16), idx = tu_host2(it, 2, 5);
    fill_values(&f, 0);
    tu_fill_int(&rng, &idx, 0, 11);
    set_index(&idx, 1 * 5 + 2, 12);
    apx_tensor packed_h = tu_host5(APX_DTYPE_F16, 2, 5, 3, 4, 4);
    twin tf = twin_of(&f), tidx = twin_of(&idx), tp = twin_of(&packed_h);
    apx_tilepack_args pd = APX_TILEPACK_ARGS_INIT, pe;
    pd.features = &tf.dev;
    pd.idx = &tidx.dev;
    pd.tile = 4;
    pd.out = &tp.dev;
    pe = pd;
    pe.features = &tf.eager;
    pe.idx = &tidx.eager;
    pe.out = &tp.eager;
    expect_rejected("tilepack", APX_OP_TILEPACK, &pd, &pe, &tp.dev, &tp.eager,
                    "idx[1][2] = [12] is outside [0, 11]", OUT_OF_PLACE);

    /* tileunpack with ids, then with origins, then with levels too far apart */
    twin tbase = twin_of(&f);
    apx_tensor out_h = tu_host4(APX_DTYPE_F16, 2, 3, 12, 16);
    twin tout = twin_of(&out_h);
    apx_tileunpack_args ud = APX_TILEUNPACK_ARGS_INIT, ue;
    ud.base = &tbase.dev;
    ud.packed = &tp.dev;
    ud.idx = &tidx.dev;
    ud.out = &tout.dev;
    ue = ud;
    ue.base = &tbase.eager;
    ue.packed = &tp.eager;
    ue.idx = &tidx.eager;
    ue.out = &tout.eager;
    /* the packed twins are poisoned by now: fine, they are inputs here */
    expect_rejected("tileunpack idx", APX_OP_TILEUNPACK, &ud, &ue, &tout.dev, &tout.eager,
                    "idx[1][2] = [12] is outside [0, 11]", OUT_OF_PLACE);
    apx_tensor origins = tu_host3(it, 2, 5, 2);
    tu_fill_int(&rng, &origins, 0, 8);
    set_index(&origins, (0 * 5 + 3) * 2 + 1, 13); /* x0 13 > W - t = 12 */
    twin tor = twin_of(&origins);
    ud.idx = ue.idx = NULL;
    ud.origins = &tor.dev;
    ue.origins = &tor.eager;
    expect_rejected("tileunpack origins", APX_OP_TILEUNPACK, &ud, &ue, &tout.dev, &tout.eager,
                    "origins[0][3] = [", OUT_OF_PLACE);
    apx_tensor levels = tu_host2(APX_DTYPE_I64, 2, 5);
    tu_fill_int(&rng, &levels, 0, 3);
    set_index(&levels, 7, (int64_t)1 << 40);
    tu_fill_int(&rng, &origins, 0, 8);
    twin tor2 = twin_of(&origins), tlev = twin_of(&levels);
    ud.origins = &tor2.dev;
    ue.origins = &tor2.eager;
    ud.levels = &tlev.dev;
    ue.levels = &tlev.eager;
    expect_rejected("tileunpack levels", APX_OP_TILEUNPACK, &ud, &ue, &tout.dev, &tout.eager,
                    "levels span", OUT_OF_PLACE);

    /* fused: a repeated id with require_unique */
    apx_tensor uid = tu_host2(it, 2, 4);
    fill_unique(&uid, 12);
    set_index(&uid, 1 * 4 + 3, get_index(&uid, 1 * 4 + 1));
    twin tuid = twin_of(&uid);
    apx_fused_pack_op_unpack_args fd = APX_FUSED_PACK_OP_UNPACK_ARGS_INIT, fe;
    fd.features = &tf.dev;
    fd.idx = &tuid.dev;
    fd.tile = 4;
    fd.out = &tout.dev;
    fe = fd;
    fe.features = &tf.eager;
    fe.idx = &tuid.eager;
    fe.out = &tout.eager;
    expect_rejected("fused require_unique", APX_OP_FUSED_PACK_OP_UNPACK, &fd, &fe, &tout.dev,
                    &tout.eager, "idx[1][3] = [", OUT_OF_PLACE);
    /* the same with K = 80 (the pre-pass's id map, not the in-kernel
     * check): a repeat in row 1 and an out-of-range id after it */
    apx_tensor f96 = tu_host4(APX_DTYPE_F16, 2, 3, 40, 40), uid80 = tu_host2(it, 2, 80);
    fill_values(&f96, 0);
    fill_unique(&uid80, 100);
    set_index(&uid80, 1 * 80 + 50, get_index(&uid80, 1 * 80 + 7));
    set_index(&uid80, 1 * 80 + 60, 100);
    twin tf96 = twin_of(&f96), tuid80 = twin_of(&uid80), tout96 = twin_of(&f96);
    fd.features = &tf96.dev;
    fd.idx = &tuid80.dev;
    fd.out = &tout96.dev;
    fe.features = &tf96.eager;
    fe.idx = &tuid80.eager;
    fe.out = &tout96.eager;
    char repeat[96]; /* the message names both positions */
    snprintf(repeat, sizeof repeat, "idx[1][50] = [%lld] repeats idx[1][7]",
             (long long)get_index(&uid80, 1 * 80 + 7));
    expect_rejected("fused require_unique K80", APX_OP_FUSED_PACK_OP_UNPACK, &fd, &fe, &tout96.dev,
                    &tout96.eager, repeat, OUT_OF_PLACE);
    /* the same with out = features: left untouched */
    fd.out = &tf96.dev;
    fe.out = &tf96.eager;
    expect_rejected("fused require_unique K80 (aliased)", APX_OP_FUSED_PACK_OP_UNPACK, &fd, &fe,
                    &tf96.dev, &tf96.eager, repeat, ALIASED);
    /* tileunpack with ids and levels too far apart: the in-kernel check's
     * span (K = 5) */
    ud.origins = ue.origins = NULL;
    ud.idx = &tidx.dev;
    ue.idx = &tidx.eager;
    set_index(&idx, 1 * 5 + 2, 3); /* the range is fine now */
    twin tidx2 = twin_of(&idx);
    ud.idx = &tidx2.dev;
    ue.idx = &tidx2.eager;
    expect_rejected("tileunpack idx levels", APX_OP_TILEUNPACK, &ud, &ue, &tout.dev, &tout.eager,
                    "levels span", OUT_OF_PLACE);
    ud.levels = ue.levels = NULL;
    twin_free(&tf96);
    twin_free(&tuid80);
    twin_free(&tout96);
    twin_free(&tidx2);
    tu_free(&f96);
    tu_free(&uid80);

    /* gather, index_select, scatter_add, gather_backward: -1 */
    apx_tensor src = tu_host2(APX_DTYPE_F32, 8, 6), gidx = tu_host2(it, 4, 6);
    fill_values(&src, 0);
    tu_fill_int(&rng, &gidx, 0, 7);
    set_index(&gidx, 3 * 6 + 1, -1);
    apx_tensor gout_h = tu_host2(APX_DTYPE_F32, 4, 6);
    twin tsrc = twin_of(&src), tgidx = twin_of(&gidx), tgout = twin_of(&gout_h);
    apx_gather_args gd = APX_GATHER_ARGS_INIT, ge;
    gd.src = &tsrc.dev;
    gd.index = &tgidx.dev;
    gd.out = &tgout.dev;
    ge = gd;
    ge.src = &tsrc.eager;
    ge.index = &tgidx.eager;
    ge.out = &tgout.eager;
    expect_rejected("gather", APX_OP_GATHER, &gd, &ge, &tgout.dev, &tgout.eager,
                    "index[3][1] = [-1] is outside [0, 7]", OUT_OF_PLACE);

    apx_tensor sidx = tu_host1(it, 4);
    tu_fill_int(&rng, &sidx, 0, 7);
    set_index(&sidx, 2, 8);
    twin tsidx = twin_of(&sidx);
    apx_index_select_args sd = APX_INDEX_SELECT_ARGS_INIT, se;
    sd.src = &tsrc.dev;
    sd.index = &tsidx.dev;
    sd.out = &tgout.dev;
    se = sd;
    se.src = &tsrc.eager;
    se.index = &tsidx.eager;
    se.out = &tgout.eager;
    expect_rejected("index_select", APX_OP_INDEX_SELECT, &sd, &se, &tgout.dev, &tgout.eager,
                    "index[2] = [8] is outside [0, 7]", OUT_OF_PLACE);

    apx_tensor sout_h = tu_host2(APX_DTYPE_F32, 8, 6);
    twin tsout = twin_of(&sout_h);
    apx_scatter_add_args ad = APX_SCATTER_ADD_ARGS_INIT, ae;
    ad.self = &tsrc.dev;
    ad.index = &tgidx.dev;
    ad.src = &tgout.dev;
    ad.out = &tsout.dev;
    ae = ad;
    ae.self = &tsrc.eager;
    ae.index = &tgidx.eager;
    ae.src = &tgout.eager;
    ae.out = &tsout.eager;
    expect_rejected("scatter_add", APX_OP_SCATTER_ADD, &ad, &ae, &tsout.dev, &tsout.eager,
                    "index[3][1] = [-1] is outside [0, 7]", OUT_OF_PLACE);

    /* scatter_add's direct path (8 out rows) and prep/tile path (16384):
     * two bad values, the later one in row-major order in the first index
     * columns; both modes name the first. The direct path with 3 column
     * chunks (24 index columns, the bad values in different blocks) and 25
     * (200), then 17 prep blocks (129) */
    scatter_first_of_two(it, 8, 4, 24, 3 * 24 + 1, 2 * 24 + 20,
                         "index[2][20] = [9] is outside [0, 7]", OUT_OF_PLACE);
    scatter_first_of_two(it, 8, 4, 200, 3 * 200 + 1, 2 * 200 + 190,
                         "index[2][190] = [9] is outside [0, 7]", OUT_OF_PLACE);
    scatter_first_of_two(it, 16384, 256, 129, 3 * 129 + 1, 2 * 129 + 120,
                         "index[2][120] = [16385] is outside [0, 16383]", OUT_OF_PLACE);
    /* validate=device's check in the direct kernel: the first row chunk's
     * warps publish their index rows' entries (one block a column chunk of
     * 8). 200 columns, the bad values in chunks 0 and 23; 1200 columns (150
     * chunks), in chunks 149 and 2, then two in chunk 149 in rows 255 and
     * 100; and 4000 column chunks */
    scatter_first_of_two(it, 8, 256, 200, 200 * 200 + 1, 100 * 200 + 190,
                         "index[100][190] = [9] is outside [0, 7]", OUT_OF_PLACE);
    scatter_first_of_two(it, 8, 256, 1200, 307199, 192017,
                         "index[160][17] = [9] is outside [0, 7]", OUT_OF_PLACE);
    scatter_first_of_two(it, 8, 256, 1200, 307199, 100 * 1200 + 1196,
                         "index[100][1196] = [9] is outside [0, 7]", OUT_OF_PLACE);
    scatter_first_of_two(it, 8, 4, 32000, 3 * 32000 + 1, 2 * 32000 + 31990,
                         "index[2][31990] = [9] is outside [0, 7]", OUT_OF_PLACE);
    /* out = self: the direct path's check beside it, the prep/tile path's
     * verdicts in every tile block, the pre-pass of the general path (301
     * index rows): self untouched */
    scatter_first_of_two(it, 8, 256, 1200, 307199, 100 * 1200 + 1196,
                         "index[100][1196] = [9] is outside [0, 7]", ALIASED);
    scatter_first_of_two(it, 8, 4, 32000, 3 * 32000 + 1, 2 * 32000 + 31990,
                         "index[2][31990] = [9] is outside [0, 7]", ALIASED);
    scatter_first_of_two(it, 16384, 256, 129, 3 * 129 + 1, 2 * 129 + 120,
                         "index[2][120] = [16385] is outside [0, 16383]", ALIASED);
    scatter_first_of_two(it, 8, 301, 6, 300 * 6 + 1, 200 * 6 + 5,
                         "index[200][5] = [9] is outside [0, 7]", ALIASED);
    scatter_first_of_two(it, 8, 301, 6, 300 * 6 + 1, 200 * 6 + 5,
                         "index[200][5] = [9] is outside [0, 7]", OUT_OF_PLACE);

    apx_gather_backward_args bd = APX_GATHER_BACKWARD_ARGS_INIT, be;
    bd.grad_out = &tgout.dev;
    bd.index = &tgidx.dev;
    bd.grad_src = &tsout.dev;
    be = bd;
    be.grad_out = &tgout.eager;
    be.index = &tgidx.eager;
    be.grad_src = &tsout.eager;
    expect_rejected("gather_backward", APX_OP_GATHER_BACKWARD, &bd, &be, &tsout.dev, &tsout.eager,
                    "index[3][1] = [-1] is outside [0, 7]", OUT_OF_PLACE);

    twin_free(&tf);
    twin_free(&tidx);
    twin_free(&tp);
    twin_free(&tbase);
    twin_free(&tout);
    twin_free(&tor);
    twin_free(&tor2);
    twin_free(&tlev);
    twin_free(&tuid);
    twin_free(&tsrc);
    twin_free(&tgidx);
    twin_free(&tgout);
    twin_free(&tsidx);
    twin_free(&tsout);
    tu_free(&f);
    tu_free(&idx);
    tu_free(&packed_h);
    tu_free(&out_h);
    tu_free(&origins);
    tu_free(&levels);
    tu_free(&uid);
    tu_free(&src);
    tu_free(&gidx);
    tu_free(&gout_h);
    tu_free(&sidx);
    tu_free(&sout_h);
  }
}
END_TEST

/* Bad values at `count` random positions of a large index, the least of
 * them at `least` or after: the position of the least. Values `bad`. */
static int64_t spread_bad(const apx_tensor *idx, int64_t least, int count, int64_t bad) {
  int64_t n = 1;
  for (int d = 0; d < idx->ndim; d++) n *= idx->shape[d];
  int64_t first = n;
  for (int i = 0; i < count; i++) {
    int64_t p = tu_int(&rng, least, n - 1);
    set_index(idx, p, bad - (i % 2) * (bad + 1)); /* bad and -1, alternately */
    first = p < first ? p : first;
  }
  return first;
}

/* "index[3][1] = [-1]" for position p of an index of shape [rows, cols]. */
static void entry_name(char *buf, size_t size, const char *arg, const apx_tensor *idx,
                       int64_t p) {
  int64_t v = get_index(idx, p);
  if (idx->ndim == 1)
    snprintf(buf, size, "%s[%lld] = [%lld] is outside", arg, (long long)p, (long long)v);
  else
    snprintf(buf, size, "%s[%lld][%lld] = [%lld] is outside", arg, (long long)(p / idx->shape[1]),
             (long long)(p % idx->shape[1]), (long long)v);
}

/* Out-of-place ops whose kernels check the entries they read
 * (validate=device): bad values spread over many blocks (and, for
 * tilepack's large K, over the order kernel's batch rows); the message
 * names the least position, as eager's does, on every repeat. */
START_TEST(test_first_of_many) {
  char msg[160];
  for (int i = 0; i < 2; i++) {
    apx_dtype it = index_dtypes[i];
    for (int rep = 0; rep < 3; rep++) {
      /* gather: index [2048, 256] over src [64, 256], dim 0 */
      apx_tensor src = tu_host2(APX_DTYPE_F32, 64, 256), gidx = tu_host2(it, 2048, 256);
      apx_tensor gout = tu_host2(APX_DTYPE_F32, 2048, 256);
      fill_values(&src, 0);
      tu_fill_int(&rng, &gidx, 0, 63);
      entry_name(msg, sizeof msg, "index", &gidx, spread_bad(&gidx, 1000 + rep * 40000, 40, 64));
      twin ts = twin_of(&src), ti = twin_of(&gidx), to = twin_of(&gout);
      apx_gather_args gd = APX_GATHER_ARGS_INIT, ge;
      gd.src = &ts.dev;
      gd.index = &ti.dev;
      gd.out = &to.dev;
      ge = gd;
      ge.src = &ts.eager;
      ge.index = &ti.eager;
      ge.out = &to.eager;
      expect_rejected("gather first of many", APX_OP_GATHER, &gd, &ge, &to.dev, &to.eager, msg,
                      OUT_OF_PLACE);
      /* index_select: 2048 rows of 256 f32 out of 64 */
      apx_tensor sidx = tu_host1(it, 2048);
      tu_fill_int(&rng, &sidx, 0, 63);
      entry_name(msg, sizeof msg, "index", &sidx, spread_bad(&sidx, 100 + rep * 300, 12, 64));
      twin tsi = twin_of(&sidx);
      apx_index_select_args sd = APX_INDEX_SELECT_ARGS_INIT, se;
      sd.src = &ts.dev;
      sd.index = &tsi.dev;
      sd.out = &to.dev;
      se = sd;
      se.src = &ts.eager;
      se.index = &tsi.eager;
      se.out = &to.eager;
      expect_rejected("index_select first of many", APX_OP_INDEX_SELECT, &sd, &se, &to.dev,
                      &to.eager, msg, OUT_OF_PLACE);
      twin_free(&ts);
      twin_free(&ti);
      twin_free(&to);
      twin_free(&tsi);
      tu_free(&src);
      tu_free(&gidx);
      tu_free(&gout);
      tu_free(&sidx);
    }
    /* tilepack: K 40 (the copy kernel checks) and K 600 (the order
     * kernel), B 3, on a 32x32 grid of 4x4 tiles */
    const int64_t ks[2] = {40, 600};
    for (int k = 0; k < 2; k++) {
      int64_t B = 3, K = ks[k];
      apx_tensor f = tu_host4(APX_DTYPE_F16, B, 2, 128, 128), idx = tu_host2(it, B, K);
      apx_tensor packed = tu_host5(APX_DTYPE_F16, B, K, 2, 4, 4);
      fill_values(&f, 0);
      tu_fill_int(&rng, &idx, 0, 1023);
      entry_name(msg, sizeof msg, "idx", &idx, spread_bad(&idx, K / 2, 9, 1024));
      twin tf = twin_of(&f), ti = twin_of(&idx), tp = twin_of(&packed);
      apx_tilepack_args pd = APX_TILEPACK_ARGS_INIT, pe;
      pd.features = &tf.dev;
      pd.idx = &ti.dev;
      pd.tile = 4;
      pd.out = &tp.dev;
      pe = pd;
      pe.features = &tf.eager;
      pe.idx = &ti.eager;
      pe.out = &tp.eager;
      expect_rejected("tilepack first of many", APX_OP_TILEPACK, &pd, &pe, &tp.dev, &tp.eager, msg,
                      OUT_OF_PLACE);
      twin_free(&tf);
      twin_free(&ti);
      twin_free(&tp);
      tu_free(&f);
      tu_free(&idx);
      tu_free(&packed);
    }
  }
}
END_TEST

/* Two failing calls before one sync: the first call's first bad entry is
 * reported (the record keeps one call), then nothing. */
START_TEST(test_first_failing_call) {
  apx_tensor src = tu_host2(APX_DTYPE_F32, 8, 6), a = tu_host1(APX_DTYPE_I32, 5);
  apx_tensor b = tu_host1(APX_DTYPE_I32, 5), out = tu_host2(APX_DTYPE_F32, 5, 6);
  fill_values(&src, 0);
  tu_fill_int(&rng, &a, 0, 7);
  tu_fill_int(&rng, &b, 0, 7);
  set_index(&a, 3, 8);
  set_index(&b, 0, -5);
  apx_tensor ds = to_dev(ctx, &src), da = to_dev(ctx, &a), db = to_dev(ctx, &b);
  apx_tensor dout = to_dev(ctx, &out);
  apx_index_select_args x = APX_INDEX_SELECT_ARGS_INIT;
  x.src = &ds;
  x.index = &da;
  x.out = &dout;
  CHECK_OK(apx_index_select(ctx, &x, &on_gpu), "first failing call");
  x.index = &db;
  CHECK_OK(apx_index_select(ctx, &x, &on_gpu), "second failing call");
  ck_assert_int_eq(apx_sync(ctx, &on_gpu), APX_ERR_DEVICE);
  ck_assert_msg(strstr(apx_last_error(), "index[3] = [8] is outside [0, 7]") != NULL,
                "message [%s] names the first call's entry", apx_last_error());
  CHECK_OK(apx_sync(ctx, &on_gpu), "one report");
  dev_free(ctx, &ds);
  dev_free(ctx, &da);
  dev_free(ctx, &db);
  dev_free(ctx, &dout);
  tu_free(&src);
  tu_free(&a);
  tu_free(&b);
  tu_free(&out);
}
END_TEST

static void add_tests(Suite *s) {
  TCase *bad = cc_tcase(s, "validate");
  tcase_add_test(bad, test_bad_indices);
  tcase_add_test(bad, test_tileunpack_own_check);
  tcase_add_test(bad, test_first_of_many);
  tcase_add_test(bad, test_first_failing_call);
}

int main(void) { return cc_main("cuda_validate", add_tests); }
