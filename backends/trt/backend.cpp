/* SPDX-License-Identifier: Apache-2.0 */
// The trt (TensorRT) backend: the probe, the plugin library's loading, no
// ops of its own (dispatch passes it over with "op_unsupported"; TensorRT
// runs apexx's kernels as plugins of its engines, docs/trt.md).
//
// TensorRT is found at run time, never at link time (nvinfer_open.h): the
// probe dlopens libnvinfer (majors 10 then 11; $APEXX_TRT_DIR/lib, the
// configure-time --with-tensorrt prefix, then the dynamic linker's path),
// reads its version through getInferLibVersion, refuses one older than 10,
// then asks the CUDA driver for a device, and reports exactly what it did
// not find. Built with TensorRT's headers (the full backend) its
// plugin_library defaults to the installed libapexx_trt_plugins.so; built
// without them (probe only) a probe that finds TensorRT says so.
#include "config.h"

#include <apexx/backend.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvinfer_open.h"

#ifndef APEXX_TRT_PLUGIN_DEFAULT
#define APEXX_TRT_PLUGIN_DEFAULT nullptr
#endif

namespace {

struct TrtState {
  const apx_core_services *svc;
  void *nvinfer;
  int version;
};

// The probe's and init's check: libnvinfer (lib->handle left open on
// success), one the plugins fit, and a CUDA device. 1 when usable, else 0
// with the reason.
int find_runtime(char *reason, size_t reason_size, NvinferLib *lib) {
  if (nvinfer_open(APEXX_TRT_DIR, lib, reason, reason_size) != 0) return 0;
  int major = lib->version / 10000, minor = (lib->version / 100) % 100,
      patch = lib->version % 100;
#ifndef APEXX_TRT_HEADERS_VERSION
  snprintf(reason, reason_size,
           "%s (TensorRT %d.%d.%d) found, but this trt backend was built without TensorRT's "
           "headers: %s",
           lib->path, major, minor, patch, APEXX_TRT_PROBE_ONLY_WHY);
  dlclose(lib->handle);
  lib->handle = nullptr;
  return 0;
#else
  // the plugins' interfaces change layout between majors
  if (major != atoi(APEXX_TRT_HEADERS_VERSION)) {
    snprintf(reason, reason_size,
             "%s is TensorRT %d.%d.%d, but apexx's plugins were built against TensorRT %s "
             "headers (configure --with-tensorrt with this version's)",
             lib->path, major, minor, patch, APEXX_TRT_HEADERS_VERSION);
    dlclose(lib->handle);
    lib->handle = nullptr;
    return 0;
  }
  int devices = 0;
  if (cuda_device_count(&devices, reason, reason_size) != 0) {
    dlclose(lib->handle);
    lib->handle = nullptr;
    return 0;
  }
  return 1;
#endif
}

int trt_probe(char *reason, size_t reason_size, char *desc, size_t desc_size) {
  NvinferLib lib;
  if (!find_runtime(reason, reason_size, &lib)) return 0;
  dlclose(lib.handle);
#ifdef APEXX_TRT_HEADERS_VERSION
  snprintf(desc, desc_size, "TensorRT %d.%d.%d (%s), plugins built against TensorRT %s headers",
           lib.version / 10000, (lib.version / 100) % 100, lib.version % 100, lib.path,
           APEXX_TRT_HEADERS_VERSION);
#else
  snprintf(desc, desc_size, "TensorRT %d.%d.%d", lib.version / 10000, (lib.version / 100) % 100,
           lib.version % 100);
#endif
  return 1;
}

apx_status trt_init(const apx_core_services *svc, void **state) {
  TrtState *st = static_cast<TrtState *>(calloc(1, sizeof(TrtState)));
  if (!st) return svc->set_error(APX_ERR_NO_MEMORY, "trt: out of memory");
  st->svc = svc;
  char reason[1600];
  NvinferLib lib;
  if (!find_runtime(reason, sizeof reason, &lib)) {
    free(st);
    return svc->set_error(APX_ERR_BACKEND, "trt: %s", reason);
  }
  st->nvinfer = lib.handle;
  st->version = lib.version;
  const char *plugins = nullptr; /* trt_keys: APEXX_TRT_PLUGIN_LIB, else the file */
  if (svc->size >= offsetof(apx_core_services, config_string) + sizeof svc->config_string &&
      svc->config_string)
    svc->config_string(svc->core, "plugin_library", &plugins);
  if (plugins && *plugins) {
    // the core's checks (ownership, writable by others, a truncated file)
    // before RTLD_GLOBAL puts the library's symbols in front of everyone's
    char why[600] = "the core is too old to check plugin libraries";
    void *p = nullptr;
    if (svc->size >= offsetof(apx_core_services, open_library) + sizeof svc->open_library &&
        svc->open_library)
      p = svc->open_library(svc->core, plugins, RTLD_NOW | RTLD_GLOBAL, why, sizeof why);
    // kept loaded for the process's life: TensorRT holds its creators
    if (!p) svc->log(svc->core, APX_LOG_WARN, "plugin_library %s not loaded: %s", plugins, why);
  }
  *state = st;
  return APX_OK;
}

void trt_fini(void *state) {
  TrtState *st = static_cast<TrtState *>(state);
  if (!st) return;
  if (st->nvinfer) dlclose(st->nvinfer);
  free(st);
}

// [backend trt] keys, and the variable probe reads itself (probe has no
// services: it is stateless and runs before init)
const apx_backend_key trt_keys[] = {
    {"plugin_library", APX_KEY_PATH, 0, 0, APEXX_TRT_PLUGIN_DEFAULT,
     "TensorRT plugin library loaded (RTLD_GLOBAL, with the core's checks) at init",
     "APEXX_TRT_PLUGIN_LIB"},
};
const apx_backend_env trt_env[] = {
    {"APEXX_TRT_DIR", "TensorRT install prefix searched first for lib/libnvinfer.so.N"},
};

apx_backend_table make_table() {
  apx_backend_table t;
  memset(&t, 0, sizeof t);
  t.abi_version = APX_BACKEND_ABI_VERSION;
  t.size = sizeof(apx_backend_table);
  t.name = "trt";
  t.version = "0.1.0";
  t.device = APX_DEVICE_CUDA;
  t.probe = trt_probe;
  t.init = trt_init;
  t.fini = trt_fini;
  t.keys = trt_keys;
  t.key_count = sizeof trt_keys / sizeof trt_keys[0];
  t.env_vars = trt_env;
  t.env_count = sizeof trt_env / sizeof trt_env[0];
  // no op table (ops NULL): the trt backend runs no op of its own; no memory
  // functions: device memory comes from the cuda backend
  return t;
}

const apx_backend_table trt_table = make_table();

}  // namespace

extern "C" APX_BACKEND_EXPORT const apx_backend_table *apx_backend_entry(void) {
  return &trt_table;
}
