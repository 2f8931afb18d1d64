/* SPDX-License-Identifier: Apache-2.0 */
/* The TensorRT plugins' pure parts (trt_units.h): no TensorRT, no CUDA. */
#include "config.h"

#include "trt_units.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const apx__trt_creator_info creators[] = {
    {"TilePack", APX_TRT_PLUGIN_VERSION, APX_TRT_NAMESPACE, APX_TRT_TILEPACK},
    {"TileUnpackFusion", APX_TRT_PLUGIN_VERSION, APX_TRT_NAMESPACE, APX_TRT_TILEUNPACK_FUSION},
    {"TileSSMScan", APX_TRT_PLUGIN_VERSION, APX_TRT_NAMESPACE, APX_TRT_TILESSM_SCAN},
};
#define CREATOR_COUNT ((int)(sizeof creators / sizeof creators[0]))

static const apx__trt_field_decl tilepack_fields[] = {
    {"tile_size", APX_TRT_FIELD_INT32, 1},
};
static const apx__trt_field_decl unpack_fields[] = {
    {"num_inputs", APX_TRT_FIELD_INT32, 1},
};
static const apx__trt_field_decl scan_fields[] = {
    {"direction", APX_TRT_FIELD_INT32, 1},
    {"clamp_value", APX_TRT_FIELD_FLOAT32, 1},
    {"num_inputs", APX_TRT_FIELD_INT32, 1},
};

static int fail(char *err, size_t err_size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int fail(char *err, size_t err_size, const char *fmt, ...) {
  if (err && err_size) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static const char *kind_name(apx__trt_kind kind) {
  return kind >= 0 && kind < APX_TRT_KIND_COUNT ? creators[kind].name : "plugin";
}

const apx__trt_creator_info *apx__trt_creators(int *count) {
  if (count) *count = CREATOR_COUNT;
  return creators;
}

const apx__trt_creator_info *apx__trt_creator_find(const char *name, const char *version,
                                                   const char *name_space) {
  if (!name || !version) return NULL;
  if (!name_space || !*name_space) name_space = APX_TRT_NAMESPACE;
  for (int i = 0; i < CREATOR_COUNT; i++) {
    if (strcmp(creators[i].name, name) == 0 && strcmp(creators[i].version, version) == 0 &&
        strcmp(creators[i].name_space, name_space) == 0)
      return &creators[i];
  }
  return NULL;
}

const apx__trt_field_decl *apx__trt_field_decls(apx__trt_kind kind, int *count) {
  switch (kind) {
  case APX_TRT_TILEPACK:
    *count = (int)(sizeof tilepack_fields / sizeof tilepack_fields[0]);
    return tilepack_fields;
  case APX_TRT_TILEUNPACK_FUSION:
    *count = (int)(sizeof unpack_fields / sizeof unpack_fields[0]);
    return unpack_fields;
  case APX_TRT_TILESSM_SCAN:
    *count = (int)(sizeof scan_fields / sizeof scan_fields[0]);
    return scan_fields;
  default:
    *count = 0;
    return NULL;
  }
}

void apx__trt_params_default(apx__trt_kind kind, apx__trt_params *out) {
  memset(out, 0, sizeof *out);
  out->kind = kind;
  out->tile_size = 8;
  out->num_inputs = 0;
  out->direction = 0;
  out->clamp_value = 1e4f;
}

/* ---- values' rules, shared by parsing and decoding --------------------- */

static int check_num_inputs(apx__trt_kind kind, int64_t v, char *err, size_t err_size) {
  if (kind == APX_TRT_TILEUNPACK_FUSION && v != 0 && v != 4 && v != 5)
    return fail(err, err_size, "TileUnpackFusion: num_inputs [%lld] is not 4, 5 or 0 (any)",
                (long long)v);
  if (kind == APX_TRT_TILESSM_SCAN && v != 0 && v != 5 && v != 6)
    return fail(err, err_size, "TileSSMScan: num_inputs [%lld] is not 5, 6 or 0 (any)",
                (long long)v);
  return 0;
}

static int check_params(const apx__trt_params *p, char *err, size_t err_size) {
  switch (p->kind) {
  case APX_TRT_TILEPACK:
    if (p->tile_size <= 0)
      return fail(err, err_size, "TilePack: tile_size [%d] is not positive", (int)p->tile_size);
    return 0;
  case APX_TRT_TILEUNPACK_FUSION:
    return check_num_inputs(p->kind, p->num_inputs, err, err_size);
  case APX_TRT_TILESSM_SCAN:
    if (p->direction != 0 && p->direction != 1)
      return fail(err, err_size,
                  "TileSSMScan: direction [%d] is not 0 (forward) or 1 (backward)",
                  (int)p->direction);
    if (isnan(p->clamp_value) || p->clamp_value < 0)
      return fail(err, err_size, "TileSSMScan: clamp_value [%g] is not a number >= 0",
                  (double)p->clamp_value);
    return check_num_inputs(p->kind, p->num_inputs, err, err_size);
  default:
    return fail(err, err_size, "plugin: kind [%d] is unknown", (int)p->kind);
  }
}

/* ---- fields ------------------------------------------------------------ */

static int field_int(apx__trt_kind kind, const apx__trt_field *f, int64_t *v, char *err,
                     size_t err_size) {
  if (f->length != 1 || !f->data)
    return fail(err, err_size, "%s: field %s has length [%d], expected 1", kind_name(kind),
                f->name, (int)f->length);
  switch (f->type) {
  case APX_TRT_FIELD_INT32: {
    int32_t x;
    memcpy(&x, f->data, sizeof x);
    *v = x;
    return 0;
  }
  case APX_TRT_FIELD_INT64: {
    int64_t x;
    memcpy(&x, f->data, sizeof x);
    if (x < INT32_MIN || x > INT32_MAX)
      return fail(err, err_size, "%s: %s [%lld] is outside the int32 range", kind_name(kind),
                  f->name, (long long)x);
    *v = x;
    return 0;
  }
  default:
    return fail(err, err_size, "%s: field %s has type [%d], expected int32 (5) or int64 (10)",
                kind_name(kind), f->name, f->type);
  }
}

static int field_float(apx__trt_kind kind, const apx__trt_field *f, double *v, char *err,
                       size_t err_size) {
  if (f->length != 1 || !f->data)
    return fail(err, err_size, "%s: field %s has length [%d], expected 1", kind_name(kind),
                f->name, (int)f->length);
  if (f->type == APX_TRT_FIELD_FLOAT32) {
    float x;
    memcpy(&x, f->data, sizeof x);
    *v = x;
    return 0;
  }
  if (f->type == APX_TRT_FIELD_FLOAT64) {
    double x;
    memcpy(&x, f->data, sizeof x);
    *v = x;
    return 0;
  }
  return fail(err, err_size, "%s: field %s has type [%d], expected float32 (1) or float64 (2)",
              kind_name(kind), f->name, f->type);
}

int apx__trt_parse_fields(apx__trt_kind kind, const apx__trt_field *fields, int count,
                          apx__trt_params *out, char *err, size_t err_size) {
  if (kind < 0 || kind >= APX_TRT_KIND_COUNT)
    return fail(err, err_size, "plugin: kind [%d] is unknown", (int)kind);
  if (count < 0 || (count > 0 && !fields))
    return fail(err, err_size, "%s: field collection [%d fields] is malformed", kind_name(kind),
                count);
  apx__trt_params p;
  apx__trt_params_default(kind, &p);
  for (int i = 0; i < count; i++) {
    const apx__trt_field *f = &fields[i];
    if (!f->name)
      return fail(err, err_size, "%s: field %d has no name", kind_name(kind), i);
    if (strcmp(f->name, APX_TRT_STATE_FIELD) == 0) {
      if (f->type != APX_TRT_FIELD_INT8 && f->type != APX_TRT_FIELD_UNKNOWN)
        return fail(err, err_size, "%s: field %s has type [%d], expected int8 (3)",
                    kind_name(kind), f->name, f->type);
      if (count != 1)
        return fail(err, err_size, "%s: field %s comes with [%d] other fields", kind_name(kind),
                    f->name, count - 1);
      if (f->length < 0 || (f->length > 0 && !f->data))
        return fail(err, err_size, "%s: field %s has length [%d]", kind_name(kind), f->name,
                    (int)f->length);
      return apx__trt_deserialize(kind, f->data, (size_t)f->length, out, err, err_size);
    }
    int64_t iv = 0;
    double fv = 0;
    if (kind == APX_TRT_TILEPACK && strcmp(f->name, "tile_size") == 0) {
      if (field_int(kind, f, &iv, err, err_size) != 0) return -1;
      p.tile_size = (int32_t)iv;
      if (iv <= 0)
        return fail(err, err_size, "TilePack: tile_size [%lld] is not positive", (long long)iv);
    } else if ((kind == APX_TRT_TILEUNPACK_FUSION || kind == APX_TRT_TILESSM_SCAN) &&
               strcmp(f->name, "num_inputs") == 0) {
      if (field_int(kind, f, &iv, err, err_size) != 0) return -1;
      if (check_num_inputs(kind, iv, err, err_size) != 0) return -1;
      p.num_inputs = (int32_t)iv;
    } else if (kind == APX_TRT_TILESSM_SCAN && strcmp(f->name, "direction") == 0) {
      if (field_int(kind, f, &iv, err, err_size) != 0) return -1;
      if (iv != 0 && iv != 1)
        return fail(err, err_size,
                    "TileSSMScan: direction [%lld] is not 0 (forward) or 1 (backward)",
                    (long long)iv);
      p.direction = (int32_t)iv;
    } else if (kind == APX_TRT_TILESSM_SCAN && strcmp(f->name, "clamp_value") == 0) {
      if (field_float(kind, f, &fv, err, err_size) != 0) return -1;
      if (isnan(fv)) return fail(err, err_size, "TileSSMScan: clamp_value [nan] is not a number");
      /* docs/ops.md, tilessm_scan: a negative clamp acts as its absolute
       * value (the seed's plugin floored it at 1.0 instead) */
      p.clamp_value = (float)fabs(fv);
    } else if (strcmp(f->name, "plugin_version") == 0 ||
               strcmp(f->name, "plugin_namespace") == 0) {
      /* the ONNX parser's node attributes that name the creator: not ours */
    } else {
      return fail(err, err_size, "%s: field [%s] is not one of this plugin's fields",
                  kind_name(kind), f->name);
    }
  }
  *out = p;
  return 0;
}

/* ---- serialisation ------------------------------------------------------ */

static void put_u16(unsigned char *b, uint32_t v) {
  b[0] = (unsigned char)(v & 0xff);
  b[1] = (unsigned char)((v >> 8) & 0xff);
}
static void put_u32(unsigned char *b, uint32_t v) {
  for (int i = 0; i < 4; i++) b[i] = (unsigned char)((v >> (8 * i)) & 0xff);
}
static uint32_t get_u16(const unsigned char *b) { return (uint32_t)b[0] | ((uint32_t)b[1] << 8); }
static uint32_t get_u32(const unsigned char *b) {
  return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
         ((uint32_t)b[3] << 24);
}
static uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static size_t payload_bytes(apx__trt_kind kind) {
  switch (kind) {
  case APX_TRT_TILEPACK: return 4;           /* tile_size */
  case APX_TRT_TILEUNPACK_FUSION: return 4;  /* num_inputs */
  case APX_TRT_TILESSM_SCAN: return 12;      /* num_inputs, direction, clamp_value */
  default: return 0;
  }
}

size_t apx__trt_serialize(const apx__trt_params *p, void *buf, size_t cap) {
  size_t payload = payload_bytes(p->kind);
  size_t size = APX_TRT_BLOB_HEADER + payload;
  if (!buf || cap < size) return size;
  unsigned char *b = (unsigned char *)buf;
  memcpy(b, APX_TRT_BLOB_MAGIC, 4);
  put_u16(b + 4, APX_TRT_BLOB_FORMAT);
  put_u16(b + 6, (uint32_t)p->kind);
  put_u32(b + 8, (uint32_t)payload);
  unsigned char *q = b + APX_TRT_BLOB_HEADER;
  switch (p->kind) {
  case APX_TRT_TILEPACK: put_u32(q, (uint32_t)p->tile_size); break;
  case APX_TRT_TILEUNPACK_FUSION: put_u32(q, (uint32_t)p->num_inputs); break;
  case APX_TRT_TILESSM_SCAN:
    put_u32(q, (uint32_t)p->num_inputs);
    put_u32(q + 4, (uint32_t)p->direction);
    put_u32(q + 8, float_bits(p->clamp_value));
    break;
  default: break;
  }
  return size;
}

int apx__trt_deserialize(apx__trt_kind kind, const void *buf, size_t len, apx__trt_params *out,
                         char *err, size_t err_size) {
  const char *name = kind_name(kind);
  if (kind < 0 || kind >= APX_TRT_KIND_COUNT)
    return fail(err, err_size, "plugin: kind [%d] is unknown", (int)kind);
  if (!buf || len < APX_TRT_BLOB_HEADER)
    return fail(err, err_size, "%s: serialised state of [%zu] bytes is shorter than its header",
                name, buf ? len : (size_t)0);
  const unsigned char *b = (const unsigned char *)buf;
  if (memcmp(b, APX_TRT_BLOB_MAGIC, 4) != 0)
    return fail(err, err_size, "%s: serialised state does not start with \"%s\"", name,
                APX_TRT_BLOB_MAGIC);
  uint32_t format = get_u16(b + 4), blob_kind = get_u16(b + 6), payload = get_u32(b + 8);
  if (format != APX_TRT_BLOB_FORMAT)
    return fail(err, err_size, "%s: serialised state format [%u] is not %d", name, format,
                APX_TRT_BLOB_FORMAT);
  if (blob_kind != (uint32_t)kind)
    return fail(err, err_size, "%s: serialised state is of plugin [%s]", name,
                blob_kind < APX_TRT_KIND_COUNT ? creators[blob_kind].name : "unknown");
  if (payload != payload_bytes(kind) || len != APX_TRT_BLOB_HEADER + (size_t)payload)
    return fail(err, err_size, "%s: serialised state of [%zu] bytes, expected %zu", name, len,
                APX_TRT_BLOB_HEADER + payload_bytes(kind));
  apx__trt_params p;
  apx__trt_params_default(kind, &p);
  const unsigned char *q = b + APX_TRT_BLOB_HEADER;
  switch (kind) {
  case APX_TRT_TILEPACK: p.tile_size = (int32_t)get_u32(q); break;
  case APX_TRT_TILEUNPACK_FUSION: p.num_inputs = (int32_t)get_u32(q); break;
  case APX_TRT_TILESSM_SCAN:
    p.num_inputs = (int32_t)get_u32(q);
    p.direction = (int32_t)get_u32(q + 4);
    p.clamp_value = bits_float(get_u32(q + 8));
    break;
  default: break;
  }
  if (check_params(&p, err, err_size) != 0) return -1;
  *out = p;
  return 0;
}

/* ---- inputs, types and formats -------------------------------------------- */

int apx__trt_nb_outputs(apx__trt_kind kind) { return kind == APX_TRT_TILESSM_SCAN ? 2 : 1; }

int apx__trt_check_nb_inputs(const apx__trt_params *p, int nb_inputs, char *err,
                             size_t err_size) {
  int lo, hi;
  switch (p->kind) {
  case APX_TRT_TILEPACK: lo = hi = 2; break;
  case APX_TRT_TILEUNPACK_FUSION: lo = 4; hi = 5; break;
  case APX_TRT_TILESSM_SCAN: lo = 5; hi = 6; break;
  default: return fail(err, err_size, "plugin: kind [%d] is unknown", (int)p->kind);
  }
  if (p->num_inputs) lo = hi = p->num_inputs;
  if (nb_inputs < lo || nb_inputs > hi) {
    if (lo == hi)
      return fail(err, err_size, "%s: [%d] inputs, expected %d", kind_name(p->kind), nb_inputs,
                  lo);
    return fail(err, err_size, "%s: [%d] inputs, expected %d or %d", kind_name(p->kind),
                nb_inputs, lo, hi);
  }
  return 0;
}

static int is_float_type(int t) {
  return t == APX_TRT_FLOAT || t == APX_TRT_HALF || t == APX_TRT_BF16;
}

/* Is input/output position pos an int32 id tensor (else a float tensor of
 * input 0's dtype)? */
static int is_index_position(apx__trt_kind kind, int pos) {
  if (kind == APX_TRT_TILEPACK) return pos == 1;
  if (kind == APX_TRT_TILEUNPACK_FUSION) return pos == 2 || pos == 3;
  return 0;
}

int apx__trt_supports(const apx__trt_params *p, int pos, const apx__trt_io *io, int nb_inputs,
                      int nb_outputs) {
  if (!io || pos < 0 || pos >= nb_inputs + nb_outputs) return 0;
  if (apx__trt_check_nb_inputs(p, nb_inputs, NULL, 0) != 0) return 0;
  if (nb_outputs != apx__trt_nb_outputs(p->kind)) return 0;
  if (io[pos].format != 0) return 0;
  int in_pos = pos < nb_inputs ? pos : -1;
  if (in_pos >= 0 && is_index_position(p->kind, in_pos)) return io[pos].type == APX_TRT_INT32;
  if (pos == 0) return is_float_type(io[0].type);
  return io[pos].type == io[0].type && is_float_type(io[0].type);
}

int apx__trt_output_types(const apx__trt_params *p, const int *in_types, int nb_inputs,
                          int *out_types, int nb_outputs, char *err, size_t err_size) {
  if (apx__trt_check_nb_inputs(p, nb_inputs, err, err_size) != 0) return -1;
  if (nb_outputs != apx__trt_nb_outputs(p->kind))
    return fail(err, err_size, "%s: [%d] outputs, expected %d", kind_name(p->kind), nb_outputs,
                apx__trt_nb_outputs(p->kind));
  if (!is_float_type(in_types[0]))
    return fail(err, err_size, "%s: input 0 has dtype [%d], expected fp32, fp16 or bf16",
                kind_name(p->kind), in_types[0]);
  for (int i = 1; i < nb_inputs; i++) {
    int want = is_index_position(p->kind, i) ? APX_TRT_INT32 : in_types[0];
    if (in_types[i] != want)
      return fail(err, err_size, "%s: input %d has dtype [%d], expected %d", kind_name(p->kind),
                  i, in_types[i], want);
  }
  for (int o = 0; o < nb_outputs; o++) out_types[o] = in_types[0];
  return 0;
}

/* ---- shapes --------------------------------------------------------------- */

static void src_in(apx__trt_dim_src *s, int input, int dim) {
  s->input = input;
  s->dim = dim;
  s->value = 0;
}
static void src_const(apx__trt_dim_src *s, int64_t v) {
  s->input = -1;
  s->dim = 0;
  s->value = v;
}

int apx__trt_output_dims(const apx__trt_params *p, int nb_inputs, int output,
                         apx__trt_dim_src *src, int *nb, char *err, size_t err_size) {
  if (apx__trt_check_nb_inputs(p, nb_inputs, err, err_size) != 0) return -1;
  if (output < 0 || output >= apx__trt_nb_outputs(p->kind))
    return fail(err, err_size, "%s: output [%d] does not exist", kind_name(p->kind), output);
  switch (p->kind) {
  case APX_TRT_TILEPACK: /* [B, K, C, t, t] from F [B,C,H,W], idx [B,K] */
    src_in(&src[0], 0, 0);
    src_in(&src[1], 1, 1);
    src_in(&src[2], 0, 1);
    src_const(&src[3], p->tile_size);
    src_const(&src[4], p->tile_size);
    *nb = 5;
    return 0;
  case APX_TRT_TILEUNPACK_FUSION: /* base's [B, C, H, W] */
    for (int d = 0; d < 4; d++) src_in(&src[d], 0, d);
    *nb = 4;
    return 0;
  case APX_TRT_TILESSM_SCAN:
    if (output == 0) { /* y: tokens' [B, K, C] */
      for (int d = 0; d < 3; d++) src_in(&src[d], 0, d);
      *nb = 3;
    } else { /* final_state [B, C] */
      src_in(&src[0], 0, 0);
      src_in(&src[1], 0, 2);
      *nb = 2;
    }
    return 0;
  default:
    return fail(err, err_size, "plugin: kind [%d] is unknown", (int)p->kind);
  }
}

/* a == b unless one is unknown */
static int dims_agree(int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; }

static int check_rank(apx__trt_kind kind, const apx__trt_dims *in, int i, int rank,
                      const char *what, char *err, size_t err_size) {
  if (in[i].nb != rank)
    return fail(err, err_size, "%s: input %d (%s) has [%d] dims, expected %d", kind_name(kind),
                i, what, in[i].nb, rank);
  return 0;
}

static int check_same(apx__trt_kind kind, const apx__trt_dims *in, int i, int di, int j, int dj,
                      const char *what, char *err, size_t err_size) {
  if (!dims_agree(in[i].d[di], in[j].d[dj]))
    return fail(err, err_size, "%s: %s: input %d dim %d [%lld] differs from input %d dim %d [%lld]",
                kind_name(kind), what, i, di, (long long)in[i].d[di], j, dj,
                (long long)in[j].d[dj]);
  return 0;
}

int apx__trt_infer_dims(const apx__trt_params *p, const apx__trt_dims *in, int nb_inputs,
                        apx__trt_dims *out, int nb_outputs, int runtime, char *err,
                        size_t err_size) {
  apx__trt_kind kind = p->kind;
  if (apx__trt_check_nb_inputs(p, nb_inputs, err, err_size) != 0) return -1;
  if (nb_outputs != apx__trt_nb_outputs(kind))
    return fail(err, err_size, "%s: [%d] outputs, expected %d", kind_name(kind), nb_outputs,
                apx__trt_nb_outputs(kind));
  for (int i = 0; i < nb_inputs; i++) {
    if (in[i].nb < 0 || in[i].nb > APX_TRT_MAX_DIMS)
      return fail(err, err_size, "%s: input %d has [%d] dims", kind_name(kind), i, in[i].nb);
    for (int d = 0; d < in[i].nb; d++) {
      if (in[i].d[d] < -1 || (runtime && in[i].d[d] < 0))
        return fail(err, err_size, "%s: input %d dim %d [%lld] is not a size", kind_name(kind), i,
                    d, (long long)in[i].d[d]);
    }
  }
  int64_t t = 0;
  const char *tile_from = "tile_size";
  switch (kind) {
  case APX_TRT_TILEPACK:
    if (check_rank(kind, in, 0, 4, "features [B,C,H,W]", err, err_size) ||
        check_rank(kind, in, 1, 2, "idx [B,K]", err, err_size) ||
        check_same(kind, in, 0, 0, 1, 0, "batch", err, err_size))
      return -1;
    t = p->tile_size;
    break;
  case APX_TRT_TILEUNPACK_FUSION:
    if (check_rank(kind, in, 0, 4, "base [B,C,H,W]", err, err_size) ||
        check_rank(kind, in, 1, 5, "packed [B,K,C,t,t]", err, err_size) ||
        check_rank(kind, in, 2, 2, "idx [B,K]", err, err_size) ||
        check_rank(kind, in, 3, 2, "levels [B,K]", err, err_size) ||
        (nb_inputs == 5 && check_rank(kind, in, 4, 4, "alpha [B,1,H,W]", err, err_size)) ||
        check_same(kind, in, 1, 0, 0, 0, "batch", err, err_size) ||
        check_same(kind, in, 1, 2, 0, 1, "channels", err, err_size) ||
        check_same(kind, in, 1, 3, 1, 4, "square tiles", err, err_size) ||
        check_same(kind, in, 2, 0, 0, 0, "batch", err, err_size) ||
        check_same(kind, in, 2, 1, 1, 1, "tiles K", err, err_size) ||
        check_same(kind, in, 3, 0, 0, 0, "batch", err, err_size) ||
        check_same(kind, in, 3, 1, 1, 1, "tiles K", err, err_size))
      return -1;
    if (nb_inputs == 5) {
      if (check_same(kind, in, 4, 0, 0, 0, "batch", err, err_size) ||
          check_same(kind, in, 4, 2, 0, 2, "height", err, err_size) ||
          check_same(kind, in, 4, 3, 0, 3, "width", err, err_size))
        return -1;
      if (in[4].d[1] >= 0 && in[4].d[1] != 1)
        return fail(err, err_size, "TileUnpackFusion: alpha dim 1 [%lld] is not 1",
                    (long long)in[4].d[1]);
    }
    t = in[1].d[3];
    tile_from = "packed's tile side";
    if (t == 0) return fail(err, err_size, "TileUnpackFusion: packed's tile side [0] is not positive");
    break;
  case APX_TRT_TILESSM_SCAN:
    if (check_rank(kind, in, 0, 3, "tokens [B,K,C]", err, err_size)) return -1;
    for (int i = 1; i <= 4; i++) {
      static const char *const names[] = {"", "decay [C]", "input_gain [C]", "output_gain [C]",
                                          "state_bias [C]"};
      if (check_rank(kind, in, i, 1, names[i], err, err_size) ||
          check_same(kind, in, i, 0, 0, 2, "channels", err, err_size))
        return -1;
    }
    if (nb_inputs == 6 &&
        (check_rank(kind, in, 5, 2, "init_state [B,C]", err, err_size) ||
         check_same(kind, in, 5, 0, 0, 0, "batch", err, err_size) ||
         check_same(kind, in, 5, 1, 0, 2, "channels", err, err_size)))
      return -1;
    break;
  default:
    return fail(err, err_size, "plugin: kind [%d] is unknown", (int)kind);
  }
  if (kind != APX_TRT_TILESSM_SCAN && t > 0) {
    for (int d = 2; d < 4; d++) {
      int64_t v = in[0].d[d];
      if (v >= 0 && v % t != 0)
        return fail(err, err_size, "%s: %s [%lld] does not divide input 0 dim %d [%lld]",
                    kind_name(kind), tile_from, (long long)t, d, (long long)v);
    }
  }
  for (int o = 0; o < nb_outputs; o++) {
    apx__trt_dim_src src[APX_TRT_MAX_DIMS];
    int nb = 0;
    if (apx__trt_output_dims(p, nb_inputs, o, src, &nb, err, err_size) != 0) return -1;
    out[o].nb = nb;
    for (int d = 0; d < nb; d++)
      out[o].d[d] = src[d].input < 0 ? src[d].value : in[src[d].input].d[src[d].dim];
  }
  return 0;
}

size_t apx__trt_workspace_bytes(const apx__trt_params *p, const apx__trt_dims *in,
                                int nb_inputs, size_t elem_size) {
  if (p->kind != APX_TRT_TILEUNPACK_FUSION || nb_inputs != 5 || in[0].nb != 4) return 0;
  size_t n = elem_size;
  for (int d = 0; d < 4; d++) {
    if (in[0].d[d] < 0) return 0;
    n *= (size_t)in[0].d[d];
  }
  return n;
}
