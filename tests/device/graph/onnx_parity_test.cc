// Parity with PyTorch: tests/parity/make_models.py exports seeded torch
// models (MLP, GELU classifier, GPT-style decoder at opsets 14 and 17, an
// nn.MultiheadAttention encoder, eval-mode BatchNorm1d/2d) with
// torch.onnx.export and saves torch's own outputs; each model is imported,
// run on the Interpreter and compared elementwise with rtol 1e-5, atol 1e-6.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/tensor/npy.h"
#include "device/graph/interpreter.h"
#include "device/graph/onnx_import.h"
#include "onnx/onnx_pb.h"
#include "tests/support/python_cases.h"
#include <sys/wait.h>

namespace ipupod::graph {
namespace {

using tensor::ReadNpyFile;
using test_support::ReadTextFile;

namespace fs = std::filesystem;

constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;

class OnnxParityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cases_ = std::make_unique<test_support::PythonCases>("make_models.py");
    dir_ = cases_->dir();
    skip_reason_ = cases_->skip_reason();
    setup_error_ = cases_->error();
  }

  static void TearDownTestSuite() { cases_.reset(); }

  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
  }

  static std::string Path(const std::string& file) { return dir_ + "/" + file; }

  // Imports NAME.onnx, runs it on NAME.in<i>.npy and compares with NAME.out<i>.npy.
  static void CheckModel(const std::string& name) {
    auto graph = ImportOnnxFile(Path(name + ".onnx"));
    ASSERT_TRUE(graph.ok()) << graph.status();
    auto interp = Interpreter::Create(*graph);
    ASSERT_TRUE(interp.ok()) << interp.status();
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < graph->inputs.size(); ++i) {
      auto t = ReadNpyFile(Path(absl::StrCat(name, ".in", i, ".npy")));
      ASSERT_TRUE(t.ok()) << t.status();
      inputs.push_back(*std::move(t));
    }
    RunStats stats;
    auto outputs = (*interp)->Run(inputs, &stats);
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    ASSERT_EQ(outputs->size(), graph->outputs.size());
    EXPECT_GT(stats.total_flops, 0);
    for (size_t i = 0; i < outputs->size(); ++i) {
      auto want = ReadNpyFile(Path(absl::StrCat(name, ".out", i, ".npy")));
      ASSERT_TRUE(want.ok()) << want.status();
      ExpectClose(absl::StrCat(name, " output ", i), (*outputs)[i], *want);
    }
  }

  static void ExpectClose(const std::string& what, const Tensor& got, const Tensor& want) {
    ASSERT_EQ(got.shape(), want.shape()) << what;
    ASSERT_EQ(got.dtype(), DType::kFloat32) << what;
    ASSERT_EQ(want.dtype(), DType::kFloat32) << what;
    const auto g = got.values<float>();
    const auto w = want.values<float>();
    double worst = 0;
    int bad = 0;
    for (size_t k = 0; k < g.size(); ++k) {
      const double err = std::fabs(double{g[k]} - double{w[k]});
      const double tol = kAtol + kRtol * std::fabs(double{w[k]});
      worst = std::max(worst, err / tol);
      if (!(err <= tol) && bad++ < 5) {
        ADD_FAILURE() << what << " element " << k << ": got " << g[k] << ", torch " << w[k];
      }
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.size() << " elements out of tolerance";
    std::printf("%s: worst error %.3f of tolerance\n", what.c_str(), worst);
  }

  static inline std::unique_ptr<test_support::PythonCases> cases_;
  static inline std::string dir_;
  static inline std::string skip_reason_;
  static inline std::string setup_error_;
};

TEST_F(OnnxParityTest, Mlp) { CheckModel("mlp"); }
TEST_F(OnnxParityTest, GeluClassifier) { CheckModel("gelu_classifier"); }
TEST_F(OnnxParityTest, TinyGptOpset14DecomposedLayerNorm) { CheckModel("tiny_gpt"); }
TEST_F(OnnxParityTest, TinyGptOpset17LayerNormalization) { CheckModel("tiny_gpt_opset17"); }
TEST_F(OnnxParityTest, MultiheadAttentionEncoder) { CheckModel("mha_encoder"); }
TEST_F(OnnxParityTest, BatchNormEvalMode) { CheckModel("batchnorm_eval"); }
TEST_F(OnnxParityTest, SmallCnnConvPoolClip) { CheckModel("small_cnn"); }
TEST_F(OnnxParityTest, ConvVarietyGroupsDilationsPadsPooling) { CheckModel("conv_variety"); }
TEST_F(OnnxParityTest, HardswishAndHardsigmoid) { CheckModel("hard_activations"); }
TEST_F(OnnxParityTest, FmodByScalarAndElementwise) { CheckModel("fmod"); }
TEST_F(OnnxParityTest, SerializedLookupMasksGreaterOrEqualLessAndOr) {
  CheckModel("serialized_lookup");
}

TEST_F(OnnxParityTest, ManifestListsEveryModel) {
  std::ifstream manifest(Path("manifest.txt"));
  std::string name;
  int opset = 0, n_in = 0, n_out = 0, count = 0;
  while (manifest >> name >> opset >> n_in >> n_out) {
    auto graph = ImportOnnxFile(Path(name + ".onnx"));
    ASSERT_TRUE(graph.ok()) << name << ": " << graph.status();
    EXPECT_EQ(graph->opset, opset) << name;
    EXPECT_EQ(static_cast<int>(graph->inputs.size()), n_in) << name;
    EXPECT_EQ(static_cast<int>(graph->outputs.size()), n_out) << name;
    ++count;
  }
  EXPECT_EQ(count, 11);
}

TEST_F(OnnxParityTest, ShapeChainsFoldAway) {
  auto graph = ImportOnnxFile(Path("tiny_gpt.onnx"));
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (const Node& node : graph->nodes) {
    for (const char* op : {"Shape", "Constant", "ConstantOfShape", "Equal", "Expand", "Identity",
                           "Unsqueeze", "Concat"}) {
      EXPECT_NE(node.op_type, op) << node.name << " should have been folded";
    }
  }
  // Every value has a static shape.
  for (const auto& [name, type] : graph->value_types) {
    for (int64_t d : type.shape) EXPECT_GE(d, 0) << name;
  }
}

TEST_F(OnnxParityTest, NodesKeepTorchModulePaths) {
  auto graph = ImportOnnxFile(Path("tiny_gpt.onnx"));
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::set<std::string> paths;
  for (const Node& node : graph->nodes) paths.insert(node.module_path);
  EXPECT_THAT(paths, ::testing::IsSupersetOf({"wte", "h.0.ln_1", "h.0.attn", "h.0.attn.qkv",
                                              "h.0.mlp.0", "h.1.mlp.2", "ln_f", "lm_head"}));
  auto mha = ImportOnnxFile(Path("mha_encoder.onnx"));
  ASSERT_TRUE(mha.ok()) << mha.status();
  paths.clear();
  for (const Node& node : mha->nodes) paths.insert(node.module_path);
  EXPECT_THAT(paths,
              ::testing::IsSupersetOf({"embed", "attn.0", "norm1.0", "ff.0.0", "ff.1.2", "head"}));
}

std::string ReadBytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

TEST_F(OnnxParityTest, TruncatedOrGarbledExportIsRejected) {
  const std::string bytes = ReadBytes(Path("gelu_classifier.onnx"));
  ASSERT_GT(bytes.size(), 1000u);
  for (size_t keep : {size_t{10}, bytes.size() / 3, bytes.size() / 2, bytes.size() - 7}) {
    auto graph = ImportOnnx(absl::string_view(bytes).substr(0, keep));
    EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument) << "kept " << keep;
  }
  std::string garbled = bytes;
  for (size_t i = 0; i < 64; ++i) garbled[i] = static_cast<char>(0xff - i);
  EXPECT_EQ(ImportOnnx(garbled).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(OnnxParityTest, ExportWithWrongOpsetOrUnsupportedOpIsRejected) {
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(ReadBytes(Path("tiny_gpt.onnx"))));
  onnx::ModelProto newer = model;
  newer.mutable_opset_import(0)->set_version(18);
  auto graph = ImportOnnx(newer.SerializeAsString());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(graph.status().message()), ::testing::HasSubstr("opset 18"));

  onnx::ModelProto conv = model;
  for (auto& node : *conv.mutable_graph()->mutable_node()) {
    if (node.op_type() == "Softmax") {
      node.set_op_type("Hardmax");
      break;
    }
  }
  graph = ImportOnnx(conv.SerializeAsString());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(graph.status().message()),
      ::testing::HasSubstr("Hardmax node '/h.0/attn/Softmax': op 'Hardmax' is not supported"));
}

}  // namespace
}  // namespace ipupod::graph
