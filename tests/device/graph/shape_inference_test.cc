// Shape inference's per-node bounds (device/graph/shape_inference.h, common/tensor/shape.h):
// a few bytes of ONNX that reshape to a hostile rank, or declare one, are
// refused with INVALID_ARGUMENT naming the node and the bound before any work
// proportional to the bad value is done (issue 29: a 2.4 MB model reshaping
// to rank 300,000 took 20-25 s to compile), and the largest legal rank still
// infers at once.
#include "device/graph/shape_inference.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "common/tensor/shape_bounds.h"
#include "device/graph/onnx_import.h"
#include "tests/device/graph/onnx_builder.h"

namespace ipupod::graph {
namespace {

using ::testing::HasSubstr;
using testing::kFloat;
using testing::OnnxBuilder;

// x[1] -> Reshape to `rank` ones -> ReduceSum over every axis -> y.
std::string ReshapeThenReduce(int64_t rank) {
  OnnxBuilder b(13);
  b.Input("x", kFloat, {1}).Output("y", kFloat);
  b.Ints("shape", {rank}, std::vector<int64_t>(static_cast<size_t>(rank), 1));
  b.Node("Reshape", {"x", "shape"}, {"r"}, "hostile_reshape");
  OnnxBuilder::AttrInt(b.Node("ReduceSum", {"r"}, {"y"}, "sum"), "keepdims", 0);
  return b.Bytes();
}

TEST(ShapeInferenceTest, AHostileRankIsRefusedAtOnceNamingTheNodeAndTheBound) {
  const std::string model = ReshapeThenReduce(300'000);
  const absl::Time start = absl::Now();
  absl::StatusOr<Graph> g = ImportOnnx(model);
  const absl::Duration took = absl::Now() - start;
  ASSERT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  EXPECT_THAT(g.status().message(), HasSubstr("hostile_reshape"));
  EXPECT_THAT(g.status().message(), HasSubstr("more than 64 dims"));
  EXPECT_THAT(g.status().message(), HasSubstr("reshape to fewer dims"));
  EXPECT_THAT(g.status().message(), HasSubstr("(rank 300000)"));
  EXPECT_LT(g.status().message().size(), 1000u) << "the shape is not printed whole";
  // Before the bound this one node's inference took seconds (quadratic in the rank).
  EXPECT_LT(took, absl::Seconds(1)) << took;
}

TEST(ShapeInferenceTest, TheLargestLegalRankInfersAtOnce) {
  const absl::Time start = absl::Now();
  absl::StatusOr<Graph> g = ImportOnnx(ReshapeThenReduce(tensor::kRankMax));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(g->value_types.at("y").shape, tensor::Shape{});
  EXPECT_EQ(ImportOnnx(ReshapeThenReduce(tensor::kRankMax + 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShapeInferenceTest, AGraphInputOverTheRankBoundIsRefused) {
  OnnxBuilder b(13);
  b.Input("x", kFloat, std::vector<int64_t>(100, 1)).Output("y", kFloat);
  b.Node("Relu", {"x"}, {"y"});
  absl::StatusOr<Graph> g = ImportOnnx(b.Bytes());
  ASSERT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  EXPECT_THAT(g.status().message(), HasSubstr("graph input 'x'"));
  EXPECT_THAT(g.status().message(), HasSubstr("more than 64 dims"));
}

TEST(ShapeInferenceTest, AHugeDimBesideAZeroDimIsRefused) {
  // Zero elements, so no element count bounds it; loops over its dims would.
  OnnxBuilder b(13);
  b.Input("x", kFloat, {1}).Output("y", kFloat);
  b.Ints("shape", {2}, {0, int64_t{1} << 50});
  auto& cos = b.Node("ConstantOfShape", {"shape"}, {"z"}, "zeros");
  OnnxBuilder::AttrFloatTensor(cos, "value", {1}, {1.0f});
  OnnxBuilder::AttrInt(b.Node("ReduceSum", {"z"}, {"s"}), "keepdims", 0);
  b.Node("Add", {"x", "s"}, {"y"});
  absl::StatusOr<Graph> g = ImportOnnx(b.Bytes());
  ASSERT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  EXPECT_THAT(g.status().message(), HasSubstr("zeros"));
  EXPECT_THAT(g.status().message(), HasSubstr("dimension over 2^40"));
}

// One image's convolution is one uninterruptible oneDNN call: more than
// kConvImageMultiplyAddsMax of it is refused when the model is read.
TEST(ShapeInferenceTest, AConvolutionTooLargeForOneImageIsRefused) {
  OnnxBuilder b(13);
  b.Input("x", kFloat, {1, 64, 1024, 1024})
      .Input("w", kFloat, {4096, 64, 7, 7})
      .Output("y", kFloat);
  b.Node("Conv", {"x", "w"}, {"y"}, "huge_conv");
  absl::StatusOr<Graph> g = ImportOnnx(b.Bytes());
  ASSERT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  EXPECT_THAT(g.status().message(), HasSubstr("huge_conv"));
  EXPECT_THAT(g.status().message(), HasSubstr("multiply-adds per image"));
}

}  // namespace
}  // namespace ipupod::graph
