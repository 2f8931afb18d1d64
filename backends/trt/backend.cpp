// The trt (TensorRT) backend: a real probe, no ops yet.
//
// TensorRT is found at run time, never at link time: the probe dlopens
// libnvinfer (the major versions apexx knows, from $APEXX_TRT_DIR/lib, the
// configure-time --with-tensorrt prefix, then the dynamic linker's path),
// reads its version through getInferLibVersion, and reports exactly what it
// did not find. The op table is empty until the TensorRT plugins land, so
// dispatch passes this backend over with "op_unsupported".
#include "config.h"

#include <apexx/backend.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace {

const char *const kLibraryNames[] = {"libnvinfer.so.10", "libnvinfer.so.8", "libnvinfer.so"};

struct TrtState {
  const apx_core_services *svc;
  void *nvinfer;
  int version;
};

// Try one directory (or the linker path when dir is empty); on failure append
// the dlerror text of the first name to `tried`.
void *open_nvinfer(const char *dir, char *tried, size_t tried_size, const char **opened) {
  for (const char *name : kLibraryNames) {
    char path[1024];
    if (dir && *dir)
      snprintf(path, sizeof path, "%s/%s", dir, name);
    else
      snprintf(path, sizeof path, "%s", name);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h) {
      *opened = name;
      return h;
    }
    if (name == kLibraryNames[0]) {
      const char *err = dlerror();
      size_t used = strlen(tried);
      snprintf(tried + used, tried_size - used, "%s%s", used ? "; " : "",
               err ? err : path);
    }
  }
  return nullptr;
}

void *find_nvinfer(char *reason, size_t reason_size, int *version) {
  char tried[768] = "";
  const char *opened = nullptr;
  void *h = nullptr;
  const char *env_dir = secure_getenv("APEXX_TRT_DIR"); /* trt_env */
  char dir[900];
  if (env_dir && *env_dir) {
    snprintf(dir, sizeof dir, "%s/lib", env_dir);
    h = open_nvinfer(dir, tried, sizeof tried, &opened);
  }
  if (!h && APEXX_TRT_DIR[0]) {
    snprintf(dir, sizeof dir, "%s/lib", APEXX_TRT_DIR);
    h = open_nvinfer(dir, tried, sizeof tried, &opened);
  }
  if (!h) h = open_nvinfer("", tried, sizeof tried, &opened);
  if (!h) {
    snprintf(reason, reason_size, "TensorRT not found: %s", tried);
    return nullptr;
  }
  void *sym = dlsym(h, "getInferLibVersion");
  if (!sym) {
    snprintf(reason, reason_size, "%s lacks getInferLibVersion: not a TensorRT library", opened);
    dlclose(h);
    return nullptr;
  }
  int (*get_version)(void);
  memcpy(&get_version, &sym, sizeof get_version);
  *version = get_version();
  return h;
}

int trt_probe(char *reason, size_t reason_size, char *desc, size_t desc_size) {
  int version = 0;
  void *h = find_nvinfer(reason, reason_size, &version);
  if (!h) return 0;
  dlclose(h);
  snprintf(desc, desc_size, "TensorRT %d.%d.%d", version / 10000, (version / 100) % 100,
           version % 100);
  return 1;
}

apx_status trt_init(const apx_core_services *svc, void **state) {
  TrtState *st = static_cast<TrtState *>(calloc(1, sizeof(TrtState)));
  if (!st) return svc->set_error(APX_ERR_NO_MEMORY, "trt: out of memory");
  st->svc = svc;
  char reason[512];
  st->nvinfer = find_nvinfer(reason, sizeof reason, &st->version);
  if (!st->nvinfer) {
    free(st);
    return svc->set_error(APX_ERR_BACKEND, "trt: %s", reason);
  }
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
    {"plugin_library", APX_KEY_PATH, 0, 0, nullptr,
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
  return t;  // no memory functions: device memory comes from the cuda backend
}

const apx_backend_table trt_table = make_table();

}  // namespace

extern "C" APX_BACKEND_EXPORT const apx_backend_table *apx_backend_entry(void) {
  return &trt_table;
}
