/* SPDX-License-Identifier: Apache-2.0 */
// The plugin class (one for the three kinds: TilePack, TileUnpackFusion,
// TileSSMScan; they differ in their parameters' kind, which the pure units
// and the per-op enqueue files act on), its creators and the library's
// registration entry points (getCreators for IPluginRegistry::loadLibrary
// and trtexec --dynamicPlugins; self-registration at load time for
// trtexec --staticPlugins and Triton's plugin loading).
#include "config.h"

#include "plugin.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <new>

namespace apexx_trt {
namespace {

using nvinfer1::DataType;
using nvinfer1::PluginFieldType;

// the units' numbering is TensorRT's (trt_units.h)
static_assert(static_cast<int>(DataType::kFLOAT) == APX_TRT_FLOAT, "DataType numbering");
static_assert(static_cast<int>(DataType::kHALF) == APX_TRT_HALF, "DataType numbering");
static_assert(static_cast<int>(DataType::kINT32) == APX_TRT_INT32, "DataType numbering");
static_assert(static_cast<int>(DataType::kBF16) == APX_TRT_BF16, "DataType numbering");
static_assert(static_cast<int>(DataType::kINT64) == APX_TRT_INT64, "DataType numbering");
static_assert(static_cast<int>(PluginFieldType::kINT8) == APX_TRT_FIELD_INT8, "field numbering");
static_assert(static_cast<int>(PluginFieldType::kINT32) == APX_TRT_FIELD_INT32, "field numbering");
static_assert(static_cast<int>(PluginFieldType::kINT64) == APX_TRT_FIELD_INT64, "field numbering");
static_assert(static_cast<int>(PluginFieldType::kFLOAT32) == APX_TRT_FIELD_FLOAT32,
              "field numbering");
static_assert(static_cast<int>(PluginFieldType::kFLOAT64) == APX_TRT_FIELD_FLOAT64,
              "field numbering");
static_assert(static_cast<int>(PluginFieldType::kUNKNOWN) == APX_TRT_FIELD_UNKNOWN,
              "field numbering");
static_assert(static_cast<int>(nvinfer1::TensorFormat::kLINEAR) == 0, "format numbering");
static_assert(APX_TRT_MAX_IO >= 6, "the plugins' inputs and outputs fit");

const apx__trt_creator_info &info_of(apx__trt_kind kind) {
  int count = 0;
  return apx__trt_creators(&count)[kind];
}

class Plugin final : public nvinfer1::IPluginV3,
                     public nvinfer1::IPluginV3OneCore,
                     public nvinfer1::IPluginV3OneBuild,
                     public nvinfer1::IPluginV3OneRuntime {
 public:
  explicit Plugin(const apx__trt_params &p) : params_(p) {}
  Plugin(const Plugin &other)
      : nvinfer1::IPluginV3(other),
        nvinfer1::IPluginV3OneCore(other),
        nvinfer1::IPluginV3OneBuild(other),
        nvinfer1::IPluginV3OneRuntime(other),
        params_(other.params_),
        recorder_(other.recorder_),
        nb_inputs_(other.nb_inputs_) {}
  Plugin &operator=(const Plugin &) = delete;
  ~Plugin() override = default;

  // ---- IPluginV3
  nvinfer1::IPluginCapability *getCapabilityInterface(
      nvinfer1::PluginCapabilityType type) noexcept override {
    switch (type) {
    case nvinfer1::PluginCapabilityType::kCORE:
      return static_cast<nvinfer1::IPluginV3OneCore *>(this);
    case nvinfer1::PluginCapabilityType::kBUILD:
      return static_cast<nvinfer1::IPluginV3OneBuild *>(this);
    case nvinfer1::PluginCapabilityType::kRUNTIME:
      return static_cast<nvinfer1::IPluginV3OneRuntime *>(this);
    }
    return nullptr;
  }
  nvinfer1::IPluginV3 *clone() noexcept override { return new (std::nothrow) Plugin(*this); }

  // ---- IPluginV3OneCore
  const char *getPluginName() const noexcept override { return info_of(params_.kind).name; }
  const char *getPluginVersion() const noexcept override { return APX_TRT_PLUGIN_VERSION; }
  const char *getPluginNamespace() const noexcept override { return APX_TRT_NAMESPACE; }

  // ---- IPluginV3OneBuild
  int32_t getNbOutputs() const noexcept override { return apx__trt_nb_outputs(params_.kind); }

  int32_t configurePlugin(const nvinfer1::DynamicPluginTensorDesc *in, int32_t nb_inputs,
                          const nvinfer1::DynamicPluginTensorDesc *out,
                          int32_t nb_outputs) noexcept override {
    (void)out;
    if (nb_inputs < 0 || nb_inputs > APX_TRT_MAX_IO) return fail("configurePlugin", "inputs");
    apx__trt_dims dims[APX_TRT_MAX_IO], outs[APX_TRT_MAX_IO];
    for (int i = 0; i < nb_inputs; i++) dims[i] = dims_of(in[i].desc.dims);
    char err[512];
    if (nb_outputs > APX_TRT_MAX_IO ||
        apx__trt_infer_dims(&params_, dims, nb_inputs, outs, nb_outputs, 0, err, sizeof err) != 0)
      return fail("configurePlugin", err);
    nb_inputs_ = nb_inputs;
    return 0;
  }

  int32_t getOutputDataTypes(DataType *out_types, int32_t nb_outputs, const DataType *in_types,
                             int32_t nb_inputs) const noexcept override {
    if (nb_inputs < 0 || nb_inputs > APX_TRT_MAX_IO || nb_outputs < 0 ||
        nb_outputs > APX_TRT_MAX_IO)
      return fail("getOutputDataTypes", "input or output count out of range");
    int in[APX_TRT_MAX_IO], out[APX_TRT_MAX_IO];
    for (int i = 0; i < nb_inputs; i++) in[i] = static_cast<int>(in_types[i]);
    char err[512];
    if (apx__trt_output_types(&params_, in, nb_inputs, out, nb_outputs, err, sizeof err) != 0)
      return fail("getOutputDataTypes", err);
    for (int o = 0; o < nb_outputs; o++) out_types[o] = static_cast<DataType>(out[o]);
    return 0;
  }

  int32_t getOutputShapes(const nvinfer1::DimsExprs *inputs, int32_t nb_inputs,
                          const nvinfer1::DimsExprs *shape_inputs, int32_t nb_shape_inputs,
                          nvinfer1::DimsExprs *outputs, int32_t nb_outputs,
                          nvinfer1::IExprBuilder &expr) noexcept override {
    (void)shape_inputs;
    (void)nb_shape_inputs;
    if (nb_inputs < 0 || nb_inputs > APX_TRT_MAX_IO || nb_outputs > APX_TRT_MAX_IO)
      return fail("getOutputShapes", "input or output count out of range");
    // the rules over what is known now (constants), then the expressions
    apx__trt_dims dims[APX_TRT_MAX_IO], outs[APX_TRT_MAX_IO];
    for (int i = 0; i < nb_inputs; i++) {
      dims[i].nb = inputs[i].nbDims;
      if (dims[i].nb < 0 || dims[i].nb > APX_TRT_MAX_DIMS) dims[i].nb = -1;
      for (int d = 0; d < dims[i].nb; d++)
        dims[i].d[d] = inputs[i].d[d]->isConstant() ? inputs[i].d[d]->getConstantValue() : -1;
    }
    char err[512];
    if (apx__trt_infer_dims(&params_, dims, nb_inputs, outs, nb_outputs, 0, err, sizeof err) != 0)
      return fail("getOutputShapes", err);
    for (int o = 0; o < nb_outputs; o++) {
      apx__trt_dim_src src[APX_TRT_MAX_DIMS];
      int nb = 0;
      if (apx__trt_output_dims(&params_, nb_inputs, o, src, &nb, err, sizeof err) != 0)
        return fail("getOutputShapes", err);
      outputs[o].nbDims = nb;
      for (int d = 0; d < nb; d++)
        outputs[o].d[d] =
            src[d].input < 0 ? expr.constant(src[d].value) : inputs[src[d].input].d[src[d].dim];
    }
    return 0;
  }

  bool supportsFormatCombination(int32_t pos, const nvinfer1::DynamicPluginTensorDesc *in_out,
                                 int32_t nb_inputs, int32_t nb_outputs) noexcept override {
    if (pos < 0 || pos >= APX_TRT_MAX_IO || nb_inputs + nb_outputs > APX_TRT_MAX_IO) return false;
    apx__trt_io io[APX_TRT_MAX_IO];
    for (int i = 0; i <= pos; i++) {
      io[i].type = static_cast<int>(in_out[i].desc.type);
      io[i].format = static_cast<int>(in_out[i].desc.format);
    }
    return apx__trt_supports(&params_, pos, io, nb_inputs, nb_outputs) != 0;
  }

  size_t getWorkspaceSize(const nvinfer1::DynamicPluginTensorDesc *inputs, int32_t nb_inputs,
                          const nvinfer1::DynamicPluginTensorDesc *outputs,
                          int32_t nb_outputs) const noexcept override {
    (void)outputs;
    (void)nb_outputs;
    if (nb_inputs < 1 || nb_inputs > APX_TRT_MAX_IO) return 0;
    apx__trt_dims dims[APX_TRT_MAX_IO];
    for (int i = 0; i < nb_inputs; i++) dims[i] = dims_of(inputs[i].max);
    return apx__trt_workspace_bytes(&params_, dims, nb_inputs, elem_size(inputs[0].desc.type));
  }

  // ---- IPluginV3OneRuntime
  int32_t onShapeChange(const nvinfer1::PluginTensorDesc *in, int32_t nb_inputs,
                        const nvinfer1::PluginTensorDesc *out,
                        int32_t nb_outputs) noexcept override {
    if (nb_inputs < 0 || nb_inputs > APX_TRT_MAX_IO || nb_outputs < 0 ||
        nb_outputs > APX_TRT_MAX_IO)
      return fail("onShapeChange", "input or output count out of range");
    apx__trt_dims dims[APX_TRT_MAX_IO], outs[APX_TRT_MAX_IO];
    for (int i = 0; i < nb_inputs; i++) dims[i] = dims_of(in[i].dims);
    char err[512];
    if (apx__trt_infer_dims(&params_, dims, nb_inputs, outs, nb_outputs, 1, err, sizeof err) != 0)
      return fail("onShapeChange", err);
    nb_inputs_ = nb_inputs;
    for (int o = 0; o < nb_outputs; o++) {
      apx__trt_dims got = dims_of(out[o].dims);
      int same = got.nb == outs[o].nb;
      for (int d = 0; same && d < got.nb; d++) same = got.d[d] == outs[o].d[d];
      if (!same) {
        snprintf(err, sizeof err, "%s: output %d's dims differ from the shape rules",
                 getPluginName(), o);
        return fail("onShapeChange", err);
      }
    }
    return 0;
  }

  int32_t enqueue(const nvinfer1::PluginTensorDesc *in, const nvinfer1::PluginTensorDesc *out,
                  const void *const *inputs, void *const *outputs, void *workspace,
                  cudaStream_t stream) noexcept override {
    char err[1024] = "";
    // enqueue gets no input count: the serialised one, else what
    // configurePlugin or onShapeChange saw
    EnqueueCall c = {&params_, in,      out,       count_inputs(), apx__trt_nb_outputs(params_.kind),
                     inputs,   outputs, workspace, stream,         err,
                     sizeof err};
    int rc = -1;
    switch (params_.kind) {
    case APX_TRT_TILEPACK: rc = enqueue_tilepack(c); break;
    case APX_TRT_TILEUNPACK_FUSION: rc = enqueue_tileunpack_fusion(c); break;
    case APX_TRT_TILESSM_SCAN: rc = enqueue_tilessm_scan(c); break;
    default: snprintf(err, sizeof err, "plugin kind [%d] is unknown", (int)params_.kind); break;
    }
    if (rc != 0) {
      report_error(recorder_, nvinfer1::ErrorCode::kINVALID_ARGUMENT, err);
      return -1;
    }
    return 0;
  }

  nvinfer1::IPluginV3 *attachToContext(nvinfer1::IPluginResourceContext *context) noexcept override {
    Plugin *p = new (std::nothrow) Plugin(*this);
    if (p && context) p->recorder_ = context->getErrorRecorder();
    return p;
  }

  const nvinfer1::PluginFieldCollection *getFieldsToSerialize() noexcept override {
    apx__trt_params p = params_;
    // what the network gave becomes part of the state
    if (!p.num_inputs && p.kind != APX_TRT_TILEPACK) p.num_inputs = nb_inputs_;
    size_t n = apx__trt_serialize(&p, blob_, sizeof blob_);
    field_ = nvinfer1::PluginField(APX_TRT_STATE_FIELD, blob_, PluginFieldType::kINT8,
                                   static_cast<int32_t>(n));
    fields_.nbFields = 1;
    fields_.fields = &field_;
    return &fields_;
  }

  void set_nb_inputs(int n) { nb_inputs_ = n; }

 private:
  static size_t elem_size(DataType t) {
    switch (t) {
    case DataType::kFLOAT:
    case DataType::kINT32: return 4;
    case DataType::kHALF:
    case DataType::kBF16: return 2;
    default: return 4;
    }
  }

  int count_inputs() const {
    if (params_.num_inputs) return params_.num_inputs;
    if (nb_inputs_) return nb_inputs_;
    // TilePack's count is fixed; the others' comes from the build
    return params_.kind == APX_TRT_TILEPACK ? 2 : 0;
  }

  int32_t fail(const char *where, const char *message) const noexcept {
    char line[700];
    snprintf(line, sizeof line, "%s %s: %s", getPluginName(), where, message);
    report_error(recorder_, nvinfer1::ErrorCode::kINVALID_ARGUMENT, line);
    return -1;
  }

  apx__trt_params params_;
  nvinfer1::IErrorRecorder *recorder_ = nullptr;
  int nb_inputs_ = 0;
  unsigned char blob_[64] = {};
  nvinfer1::PluginField field_;
  nvinfer1::PluginFieldCollection fields_;
};

class Creator final : public nvinfer1::IPluginCreatorV3One {
 public:
  explicit Creator(apx__trt_kind kind) : kind_(kind) {
    int count = 0;
    const apx__trt_field_decl *decls = apx__trt_field_decls(kind, &count);
    if (count > kMaxFields) count = kMaxFields;
    for (int i = 0; i < count; i++)
      fields_[i] = nvinfer1::PluginField(decls[i].name, nullptr,
                                         static_cast<PluginFieldType>(decls[i].type),
                                         decls[i].length);
    collection_.nbFields = count;
    collection_.fields = fields_;
  }

  nvinfer1::IPluginV3 *createPlugin(const char *name, const nvinfer1::PluginFieldCollection *fc,
                                    nvinfer1::TensorRTPhase phase) noexcept override {
    (void)phase;
    apx__trt_field fields[16];
    int count = fc ? fc->nbFields : 0;
    char err[512];
    if (count < 0 || count > 16 || (count > 0 && !fc->fields)) {
      snprintf(err, sizeof err, "%s %s: [%d] fields", info_of(kind_).name, name ? name : "",
               count);
      report_error(nullptr, nvinfer1::ErrorCode::kINVALID_ARGUMENT, err);
      return nullptr;
    }
    for (int i = 0; i < count; i++) {
      fields[i].name = fc->fields[i].name;
      fields[i].data = fc->fields[i].data;
      fields[i].type = static_cast<int>(fc->fields[i].type);
      fields[i].length = fc->fields[i].length;
    }
    apx__trt_params p;
    if (apx__trt_parse_fields(kind_, fields, count, &p, err, sizeof err) != 0) {
      report_error(nullptr, nvinfer1::ErrorCode::kINVALID_ARGUMENT, err);
      return nullptr;
    }
    Plugin *plugin = new (std::nothrow) Plugin(p);
    if (plugin && p.num_inputs) plugin->set_nb_inputs(p.num_inputs);
    return plugin;
  }

  const nvinfer1::PluginFieldCollection *getFieldNames() noexcept override { return &collection_; }
  const char *getPluginName() const noexcept override { return info_of(kind_).name; }
  const char *getPluginVersion() const noexcept override { return APX_TRT_PLUGIN_VERSION; }
  const char *getPluginNamespace() const noexcept override { return APX_TRT_NAMESPACE; }

 private:
  static constexpr int kMaxFields = 8;
  apx__trt_kind kind_;
  nvinfer1::PluginField fields_[kMaxFields];
  nvinfer1::PluginFieldCollection collection_;
};

Creator tilepack_creator(APX_TRT_TILEPACK);
Creator unpack_creator(APX_TRT_TILEUNPACK_FUSION);
Creator scan_creator(APX_TRT_TILESSM_SCAN);
nvinfer1::IPluginCreatorInterface *const creator_list[] = {&tilepack_creator, &unpack_creator,
                                                           &scan_creator};
constexpr int kCreatorCount = static_cast<int>(sizeof creator_list / sizeof creator_list[0]);

// Registered at load time (static registration)? Then getCreators takes
// them back first, so that loadLibrary can register them itself.
nvinfer1::IPluginRegistry *static_registry;

nvinfer1::IPluginRegistry *process_registry() {
  void *sym = dlsym(RTLD_DEFAULT, "getPluginRegistry");
  if (!sym) return nullptr;
  nvinfer1::IPluginRegistry *(*get)();
  memcpy(&get, &sym, sizeof get);
  return get();
}

void register_at_load() {
  // only where TensorRT is already in the process (trtexec --staticPlugins,
  // Triton's plugin loading); never with $APEXX_TRT_NO_STATIC_REGISTER
  const char *off = secure_getenv("APEXX_TRT_NO_STATIC_REGISTER");
  if (off && *off && strcmp(off, "0") != 0) return;
  nvinfer1::IPluginRegistry *reg = process_registry();
  if (!reg) return;
  int done = 0;
  for (int i = 0; i < kCreatorCount; i++)
    done += reg->registerCreator(*creator_list[i], APX_TRT_NAMESPACE) ? 1 : 0;
  if (done) static_registry = reg;
}

// at load time, after the creators above (a translation unit's objects are
// initialised in order)
struct RegisterAtLoad {
  RegisterAtLoad() { register_at_load(); }
} register_at_load_instance;

}  // namespace
}  // namespace apexx_trt

// TensorRT 10's entry for plugin libraries of IPluginV3 creators
// (IPluginRegistry::loadLibrary, trtexec --dynamicPlugins).
APX_TRT_EXPORT nvinfer1::IPluginCreatorInterface *const *getCreators(int32_t &nb_creators) {
  using namespace apexx_trt;
  if (static_registry) {
    for (int i = 0; i < kCreatorCount; i++) static_registry->deregisterCreator(*creator_list[i]);
    static_registry = nullptr;
  }
  nb_creators = kCreatorCount;
  return creator_list;
}

// The library's ABI version for tools that dlopen it (the seed's harness).
APX_TRT_EXPORT int apexx_trt_abi_version(void) { return 1; }
