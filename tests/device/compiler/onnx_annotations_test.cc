#include "device/compiler/onnx_annotations.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/graph/onnx_import.h"
#include "tests/device/compiler/test_models.h"

namespace ipupod::compiler {
namespace {

using testing::GptBuilder;
using testing::GptSpec;
using ::testing::HasSubstr;
using testing::OnnxBuilder;

TEST(OnnxAnnotationsTest, ModelWithoutAnnotationsIsReturnedUnchanged) {
  GptBuilder gpt;
  const std::string bytes = gpt.Bytes();
  auto out = ExtractPlacementAttributes(bytes);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->onnx_bytes, bytes);
  EXPECT_TRUE(out->annotations.empty());
}

TEST(OnnxAnnotationsTest, GraphImportRejectsThemSoTheyAreStripped) {
  GptBuilder gpt(GptSpec{.layers = 2});
  OnnxBuilder::AttrInt(gpt.NodeNamed("/h.1/attn/MatMul"), "__ipu_number", 1);
  OnnxBuilder::AttrInt(gpt.NodeNamed("/lm_head/MatMul"), "__ipu_number", 1);
  OnnxBuilder::AttrInt(gpt.NodeNamed("/lm_head/MatMul"), "__pipeline_stage", 2);
  OnnxBuilder::AttrInt(gpt.NodeNamed("/ln_f/Mul"), "__execution_phase", 3);
  const std::string bytes = gpt.Bytes();
  auto direct = graph::ImportOnnx(bytes);
  EXPECT_THAT(direct.status().message(), HasSubstr("'__ipu_number' is not supported"));

  auto out = ExtractPlacementAttributes(bytes);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->annotations.size(), 3u);
  EXPECT_EQ(out->annotations.at("/ln_f/Mul").phase, 3);
  EXPECT_FALSE(out->annotations.at("/ln_f/Mul").ipu.has_value());
  EXPECT_EQ(out->annotations.at("/h.1/attn/MatMul").ipu, 1);
  EXPECT_FALSE(out->annotations.at("/h.1/attn/MatMul").stage.has_value());
  EXPECT_EQ(out->annotations.at("/lm_head/MatMul").stage, 2);
  auto imported = graph::ImportOnnx(out->onnx_bytes);
  ASSERT_TRUE(imported.ok()) << imported.status();
}

TEST(OnnxAnnotationsTest, UnnamedNodesGetTheImportersNames) {
  OnnxBuilder b(14);
  b.Input("x", testing::kFloat, {2});
  b.Output("z", testing::kFloat, {2});
  b.Node("Relu", {"x"}, {"y"}).clear_name();
  auto& second = b.Node("Relu", {"y"}, {"z"});
  second.clear_name();
  OnnxBuilder::AttrInt(second, "__ipu_number", 1);
  auto out = ExtractPlacementAttributes(b.Bytes());
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->annotations.count("Relu_1"), 1u);
  auto g = graph::ImportOnnx(out->onnx_bytes);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->nodes[0].name, "Relu_0");
  EXPECT_EQ(g->nodes[1].name, "Relu_1");
}

TEST(OnnxAnnotationsTest, NonIntegerOrNegativeAnnotationsAreErrors) {
  GptBuilder gpt(GptSpec{.layers = 1});
  OnnxBuilder::AttrFloat(gpt.NodeNamed("/h.0/Add"), "__ipu_number", 1.0f);
  auto out = ExtractPlacementAttributes(gpt.Bytes());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(),
              HasSubstr("node '/h.0/Add': attribute '__ipu_number' must be a non-negative INT"));

  GptBuilder negative(GptSpec{.layers = 1});
  OnnxBuilder::AttrInt(negative.NodeNamed("/h.0/Add"), "__pipeline_stage", -1);
  EXPECT_EQ(ExtractPlacementAttributes(negative.Bytes()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(OnnxAnnotationsTest, GarbageIsLeftForTheImporter) {
  auto out = ExtractPlacementAttributes("not a model");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->onnx_bytes, "not a model");
}

}  // namespace
}  // namespace ipupod::compiler
