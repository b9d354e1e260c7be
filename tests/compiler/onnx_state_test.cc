#include "compiler/onnx_state.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "compiler/compile.h"
#include "graph/onnx_import.h"
#include "tests/compiler/test_models.h"

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

TEST(OnnxStateTest, BytesThatDoNotParseAreLeftForTheImportToReport) {
  auto out = KeepModuleStateWritable("not onnx");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->onnx_bytes, "not onnx");
}

}  // namespace
}  // namespace ipupod::compiler
