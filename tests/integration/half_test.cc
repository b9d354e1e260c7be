// float16 end to end: tests/parity/make_half_cases.py exports torch models in
// float32, converts their graphs to float16 as a user would, and computes a
// float32 reference rounded to float16 at every node (with half partials where
// the case's IPUConfig enables them). Each case is compiled with `ipupod
// compile` and run with `ipupod run` on a real ipupodd; the outputs must come
// back float16 and equal the reference: every element within one float16 unit
// in the last place (float32 sums in another order may round the other way at
// a tie's edge) and nearly all bit for bit. With half partials the running sum
// is rounded after every block, and the float32 order inside a block is the
// kernel's, chosen by the CPU's instruction set (oneDNN, OpenBLAS): a 1-ulp
// difference at one block's rounding, followed by cancellation in the next
// blocks, is 2 ulps of a smaller result. So those cases allow 2 ulps and 80 %
// bit for bit (an AVX2-only AMD EPYC gave 17 of 20 elements of
// cnn_half_partials bit for bit, worst 2 ulps, where AVX-512 machines gave all
// 20; every other case was bit for bit on both). The float32 model's outputs differ:
// the rounding is real. A second test shows the memory plan's 2 bytes per
// value: a model too large for an IPU in float32 fits in float16. A third
// trains a float16 model whose loss gradient underflows float16: without loss
// scaling its weights go astray, with it they follow float32 torch.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/tensor/float16.h"
#include "common/tensor/tensor_files.h"
#include "tests/device/graph/onnx_builder.h"
#include "tests/integration/harness.h"
#include "tests/support/python_cases.h"

namespace ipupod::testing {
namespace {

using std::chrono::seconds;
using tensor::DType;
using tensor::Float16;
using tensor::ToFloat32;

// One float16 ulp at |v| (the spacing of float16 values around v).
double Float16Ulp(double v) {
  const double a = std::max(std::abs(v), 6.103515625e-05);  // the smallest normal
  return std::ldexp(1.0, std::ilogb(a) - 10);
}

struct Agreement {
  int64_t exact = 0;
  double worst_ulps = 0;
};

Agreement Compare(const tensor::Tensor& got, const tensor::Tensor& want) {
  Agreement a;
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    const double g = ToFloat32(got.values<Float16>()[i]);
    const double w = ToFloat32(want.values<Float16>()[i]);
    if (g == w) ++a.exact;
    const double ulps = std::abs(g - w) / Float16Ulp(w);
    if (!(ulps <= a.worst_ulps)) a.worst_ulps = ulps;  // NaN too
  }
  return a;
}

TEST(HalfTest, Float16ModelsRunAsTheRoundedReferenceSays) {
  const test_support::PythonCases python("make_half_cases.py");
  if (!python.skip_reason().empty()) GTEST_SKIP() << python.skip_reason();
  ASSERT_TRUE(python.error().empty()) << python.error();
  ServerUnderTest server({"--pod", "POD4"});
  std::istringstream manifest(test_support::ReadTextFile(python.dir() + "/manifest.txt"));
  int cases = 0;
  for (std::string name; manifest >> name;) {
    int64_t samples = 0, steps = 0;
    manifest >> samples >> steps;
    SCOPED_TRACE(name);
    const std::string c = python.dir() + "/" + name + "/";
    CliResult compiled =
        RunLongCli(server.address(), "alice",
                   {"--json", "compile", c + "model.onnx", "--ipu-config", c + "ipu_config.json"},
                   seconds(300));
    ASSERT_EQ(compiled.exit_code, 0) << compiled.out << compiled.err;
    CliResult run = RunLongCli(
        server.address(), "alice",
        {"run", c + "model.ipx", "--inputs", c + "inputs.npz", "--outputs", c + "out.npz"},
        seconds(300));
    ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
    auto got = tensor::ReadTensorFile(c + "out.npz");
    auto want = tensor::ReadTensorFile(c + "expected.npz");
    auto wide = tensor::ReadTensorFile(c + "float32.npz");
    ASSERT_TRUE(got.ok() && want.ok() && wide.ok()) << got.status() << want.status();
    const tensor::Tensor& y = (*got)[0].second;
    ASSERT_EQ(y.dtype(), DType::kFloat16);
    ASSERT_EQ(y.shape(), (*want)[0].second.shape());
    const Agreement a = Compare(y, (*want)[0].second);
    std::printf("%s: %lld of %lld elements bit for bit, worst %.2f float16 ulps\n", name.c_str(),
                static_cast<long long>(a.exact), static_cast<long long>(y.num_elements()),
                a.worst_ulps);
    const bool partials = name.find("_partials") != std::string::npos;
    EXPECT_LE(a.worst_ulps, partials ? 2.0 : 1.0);
    EXPECT_GE(a.exact, y.num_elements() * (partials ? 80 : 95) / 100);
    // The float32 model does not give float16's answer.
    int64_t same_as_float32 = 0;
    for (int64_t i = 0; i < y.num_elements(); ++i) {
      same_as_float32 += ToFloat32(y.values<Float16>()[i]) == (*wide)[0].second.values<float>()[i];
    }
    EXPECT_LT(same_as_float32, y.num_elements() / 2);
    ++cases;
  }
  EXPECT_EQ(cases, 4);  // every case of make_half_cases.py ran
}

// ||trained - reference|| / ||reference - initial|| over every weight: how far
// training went astray, relative to how far it should have gone.
double WeightError(const std::string& dir, const std::string& trained_file) {
  auto trained = tensor::ReadTensorFile(trained_file);
  auto initial = tensor::ReadTensorFile(dir + "initial.npz");
  auto reference = tensor::ReadTensorFile(dir + "reference.npz");
  EXPECT_TRUE(trained.ok() && initial.ok() && reference.ok()) << trained.status();
  if (!trained.ok() || !initial.ok() || !reference.ok()) return 1e9;
  double off = 0, moved = 0;
  for (size_t k = 0; k < reference->size(); ++k) {
    const auto& [name, want] = (*reference)[k];
    const tensor::Tensor* got = nullptr;
    for (const auto& [n, t] : *trained) got = n == name ? &t : got;
    EXPECT_NE(got, nullptr) << name;
    if (got == nullptr) return 1e9;
    EXPECT_EQ(got->dtype(), DType::kFloat16) << name;
    for (int64_t i = 0; i < want.num_elements(); ++i) {
      const double w = want.values<float>()[i];
      const double g = ToFloat32(got->values<Float16>()[i]);
      const double start = ToFloat32((*initial)[k].second.values<Float16>()[i]);
      off += (g - w) * (g - w);
      moved += (w - start) * (w - start);
    }
  }
  return std::sqrt(off / moved);
}

struct Trained {
  double error = 0;            // WeightError
  std::vector<double> scales;  // every update's loss scale, from the JSON lines
};

// Compiles the training case with `opt` (and `set`), trains it through the server.
Trained Train(const std::string& server, const std::string& c, const std::string& name,
              const std::string& opt, const std::string& set) {
  SCOPED_TRACE(name);
  Trained out;
  const std::string ipx = c + name + ".ipx";
  std::vector<std::string> compile = {"compile", c + "model.onnx", "--train", "--opt", opt, "-o",
                                      ipx};
  if (!set.empty()) compile.insert(compile.end(), {"--set", set});
  CliResult compiled = RunLongCli(server, "alice", compile, seconds(300));
  EXPECT_EQ(compiled.exit_code, 0) << compiled.out << compiled.err;
  const std::string steps = test_support::ReadTextFile(c + "manifest.txt");
  const std::string trained = c + name + ".npz";
  CliResult run =
      RunLongCli(server, "alice",
                 {"--json", "run", ipx, "--train", "--inputs", c + "data.npz", "--steps",
                  steps.substr(0, steps.find('\n')), "--save-weights", trained},
                 seconds(300));
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  std::istringstream lines(run.out);
  for (std::string line; std::getline(lines, line);) {
    const auto doc = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (doc.is_object() && doc.contains("loss_scales")) {
      for (double s : doc["loss_scales"]) out.scales.push_back(s);
    }
  }
  out.error = WeightError(c, trained);
  return out;
}

TEST(HalfTest, LossScalingKeepsUnderflowingGradientsTraining) {
  const test_support::PythonCases python("make_half_cases.py");
  if (!python.skip_reason().empty()) GTEST_SKIP() << python.skip_reason();
  ASSERT_TRUE(python.error().empty()) << python.error();
  ServerUnderTest server({"--pod", "POD4"});
  const std::string c = python.dir() + "/train/";
  const Trained plain = Train(server.address(), c, "plain", "lr=1000", "");
  const Trained scaled = Train(server.address(), c, "scaled", "lr=1000,loss_scaling=32768", "");
  const Trained automatic = Train(server.address(), c, "auto", "lr=1000", "auto_loss_scaling=true");
  std::printf(
      "weights off the float32 reference by %.3f of their travel without loss scaling, "
      "%.3f with loss_scaling 32768, %.3f with auto_loss_scaling from 1\n",
      plain.error, scaled.error, automatic.error);
  EXPECT_LT(scaled.error, 0.05);  // float16 rounding of weights and values only
  EXPECT_GT(plain.error, 0.5);    // the gradient underflowed
  // Automatic: the scale doubles from 1 while no gradient nears overflow, so
  // the first updates underflow and the later ones train.
  ASSERT_EQ(automatic.scales.size(), 30u);
  EXPECT_EQ(automatic.scales[0], 1.0);
  EXPECT_EQ(automatic.scales[1], 2.0);
  EXPECT_EQ(automatic.scales.back(), 32768.0);  // its ceiling, 2^15
  EXPECT_LT(automatic.error, plain.error * 0.8);
  EXPECT_EQ(scaled.scales, std::vector<double>(30, 32768.0));
}

// x [rows, cols] -> Relu -> y, of `dtype`: its activations alone decide the fit.
std::string WideModel(int dtype, int64_t rows, int64_t cols) {
  graph::testing::OnnxBuilder b(17);
  b.Input("x", dtype, {rows, cols});
  b.Output("y", dtype, {rows, cols});
  b.Node("Relu", {"x"}, {"y"}, "/Relu");
  return b.Bytes();
}

TEST(HalfTest, AHalfModelFitsWhereItsFloat32TwinDoesNot) {
  TempDir dir;
  const int64_t rows = 12'000, cols = 12'000;  // 576 MB a value in float32, 288 MB in float16
  struct Case {
    int dtype;
    const char* file;
  };
  for (const Case& c :
       {Case{graph::testing::kFloat, "f32.onnx"}, Case{graph::testing::kFloat16, "f16.onnx"}}) {
    std::ofstream(dir.path() + "/" + c.file, std::ios::binary) << WideModel(c.dtype, rows, cols);
  }
  CliResult f32 = RunCli("127.0.0.1:1", "alice", {"compile", dir.path() + "/f32.onnx"});
  EXPECT_EQ(f32.exit_code, 12) << f32.out << f32.err;  // does not fit: the plan's table
  EXPECT_NE(f32.err.find("out of memory on IPU 0"), std::string::npos) << f32.err;
  CliResult f16 = RunCli("127.0.0.1:1", "alice", {"--json", "compile", dir.path() + "/f16.onnx"});
  ASSERT_EQ(f16.exit_code, 0) << f16.out << f16.err;
}

}  // namespace
}  // namespace ipupod::testing
