/* The cpu backend's internals shared between its files. */
#ifndef APX_CPU_H
#define APX_CPU_H

#ifdef HAVE_CONFIG_H
#include "config.h" /* _GNU_SOURCE and friends, before any system header */
#endif

#include <apexx/backend.h>

typedef struct cpu_state {
  const apx_core_services *svc;
  int threads; /* OpenMP threads for kernels; >= 1 */
} cpu_state;

/* One function per op (docs/ops.md); arguments are validated by the core. */
#define CPU_OP_DECL_(upper, lower)                                             \
  apx_status cpu_##lower(void *state, const apx_##lower##_args *args,          \
                         const apx_call *call);
APX_OP_MAP(CPU_OP_DECL_)
#undef CPU_OP_DECL_

#endif
