/* SPDX-License-Identifier: Apache-2.0 */
// Finding TensorRT and a CUDA device at run time, shared by the trt
// backend's probe (backend.cpp) and the engine runner (plugins/
// engine_runner.cpp): one search, one set of reasons. Header-only (static
// functions): each module keeps its own copy, neither exports it.
//
// libnvinfer is dlopened, never linked: the names of the majors apexx
// knows (kNvinferNames, in that order) in $APEXX_TRT_DIR/lib (read with
// secure_getenv), then the configure-time --with-tensorrt prefix's lib,
// then the dynamic linker's path. Its version comes from getInferLibVersion
// ((major * 100 + minor) * 100 + patch); a major below 10 is refused.
#ifndef APX_TRT_NVINFER_OPEN_H
#define APX_TRT_NVINFER_OPEN_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace {

const char *const kNvinferNames[] = {"libnvinfer.so.10", "libnvinfer.so.11"};
constexpr int kNvinferNameCount = 2;
constexpr int kNvinferMinMajor = 10;

struct NvinferLib {
  void *handle;
  int version;     // getInferLibVersion()
  char path[1024]; // what dlopen was given
};

// Append s to the NUL-terminated text in dst[size], truncating.
inline void text_append(char *dst, size_t size, const char *s) {
  size_t used = strnlen(dst, size);
  if (used + 1 >= size) return;
  size_t n = strnlen(s, size - used - 1);
  memcpy(dst + used, s, n);
  dst[used + n] = '\0';
}

// dst = the concatenation of the parts (NULL ends them), truncated.
inline void text_set(char *dst, size_t size, const char *a, const char *b = nullptr,
                     const char *c = nullptr, const char *d = nullptr, const char *e = nullptr) {
  if (!size) return;
  dst[0] = '\0';
  const char *parts[] = {a, b, c, d, e};
  for (const char *p : parts) {
    if (!p) break;
    text_append(dst, size, p);
  }
}

// dlopen each name in dir ("" = the linker path); on failure remember the
// last dlerror text (copied at once: it is global and fleeting).
inline void *nvinfer_try_dir(const char *dir, char *path, size_t path_size, char *last_error,
                             size_t last_error_size) {
  for (int i = 0; i < kNvinferNameCount; i++) {
    if (dir && *dir)
      text_set(path, path_size, dir, "/", kNvinferNames[i]);
    else
      text_set(path, path_size, kNvinferNames[i]);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    const char *e = dlerror();
    text_set(last_error, last_error_size, e ? e : "dlopen failed");
  }
  return nullptr;
}

// Open libnvinfer into *lib (the caller dlcloses lib->handle). 0 on
// success; -1 with one line in reason naming what was tried or why the
// library found is not usable.
inline int nvinfer_open(const char *configured_dir, NvinferLib *lib, char *reason,
                        size_t reason_size) {
  memset(lib, 0, sizeof *lib);
  char last_error[512] = "";
  char where[1200] = "";
  const char *env_dir = secure_getenv("APEXX_TRT_DIR");
  char dir[1024];
  void *h = nullptr;
  if (env_dir && *env_dir) {
    text_set(dir, sizeof dir, env_dir, "/lib");
    text_set(where, sizeof where, dir, " ($APEXX_TRT_DIR), ");
    h = nvinfer_try_dir(dir, lib->path, sizeof lib->path, last_error, sizeof last_error);
  }
  if (!h && configured_dir && *configured_dir) {
    text_set(dir, sizeof dir, configured_dir, "/lib");
    text_append(where, sizeof where, dir);
    text_append(where, sizeof where, " (--with-tensorrt), ");
    h = nvinfer_try_dir(dir, lib->path, sizeof lib->path, last_error, sizeof last_error);
  }
  if (!h) h = nvinfer_try_dir("", lib->path, sizeof lib->path, last_error, sizeof last_error);
  if (!h) {
    text_set(reason, reason_size, "TensorRT not found: tried ", kNvinferNames[0], ", ",
             kNvinferNames[1], " in ");
    text_append(reason, reason_size, where);
    text_append(reason, reason_size, "the dynamic linker's path (last: ");
    text_append(reason, reason_size, last_error);
    text_append(reason, reason_size, ")");
    return -1;
  }
  void *sym = dlsym(h, "getInferLibVersion");
  if (!sym) {
    text_set(reason, reason_size, lib->path, " lacks getInferLibVersion: not a TensorRT library");
    dlclose(h);
    return -1;
  }
  int (*get_version)(void);
  memcpy(&get_version, &sym, sizeof get_version);
  int version = get_version();
  if (version / 10000 < kNvinferMinMajor) {
    char found[96];
    snprintf(found, sizeof found, " is TensorRT %d.%d.%d: apexx needs %d or newer",
             version / 10000, (version / 100) % 100, version % 100, kNvinferMinMajor);
    text_set(reason, reason_size, lib->path, found);
    dlclose(h);
    return -1;
  }
  lib->handle = h;
  lib->version = version;
  return 0;
}

// Is there a CUDA device? Through the driver (libcuda.so.1, dlopened), as
// TensorRT needs one. 0 with *count set; -1 with the reason.
inline int cuda_device_count(int *count, char *reason, size_t reason_size) {
  *count = 0;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    text_set(reason, reason_size, "no CUDA driver: ", e ? e : "libcuda.so.1 not found");
    return -1;
  }
  void *init_sym = dlsym(h, "cuInit");
  void *count_sym = dlsym(h, "cuDeviceGetCount");
  if (!init_sym || !count_sym) {
    text_set(reason, reason_size, "no CUDA driver: libcuda.so.1 lacks cuInit or cuDeviceGetCount");
    dlclose(h);
    return -1;
  }
  int (*cu_init)(unsigned);
  int (*cu_count)(int *);
  memcpy(&cu_init, &init_sym, sizeof cu_init);
  memcpy(&cu_count, &count_sym, sizeof cu_count);
  int rc = cu_init(0);
  if (rc == 100) { /* CUDA_ERROR_NO_DEVICE */
    text_set(reason, reason_size, "no CUDA device: cuInit reports none (CUDA_ERROR_NO_DEVICE)");
    dlclose(h);
    return -1;
  }
  if (rc != 0) {
    snprintf(reason, reason_size, "no CUDA device: cuInit failed with CUresult %d", rc);
    dlclose(h);
    return -1;
  }
  rc = cu_count(count);
  dlclose(h);
  if (rc != 0 || *count <= 0) {
    snprintf(reason, reason_size, "no CUDA device: cuDeviceGetCount = %d (CUresult %d)", *count,
             rc);
    return -1;
  }
  return 0;
}

}  // namespace

#endif
