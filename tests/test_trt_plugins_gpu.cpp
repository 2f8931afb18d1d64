/* SPDX-License-Identifier: Apache-2.0 */
// The plugins' enqueue on a GPU, without TensorRT's runtime (built where
// configure found TensorRT's headers; exit 77 without a CUDA device): the
// TilePack plugin against a plain loop, its default validation (device: a
// bad id found by the kernels is reported by the next enqueue, through the
// error recorder, and the one after runs again), and enqueue inside a
// captured CUDA graph (no synchronisation in it), whose bad id the next
// enqueue reports too.
#include <NvInferRuntime.h>
#include <check.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "trt_test_util.h"

using namespace nvinfer1;
using trt_test::Context;
using trt_test::desc;
using trt_test::Recorder;

extern "C" IPluginCreatorInterface *const *getCreators(int32_t &nb_creators);

namespace {

const int B = 1, C = 2, H = 8, W = 8, T = 4, K = 3;

// A TilePack plugin of tile 4, configured and attached to a context with
// the recorder, over features [1,2,8,8] f32, idx [1,3] i32, out [1,3,2,4,4].
struct Pack {
  Recorder rec;
  Context ctx{&rec};
  IPluginV3 *plugin = nullptr, *attached = nullptr;
  IPluginV3OneRuntime *rt = nullptr;
  PluginTensorDesc in[2], out[1];
  float *feat = nullptr, *dst = nullptr;
  int *idx = nullptr;
  std::vector<float> host_feat;

  Pack() {
    int32_t n = 0, t = T;
    IPluginCreatorInterface *const *list = getCreators(n);
    IPluginCreatorV3One *c = nullptr;
    for (int i = 0; i < n; i++)
      if (strcmp(static_cast<IPluginCreatorV3One *>(list[i])->getPluginName(), "TilePack") == 0)
        c = static_cast<IPluginCreatorV3One *>(list[i]);
    ck_assert_ptr_nonnull(c);
    PluginField f("tile_size", &t, PluginFieldType::kINT32, 1);
    PluginFieldCollection fc;
    fc.nbFields = 1;
    fc.fields = &f;
    plugin = c->createPlugin("pack", &fc, TensorRTPhase::kBUILD);
    ck_assert_ptr_nonnull(plugin);
    in[0] = desc({B, C, H, W}, DataType::kFLOAT);
    in[1] = desc({B, K}, DataType::kINT32);
    out[0] = desc({B, K, C, T, T}, DataType::kFLOAT);
    DynamicPluginTensorDesc io[3];
    for (int i = 0; i < 3; i++) {
      io[i].desc = i < 2 ? in[i] : out[0];
      io[i].min = io[i].max = io[i].opt = io[i].desc.dims;
    }
    auto *build = static_cast<IPluginV3OneBuild *>(
        plugin->getCapabilityInterface(PluginCapabilityType::kBUILD));
    ck_assert_int_eq(build->configurePlugin(io, 2, io + 2, 1), 0);
    rt = static_cast<IPluginV3OneRuntime *>(
        plugin->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
    attached = rt->attachToContext(&ctx);
    ck_assert_ptr_nonnull(attached);
    rt = static_cast<IPluginV3OneRuntime *>(
        attached->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
    ck_assert_int_eq(rt->onShapeChange(in, 2, out, 1), 0);
    host_feat.resize((size_t)B * C * H * W);
    for (size_t i = 0; i < host_feat.size(); i++) host_feat[i] = (float)(i % 97) - 40.0f;
    ck_assert_int_eq(cudaMalloc((void **)&feat, sizeof(float) * host_feat.size()), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&dst, sizeof(float) * B * K * C * T * T), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&idx, sizeof(int) * B * K), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(feat, host_feat.data(), sizeof(float) * host_feat.size(),
                                cudaMemcpyHostToDevice),
                     cudaSuccess);
  }
  ~Pack() {
    cudaFree(feat);
    cudaFree(dst);
    cudaFree(idx);
    delete attached;
    delete plugin;
  }
  void set_ids(const int (&ids)[K]) {
    ck_assert_int_eq(cudaMemcpy(idx, ids, sizeof ids, cudaMemcpyHostToDevice), cudaSuccess);
  }
  int enqueue(cudaStream_t s) {
    const void *inputs[2] = {feat, idx};
    void *outputs[1] = {dst};
    return rt->enqueue(in, out, inputs, outputs, nullptr, s);
  }
  // the output against the definition: out[b][k][c][y][x] =
  // features[b][c][ty*T + y][tx*T + x], tile id = ty*(W/T) + tx
  void expect(const int (&ids)[K]) {
    std::vector<float> got((size_t)B * K * C * T * T);
    ck_assert_int_eq(cudaMemcpy(got.data(), dst, sizeof(float) * got.size(), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    for (int k = 0; k < K; k++)
      for (int c = 0; c < C; c++)
        for (int y = 0; y < T; y++)
          for (int x = 0; x < T; x++) {
            const int ty = ids[k] / (W / T), tx = ids[k] % (W / T);
            const float want = host_feat[(size_t)(c * H + ty * T + y) * W + tx * T + x];
            const float v = got[(size_t)((k * C + c) * T + y) * T + x];
            ck_assert_msg(v == want, "out[0][%d][%d][%d][%d] = %g, want %g", k, c, y, x, v, want);
          }
  }
};

const int good[K] = {3, 0, 2}, bad[K] = {3, 9, 2};

}  // namespace

START_TEST(test_enqueue_matches_the_definition) {
  Pack p;
  p.set_ids(good);
  ck_assert_int_eq(p.enqueue(nullptr), 0);
  ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
  p.expect(good);
  ck_assert_uint_eq(p.rec.messages.size(), 0);
}
END_TEST

START_TEST(test_bad_id_reported_by_the_next_enqueue) {
  Pack p;
  p.set_ids(bad);
  ck_assert_int_eq(p.enqueue(nullptr), 0); /* validate = device: no wait here */
  ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
  p.set_ids(good);
  ck_assert_int_eq(p.enqueue(nullptr), -1);
  ck_assert_uint_eq(p.rec.messages.size(), 1);
  const std::string &m = p.rec.messages[0];
  ck_assert_msg(m.find("an earlier enqueue") != std::string::npos && m.find("[9]") != std::string::npos &&
                    m.find("idx") != std::string::npos,
                "%s", m.c_str());
  /* reported once: the next enqueue runs */
  ck_assert_int_eq(p.enqueue(nullptr), 0);
  ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
  p.expect(good);
  ck_assert_uint_eq(p.rec.messages.size(), 1);
}
END_TEST

START_TEST(test_enqueue_in_a_captured_graph) {
  Pack p;
  cudaStream_t s;
  ck_assert_int_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  for (int round = 0; round < 2; round++) {
    p.set_ids(round ? bad : good);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    const int rc = p.enqueue(s);
    ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
    ck_assert_int_eq(cudaGraphLaunch(ge, s), cudaSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(s), cudaSuccess);
    if (round == 0) p.expect(good);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  }
  ck_assert_uint_eq(p.rec.messages.size(), 0);
  /* the replayed graph's bad id: the next (plain) enqueue says so */
  p.set_ids(good);
  ck_assert_int_eq(p.enqueue(s), -1);
  ck_assert_uint_eq(p.rec.messages.size(), 1);
  ck_assert_msg(p.rec.messages[0].find("[9]") != std::string::npos, "%s", p.rec.messages[0].c_str());
  ck_assert_int_eq(p.enqueue(s), 0);
  ck_assert_int_eq(cudaStreamSynchronize(s), cudaSuccess);
  p.expect(good);
  cudaStreamDestroy(s);
}
END_TEST

int main(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("SKIP: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    return 77;
  }
  const char *mode = getenv("APEXX_TRT_VALIDATE");
  if (mode && *mode && strcmp(mode, "device") != 0) {
    printf("SKIP: APEXX_TRT_VALIDATE = [%s]: these cases are validate = device's\n", mode);
    return 77;
  }
  Suite *s = suite_create("trt_plugins_gpu");
  TCase *tc = tcase_create("trt_plugins_gpu");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_enqueue_matches_the_definition);
  tcase_add_test(tc, test_bad_id_reported_by_the_next_enqueue);
  tcase_add_test(tc, test_enqueue_in_a_captured_graph);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
