#include "device/compiler/onnx_state.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/compiler/compile.h"
#include "device/graph/onnx_import.h"
#include "tests/device/compiler/test_models.h"

namespace ipupod::compiler {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::kFloat;
using testing::OnnxBuilder;

// What torch.onnx writes in eval mode for two LayerNorm-like scales equal at
// export: one initializer, the second read through an Identity of its name.
std::string MergedScales() {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {2}).Output("y", kFloat);
  b.Floats("ln1.weight", {2}, {1, 1});
  b.Node("Identity", {"ln1.weight"}, {"ln2.weight"}, "Identity_0");
  b.Node("Mul", {"x", "ln1.weight"}, {"h"}, "/ln1/Mul");
  b.Node("Mul", {"h", "ln2.weight"}, {"y"}, "/ln2/Mul");
  return b.Bytes();
}

TEST(OnnxStateTest, ParametersMergedByValueGetInitializersOfTheirOwn) {
  auto out = KeepModuleStateWritable(MergedScales());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(out->split, ElementsAre("ln2.weight"));
  EXPECT_THAT(out->warnings, IsEmpty());
  auto g = graph::ImportOnnx(out->onnx_bytes, graph::FoldOptions{.keep_weights = true});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_NE(g->FindInitializer("ln2.weight"), nullptr);
  EXPECT_NE(g->FindInitializer("ln1.weight"), g->FindInitializer("ln2.weight"));
}

TEST(OnnxStateTest, ACompiledModelTakesEachMergedParameterAsAWeight) {
  auto e = Compile(MergedScales(), IpuConfig{}, CompileOptions{});
  ASSERT_TRUE(e.ok()) << e.status();
  auto g = graph::ImportOnnx(e->model_bytes, graph::FoldOptions{.keep_weights = true});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_NE(g->FindInitializer("ln2.weight"), nullptr);
}

TEST(OnnxStateTest, InitializersTheExporterFoldedAreNamedInAWarning) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {1, 2}).Output("y", kFloat);
  b.Floats("onnx::MatMul_45", {2, 2}, {1, 0, 0, 1});
  b.Node("MatMul", {"x", "onnx::MatMul_45"}, {"y"}, "/fc/MatMul");
  auto e = Compile(b.Bytes(), IpuConfig{}, CompileOptions{});
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_FALSE(e->warnings.empty());
  EXPECT_THAT(e->warnings.front(), HasSubstr("onnx::MatMul_45 (read by /fc/MatMul)"));
  EXPECT_THAT(e->warnings.front(), HasSubstr("do_constant_folding=False"));
}

// What torch.onnx writes for GPT-2's tied head and its attention's scalar
// buffer: the token embedding's table read by the embedding (Gather) and by
// lm_head (Transpose, MatMul) - lm_head.weight is not exported - and a
// rank-0 masked_bias read through a Cast; plus a constant torch named
// onnx::Mul_7.
std::string TiedTorchExport(const std::string& producer = "pytorch") {
  OnnxBuilder b(14);
  b.model().set_producer_name(producer);
  b.Input("ids", testing::kInt64, {2}).Output("logits", kFloat);
  b.Floats("wte.weight", {3, 2}, {1, 2, 3, 4, 5, 6});
  b.Floats("attn.masked_bias", {}, {-1e4f}).Floats("onnx::Mul_7", {}, {0.5f});
  b.Node("Gather", {"wte.weight", "ids"}, {"x"}, "/wte/Gather");
  OnnxBuilder::AttrInt(b.Node("Cast", {"attn.masked_bias"}, {"m"}, "/attn/Cast"), "to", kFloat);
  b.Node("Add", {"x", "m"}, {"xm"}, "/attn/Add");
  b.Node("Mul", {"xm", "onnx::Mul_7"}, {"h"}, "/attn/Mul");
  OnnxBuilder::AttrInts(b.Node("Transpose", {"wte.weight"}, {"wt"}, "/lm_head/Transpose"), "perm",
                        {1, 0});
  b.Node("MatMul", {"h", "wt"}, {"logits"}, "/lm_head/MatMul");
  return b.Bytes();
}

TEST(OnnxStateTest, ATorchExportNamesItsTiedWeightsAndKeepsItsScalarState) {
  auto out = KeepModuleStateWritable(TiedTorchExport());
  ASSERT_TRUE(out.ok()) << out.status();
  auto g = graph::ImportOnnx(out->onnx_bytes, graph::FoldOptions{.keep_weights = true});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_FALSE(g->module_state.declared);  // training still trains every weight of rank >= 1
  EXPECT_THAT(g->module_state.aliases, ElementsAre(std::pair<const std::string, std::string>(
                                           "lm_head.weight", "wte.weight")));
  EXPECT_THAT(g->module_state.buffers, ElementsAre("attn.masked_bias"));
  // The scalar buffer stays a weight the graph reads (its Cast is not folded);
  // torch's onnx:: constant is no state.
  bool read = false;
  for (const graph::Node& n : g->nodes) {
    for (const std::string& in : n.inputs) read = read || in == "attn.masked_bias";
  }
  EXPECT_TRUE(read);
}

TEST(OnnxStateTest, OnlyTorchExportsWithoutADeclaredStateAreInferred) {
  auto other = KeepModuleStateWritable(TiedTorchExport("tf2onnx"));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->onnx_bytes, TiedTorchExport("tf2onnx"));
  onnx::ModelProto declared;
  ASSERT_TRUE(declared.ParseFromString(TiedTorchExport()));
  auto* entry = declared.add_metadata_props();
  entry->set_key(graph::kParametersMetadataKey);
  entry->set_value("wte.weight");
  const std::string bytes = declared.SerializeAsString();
  auto out = KeepModuleStateWritable(bytes);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->onnx_bytes, bytes);
}

TEST(OnnxStateTest, ALinearWithItsOwnWeightIsNoAlias) {
  OnnxBuilder b(14);
  b.model().set_producer_name("pytorch");
  b.Input("x", kFloat, {1, 2}).Output("y", kFloat);
  b.Floats("fc.weight", {2, 2}, {1, 0, 0, 1}).Floats("other.weight", {2, 2}, {1, 0, 0, 1});
  auto& gemm = b.Node("Gemm", {"x", "fc.weight"}, {"h"}, "/fc/Gemm");
  OnnxBuilder::AttrInt(gemm, "transB", 1);
  auto& tied = b.Node("Gemm", {"h", "other.weight"}, {"y"}, "/head/Gemm");
  OnnxBuilder::AttrInt(tied, "transB", 1);
  auto out = KeepModuleStateWritable(b.Bytes());
  ASSERT_TRUE(out.ok()) << out.status();
  auto g = graph::ImportOnnx(out->onnx_bytes);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(g->module_state.aliases, ElementsAre(std::pair<const std::string, std::string>(
                                           "head.weight", "other.weight")));
}

TEST(OnnxStateTest, BytesThatDoNotParseAreLeftForTheImportToReport) {
  auto out = KeepModuleStateWritable("not onnx");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->onnx_bytes, "not onnx");
}

}  // namespace
}  // namespace ipupod::compiler
