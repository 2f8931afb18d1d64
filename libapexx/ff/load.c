/* SPDX-License-Identifier: Apache-2.0 */
/* apx_ff_weights_load: the safetensors reader (docs/ff_weights.md). The
 * file is read through one descriptor; its header is scanned within
 * apexx's limits (json_scan.c) before cJSON parses it; every tensor's name,
 * dtype, shape and place are checked before any data is read, and every
 * weight must be finite. */
#include "config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "apx_half.h"
#include "ff_internal.h"

/* the longest tensor name a message quotes whole */
#define MESSAGE_NAME_BYTES 200

/* Element size of a safetensors dtype in bytes, 0 when unknown (or not a
 * whole number of bytes). */
static int64_t dtype_size(const char *dtype) {
  static const struct {
    const char *name;
    int64_t size;
  } known[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
               {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
               {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},     {"C64", 8}};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strcmp(dtype, known[i].name) == 0)
      return known[i].size;
  return 0;
}

/* One entry of the header, checked for form. */
typedef struct st_entry {
  const char *name;
  const char *dtype;
  int ndim;
  int64_t dims[8];
  int64_t numel;
  uint64_t begin, end; /* relative to the data section */
} st_entry;

static int entry_by_name(const void *a, const void *b) {
  return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static int entry_by_begin(const void *a, const void *b) {
  const st_entry *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

/* A JSON number that is an integer in [0, 2^53]. */
static int json_uint(const cJSON *item, uint64_t *out) {
  if (!cJSON_IsNumber(item))
    return 0;
  double v = item->valuedouble;
  if (!(v >= 0.0) || v > 9007199254740992.0 || v != floor(v))
    return 0;
  *out = (uint64_t)v;
  return 1;
}

typedef struct loader {
  const char *op;
  const char *path;
  int fd;
  uint64_t file_bytes;
  uint64_t data_start; /* 8 + header length */
  char *header;
  cJSON *json;
  st_entry *entries;
  int entry_count;
  void *scratch; /* f16/bf16 bytes of one tensor */
  size_t scratch_bytes;
} loader;

/* Every rejection of a file's content or path: APX_ERR_INVALID_ARG with
 * the problem first and the file last, so that a long path cannot push the
 * problem out of the 1023-byte message. */
static apx_status bad_file(const loader *ld, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static apx_status bad_file(const loader *ld, const char *fmt, ...) {
  char problem[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(problem, sizeof problem, fmt, ap);
  va_end(ap);
  return apx__error(APX_ERR_INVALID_ARG, "%s: %s (file [%s])", ld->op, problem, ld->path);
}

/* A tensor name as a message quotes it: whole up to MESSAGE_NAME_BYTES,
 * else its start and its length. Used inside one call's arguments (the
 * struct lives until the end of that expression). */
typedef struct quoted_name {
  char text[MESSAGE_NAME_BYTES + 40];
} quoted_name;

static quoted_name quote(const char *name) {
  quoted_name q;
  size_t n = strlen(name);
  if (n <= MESSAGE_NAME_BYTES)
    memcpy(q.text, name, n + 1);
  else
    snprintf(q.text, sizeof q.text, "%.*s... (%zu bytes)", MESSAGE_NAME_BYTES, name, n);
  return q;
}

/* The whole header: one value, then only white space. */
static apx_status scan_header(const loader *ld, size_t header_bytes) {
  const char *problem;
  size_t at;
  int over_limit;
  if (apx__ff_json_scan(ld->header, header_bytes, &problem, &at, &over_limit))
    return APX_OK;
  if (over_limit)
    return bad_file(ld, "the header has %s (at byte %lld), over apexx's limit "
                        "(docs/ff_weights.md, Limits)",
                    problem, (long long)at);
  if (strcmp(problem, "bytes after its JSON value") == 0)
    return bad_file(ld, "the header has bytes after its JSON value (at byte %lld)",
                    (long long)at);
  return bad_file(ld, "the header is not JSON: %s at byte %lld", problem, (long long)at);
}

/* Check one header entry's form and its offsets against the file. */
static apx_status parse_entry(loader *ld, const cJSON *item, st_entry *e) {
  const char *name = item->string;
  e->name = name;
  if (!cJSON_IsObject(item))
    return bad_file(ld, "tensor [%s] is not a JSON object", quote(name).text);
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
  const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
  if (!dtype)
    return bad_file(ld, "tensor [%s] has no dtype", quote(name).text);
  if (!cJSON_IsString(dtype))
    return bad_file(ld, "tensor [%s]: dtype is not a string", quote(name).text);
  e->dtype = dtype->valuestring;
  if (!cJSON_IsArray(shape))
    return bad_file(ld, "tensor [%s]: shape is missing or not a list", quote(name).text);
  int ndim = cJSON_GetArraySize(shape);
  if (ndim > (int)(sizeof e->dims / sizeof e->dims[0]))
    return bad_file(ld, "tensor [%s]: shape has [%d] dimensions, more than %d", quote(name).text,
                    ndim, (int)(sizeof e->dims / sizeof e->dims[0]));
  e->ndim = ndim;
  e->numel = 1;
  int overflow = 0;
  for (int d = 0; d < ndim; d++) {
    uint64_t v;
    if (!json_uint(cJSON_GetArrayItem(shape, d), &v))
      return bad_file(ld, "tensor [%s]: shape[%d] is not a non-negative integer",
                      quote(name).text, d);
    e->dims[d] = (int64_t)v;
    if (v != 0 && (uint64_t)e->numel > (uint64_t)INT64_MAX / 8 / v)
      overflow = 1;
    if (!overflow)
      e->numel *= (int64_t)v;
  }
  if (overflow) {
    for (int d = 0; d < ndim; d++)
      if (e->dims[d] == 0)
        overflow = 0;
    if (overflow)
      return bad_file(ld, "tensor [%s]: shape has too many elements", quote(name).text);
    e->numel = 0;
  }
  if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
      !json_uint(cJSON_GetArrayItem(offsets, 0), &e->begin) ||
      !json_uint(cJSON_GetArrayItem(offsets, 1), &e->end))
    return bad_file(ld, "tensor [%s]: data_offsets is missing or not two non-negative integers",
                    quote(name).text);
  uint64_t data_bytes = ld->file_bytes - ld->data_start;
  if (e->begin > e->end)
    return bad_file(ld, "tensor [%s]: data_offsets [%llu, %llu] end before they begin",
                    quote(name).text, (unsigned long long)e->begin, (unsigned long long)e->end);
  if (e->end > data_bytes)
    return bad_file(ld, "tensor [%s]: data_offsets [%llu, %llu] reach past the end of the data "
                        "[%llu bytes]",
                    quote(name).text, (unsigned long long)e->begin, (unsigned long long)e->end,
                    (unsigned long long)data_bytes);
  int64_t size = dtype_size(e->dtype);
  if (size && e->end - e->begin != (uint64_t)(e->numel * size))
    return bad_file(ld, "tensor [%s]: data_offsets [%llu, %llu] hold %llu bytes, but %lld "
                        "elements of %s take %lld",
                    quote(name).text, (unsigned long long)e->begin, (unsigned long long)e->end,
                    (unsigned long long)(e->end - e->begin), (long long)e->numel,
                    quote(e->dtype).text, (long long)(e->numel * size));
  return APX_OK;
}

/* Read exactly `bytes` at `offset`. */
static apx_status read_at(loader *ld, void *dst, size_t bytes, uint64_t offset, const char *what) {
  char *p = dst;
  while (bytes > 0) {
    ssize_t got = pread(ld->fd, p, bytes, (off_t)offset);
    if (got < 0 && errno == EINTR)
      continue;
    if (got == 0)
      return bad_file(ld, "cannot read %s: the file ended early", what);
    if (got < 0)
      return apx__error(APX_ERR_IO, "%s: cannot read %s: %s (file [%s])", ld->op, what,
                        strerror(errno), ld->path);
    p += got;
    bytes -= (size_t)got;
    offset += (uint64_t)got;
  }
  return APX_OK;
}

/* Read the 8-byte length and the JSON header; check every entry's form,
 * the names' uniqueness and the offsets' disjointness. */
static apx_status read_header(loader *ld) {
  if (ld->file_bytes < 8)
    return bad_file(ld, "the file is [%llu] bytes, too short for the 8-byte header length",
                    (unsigned long long)ld->file_bytes);
  unsigned char len_bytes[8];
  apx_status st = read_at(ld, len_bytes, 8, 0, "the header length");
  if (st != APX_OK)
    return st;
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; i--)
    header_bytes = header_bytes << 8 | len_bytes[i];
  if (header_bytes > ld->file_bytes - 8)
    return bad_file(ld, "header length [%llu] reaches past the end of the file [%llu bytes]",
                    (unsigned long long)header_bytes, (unsigned long long)ld->file_bytes);
  if (header_bytes > APX__FF_MAX_HEADER_BYTES)
    return bad_file(ld, "header length [%llu] is over apexx's limit of %llu bytes "
                        "(docs/ff_weights.md, Limits)",
                    (unsigned long long)header_bytes, (unsigned long long)APX__FF_MAX_HEADER_BYTES);
  ld->data_start = 8 + header_bytes;
  ld->header = malloc(header_bytes + 1);
  if (!ld->header)
    return apx__error(APX_ERR_NO_MEMORY, "%s: out of memory for a header of %llu bytes", ld->op,
                      (unsigned long long)header_bytes);
  st = read_at(ld, ld->header, header_bytes, 8, "the header");
  if (st != APX_OK)
    return st;
  ld->header[header_bytes] = '\0';
  st = scan_header(ld, (size_t)header_bytes);
  if (st != APX_OK)
    return st;
  ld->json = cJSON_ParseWithLengthOpts(ld->header, header_bytes, NULL, 0);
  if (!ld->json) /* the scan found valid JSON within the limits */
    return apx__error(APX_ERR_NO_MEMORY, "%s: out of memory reading a header of %llu bytes",
                      ld->op, (unsigned long long)header_bytes);
  if (!cJSON_IsObject(ld->json))
    return bad_file(ld, "the header is not a JSON object");

  int count = 0;
  for (const cJSON *item = ld->json->child; item; item = item->next)
    count++;
  ld->entries = calloc((size_t)count + 1, sizeof *ld->entries);
  if (!ld->entries)
    return apx__error(APX_ERR_NO_MEMORY, "%s: out of memory", ld->op);
  for (const cJSON *item = ld->json->child; item; item = item->next) {
    if (!item->string)
      return bad_file(ld, "the header has an unnamed entry");
    if (strcmp(item->string, "__metadata__") == 0) {
      if (!cJSON_IsObject(item))
        return bad_file(ld, "__metadata__ is not a JSON object");
      for (const cJSON *m = item->child; m; m = m->next)
        if (!cJSON_IsString(m))
          return bad_file(ld, "__metadata__ [%s] is not a string",
                          quote(m->string ? m->string : "").text);
      continue;
    }
    st = parse_entry(ld, item, &ld->entries[ld->entry_count]);
    if (st != APX_OK)
      return st;
    ld->entry_count++;
  }
  if (ld->entry_count > 1) {
    /* a name twice is reported as such before its bytes can overlap */
    qsort(ld->entries, (size_t)ld->entry_count, sizeof *ld->entries, entry_by_name);
    for (int i = 1; i < ld->entry_count; i++)
      if (strcmp(ld->entries[i - 1].name, ld->entries[i].name) == 0)
        return bad_file(ld, "tensor [%s] appears more than once in the header",
                        quote(ld->entries[i].name).text);
    qsort(ld->entries, (size_t)ld->entry_count, sizeof *ld->entries, entry_by_begin);
    const st_entry *last = NULL; /* the non-empty entry reaching furthest so far */
    for (int i = 0; i < ld->entry_count; i++) {
      const st_entry *e = &ld->entries[i];
      if (e->begin == e->end)
        continue;
      if (last && e->begin < last->end)
        return bad_file(ld, "tensor [%s]: data_offsets [%llu, %llu] overlap tensor [%s] [%llu, "
                            "%llu]",
                        quote(e->name).text, (unsigned long long)e->begin,
                        (unsigned long long)e->end, quote(last->name).text,
                        (unsigned long long)last->begin, (unsigned long long)last->end);
      if (!last || e->end > last->end)
        last = e;
    }
    qsort(ld->entries, (size_t)ld->entry_count, sizeof *ld->entries, entry_by_name);
  }
  return APX_OK;
}

static const st_entry *find_entry(const loader *ld, const char *name) {
  st_entry key = {.name = name};
  if (ld->entry_count == 0)
    return NULL;
  return bsearch(&key, ld->entries, (size_t)ld->entry_count, sizeof key, entry_by_name);
}

/* A required tensor: present, a supported dtype, the expected shape. */
static apx_status check_required(const loader *ld, const char *name, const apx__ff_tensor_spec *s,
                                 int64_t c, const st_entry **out) {
  const st_entry *e = find_entry(ld, name);
  if (!e)
    return bad_file(ld, "tensor [%s] is missing", name);
  if (strcmp(e->dtype, "F32") != 0 && strcmp(e->dtype, "F16") != 0 && strcmp(e->dtype, "BF16") != 0)
    return bad_file(ld, "tensor [%s]: dtype [%s] is not F32, F16 or BF16", name,
                    quote(e->dtype).text);
  int same = e->ndim == s->ndim;
  for (int d = 0; same && d < s->ndim; d++)
    same = e->dims[d] == apx__ff_spec_dim(s, d, c);
  if (!same) {
    char got[160], want[96];
    apx__ff_format_dims(got, sizeof got, e->ndim, e->dims);
    apx__ff_format_spec_dims(want, sizeof want, s, c);
    return bad_file(ld, "tensor [%s] has shape %s, expected %s for C = %lld", name, got, want,
                    (long long)c);
  }
  *out = e;
  return APX_OK;
}

/* docs/ff_weights.md: a weight must be finite; the first one that is not
 * is named by its index in the tensor's shape. */
static apx_status check_finite(const loader *ld, const st_entry *e, const float *v) {
  for (int64_t k = 0; k < e->numel; k++) {
    if (isfinite(v[k]))
      continue;
    int64_t index[8], rest = k;
    for (int d = e->ndim - 1; d >= 0; d--) {
      index[d] = rest % e->dims[d];
      rest /= e->dims[d];
    }
    char at[160];
    apx__ff_format_dims(at, sizeof at, e->ndim, index);
    return bad_file(ld, "tensor [%s] holds %s at index %s (element %lld); weights must be finite",
                    e->name, isnan(v[k]) ? "NaN" : v[k] > 0 ? "+inf" : "-inf", at, (long long)k);
  }
  return APX_OK;
}

/* Read one tensor's bytes and convert them to fp32 in dst. */
static apx_status read_tensor(loader *ld, const st_entry *e, float *dst) {
  size_t n = (size_t)e->numel;
  uint64_t offset = ld->data_start + e->begin;
  char what[APX__FF_NAME_MAX + 32];
  snprintf(what, sizeof what, "tensor [%s]", e->name);
  if (strcmp(e->dtype, "F32") == 0) {
    apx_status st = read_at(ld, dst, n * 4, offset, what);
    if (st != APX_OK)
      return st;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (size_t k = 0; k < n; k++) {
      const unsigned char *b = (const unsigned char *)&dst[k];
      dst[k] = apx_bits_f32((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                            (uint32_t)b[3] << 24);
    }
#endif
    return check_finite(ld, e, dst);
  }
  if (n * 2 > ld->scratch_bytes) {
    free(ld->scratch);
    ld->scratch = malloc(n * 2);
    ld->scratch_bytes = ld->scratch ? n * 2 : 0;
    if (!ld->scratch)
      return apx__error(APX_ERR_NO_MEMORY, "%s: out of memory", ld->op);
  }
  apx_status st = read_at(ld, ld->scratch, n * 2, offset, what);
  if (st != APX_OK)
    return st;
  const unsigned char *b = ld->scratch;
  int bf16 = strcmp(e->dtype, "BF16") == 0;
  for (size_t k = 0; k < n; k++) {
    uint16_t h = (uint16_t)(b[2 * k] | b[2 * k + 1] << 8);
    dst[k] = bf16 ? apx_bf16_to_f32(h) : apx_f16_to_f32(h);
  }
  return check_finite(ld, e, dst);
}

static apx_status load_file(loader *ld, apx_context *ctx, apx_ff_weights **out) {
  ld->fd = open(ld->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
  if (ld->fd < 0)
    return bad_file(ld, "cannot open the file: %s", strerror(errno));
  struct stat sb;
  if (fstat(ld->fd, &sb) != 0)
    return bad_file(ld, "cannot examine the file: %s", strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return bad_file(ld, "the path is not a regular file");
  ld->file_bytes = (uint64_t)sb.st_size;
  apx_status st = read_header(ld);
  if (st != APX_OK)
    return st;

  /* C comes from the first tensor; every other shape follows from it */
  const apx__ff_tensor_spec *first = &apx__ff_level_specs[0];
  char name[APX__FF_NAME_MAX];
  apx__ff_spec_name(name, 0, first);
  const st_entry *e = find_entry(ld, name);
  if (!e)
    return bad_file(ld, "tensor [%s] is missing", name);
  if (e->ndim != 1 || e->dims[0] < 1 || e->dims[0] > APX__FF_MAX_CHANNELS) {
    char got[160];
    apx__ff_format_dims(got, sizeof got, e->ndim, e->dims);
    return bad_file(ld, "tensor [%s] has shape %s, expected [C] with C in [1, %d]", name, got,
                    APX__FF_MAX_CHANNELS);
  }
  int64_t c = e->dims[0];
  const st_entry *found[2][APX__FF_LEVEL_TENSORS];
  for (int level = 0; level < 2; level++)
    for (int i = 0; i < APX__FF_LEVEL_TENSORS; i++) {
      apx__ff_spec_name(name, level, &apx__ff_level_specs[i]);
      st = check_required(ld, name, &apx__ff_level_specs[i], c, &found[level][i]);
      if (st != APX_OK)
        return st;
    }

  apx_ff_weights *w;
  st = apx__ff_weights_new(ctx, ld->op, c, &w);
  if (st != APX_OK)
    return st;
  float *dst = w->data;
  for (int level = 0; level < 2 && st == APX_OK; level++)
    for (int i = 0; i < APX__FF_LEVEL_TENSORS && st == APX_OK; i++) {
      st = read_tensor(ld, found[level][i], dst);
      dst += found[level][i]->numel;
    }
  if (st != APX_OK) {
    apx__ff_weights_destroy(w);
    return st;
  }
  apx__ff_weights_bind(w);
  *out = w;
  return APX_OK;
}

APX_API apx_status apx_ff_weights_load(apx_context *ctx, const char *path,
                                       apx_ff_weights **weights) {
  static const char op[] = "apx_ff_weights_load";
  apx__clear_error();
  if (weights)
    *weights = NULL;
  if (!ctx)
    return apx__error(APX_ERR_INVALID_ARG, "%s: ctx = [NULL]", op);
  if (!path)
    return apx__error(APX_ERR_INVALID_ARG, "%s: path = [NULL]", op);
  if (!weights)
    return apx__error(APX_ERR_INVALID_ARG, "%s: weights = [NULL]", op);
  apx_status st = apx__ff_make_begin(ctx, op);
  if (st != APX_OK)
    return st;
  loader ld = {.op = op, .path = path, .fd = -1};
  apx_ff_weights *w = NULL;
  st = load_file(&ld, ctx, &w);
  if (ld.fd >= 0)
    close(ld.fd);
  cJSON_Delete(ld.json);
  free(ld.header);
  free(ld.entries);
  free(ld.scratch);
  st = apx__ff_make_end(ctx, op, w, st);
  if (st == APX_OK)
    *weights = w;
  return st;
}
