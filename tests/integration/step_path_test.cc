// End to end: which RPC `ipupod run` steps take against a real ipupodd.
// Several steps share one Run stream, whatever their size, so the next
// step's inputs go out while one computes. A single small step is one
// RunInline round trip; a single step whose outputs are over 1 MiB runs
// through the Run stream after one refused try. Every path writes the
// outputs the interpreter computes; the server's RPC metrics say which
// method ran.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/tensor/tensor_files.h"
#include "device/graph/interpreter.h"
#include "device/graph/onnx_import.h"
#include "tests/integration/harness.h"
#include "tests/support/exposition.h"
#include "tests/support/http_client.h"
#include "tests/support/models.h"

namespace ipupod::testing {
namespace {

class StepPathTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }
  // Compiles the model, writes `steps` steps of inputs and runs them; returns the outputs.
  tensor::Tensor RunModel(int64_t rows, int64_t cols, int64_t steps) {
    const std::string onnx = test_support::LinearModel(rows, cols, -0.5f);
    std::ofstream(Path("m.onnx"), std::ios::binary) << onnx;
    CliResult compiled =
        RunCli(server_.address(), "alice", {"compile", Path("m.onnx"), "-o", Path("m.ipx")});
    EXPECT_EQ(compiled.exit_code, 0) << compiled.err;
    std::vector<float> x(static_cast<size_t>(steps * rows * 8));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(int(i % 9) - 4);
    x_ = *tensor::Tensor::FromValues<float>({steps * rows, 8}, x);
    std::ofstream(Path("x.npz"), std::ios::binary) << tensor::SerializeNpz({{"x", x_}});
    CliResult run =
        RunCli(server_.address(), "alice",
               {"run", Path("m.ipx"), "--inputs", Path("x.npz"), "--outputs", Path("y.npz")});
    EXPECT_EQ(run.exit_code, 0) << run.err;
    auto out = tensor::ReadTensorFile(Path("y.npz"));
    EXPECT_TRUE(out.ok()) << out.status();
    ExpectInterpreterOutputs(onnx, rows, out.ok() ? (*out)[0].second : tensor::Tensor());
    return out.ok() ? (*out)[0].second : tensor::Tensor();
  }
  void ExpectInterpreterOutputs(const std::string& onnx, int64_t rows, const tensor::Tensor& y) {
    auto interp = graph::Interpreter::Create(*graph::ImportOnnx(onnx));
    ASSERT_TRUE(interp.ok()) << interp.status();
    const int64_t cols = y.shape()[1];
    for (int64_t step = 0; step * rows < x_.shape()[0]; ++step) {
      std::vector<float> rows_x(x_.values<float>().begin() + step * rows * 8,
                                x_.values<float>().begin() + (step + 1) * rows * 8);
      auto want = (*interp)->Run({*tensor::Tensor::FromValues<float>({rows, 8}, rows_x)});
      ASSERT_TRUE(want.ok()) << want.status();
      for (int64_t i = 0; i < rows * cols; ++i) {
        const float expected = (*want)[0].values<float>()[i];
        ASSERT_NEAR(y.values<float>()[step * rows * cols + i], expected,
                    1e-6 + 1e-5 * std::abs(expected))
            << "step " << step << " element " << i;
      }
    }
  }
  double Calls(const std::string& method, const std::string& code = "OK") {
    const std::string text = test_support::HttpGet(server_.metrics_url() + "/metrics").body;
    return test_support::SampleValue(
               text, absl::StrCat(R"(ipupod_rpcs_total{code=")", code, R"(",method=")", method,
                                  R"(",service="ipupod.v1.ExecutionService"})"))
        .value_or(0);
  }

  TempDir dir_;
  ServerUnderTest server_;
  tensor::Tensor x_;
};

TEST_F(StepPathTest, ATinyModelsStepsShareOneRunStream) {
  RunModel(1, 10, 5);  // a 10-wide Linear at batch 1: 32 bytes in, 40 out per step
  EXPECT_EQ(Calls("Run"), 1);
  EXPECT_EQ(Calls("RunInline"), 0);
}

TEST_F(StepPathTest, ATinyModelsSingleStepIsOneRunInlineCall) {
  RunModel(1, 10, 1);
  EXPECT_EQ(Calls("RunInline"), 1);
  EXPECT_EQ(Calls("Run"), 0);
}

TEST_F(StepPathTest, AStepWithOutputsOverTheBoundTakesTheRunStream) {
  RunModel(64, 4200, 1);  // 1,075,200 bytes of outputs per step
  EXPECT_EQ(Calls("RunInline", "OUT_OF_RANGE"), 1) << "one try";
  EXPECT_EQ(Calls("Run"), 1);
}

TEST_F(StepPathTest, LargeStepsShareOneRunStreamWithoutAnInlineTry) {
  RunModel(64, 4200, 3);
  EXPECT_EQ(Calls("RunInline", "OUT_OF_RANGE"), 0);
  EXPECT_EQ(Calls("Run"), 1);
}

}  // namespace
}  // namespace ipupod::testing
