/* SPDX-License-Identifier: Apache-2.0 */
/* Status names, the per-thread last-error message, small string helpers. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apx_half.h"
#include "internal.h"

static __thread char last_error[1024];

/* Bytes of the UTF-8 character at p (2 to 4), 0 when p starts no valid
 * one (a stray continuation byte, an overlong form, a surrogate, past
 * U+10FFFF, or cut short). */
static size_t utf8_length(const unsigned char *p, uint32_t *code) {
  size_t n;
  uint32_t c, min;
  if (p[0] >= 0xc2 && p[0] <= 0xdf) {
    n = 2, c = p[0] & 0x1fu, min = 0x80;
  } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
    n = 3, c = p[0] & 0x0fu, min = 0x800;
  } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
    n = 4, c = p[0] & 0x07u, min = 0x10000;
  } else {
    return 0;
  }
  for (size_t i = 1; i < n; i++) {
    if ((p[i] & 0xc0) != 0x80) return 0; /* also stops at the NUL */
    c = (c << 6) | (p[i] & 0x3fu);
  }
  if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
  *code = c;
  return n;
}

size_t apx__printable(char *dst, size_t size, const char *src) {
  if (size == 0) return 0;
  size_t out = 0;
  const unsigned char *p = (const unsigned char *)src;
  while (*p) {
    char piece[24];
    size_t n = 0, advance = 1;
    uint32_t code = 0;
    size_t len = *p < 0x80 ? 1 : utf8_length(p, &code);
    if (*p < 0x80 && *p >= 0x20 && *p != 0x7f) {
      piece[n++] = (char)*p;
    } else if (*p == '\n' || *p == '\r' || *p == '\t') {
      piece[n++] = '\\';
      piece[n++] = *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't';
    } else if (len == 1 || len == 0) { /* a control byte, DEL, or not UTF-8 */
      n = (size_t)snprintf(piece, sizeof piece, "\\x%02x", *p);
    } else if ((code >= 0x80 && code <= 0x9f) || code == 0x2028 || code == 0x2029) {
      /* C1 controls and the line and paragraph separators, byte by byte */
      for (size_t i = 0; i < len; i++)
        n += (size_t)snprintf(piece + n, sizeof piece - n, "\\x%02x", p[i]);
      advance = len;
    } else {
      memcpy(piece, p, len);
      n = len;
      advance = len;
    }
    if (out + n >= size) break; /* never half a character or half an escape */
    memcpy(dst + out, piece, n);
    out += n;
    p += advance;
  }
  dst[out] = '\0';
  return out;
}

APX_API const char *apx_status_name(apx_status status) {
  switch (status) {
#define STATUS_NAME_(name, value, text)                                        \
  case APX_##name:                                                             \
    return "APX_" #name;
    APX_STATUS_MAP(STATUS_NAME_)
#undef STATUS_NAME_
  }
  return "APX_UNKNOWN";
}

static const char *status_default_message(apx_status status) {
  switch (status) {
#define STATUS_TEXT_(name, value, text)                                        \
  case APX_##name:                                                             \
    return text;
    APX_STATUS_MAP(STATUS_TEXT_)
#undef STATUS_TEXT_
  }
  return "unknown status";
}

APX_API const char *apx_last_error(void) { return last_error; }

void apx__clear_error(void) { last_error[0] = '\0'; }

apx_status apx__verror(apx_status st, const char *fmt, va_list ap) {
  if (fmt) {
    /* formatted whole first (4x the message: escapes only lengthen it),
     * then made one printable line and cut at a character boundary */
    char raw[4 * sizeof last_error];
    vsnprintf(raw, sizeof raw, fmt, ap);
    apx__printable(last_error, sizeof last_error, raw);
  } else
    apx__strlcpy(last_error, status_default_message(st), sizeof last_error);
  return st;
}

apx_status apx__error(apx_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  apx__verror(st, fmt, ap);
  va_end(ap);
  return st;
}

APX_API const char *apx_version(void) { return PACKAGE_VERSION; }

char *apx__strdup(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

char *apx__strdupf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return NULL;
  char *s = malloc((size_t)n + 1);
  if (!s) return NULL;
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

void apx__strlcpy(char *dst, const char *src, size_t size) {
  if (size == 0) return;
  size_t n = strlen(src);
  if (n >= size) n = size - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

const char *apx__getenv(const char *name) {
#ifdef HAVE_SECURE_GETENV
  return secure_getenv(name);
#else
  return getenv(name);
#endif
}

/* ---- names of the enums in apexx.h ---- */
APX_API const char *apx_dtype_name(apx_dtype dtype) {
  switch (dtype) {
#define DTYPE_NAME_(upper, lower, size)                                        \
  case APX_DTYPE_##upper:                                                      \
    return #lower;
    APX_DTYPE_MAP(DTYPE_NAME_)
#undef DTYPE_NAME_
  default:
    return NULL;
  }
}

APX_API size_t apx_dtype_size(apx_dtype dtype) { return apx_backend_dtype_size(dtype); }

APX_API const char *apx_device_name(apx_device device) {
  switch (device) {
  case APX_DEVICE_HOST: return "host";
  case APX_DEVICE_CUDA: return "cuda";
  }
  return NULL;
}

APX_API const char *apx_backend_state_name(apx_backend_state state) {
  switch (state) {
#define STATE_NAME_(upper, lower)                                              \
  case APX_BACKEND_##upper:                                                    \
    return #lower;
    APX_BACKEND_STATE_MAP(STATE_NAME_)
#undef STATE_NAME_
  default:
    return NULL;
  }
}

APX_API const char *apx_pass_over_name(apx_pass_over_code code) {
  switch (code) {
#define PASS_NAME_(upper, lower)                                               \
  case APX_PASS_##upper:                                                       \
    return #lower;
    APX_PASS_OVER_MAP(PASS_NAME_)
#undef PASS_NAME_
  default:
    return NULL;
  }
}

APX_API const char *apx_op_name(apx_op_id op) { return apx_backend_op_name(op); }

APX_API int apx_op_from_name(const char *name) {
  if (!name) return -1;
  for (int op = 0; op < APX_OP_COUNT; op++)
    if (strcmp(name, apx_backend_op_name((apx_op_id)op)) == 0) return op;
  return -1;
}

APX_API int64_t apx_tensor_numel(const apx_tensor *t) {
  if (!t || t->ndim < 0 || t->ndim > APX_MAX_DIMS) return 0;
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] < 0) return -1;
    if (__builtin_mul_overflow(n, t->shape[i], &n)) return -1;
  }
  return n;
}

APX_API apx_tensor apx_tensor_host(void *data, apx_dtype dtype, int ndim,
                                   const int64_t *shape) {
  apx_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.device = APX_DEVICE_HOST;
  /* a bad ndim is kept (no shape read) and a missing shape reads as
   * negative dimensions, so that every call rejects the tensor naming it */
  t.ndim = ndim;
  if (ndim < 0 || ndim > APX_MAX_DIMS) {
    apx__error(APX_ERR_INVALID_ARG, "apx_tensor_host: ndim = [%d] is outside [0, %d]", ndim,
               APX_MAX_DIMS);
    return t;
  }
  if (ndim > 0 && !shape) {
    for (int i = 0; i < ndim; i++) t.shape[i] = -1;
    apx__error(APX_ERR_INVALID_ARG, "apx_tensor_host: shape = [NULL] with ndim [%d]", ndim);
    return t;
  }
  for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
  return t;
}
