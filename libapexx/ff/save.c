/* SPDX-License-Identifier: Apache-2.0 */
/* apx_ff_weights_save: the safetensors writer (docs/ff_weights.md): every
 * tensor as F32 under its FFModule name, written to a new file beside the
 * target and renamed over it, so a failed write leaves the old file. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "apx_half.h"
#include "ff_internal.h"

/* A failed write, sync or rename is APX_ERR_IO (a full disk, a quota, a
 * file size limit, a device error); a path that cannot name a file there
 * is the caller's argument. */
static apx_status save_failed(int err, const char *op, const char *what, const char *path) {
  int bad_path = err == ENOENT || err == ENOTDIR || err == EACCES || err == EPERM ||
                 err == EISDIR || err == ENAMETOOLONG || err == ELOOP || err == EROFS;
  return apx__error(bad_path ? APX_ERR_INVALID_ARG : APX_ERR_IO, "%s: cannot %s: %s (file [%s])",
                    op, what, strerror(err), path);
}

static apx_status write_all(int fd, const void *src, size_t bytes, const char *op,
                            const char *path) {
  const char *p = src;
  while (bytes > 0) {
    ssize_t put = write(fd, p, bytes);
    if (put < 0 && errno == EINTR)
      continue;
    if (put < 0)
      return apx__error(APX_ERR_IO, "%s: cannot write: %s (file [%s])", op, strerror(errno),
                        path);
    p += put;
    bytes -= (size_t)put;
  }
  return APX_OK;
}

/* The header: every tensor as F32 at its place in the buffer, padded with
 * spaces to a multiple of 8 bytes. */
static char *make_header(const apx_ff_weights *w, size_t *length) {
  size_t cap = 256 + 2 * APX__FF_LEVEL_TENSORS * (APX__FF_NAME_MAX + 128), used = 0;
  char *h = malloc(cap);
  if (!h)
    return NULL;
  used += (size_t)snprintf(h + used, cap - used, "{\"__metadata__\":{\"format\":\"pt\"}");
  uint64_t offset = 0;
  for (int level = 0; level < 2; level++)
    for (int i = 0; i < APX__FF_LEVEL_TENSORS; i++) {
      const apx__ff_tensor_spec *s = &apx__ff_level_specs[i];
      char name[APX__FF_NAME_MAX], dims[96];
      apx__ff_spec_name(name, level, s);
      apx__ff_format_spec_dims(dims, sizeof dims, s, w->channels);
      for (char *p = dims; *p; p++) /* compact JSON, as safetensors writes it */
        if (*p == ' ')
          memmove(p, p + 1, strlen(p));
      uint64_t bytes = (uint64_t)apx__ff_spec_numel(s, w->channels) * 4;
      used += (size_t)snprintf(h + used, cap - used,
                               ",\"%s\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[%llu,"
                               "%llu]}",
                               name, dims, (unsigned long long)offset,
                               (unsigned long long)(offset + bytes));
      offset += bytes;
    }
  used += (size_t)snprintf(h + used, cap - used, "}");
  while (used % 8 != 0)
    h[used++] = ' ';
  h[used] = '\0';
  *length = used;
  return h;
}

static apx_status write_file(int fd, const apx_ff_weights *w, const char *op, const char *path) {
  size_t header_bytes;
  char *header = make_header(w, &header_bytes);
  if (!header)
    return apx__error(APX_ERR_NO_MEMORY, "%s: out of memory", op);
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; i++)
    len_bytes[i] = (unsigned char)((uint64_t)header_bytes >> (8 * i));
  apx_status st = write_all(fd, len_bytes, 8, op, path);
  if (st == APX_OK)
    st = write_all(fd, header, header_bytes, op, path);
  free(header);
  size_t n = 2 * w->level_count;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  for (size_t k = 0; k < n && st == APX_OK; k++) {
    uint32_t u = apx_f32_bits(w->data[k]);
    unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                          (unsigned char)(u >> 24)};
    st = write_all(fd, b, 4, op, path);
  }
#else
  if (st == APX_OK)
    st = write_all(fd, w->data, n * sizeof(float), op, path);
#endif
  if (st == APX_OK && fsync(fd) != 0)
    st = apx__error(APX_ERR_IO, "%s: cannot sync: %s (file [%s])", op, strerror(errno), path);
  return st;
}

/* apx_ff_weights_save of a pinned handle. */
static apx_status save_pinned(const apx_ff_weights *weights, const char *path) {
  static const char op[] = "apx_ff_weights_save";
  static atomic_uint temp_counter;
  struct stat sb;
  if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
    return apx__error(APX_ERR_INVALID_ARG,
                      "%s: the target exists and is not a regular file (file [%s])", op, path);
  /* a new file beside the target (same file system), renamed over it */
  char *temp = NULL;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
    free(temp);
    temp = apx__strdupf("%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&temp_counter, 1u));
    if (!temp)
      return apx__error(APX_ERR_NO_MEMORY, "%s: out of memory", op);
    fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST)
      break;
  }
  if (fd < 0) {
    apx_status st = save_failed(errno, op, "create the temporary file", temp);
    free(temp);
    return st;
  }
  apx_status st = write_file(fd, weights, op, path);
  if (close(fd) != 0 && st == APX_OK)
    st = apx__error(APX_ERR_IO, "%s: cannot write: %s (file [%s])", op, strerror(errno), path);
  if (st == APX_OK && rename(temp, path) != 0)
    st = save_failed(errno, op, "rename the temporary file over the target", path);
  if (st != APX_OK)
    unlink(temp);
  free(temp);
  return st;
}

APX_API apx_status apx_ff_weights_save(apx_context *ctx, const apx_ff_weights *weights,
                                       const char *path) {
  static const char op[] = "apx_ff_weights_save";
  apx__clear_error();
  if (!ctx)
    return apx__error(APX_ERR_INVALID_ARG, "%s: ctx = [NULL]", op);
  if (!weights)
    return apx__error(APX_ERR_INVALID_ARG, "%s: weights = [NULL]", op);
  if (!path)
    return apx__error(APX_ERR_INVALID_ARG, "%s: path = [NULL]", op);
  apx_ff_weights *w = apx__ff_pin_handle(ctx, weights);
  if (!w)
    return apx__error(APX_ERR_INVALID_ARG,
                      "%s: weights [%p] are not an open handle of this context (freed, or made "
                      "by another context)",
                      op, (const void *)weights);
  apx_status st = save_pinned(w, path);
  apx__ff_unpin_handle(ctx, w);
  return st;
}
