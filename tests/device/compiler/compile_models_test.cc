// Compiles the models tests/parity/make_models.py exports with
// torch.onnx.export (an MLP, a GELU classifier, a GPT-style decoder and an
// nn.MultiheadAttention encoder) and checks placement on real torch module
// paths, PopART annotations added to a real export, and the executable
// round trip. Skipped when /usr/bin/python3 has no torch.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "device/compiler/compile.h"
#include "device/graph/onnx_import.h"
#include "onnx/onnx_pb.h"
#include "tests/support/python_cases.h"
#include <sys/wait.h>

namespace ipupod::compiler {
namespace {

using test_support::ReadTextFile;

using ::testing::HasSubstr;

class CompileModelsTest : public ::testing::Test {
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
  static std::string Model(const std::string& name) {
    return ReadTextFile(dir_ + "/" + name + ".onnx");
  }

  static inline std::unique_ptr<test_support::PythonCases> cases_;
  static inline std::string dir_;
  static inline std::string skip_reason_;
  static inline std::string setup_error_;
};

IpuConfig Config(const std::string& update) {
  IpuConfig c;
  EXPECT_TRUE(UpdateFromString(c, update).ok()) << update;
  return c;
}

// IPU of every node whose module path starts with `prefix`; -1 if they differ.
int64_t IpuOf(const Executable& exe, const graph::Graph& g, const std::string& prefix) {
  int64_t ipu = -2;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!absl::StartsWith(g.nodes[i].module_path, prefix)) continue;
    const int64_t mine = exe.placement.NodeIpu(i);
    if (ipu == -2) ipu = mine;
    if (ipu != mine) return -1;
  }
  return ipu;
}

graph::Graph Imported(const Executable& exe) {
  auto g = graph::ImportOnnx(exe.model_bytes, graph::FoldOptions{.keep_weights = true});
  EXPECT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(CheckPlacementMatchesGraph(exe.placement, *g).ok());
  return *std::move(g);
}

TEST_F(CompileModelsTest, TinyGptLayersPerIpu) {
  Report report;
  auto exe = Compile(Model("tiny_gpt"),
                     Config("layers_per_ipu=[1 1],inference_device_iterations=2"), {}, &report);
  ASSERT_TRUE(exe.ok()) << exe.status();
  const graph::Graph g = Imported(*exe);
  EXPECT_EQ(IpuOf(*exe, g, "wte"), 0);
  EXPECT_EQ(IpuOf(*exe, g, "h.0"), 0);
  EXPECT_EQ(IpuOf(*exe, g, "h.1"), 1);
  EXPECT_EQ(IpuOf(*exe, g, "ln_f"), 1);
  EXPECT_EQ(IpuOf(*exe, g, "lm_head"), 1);
  EXPECT_EQ(exe->micro_batch_size, 2);
  EXPECT_GT(report.ipus[1].flops, 0);
  EXPECT_GT(report.ipus[0].ipu_link_bytes, 0);
  auto back = ReadExecutable(*WriteExecutable(*exe));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *exe);
}

TEST_F(CompileModelsTest, TinyGptWithPopartAnnotations) {
  onnx::ModelProto model;
  const std::string original = Model("tiny_gpt");
  ASSERT_TRUE(model.ParseFromString(original));
  for (auto& node : *model.mutable_graph()->mutable_node()) {
    const bool late = absl::StartsWith(node.name(), "/h.1/") || node.name() == "/h.1" ||
                      absl::StartsWith(node.name(), "/ln_f") ||
                      absl::StartsWith(node.name(), "/lm_head");
    auto* a = node.add_attribute();
    a->set_name("__ipu_number");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(late ? 1 : 0);
  }
  auto annotated = Compile(model.SerializeAsString(), Config("inference_device_iterations=2"), {});
  ASSERT_TRUE(annotated.ok()) << annotated.status();
  auto layered =
      Compile(original, Config("layers_per_ipu=[1 1],inference_device_iterations=2"), {});
  ASSERT_TRUE(layered.ok()) << layered.status();
  EXPECT_EQ(annotated->placement.method, PlacementMethod::kOnnxAttributes);
  EXPECT_EQ(annotated->placement.node_stage, layered->placement.node_stage);
}

TEST_F(CompileModelsTest, MhaEncoderZippedLayersSplitAcrossIpus) {
  auto exe = Compile(Model("mha_encoder"),
                     Config("layers_per_ipu=[1 1],inference_device_iterations=2"), {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  const graph::Graph g = Imported(*exe);
  EXPECT_EQ(IpuOf(*exe, g, "embed"), 0);
  EXPECT_EQ(IpuOf(*exe, g, "attn.1"), 1);
  EXPECT_EQ(IpuOf(*exe, g, "ff.1"), 1);
  EXPECT_EQ(IpuOf(*exe, g, "norm2.1"), 1);
  EXPECT_EQ(IpuOf(*exe, g, "head"), 1);
}

TEST_F(CompileModelsTest, MlpRunsOnOneIpuAndCannotBeSplitByLayers) {
  auto exe = Compile(Model("mlp"), IpuConfig(), {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ(exe->placement.ipus_per_replica, 1);
  auto split =
      Compile(Model("mlp"), Config("ipus_per_replica=2,inference_device_iterations=2"), {});
  EXPECT_THAT(split.status().message(), HasSubstr("found no repeated layers"));
  CompileOptions map;
  map.module_map = ModuleMap{{"fc3", 1}};
  auto mapped = Compile(Model("mlp"), Config("inference_device_iterations=2"), map);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ(mapped->placement.ipus_per_replica, 2);
}

TEST_F(CompileModelsTest, GeluClassifierSequentialCountsEveryModule) {
  // layers = Sequential(Linear, GELU, Linear, GELU, Dropout, Linear): 6 layers.
  auto exe = Compile(Model("gelu_classifier"),
                     Config("layers_per_ipu=[3 3],inference_device_iterations=2"), {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  const graph::Graph g = Imported(*exe);
  EXPECT_EQ(IpuOf(*exe, g, "layers.2"), 0);
  EXPECT_EQ(IpuOf(*exe, g, "layers.5"), 1);
}

}  // namespace
}  // namespace ipupod::compiler
