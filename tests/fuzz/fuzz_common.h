/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the libFuzzer targets (docs/reliability.md): a scratch
 * directory, files written from the input, a cpu-only context. Targets use
 * the public API only, so the same sources also build as replay programs
 * (replay.c) that make check runs over the kept corpora. */
#ifndef APX_FUZZ_COMMON_H
#define APX_FUZZ_COMMON_H

#include <apexx/apexx.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A private directory for the process, made once (mode 0700). */
static inline const char *fuzz_dir(void) {
  static char dir[64];
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/apexx-fuzz-XXXXXX");
    if (!mkdtemp(dir)) abort();
  }
  return dir;
}

/* Write bytes to dir/name; returns the path (static). */
static inline const char *fuzz_file(const char *name, const void *data, size_t size) {
  static char path[128];
  snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  if (size && fwrite(data, 1, size, f) != size) abort();
  fclose(f);
  return path;
}

/* One context on the cpu backend, opened on first use and kept: the
 * modules come from $APEXX_BACKEND_DIR (make fuzz / make check set it). */
static inline apx_context *fuzz_cpu_context(void) {
  static apx_context *ctx;
  if (!ctx) {
    const char *ini = "[apexx]\norder = cpu\n[backend cpu]\nlibrary = apexx-cpu.so\nthreads = 1\n";
    if (apx_open(&ctx, fuzz_file("cpu.ini", ini, strlen(ini))) != APX_OK) {
      fprintf(stderr, "fuzz: apx_open: %s\n", apx_last_error());
      abort();
    }
  }
  return ctx;
}

#endif
