/* SPDX-License-Identifier: Apache-2.0 */
// The plugin classes of libapexx_trt_plugins.so driven the way TensorRT
// drives them, without TensorRT's runtime or a GPU (built where configure
// found TensorRT's headers): the creators from getCreators, createPlugin
// from attributes and from the serialised state, the capabilities, the
// build-time rules (types, formats, configurePlugin, workspace),
// onShapeChange, the serialise/create round trip, and the error path: a
// recorder given through attachToContext, else the logger of
// setLoggerFinder, receives the message of a rejected call (enqueue with
// shapes that break the rules fails before any device work).
// Not covered: getOutputShapes (it needs TensorRT's expression builder).
#include <NvInferRuntime.h>
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "trt_test_util.h"

using namespace nvinfer1;
using trt_test::Context;
using trt_test::desc;
using trt_test::dims;
using trt_test::Recorder;

extern "C" IPluginCreatorInterface *const *getCreators(int32_t &nb_creators);
extern "C" void setLoggerFinder(ILoggerFinder *finder);

namespace {

class Logger final : public ILogger {
 public:
  void log(Severity severity, const char *msg) noexcept override {
    if (severity <= Severity::kERROR) lines.push_back(msg);
  }
  std::vector<std::string> lines;
};

class Finder final : public ILoggerFinder {
 public:
  ILogger *findLogger() override { return &logger; }
  Logger logger;
};

Finder finder;

IPluginCreatorV3One *creator(const char *name) {
  int32_t n = 0;
  IPluginCreatorInterface *const *list = getCreators(n);
  for (int i = 0; i < n; i++) {
    auto *c = static_cast<IPluginCreatorV3One *>(list[i]);
    if (strcmp(c->getPluginName(), name) == 0) return c;
  }
  return nullptr;
}

IPluginV3 *make(const char *name, std::vector<PluginField> fields) {
  PluginFieldCollection fc;
  fc.nbFields = (int32_t)fields.size();
  fc.fields = fields.data();
  return creator(name)->createPlugin("node", &fc, TensorRTPhase::kBUILD);
}

IPluginV3OneBuild *build(IPluginV3 *p) {
  return static_cast<IPluginV3OneBuild *>(p->getCapabilityInterface(PluginCapabilityType::kBUILD));
}
IPluginV3OneRuntime *runtime(IPluginV3 *p) {
  return static_cast<IPluginV3OneRuntime *>(
      p->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
}
IPluginV3OneCore *core(IPluginV3 *p) {
  return static_cast<IPluginV3OneCore *>(p->getCapabilityInterface(PluginCapabilityType::kCORE));
}

DynamicPluginTensorDesc dyn(std::vector<int64_t> d, DataType t) {
  DynamicPluginTensorDesc x;
  x.desc = desc(d, t);
  x.min = x.desc.dims;
  x.max = x.desc.dims;
  x.opt = x.desc.dims;
  return x;
}

}  // namespace

START_TEST(test_creators) {
  int32_t n = 0;
  IPluginCreatorInterface *const *list = getCreators(n);
  ck_assert_int_eq(n, 3);
  const char *names[] = {"TilePack", "TileUnpackFusion", "TileSSMScan"};
  const int fields[] = {1, 1, 3};
  for (int i = 0; i < n; i++) {
    ck_assert_str_eq(list[i]->getInterfaceInfo().kind, "PLUGIN CREATOR_V3ONE");
    auto *c = static_cast<IPluginCreatorV3One *>(list[i]);
    ck_assert_str_eq(c->getPluginName(), names[i]);
    ck_assert_str_eq(c->getPluginVersion(), "1");
    ck_assert_str_eq(c->getPluginNamespace(), "apexx");
    ck_assert_int_eq(c->getFieldNames()->nbFields, fields[i]);
  }
  ck_assert_str_eq(creator("TileSSMScan")->getFieldNames()->fields[1].name, "clamp_value");
  ck_assert(creator("TileSSMScan")->getFieldNames()->fields[1].type == PluginFieldType::kFLOAT32);
}
END_TEST

START_TEST(test_tilepack_build_rules) {
  int32_t t = 4;
  IPluginV3 *p = make("TilePack", {PluginField("tile_size", &t, PluginFieldType::kINT32, 1)});
  ck_assert_ptr_nonnull(p);
  ck_assert_str_eq(p->getInterfaceInfo().kind, "PLUGIN");
  ck_assert_str_eq(core(p)->getPluginName(), "TilePack");
  ck_assert_str_eq(core(p)->getPluginNamespace(), "apexx");
  IPluginV3OneBuild *b = build(p);
  ck_assert_int_eq(b->getNbOutputs(), 1);
  DataType in_types[2] = {DataType::kBF16, DataType::kINT32}, out_type = DataType::kFLOAT;
  ck_assert_int_eq(b->getOutputDataTypes(&out_type, 1, in_types, 2), 0);
  ck_assert(out_type == DataType::kBF16);
  in_types[1] = DataType::kINT64;
  ck_assert_int_eq(b->getOutputDataTypes(&out_type, 1, in_types, 2), -1);
  DynamicPluginTensorDesc io[3] = {dyn({2, 3, 8, 12}, DataType::kHALF), dyn({2, 5}, DataType::kINT32),
                                   dyn({2, 5, 3, 4, 4}, DataType::kHALF)};
  for (int pos = 0; pos < 3; pos++) ck_assert(b->supportsFormatCombination(pos, io, 2, 1));
  io[2].desc.type = DataType::kFLOAT;
  ck_assert(!b->supportsFormatCombination(2, io, 2, 1));
  io[2].desc.type = DataType::kHALF;
  io[1].desc.format = TensorFormat::kHWC8;
  ck_assert(!b->supportsFormatCombination(1, io, 2, 1));
  io[1].desc.format = TensorFormat::kLINEAR;
  ck_assert_int_eq(b->configurePlugin(io, 2, io + 2, 1), 0);
  io[0] = dyn({2, 3, 8, 10}, DataType::kHALF); /* W not a multiple of 4 */
  ck_assert_int_eq(b->configurePlugin(io, 2, io + 2, 1), -1);
  ck_assert_uint_eq(b->getWorkspaceSize(io, 2, io + 2, 1), 0);
  delete p;
  /* bad attributes: no plugin, a message to the logger */
  size_t before = finder.logger.lines.size();
  int32_t zero = 0;
  ck_assert_ptr_null(make("TilePack", {PluginField("tile_size", &zero, PluginFieldType::kINT32, 1)}));
  ck_assert_uint_eq(finder.logger.lines.size(), before + 1);
  ck_assert_msg(finder.logger.lines.back().find("tile_size [0] is not positive") != std::string::npos,
                "%s", finder.logger.lines.back().c_str());
  ck_assert_ptr_null(make("TilePack", {PluginField("tile", &zero, PluginFieldType::kINT32, 1)}));
}
END_TEST

START_TEST(test_serialise_round_trip) {
  int32_t dir = 1;
  float clamp = -7.5f;
  IPluginV3 *p = make("TileSSMScan", {PluginField("direction", &dir, PluginFieldType::kINT32, 1),
                                      PluginField("clamp_value", &clamp, PluginFieldType::kFLOAT32, 1)});
  ck_assert_ptr_nonnull(p);
  /* the network's input count becomes part of the state */
  DynamicPluginTensorDesc io[8] = {dyn({2, 9, 4}, DataType::kFLOAT), dyn({4}, DataType::kFLOAT),
                                   dyn({4}, DataType::kFLOAT),       dyn({4}, DataType::kFLOAT),
                                   dyn({4}, DataType::kFLOAT),       dyn({2, 4}, DataType::kFLOAT),
                                   dyn({2, 9, 4}, DataType::kFLOAT), dyn({2, 4}, DataType::kFLOAT)};
  ck_assert_int_eq(build(p)->configurePlugin(io, 6, io + 6, 2), 0);
  const PluginFieldCollection *fc = runtime(p)->getFieldsToSerialize();
  ck_assert_int_eq(fc->nbFields, 1);
  ck_assert_str_eq(fc->fields[0].name, "apexx_state");
  ck_assert(fc->fields[0].type == PluginFieldType::kINT8);
  std::vector<unsigned char> blob((const unsigned char *)fc->fields[0].data,
                                  (const unsigned char *)fc->fields[0].data + fc->fields[0].length);
  ck_assert_int_eq(memcmp(blob.data(), "APXT", 4), 0);
  IPluginV3 *q = creator("TileSSMScan")->createPlugin("node", fc, TensorRTPhase::kRUNTIME);
  ck_assert_ptr_nonnull(q);
  const PluginFieldCollection *fq = runtime(q)->getFieldsToSerialize();
  ck_assert_int_eq(fq->fields[0].length, (int32_t)blob.size());
  ck_assert_int_eq(memcmp(fq->fields[0].data, blob.data(), blob.size()), 0);
  /* the state fixed six inputs: five are refused */
  PluginTensorDesc in[6], out[2];
  for (int i = 0; i < 6; i++) in[i] = io[i].desc;
  out[0] = io[6].desc;
  out[1] = io[7].desc;
  ck_assert_int_eq(runtime(q)->onShapeChange(in, 6, out, 2), 0);
  ck_assert_int_eq(runtime(q)->onShapeChange(in, 5, out, 2), -1);
  /* a truncated state: no plugin */
  PluginField cut("apexx_state", blob.data(), PluginFieldType::kINT8, (int32_t)blob.size() - 1);
  PluginFieldCollection cfc;
  cfc.nbFields = 1;
  cfc.fields = &cut;
  ck_assert_ptr_null(creator("TileSSMScan")->createPlugin("node", &cfc, TensorRTPhase::kRUNTIME));
  /* another plugin's state */
  ck_assert_ptr_null(creator("TilePack")->createPlugin("node", fc, TensorRTPhase::kRUNTIME));
  IPluginV3 *c = q->clone();
  ck_assert_ptr_nonnull(c);
  ck_assert_str_eq(core(c)->getPluginName(), "TileSSMScan");
  delete c;
  delete q;
  delete p;
}
END_TEST

START_TEST(test_errors_reach_the_recorder) {
  IPluginV3 *p = make("TileUnpackFusion", {});
  ck_assert_ptr_nonnull(p);
  DynamicPluginTensorDesc io[6] = {dyn({1, 2, 8, 8}, DataType::kHALF),    dyn({1, 3, 2, 4, 4}, DataType::kHALF),
                                   dyn({1, 3}, DataType::kINT32),         dyn({1, 3}, DataType::kINT32),
                                   dyn({1, 1, 8, 8}, DataType::kHALF),    dyn({1, 2, 8, 8}, DataType::kHALF)};
  ck_assert_int_eq(build(p)->configurePlugin(io, 5, io + 5, 1), 0);
  /* with alpha: the merged map's workspace, B*C*H*W halves */
  ck_assert_uint_eq(build(p)->getWorkspaceSize(io, 5, io + 5, 1), 1u * 2 * 8 * 8 * 2);
  ck_assert_uint_eq(build(p)->getWorkspaceSize(io, 4, io + 5, 1), 0);
  Recorder rec;
  Context ctx(&rec);
  IPluginV3 *attached = runtime(p)->attachToContext(&ctx);
  ck_assert_ptr_nonnull(attached);
  PluginTensorDesc in[5], out[1];
  for (int i = 0; i < 5; i++) in[i] = io[i].desc;
  out[0] = io[5].desc;
  in[1] = desc({1, 3, 2, 4, 2}, DataType::kHALF); /* tiles not square */
  ck_assert_int_eq(runtime(attached)->onShapeChange(in, 5, out, 1), -1);
  ck_assert_uint_eq(rec.messages.size(), 1);
  ck_assert_msg(rec.messages[0].find("square tiles") != std::string::npos, "%s",
                rec.messages[0].c_str());
  ck_assert(rec.codes[0] == ErrorCode::kINVALID_ARGUMENT);
  /* enqueue rejects it before any device work */
  const void *inputs[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
  void *outputs[1] = {nullptr};
  ck_assert_int_eq(runtime(attached)->enqueue(in, out, inputs, outputs, nullptr, nullptr), -1);
  ck_assert_uint_eq(rec.messages.size(), 2);
  ck_assert_msg(rec.messages[1].find("square tiles") != std::string::npos, "%s",
                rec.messages[1].c_str());
  /* an output that does not follow the rules */
  in[1] = io[1].desc;
  out[0] = desc({1, 2, 8, 4}, DataType::kHALF);
  ck_assert_int_eq(runtime(attached)->enqueue(in, out, inputs, outputs, nullptr, nullptr), -1);
  ck_assert_msg(rec.messages.back().find("output 0") != std::string::npos, "%s",
                rec.messages.back().c_str());
  /* a wrong dtype at run time */
  out[0] = io[5].desc;
  in[4].type = DataType::kFLOAT;
  ck_assert_int_eq(runtime(attached)->enqueue(in, out, inputs, outputs, nullptr, nullptr), -1);
  ck_assert_msg(rec.messages.back().find("input 4 has dtype") != std::string::npos, "%s",
                rec.messages.back().c_str());
  delete attached;
  delete p;
}
END_TEST

int main(void) {
  setLoggerFinder(&finder);
  Suite *s = suite_create("trt_plugins");
  TCase *tc = tcase_create("trt_plugins");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_creators);
  tcase_add_test(tc, test_tilepack_build_rules);
  tcase_add_test(tc, test_serialise_round_trip);
  tcase_add_test(tc, test_errors_reach_the_recorder);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
