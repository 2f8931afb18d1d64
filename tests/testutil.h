/* SPDX-License-Identifier: Apache-2.0 */
/* Shared helpers for the Check suites: seeded random data, host tensors,
 * poisoning, element access by dtype, and opening a context on the build
 * tree's configuration. Not installed. */
#ifndef APX_TESTUTIL_H
#define APX_TESTUTIL_H

#include <apexx/apexx.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* splitmix64: the documented, seeded generator of the tests and the bench. */
typedef struct tu_rng { uint64_t s; } tu_rng;
uint64_t tu_next(tu_rng *r);
/* uniform in [0, 1) */
double tu_uniform(tu_rng *r);
/* standard normal (Box-Muller) */
double tu_normal(tu_rng *r);
/* uniform integer in [lo, hi] */
int64_t tu_int(tu_rng *r, int64_t lo, int64_t hi);
/* A seed for this test run: $APEXX_TEST_SEED or a fixed default; printed
 * once so a failure can be replayed. */
uint64_t tu_seed(void);

/* Host tensors owned by the test (malloc'd, 64-byte aligned). */
apx_tensor tu_host(apx_dtype dtype, int ndim, const int64_t *shape);
apx_tensor tu_host1(apx_dtype dtype, int64_t d0);
apx_tensor tu_host2(apx_dtype dtype, int64_t d0, int64_t d1);
apx_tensor tu_host3(apx_dtype dtype, int64_t d0, int64_t d1, int64_t d2);
apx_tensor tu_host4(apx_dtype dtype, int64_t d0, int64_t d1, int64_t d2, int64_t d3);
apx_tensor tu_host5(apx_dtype dtype, int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t d4);
void tu_free(apx_tensor *t);
size_t tu_bytes(const apx_tensor *t);

/* Element i (flat) of a tensor, as double; set element i from double with
 * the dtype's rounding (RNE for f16/bf16, truncation toward zero for ints). */
double tu_get(const apx_tensor *t, int64_t i);
void tu_set(const apx_tensor *t, int64_t i, double v);

/* Fill with N(0,1) values (floats) rounded to the dtype. */
void tu_fill_normal(tu_rng *r, const apx_tensor *t);
/* Fill with uniform values in [lo, hi). */
void tu_fill_uniform(tu_rng *r, const apx_tensor *t, double lo, double hi);
/* Fill integers uniformly in [lo, hi]. */
void tu_fill_int(tu_rng *r, const apx_tensor *t, int64_t lo, int64_t hi);
/* Set every byte to 0xA5 (a NaN pattern for f16/bf16/f32). */
void tu_poison(const apx_tensor *t);
/* 1 when every byte of the tensor is still 0xA5. */
int tu_is_poisoned(const apx_tensor *t);
/* Byte-equal contents (same numel and dtype required). */
int tu_bytes_equal(const apx_tensor *a, const apx_tensor *b);
/* Copy the bytes of src into a fresh tensor of the same shape. */
apx_tensor tu_clone(const apx_tensor *src);

/* Open a context on $APEXX_CONFIG (the build tree's apexx.ini under make
 * check); the test fails if it cannot. */
apx_context *tu_open(void);

/* A context whose cpu backend alone runs with `threads` OpenMP threads,
 * from a private configuration file (the threaded paths must give the same
 * bits whatever the machine's core count). NULL, with the reason on stderr,
 * when it cannot be opened. */
apx_context *tu_open_cpu_threads(int threads);

/* A context on a private configuration file holding `text`; NULL (message
 * on stderr) when apx_open refuses it. */
apx_context *tu_open_ini(const char *text);

/* tu_open(), then exit 77 with a "SKIP: cuda backend ..." line unless the
 * cuda backend is ok; *device_name (lives as long as the context) names
 * the card. */
apx_context *tu_open_cuda_or_skip(const char **device_name);

/* cuda, then cpu, with validate = eager; exits the test on failure. */
apx_context *tu_open_cuda_eager(void);

/* A backend's set_error (apx_core_services) for tests that call backend
 * code with fake services: the message goes to tu_error_text. */
extern char tu_error_text[512];
apx_status tu_set_error(apx_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
