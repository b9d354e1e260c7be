// End to end against PyTorch: tests/parity/make_run_cases.py exports torch
// models with ipu_config.json files, several steps of inputs and torch's
// outputs; each case is compiled with `ipupod compile` and run with `ipupod
// run` on a real ipupodd (POD16), and out.npz must match expected.npz at
// the case's tolerance, rtol 1e-5 / atol 1e-6 unless its manifest line says
// otherwise (the worst element is printed). Cases: an MLP, a GELU classifier
// and a small transformer, each on 1 IPU and pipelined over 4 IPUs x 2
// replicas with 4 device iterations (the MLP placed by a module map, the
// others by layers_per_ipu); torchvision's ResNet-18, MobileNetV2, MobileNetV3 and Swin-T on
// 224x224 images at rtol 1e-4 / atol 1e-5; and a batch beside a mask of one
// row per micro-batch (inputs whose dim 0 differ, each cut into steps by its
// own rows). Skips when /usr/bin/python3 has no torch.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "common/tensor/tensor_files.h"
#include "tests/integration/harness.h"
#include "tests/support/python_cases.h"
#include <sys/wait.h>

namespace ipupod::testing {
namespace {

using std::chrono::seconds;

CliResult LongCli(const std::string& server, const std::vector<std::string>& args) {
  return RunLongCli(server, "alice", args, seconds(300));
}

// Compares one output; reports the worst element relative to the tolerance.
void ExpectClose(const std::string& what, const tensor::Tensor& got, const tensor::Tensor& want,
                 double rtol, double atol) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), tensor::DType::kFloat32) << what;
  double worst_ratio = 0;
  int64_t worst = 0;
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    const double g = got.values<float>()[i];
    const double w = want.values<float>()[i];
    const double ratio = std::abs(g - w) / (atol + rtol * std::abs(w));
    if (!(ratio <= worst_ratio)) {  // also catches NaN
      worst_ratio = ratio;
      worst = i;
    }
  }
  EXPECT_LE(worst_ratio, 1.0) << what << ": worst element " << worst << " is "
                              << got.values<float>()[worst] << ", torch says "
                              << want.values<float>()[worst] << " (" << worst_ratio
                              << "x the tolerance)";
  std::printf("%s: %lld elements, worst %lld at %.3gx the tolerance\n", what.c_str(),
              static_cast<long long>(got.num_elements()), static_cast<long long>(worst),
              worst_ratio);
}

TEST(RunParityTest, CompiledAndRunModelsMatchTorch) {
  const test_support::PythonCases python("make_run_cases.py");
  if (!python.skip_reason().empty()) GTEST_SKIP() << python.skip_reason();
  ASSERT_TRUE(python.error().empty()) << python.error();
  ServerUnderTest server({"--pod", "POD16"});
  std::istringstream manifest(ReadTextFile(python.dir() + "/manifest.txt"));
  int cases = 0;
  for (std::string name; manifest >> name;) {
    int64_t step = 0, steps = 0;
    double rtol = 0, atol = 0;
    manifest >> step >> steps >> rtol >> atol;
    SCOPED_TRACE(name);
    const std::string c = python.dir() + "/" + name + "/";
    std::vector<std::string> compile = {"--json", "compile", c + "model.onnx", "--ipu-config",
                                        c + "ipu_config.json"};
    if (std::filesystem::exists(c + "module_map.json")) {
      compile.insert(compile.end(), {"--module-map", c + "module_map.json"});
    }
    CliResult compiled = LongCli(server.address(), compile);
    ASSERT_EQ(compiled.exit_code, 0) << compiled.out << compiled.err;
    EXPECT_EQ(compiled.json()["samples_per_step"], step) << compiled.out;
    CliResult run = LongCli(server.address(), {"run", c + "model.ipx", "--inputs", c + "inputs.npz",
                                               "--outputs", c + "out.npz"});
    ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
    std::printf("%s", run.out.c_str());
    auto got = tensor::ReadTensorFile(c + "out.npz");
    auto want = tensor::ReadTensorFile(c + "expected.npz");
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_EQ(got->size(), want->size());
    for (size_t i = 0; i < want->size(); ++i) {
      EXPECT_EQ((*got)[i].first, (*want)[i].first);
      ExpectClose(name + " " + (*want)[i].first, (*got)[i].second, (*want)[i].second, rtol, atol);
    }
    EXPECT_EQ((*got)[0].second.shape()[0] % step, 0);
    ++cases;
  }
  EXPECT_EQ(cases, 11);  // every case of make_run_cases.py ran
}

}  // namespace
}  // namespace ipupod::testing
