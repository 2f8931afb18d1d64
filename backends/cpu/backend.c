/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu backend's table: probe, state, host memory, a monotonic timer.
 * Kernels live one op per file beside this one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu.h"

#define CPU_BACKEND_VERSION "0.1.0"
#define HOST_ALIGN 64u

static void cpu_model(char *name, size_t size) {
  snprintf(name, size, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) != 0) continue;
    char *colon = strchr(line, ':');
    if (!colon) break;
    colon++;
    while (*colon == ' ' || *colon == '\t') colon++;
    colon[strcspn(colon, "\n")] = '\0';
    snprintf(name, size, "%s", colon);
    break;
  }
  fclose(f);
}

static int online_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static int cpu_probe(char *reason, size_t reason_size, char *desc, size_t desc_size) {
  (void)reason;
  (void)reason_size;
  char model[256];
  cpu_model(model, sizeof model);
#ifdef _OPENMP
  snprintf(desc, desc_size, "%s, %d cores (OpenMP)", model, online_cores());
#else
  snprintf(desc, desc_size, "%s, %d cores (no OpenMP: single-threaded)", model, online_cores());
#endif
  return 1;
}

static apx_status cpu_init(const apx_core_services *svc, void **state) {
  cpu_state *st = calloc(1, sizeof *st);
  if (!st) return svc->set_error(APX_ERR_NO_MEMORY, "cpu: out of memory");
  st->svc = svc;
  int64_t n = 0; /* cpu_keys: checked by the core */
  if (svc->size >= offsetof(apx_core_services, config_int) + sizeof svc->config_int &&
      svc->config_int)
    svc->config_int(svc->core, "threads", &n);
  st->threads = n > 0 ? (int)n : online_cores();
#ifndef _OPENMP
  st->threads = 1;
#endif
  char warning[400];
  if (cpu_isa_variable_warning(warning, sizeof warning))
    svc->log(svc->core, APX_LOG_WARN, "%s", warning);
  *state = st;
  return APX_OK;
}

static void cpu_fini(void *state) {
  cpu_ff_work_free(state);
  free(state);
}

static apx_status cpu_alloc(void *state, int device_index, size_t bytes, void **ptr) {
  (void)device_index;
  cpu_state *st = state;
  size_t rounded = (bytes + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN;
  *ptr = aligned_alloc(HOST_ALIGN, rounded ? rounded : HOST_ALIGN);
  if (!*ptr) return st->svc->set_error(APX_ERR_NO_MEMORY, "cpu: %zu bytes not available", bytes);
  return APX_OK;
}

static void cpu_free(void *state, int device_index, void *ptr) {
  (void)state;
  (void)device_index;
  free(ptr);
}

static apx_status cpu_copy(void *state, void *dst, apx_device dst_device, int dst_index,
                           const void *src, apx_device src_device, int src_index, size_t bytes,
                           void *stream) {
  (void)dst_index;
  (void)src_index;
  (void)stream;
  cpu_state *st = state;
  if (dst_device != APX_DEVICE_HOST || src_device != APX_DEVICE_HOST)
    return st->svc->set_error(APX_ERR_UNSUPPORTED, "cpu: copies only host memory");
  memmove(dst, src, bytes);
  return APX_OK;
}

static apx_status cpu_sync(void *state, int device_index, void *stream) {
  (void)state;
  (void)device_index;
  (void)stream;
  return APX_OK; /* every cpu op has finished when it returns */
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static apx_status cpu_timer_begin(void *state, int device_index, void *stream, void **timer) {
  (void)device_index;
  (void)stream;
  cpu_state *st = state;
  double *start = malloc(sizeof *start);
  if (!start) return st->svc->set_error(APX_ERR_NO_MEMORY, "cpu: out of memory");
  *start = now_ms();
  *timer = start;
  return APX_OK;
}

static apx_status cpu_timer_end(void *state, void *timer, double *elapsed_ms) {
  (void)state;
  double *start = timer;
  *elapsed_ms = now_ms() - *start;
  free(start);
  return APX_OK;
}

static apx_status cpu_device_info(void *state, int index, struct apx_device_info *info) {
  (void)state;
  (void)index;
  memset(info, 0, sizeof *info);
  cpu_model(info->name, sizeof info->name);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) info->total_memory_bytes = (uint64_t)pages * (uint64_t)page;
  info->multiprocessors = online_cores();
  return APX_OK;
}

/* [backend cpu] keys and the variables the kernels read per call. */
static const apx_backend_key cpu_keys[] = {
    {"threads", APX_KEY_INT, 0, 4096, "0",
     "OpenMP threads of every op; 0: one per online core", NULL},
};
static const apx_backend_env cpu_env[] = {
    {"APEXX_CPU_ISA", "portable or avx2: the newest SIMD path the tile ops may use "
                      "(read per call; default the best the CPU has)"},
    {"APEXX_CPU_SIMD", "off: an alias of APEXX_CPU_ISA=portable"},
};

/* Every op, in APX_OP_MAP's order: cpu_NAME beside this file. */
static const apx_backend_ops cpu_ops = {
    .size = sizeof(apx_backend_ops),
#define CPU_OP_SLOT_(upper, lower) .lower = cpu_##lower,
    APX_OP_MAP(CPU_OP_SLOT_)
#undef CPU_OP_SLOT_
};

static const apx_backend_table cpu_table = {
    .abi_version = APX_BACKEND_ABI_VERSION,
    .size = sizeof(apx_backend_table),
    .name = "cpu",
    .version = CPU_BACKEND_VERSION,
    .device = APX_DEVICE_HOST,
    .probe = cpu_probe,
    .init = cpu_init,
    .fini = cpu_fini,
    .supports = NULL, /* every op, every dtype the core accepts */
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .peak_bytes = NULL, /* host peaks are tracked by the core */
    .reset_peak = NULL,
    .timer_begin = cpu_timer_begin,
    .timer_end = cpu_timer_end,
    .device_info = cpu_device_info,
    .ops = &cpu_ops,
    .keys = cpu_keys,
    .key_count = sizeof cpu_keys / sizeof cpu_keys[0],
    .env_vars = cpu_env,
    .env_count = sizeof cpu_env / sizeof cpu_env[0],
};

APX_BACKEND_EXPORT const apx_backend_table *apx_backend_entry(void) { return &cpu_table; }
