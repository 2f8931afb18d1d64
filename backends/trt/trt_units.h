/* SPDX-License-Identifier: Apache-2.0 */
/* The TensorRT plugins' pure parts: attribute parsing, serialisation,
 * shape and type rules and the creator list, in plain C without TensorRT,
 * so that make check tests them on machines without TensorRT. The plugin
 * classes (backends/trt/plugins/) translate TensorRT's structures into the
 * small ones below and call these functions.
 *
 * Numbering: apx__trt_dtype follows nvinfer1::DataType, apx__trt_field_type
 * follows nvinfer1::PluginFieldType and format 0 is TensorFormat::kLINEAR
 * (the plugin sources check that with static_asserts).
 *
 * Semantics: docs/trt.md, The plugins: the seed's plugins' inputs, outputs
 * and attributes, with apexx's rules where the seed's plugins had an
 * oddity (ids out of range are errors, clamp_value is |v| as tilessm_scan,
 * the unpack priority key is (level, k) as tileunpack). */
#ifndef APX_TRT_UNITS_H
#define APX_TRT_UNITS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define APX_TRT_NAMESPACE "apexx"
#define APX_TRT_PLUGIN_VERSION "1"
#define APX_TRT_MAX_DIMS 8
#define APX_TRT_MAX_IO 8
/* the serialised state: "APXT", u16 format, u16 kind, u32 payload bytes */
#define APX_TRT_BLOB_MAGIC "APXT"
#define APX_TRT_BLOB_FORMAT 1
#define APX_TRT_BLOB_HEADER 12
/* the one field getFieldsToSerialize hands TensorRT (PluginFieldType kINT8) */
#define APX_TRT_STATE_FIELD "apexx_state"

typedef enum apx__trt_kind {
  APX_TRT_TILEPACK = 0,
  APX_TRT_TILEUNPACK_FUSION = 1,
  APX_TRT_TILESSM_SCAN = 2,
  APX_TRT_KIND_COUNT
} apx__trt_kind;

typedef enum apx__trt_dtype {
  APX_TRT_FLOAT = 0,
  APX_TRT_HALF = 1,
  APX_TRT_INT8 = 2,
  APX_TRT_INT32 = 3,
  APX_TRT_BOOL = 4,
  APX_TRT_UINT8 = 5,
  APX_TRT_FP8 = 6,
  APX_TRT_BF16 = 7,
  APX_TRT_INT64 = 8
} apx__trt_dtype;

typedef enum apx__trt_field_type {
  APX_TRT_FIELD_FLOAT16 = 0,
  APX_TRT_FIELD_FLOAT32 = 1,
  APX_TRT_FIELD_FLOAT64 = 2,
  APX_TRT_FIELD_INT8 = 3,
  APX_TRT_FIELD_INT16 = 4,
  APX_TRT_FIELD_INT32 = 5,
  APX_TRT_FIELD_CHAR = 6,
  APX_TRT_FIELD_DIMS = 7,
  APX_TRT_FIELD_UNKNOWN = 8,
  APX_TRT_FIELD_BF16 = 9,
  APX_TRT_FIELD_INT64 = 10
} apx__trt_field_type;

/* One creator field (nvinfer1::PluginField): data holds `length` values. */
typedef struct apx__trt_field {
  const char *name;
  const void *data;
  int type;       /* apx__trt_field_type */
  int32_t length;
} apx__trt_field;

/* A plugin's parameters (its attributes and what serialisation keeps). */
typedef struct apx__trt_params {
  apx__trt_kind kind;
  int32_t tile_size;  /* TilePack: > 0, default 8 */
  int32_t num_inputs; /* TileUnpackFusion 4|5, TileSSMScan 5|6; 0: as the network gives */
  int32_t direction;  /* TileSSMScan: 0 forward, 1 backward */
  float clamp_value;  /* TileSSMScan: |value| as given (default 1e4) */
} apx__trt_params;

/* Dimensions as TensorRT gives them; -1 = not known before run time. */
typedef struct apx__trt_dims {
  int nb;
  int64_t d[APX_TRT_MAX_DIMS];
} apx__trt_dims;

/* One input or output's element type and format (0 = linear). */
typedef struct apx__trt_io {
  int type;   /* apx__trt_dtype */
  int format;
} apx__trt_io;

/* Where an output dimension comes from: input `input`'s dimension `dim`,
 * or the constant `value` when input < 0. */
typedef struct apx__trt_dim_src {
  int input;
  int dim;
  int64_t value;
} apx__trt_dim_src;

/* A creator's declared field (getFieldNames). */
typedef struct apx__trt_field_decl {
  const char *name;
  int type;
  int32_t length;
} apx__trt_field_decl;

typedef struct apx__trt_creator_info {
  const char *name;      /* "TilePack", "TileUnpackFusion", "TileSSMScan" */
  const char *version;   /* "1" */
  const char *name_space; /* "apexx" */
  apx__trt_kind kind;
} apx__trt_creator_info;

/* The creators the plugin library registers, in a fixed order. */
const apx__trt_creator_info *apx__trt_creators(int *count);
/* The creator of (name, version, namespace); NULL when none matches.
 * A NULL or empty namespace matches "apexx". */
const apx__trt_creator_info *apx__trt_creator_find(const char *name, const char *version,
                                                   const char *name_space);
/* The fields a kind's creator declares (getFieldNames). */
const apx__trt_field_decl *apx__trt_field_decls(apx__trt_kind kind, int *count);

/* The defaults of a kind's attributes. */
void apx__trt_params_default(apx__trt_kind kind, apx__trt_params *out);

/* Parse creator fields into *out (defaults for absent fields). A field
 * named APX_TRT_STATE_FIELD is a serialised state: it is decoded instead
 * and may be the only field. Unknown names, wrong types or lengths and
 * values outside a field's range are errors: -1 with the message in err
 * (`TilePack: tile_size [0] is not positive`), *out untouched; 0 on
 * success. */
int apx__trt_parse_fields(apx__trt_kind kind, const apx__trt_field *fields, int count,
                          apx__trt_params *out, char *err, size_t err_size);

/* Serialise p into buf: returns the blob's size, writing only when
 * cap >= size (so a NULL buf with cap 0 asks for the size). */
size_t apx__trt_serialize(const apx__trt_params *p, void *buf, size_t cap);
/* Decode a blob of `len` bytes made by apx__trt_serialize for `kind`. A
 * short, long or foreign blob (magic, format, kind) or a value out of range
 * is an error: -1 with the message; 0 on success. Reads only buf[0, len). */
int apx__trt_deserialize(apx__trt_kind kind, const void *buf, size_t len, apx__trt_params *out,
                         char *err, size_t err_size);

/* Outputs of a kind (TilePack 1, TileUnpackFusion 1, TileSSMScan 2). */
int apx__trt_nb_outputs(apx__trt_kind kind);
/* Is nb_inputs a count this plugin takes? 0 yes, -1 with the message. */
int apx__trt_check_nb_inputs(const apx__trt_params *p, int nb_inputs, char *err,
                             size_t err_size);

/* supportsFormatCombination: may io[pos] have its type and format, given
 * io[0..pos-1] (inputs first, then outputs)? Float tensors are fp32, fp16
 * or bf16, all of one dtype (input 0's); ids and levels int32; all linear. */
int apx__trt_supports(const apx__trt_params *p, int pos, const apx__trt_io *io, int nb_inputs,
                      int nb_outputs);
/* getOutputDataTypes: outputs take input 0's float dtype; -1 with the
 * message for an input dtype the plugin does not take. */
int apx__trt_output_types(const apx__trt_params *p, const int *in_types, int nb_inputs,
                          int *out_types, int nb_outputs, char *err, size_t err_size);

/* getOutputShapes: output `output`'s dimensions as sources (*nb of them). */
int apx__trt_output_dims(const apx__trt_params *p, int nb_inputs, int output,
                         apx__trt_dim_src *src, int *nb, char *err, size_t err_size);
/* Check input dims (ranks, matching sizes, the tile grid) and compute the
 * outputs' dims. Dims of -1 are unknown (build time) and skip the checks
 * they take part in; with `runtime` every dim must be known and >= 0.
 * 0 on success, -1 with the message. */
int apx__trt_infer_dims(const apx__trt_params *p, const apx__trt_dims *in, int nb_inputs,
                        apx__trt_dims *out, int nb_outputs, int runtime, char *err,
                        size_t err_size);

/* Workspace bytes of a call (TileUnpackFusion with alpha: the merged map
 * before the alpha blend, B*C*H*W elements of elem_size). */
size_t apx__trt_workspace_bytes(const apx__trt_params *p, const apx__trt_dims *in,
                                int nb_inputs, size_t elem_size);

#ifdef __cplusplus
}
#endif

#endif
