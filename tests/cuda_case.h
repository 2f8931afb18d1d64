/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu-vs-cuda harness of the test_cuda_* suites (tests/cuda.mk): the
 * two contexts, device tensors, the comparisons of docs/ops.md, Rounding
 * and parity, seeded fills, and cc_run, the one case helper every op's
 * parity case goes through. Not installed. */
#ifndef APX_TEST_CUDA_CASE_H
#define APX_TEST_CUDA_CASE_H

#include <check.h>

#include "testutil.h"

extern apx_context *ctx;       /* the build tree's config: validate = device */
extern apx_context *ctx_eager; /* the same with validate = eager */
extern tu_rng rng;
extern const apx_call on_cpu, on_gpu;
extern const apx_dtype float_dtypes[3]; /* f32, f16, bf16 */
extern const apx_dtype index_dtypes[2]; /* i32, i64 */
extern const apx_dtype data_dtypes[5];  /* the float dtypes, then i32, i64 */

#define CHECK_OK(expr, what)                                                   \
  do {                                                                         \
    apx_status check_st_ = (expr);                                             \
    ck_assert_msg(check_st_ == APX_OK, "%s: %s: %s: %s", (what), #expr,        \
                  apx_status_name(check_st_), apx_last_error());               \
  } while (0)

/* ---- device tensors (failures abort the test) ---- */
apx_tensor dev_alloc(apx_context *c, apx_dtype dt, int ndim, const int64_t *shape);
apx_tensor to_dev(apx_context *c, const apx_tensor *h);
apx_tensor to_host(apx_context *c, const apx_tensor *d);
/* Fill a device tensor with 0xA5 bytes (NaN for every float dtype). */
void dev_poison(apx_context *c, const apx_tensor *d);
int dev_is_poisoned(apx_context *c, const apx_tensor *d);
void dev_free(apx_context *c, apx_tensor *d);
/* A view `off` elements into device buffer `buf`, shaped ndim/shape (not
 * 16-byte aligned where off * element size is not a multiple of 16); the
 * caller keeps it inside the buffer and frees the buffer, not the view. */
apx_tensor dev_view(const apx_tensor *buf, int64_t off, int ndim, const int64_t *shape);
/* the elements of 1-D buffer `buf` outside [off, off + n) still dev_poison's */
void expect_untouched_around(apx_context *c, const apx_tensor *buf, int64_t off, int64_t n,
                             const char *what);

/* ---- comparisons ---- */
double tol_of(apx_dtype dt);
/* One unit in the last place of dtype dt at magnitude |v|. */
double ulp_of(apx_dtype dt, double v);
void expect_exact(const apx_tensor *got, const apx_tensor *want, const char *what);
/* |got - want| <= 2*(atol + rtol*mag) + extra_ulps*ulp (docs/ops.md,
 * Rounding and parity, both sides' errors); mag NULL means |want|. NaN must
 * meet NaN, inf itself. */
void expect_close(const apx_tensor *got, const apx_tensor *want, const double *mag,
                  double extra_ulps, const char *what);
/* expect_close with the same magnitude m for every element. */
void expect_close_flat(const apx_tensor *got, const apx_tensor *want, double m, double extra_ulps,
                       const char *what);

/* ---- index and value fills ---- */
void set_index(const apx_tensor *t, int64_t i, int64_t v);
int64_t get_index(const apx_tensor *t, int64_t i);
/* Distinct ids per batch row in [0, tiles). */
void fill_unique(const apx_tensor *idx, int64_t tiles);
/* When set, fill_values also writes raw bit patterns no arithmetic path
 * keeps: signaling and quiet NaNs with payloads (either sign), +-0 and
 * subnormals, so that a copy op moving values through fp32 anywhere shows
 * as a bitwise difference. */
extern int bit_specials;
/* N(0,1) values with a sprinkle of NaN, +-inf, -0 when specials. */
void fill_values(const apx_tensor *t, int specials);
/* fill_values for floats, integers in [-1e6, 1e6] otherwise. */
void fill_data(const apx_tensor *t);
/* tileunpack levels [B,K] in [lo, lo + (INT32_MAX >> order_bits)] with both
 * ends present (they fit exactly: docs/ops.md, tileunpack (priority)), or
 * with `past` one level a step above that (rejected); returns the position
 * of the largest. */
int64_t fill_levels_at_limit(const apx_tensor *levels, int64_t lo, int past);

/* ---- the case helper ---- */

/* Any op of APX_OP_MAP on `args` (its apx_<op>_args). */
apx_status cc_call_op(apx_context *c, apx_op_id op, const void *args, const apx_call *call);

#define CC_MAX_INPUTS 8
#define CC_MAX_OUTPUTS 2

/* One cpu-vs-cuda call of `op`. `args` holds host tensors: the inputs the
 * `inputs` fields point at (a field holding NULL is an absent optional
 * tensor) and, in the `outputs` fields, the host tensors the cpu backend's
 * results go to. */
typedef struct cc_case {
  const char *what;
  apx_op_id op;
  void *args;
  const apx_tensor **inputs[CC_MAX_INPUTS];
  const apx_tensor **outputs[CC_MAX_OUTPUTS];
  int alias;  /* >= 0: outputs[0] is inputs[alias]'s device copy (in place) */
  int repeat; /* run the device call twice: the same bits (not when aliased);
                 APEXX_TEST_CUDA_REPEATS runs every out-of-place case N more times */
} cc_case;

/* Runs the case on the cpu backend, copies the inputs to the device,
 * poisons every device output that aliases no input, runs it on the cuda
 * backend, syncs, and returns each output copied back in got[i] (tu_free
 * them; a zero tensor for an absent output). The args hold the host
 * tensors again on return. */
void cc_run(const cc_case *c, apx_tensor got[CC_MAX_OUTPUTS]);

/* APEXX_TEST_CUDA_REPEATS=N: every out-of-place case's device call runs N
 * more times and must give the same bits each time (0 when unset). */
int cc_repeats(void);

/* main() of a test_cuda_* program: opens the contexts (exit 77 with the
 * reason when the cuda backend cannot run), seeds rng, runs the tests that
 * add_tests puts into the suite without forking (CUDA does not survive
 * Check's fork), closes the contexts. */
int cc_main(const char *suite_name, void (*add_tests)(Suite *s));

/* A test case with the suite's timeout, added to s. */
TCase *cc_tcase(Suite *s, const char *name);

#endif
