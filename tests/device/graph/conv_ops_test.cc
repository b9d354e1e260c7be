// The convolutional ops (device/graph/ops_conv.cc) and Pad through ONNX import and
// the Interpreter, for what torch.onnx never writes and the parity tests
// therefore cannot reach: auto_pad, explicit values small enough to check by
// hand, FLOPs, and the errors a model can hit, each naming op and node.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/graph/interpreter.h"
#include "device/graph/onnx_import.h"
#include "tests/device/graph/onnx_builder.h"

namespace ipupod::graph {
namespace {

using ::testing::HasSubstr;
using testing::kFloat;
using testing::OnnxBuilder;

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  return v;
}

struct Ran {
  std::vector<float> y;
  Shape shape;
  int64_t flops = 0;
};

absl::StatusOr<Ran> RunModel(const OnnxBuilder& b, const Shape& x_shape) {
  auto graph = ImportOnnx(b.Bytes());
  if (!graph.ok()) return graph.status();
  auto interp = Interpreter::Create(*graph);
  if (!interp.ok()) return interp.status();
  int64_t n = 1;
  for (int64_t d : x_shape) n *= d;
  auto out = (*interp)->Run({*Tensor::FromValues<float>(x_shape, Iota(n))});
  if (!out.ok()) return out.status();
  const Tensor& y = (*out)[0];
  return Ran{
      {y.values<float>().begin(), y.values<float>().end()}, y.shape(), (*interp)->total_flops()};
}

// x [1, 1, 3, 3] (0..8) -> Conv with a [1, 1, 2, 2] kernel of ones.
OnnxBuilder ConvModel(const std::string& auto_pad, const std::vector<int64_t>& pads) {
  OnnxBuilder b(13);
  b.Input("x", kFloat, {1, 1, 3, 3}).Output("y", kFloat);
  b.Floats("w", {1, 1, 2, 2}, {1, 1, 1, 1});
  auto& n = b.Node("Conv", {"x", "w"}, {"y"}, "/conv/Conv");
  if (!auto_pad.empty()) OnnxBuilder::AttrString(n, "auto_pad", auto_pad);
  if (!pads.empty()) OnnxBuilder::AttrInts(n, "pads", pads);
  return b;
}

TEST(ConvOpsTest, AutoPadSameUpperAndLowerPadTheEndOrTheBeginning) {
  // SAME_UPPER: the extra row and column at the end, as pads [0, 0, 1, 1].
  auto upper = RunModel(ConvModel("SAME_UPPER", {}), {1, 1, 3, 3});
  auto explicit_end = RunModel(ConvModel("", {0, 0, 1, 1}), {1, 1, 3, 3});
  ASSERT_TRUE(upper.ok() && explicit_end.ok()) << upper.status() << explicit_end.status();
  EXPECT_EQ(upper->shape, Shape({1, 1, 3, 3}));
  EXPECT_EQ(upper->y, explicit_end->y);
  EXPECT_EQ(upper->y, std::vector<float>({8, 12, 7, 20, 24, 13, 13, 15, 8}));
  // SAME_LOWER: at the beginning.
  auto lower = RunModel(ConvModel("SAME_LOWER", {}), {1, 1, 3, 3});
  ASSERT_TRUE(lower.ok()) << lower.status();
  EXPECT_EQ(lower->y, std::vector<float>({0, 1, 3, 3, 8, 12, 9, 20, 24}));
  // VALID: no padding, 2x2 out; FLOPs are 2 per multiply-add.
  auto valid = RunModel(ConvModel("VALID", {}), {1, 1, 3, 3});
  ASSERT_TRUE(valid.ok()) << valid.status();
  EXPECT_EQ(valid->y, std::vector<float>({8, 12, 20, 24}));
  EXPECT_EQ(valid->flops, 2 * 4 * 4);
}

TEST(ConvOpsTest, PoolingByHand) {
  OnnxBuilder b(13);
  b.Input("x", kFloat, {1, 1, 4, 4}).Output("m", kFloat).Output("a", kFloat).Output("g", kFloat);
  auto& max = b.Node("MaxPool", {"x"}, {"m"}, "/pool/MaxPool");
  OnnxBuilder::AttrInts(max, "kernel_shape", {3, 3});
  OnnxBuilder::AttrInts(max, "strides", {2, 2});
  OnnxBuilder::AttrInt(max, "ceil_mode", 1);
  auto& avg = b.Node("AveragePool", {"x"}, {"a"}, "/pool/AveragePool");
  OnnxBuilder::AttrInts(avg, "kernel_shape", {2, 2});
  OnnxBuilder::AttrInts(avg, "pads", {1, 1, 1, 1});
  OnnxBuilder::AttrInt(avg, "count_include_pad", 1);
  b.Node("GlobalAveragePool", {"x"}, {"g"}, "/pool/GlobalAveragePool");
  auto graph = ImportOnnx(b.Bytes());
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto interp = Interpreter::Create(*graph);
  ASSERT_TRUE(interp.ok()) << interp.status();
  auto out = (*interp)->Run({*Tensor::FromValues<float>({1, 1, 4, 4}, Iota(16))});
  ASSERT_TRUE(out.ok()) << out.status();
  // ceil_mode: windows at 0 and 2, the second clipped to the input.
  EXPECT_EQ((*out)[0].shape(), Shape({1, 1, 2, 2}));
  EXPECT_THAT((*out)[0].values<float>(), ::testing::ElementsAre(10, 11, 14, 15));
  // Padding counted: the corner window holds x[0] = 0 and three zeros.
  EXPECT_EQ((*out)[1].shape(), Shape({1, 1, 5, 5}));
  EXPECT_FLOAT_EQ((*out)[1].values<float>()[1], (0 + 1) / 4.0f);
  EXPECT_FLOAT_EQ((*out)[2].values<float>()[0], 7.5f);
}

TEST(ConvOpsTest, PadWritesTheConstantAround) {
  OnnxBuilder b(13);
  b.Input("x", kFloat, {1, 2}).Output("y", kFloat);
  b.Ints("pads", {4}, {0, 1, 1, 2});
  b.Floats("value", {}, {-1});
  b.Node("Pad", {"x", "pads", "value"}, {"y"}, "/Pad");
  auto r = RunModel(b, {1, 2});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->shape, Shape({2, 5}));
  EXPECT_EQ(r->y, std::vector<float>({-1, 0, 1, -1, -1, -1, -1, -1, -1, -1}));
}

void ExpectInvalid(const OnnxBuilder& b, const std::string& needle) {
  auto graph = ImportOnnx(b.Bytes());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument) << graph.status();
  EXPECT_THAT(std::string(graph.status().message()), HasSubstr(needle));
}

TEST(ConvOpsTest, ErrorsNameTheNodeAndWhatToChange) {
  OnnxBuilder groups(13);
  groups.Input("x", kFloat, {1, 4, 5, 5}).Output("y", kFloat);
  groups.Floats("w", {6, 4, 3, 3}, std::vector<float>(6 * 4 * 9, 1));
  OnnxBuilder::AttrInt(groups.Node("Conv", {"x", "w"}, {"y"}, "/c/Conv"), "group", 2);
  ExpectInvalid(groups, "Conv node '/c/Conv': weight W [6,4,3,3] does not fit input X");

  OnnxBuilder no_kernel(13);
  no_kernel.Input("x", kFloat, {1, 1, 4, 4}).Output("y", kFloat);
  no_kernel.Node("MaxPool", {"x"}, {"y"}, "/p/MaxPool");
  ExpectInvalid(no_kernel, "attribute 'kernel_shape' is required");

  OnnxBuilder reflect(13);
  reflect.Input("x", kFloat, {1, 2}).Output("y", kFloat);
  reflect.Ints("pads", {4}, {0, 1, 0, 1});
  OnnxBuilder::AttrString(reflect.Node("Pad", {"x", "pads"}, {"y"}, "/Pad"), "mode", "reflect");
  ExpectInvalid(reflect, "mode 'reflect' is not supported");

  OnnxBuilder small(13);
  small.Input("x", kFloat, {1, 1, 2, 2}).Output("y", kFloat);
  small.Floats("w", {1, 1, 3, 3}, std::vector<float>(9, 1));
  small.Node("Conv", {"x", "w"}, {"y"}, "/c/Conv");
  ExpectInvalid(small, "smaller than the kernel window 3");

  OnnxBuilder both(13);
  both.Input("x", kFloat, {1, 1, 4, 4}).Output("y", kFloat);
  both.Floats("w", {1, 1, 3, 3}, std::vector<float>(9, 1));
  auto& n = both.Node("Conv", {"x", "w"}, {"y"}, "/c/Conv");
  OnnxBuilder::AttrString(n, "auto_pad", "SAME_UPPER");
  OnnxBuilder::AttrInts(n, "pads", {1, 1, 1, 1});
  ExpectInvalid(both, "'pads' and 'auto_pad' cannot both be given");
}

}  // namespace
}  // namespace ipupod::graph
