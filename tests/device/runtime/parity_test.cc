// Parity with PyTorch through runtime::Program: make_models.py --step exports
// the GELU classifier (6 layers) and writes one host step of 8 micro-batches
// (numpy.savez) with torch's outputs of each micro-batch run on its own
// (numpy.savez_compressed). The model is compiled pipelined over 4 IPUs x
// replication 2 x device_iterations 4 and RunStep must match torch to
// rtol 1e-5. Reading the files also checks numpy-written .npz archives.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/tensor/tensor_files.h"
#include "device/compiler/compile.h"
#include "device/runtime/program.h"
#include "tests/support/python_cases.h"
#include <sys/wait.h>

namespace ipupod::runtime {
namespace {

using test_support::ReadTextFile;

constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;

void ExpectClose(const std::string& what, const tensor::Tensor& got, const tensor::Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.values<float>();
  const auto w = want.values<float>();
  int bad = 0;
  for (size_t k = 0; k < g.size(); ++k) {
    const double tol = kAtol + kRtol * std::fabs(double{w[k]});
    if (!(std::fabs(double{g[k]} - double{w[k]}) <= tol) && bad++ < 5) {
      ADD_FAILURE() << what << " element " << k << ": got " << g[k] << ", torch " << w[k];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.size() << " elements out of tolerance";
}

TEST(RuntimeParityTest, PipelinedReplicatedStepMatchesTorch) {
  const test_support::PythonCases cases("make_models.py", {"--step", "gelu_classifier", "8"});
  if (!cases.skip_reason().empty()) GTEST_SKIP() << cases.skip_reason();
  ASSERT_TRUE(cases.error().empty()) << cases.error();
  const std::string& dir = cases.dir();

  compiler::IpuConfig config;
  ASSERT_TRUE(compiler::UpdateFromString(config,
                                         "layers_per_ipu=[2 1 2 1],inference_replication_factor=2,"
                                         "inference_device_iterations=4")
                  .ok());
  auto compiled = compiler::Compile(ReadTextFile(dir + "/gelu_classifier.onnx"), config, {});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(compiled->placement.ipus_per_replica, 4);
  auto program = Program::Create(std::make_shared<const compiler::Executable>(*compiled));
  ASSERT_TRUE(program.ok()) << program.status();

  auto inputs = tensor::ReadTensorFile(dir + "/gelu_classifier.step_in.npz");  // numpy.savez
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  auto want = tensor::ReadTensorFile(dir + "/gelu_classifier.step_out.npz");  // savez_compressed
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(want->size(), 2u);
  auto step = (*program)->RunStep(*inputs);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(step->outputs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(step->outputs[i].first, (*want)[i].first);
    ExpectClose(step->outputs[i].first, step->outputs[i].second, (*want)[i].second);
  }
  EXPECT_EQ(step->samples, 48);
  EXPECT_GT(step->simulated.pipeline_ramp_s, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ipupod::runtime
