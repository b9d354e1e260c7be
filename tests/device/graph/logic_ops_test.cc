// The comparison and logical ops optimum-graphcore's SerializedEmbedding
// exports (GreaterOrEqual, Less, And, then Cast and Mul by the mask) and
// their siblings LessOrEqual and Or (device/graph/ops_elementwise.cc), against hand
// values through ImportOnnx and the Interpreter. Numerics against torch:
// the serialized_embedding model of onnx_parity_test.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/graph/interpreter.h"
#include "device/graph/onnx_import.h"
#include "tests/device/graph/onnx_builder.h"

namespace ipupod::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::kBool;
using testing::kFloat;
using testing::kInt64;
using testing::OnnxBuilder;

absl::StatusOr<std::vector<Tensor>> RunModel(const OnnxBuilder& b, std::vector<Tensor> inputs) {
  auto graph = ImportOnnx(b.Bytes());
  if (!graph.ok()) return graph.status();
  auto interpreter = Interpreter::Create(*std::move(graph));
  if (!interpreter.ok()) return interpreter.status();
  return (*interpreter)->Run(inputs);
}

std::vector<int> Bools(const Tensor& t) {
  std::vector<int> out;
  for (bool v : t.values<bool>()) out.push_back(v ? 1 : 0);
  return out;
}

Tensor Ints(const Shape& shape, std::vector<int64_t> v) {
  return *Tensor::FromValues<int64_t>(shape, v);
}

Tensor BoolTensor(const Shape& shape, const std::vector<bool>& v) {
  Tensor t = *Tensor::Create(DType::kBool, shape);
  for (size_t i = 0; i < v.size(); ++i) t.mutable_data<bool>()[i] = v[i];
  return t;
}

// y_ge = x >= bound, y_le = x <= bound; bound is a scalar initializer.
OnnxBuilder CompareModel(int elem_type, int64_t opset = 14) {
  OnnxBuilder b(opset);
  b.Input("x", elem_type, {2, 3}).Output("y_ge", kBool).Output("y_le", kBool);
  if (elem_type == kInt64) {
    b.Ints("bound", {}, {2});
  } else {
    b.Floats("bound", {}, {2.0f});
  }
  b.Node("GreaterOrEqual", {"x", "bound"}, {"y_ge"});
  b.Node("LessOrEqual", {"x", "bound"}, {"y_le"});
  return b;
}

TEST(LogicOpsTest, GreaterOrEqualAndLessOrEqualOnIntegersIncludeTheBound) {
  auto y = RunModel(CompareModel(kInt64), {Ints({2, 3}, {0, 1, 2, 3, 4, -5})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Bools((*y)[0]), ElementsAre(0, 0, 1, 1, 1, 0));
  EXPECT_THAT(Bools((*y)[1]), ElementsAre(1, 1, 1, 0, 0, 1));
}

TEST(LogicOpsTest, GreaterOrEqualAndLessOrEqualOnFloats) {
  auto x =
      *Tensor::FromValues<float>({2, 3}, std::vector<float>{1.5f, 2.0f, 2.5f, -0.0f, 2.0f, 1e30f});
  auto y = RunModel(CompareModel(kFloat), {x});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Bools((*y)[0]), ElementsAre(0, 1, 1, 0, 1, 1));
  EXPECT_THAT(Bools((*y)[1]), ElementsAre(1, 1, 0, 1, 1, 0));
}

TEST(LogicOpsTest, AndAndOrBroadcast) {
  OnnxBuilder b(14);
  b.Input("a", kBool, {2, 2}).Input("c", kBool, {2, 1});
  b.Output("both", kBool).Output("either", kBool);
  b.Node("And", {"a", "c"}, {"both"});
  b.Node("Or", {"a", "c"}, {"either"});
  auto y = RunModel(
      b, {BoolTensor({2, 2}, {true, false, true, false}), BoolTensor({2, 1}, {true, false})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ((*y)[0].shape(), (Shape{2, 2}));
  EXPECT_THAT(Bools((*y)[0]), ElementsAre(1, 0, 0, 0));
  EXPECT_THAT(Bools((*y)[1]), ElementsAre(1, 1, 1, 0));
}

// One slice of a serialized lookup as torch exports it: the ids of rows
// [2, 4) of a 4-row table select those rows, every other id gives zeros.
TEST(LogicOpsTest, MaskedSliceLookupAsSerializedEmbeddingExportsIt) {
  OnnxBuilder b(14);
  b.Input("ids", kInt64, {5}).Output("y", kFloat);
  b.Floats("table", {2, 2}, {10, 11, 20, 21});  // rows 2 and 3 of the whole table
  b.Ints("start", {}, {2}).Ints("zero", {}, {0}).Ints("size", {}, {2}).Ints("last", {1}, {-1});
  b.Node("Sub", {"ids", "start"}, {"local"});
  b.Node("GreaterOrEqual", {"local", "zero"}, {"above"});
  b.Node("Less", {"local", "size"}, {"below"});
  b.Node("And", {"above", "below"}, {"mask"});
  OnnxBuilder::AttrInt(b.Node("Cast", {"mask"}, {"mask_i"}), "to", kInt64);
  b.Node("Mul", {"local", "mask_i"}, {"safe"});
  b.Node("Gather", {"table", "safe"}, {"rows"});
  b.Node("Unsqueeze", {"mask", "last"}, {"mask_col"});
  OnnxBuilder::AttrInt(b.Node("Cast", {"mask_col"}, {"mask_f"}), "to", kFloat);
  b.Node("Mul", {"rows", "mask_f"}, {"y"});
  auto y = RunModel(b, {Ints({5}, {0, 2, 3, 1, 4})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].values<float>(), ElementsAre(0, 0, 10, 11, 20, 21, 0, 0, 0, 0));
}

TEST(LogicOpsTest, ComparisonsOfConstantsFold) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {3}).Output("y", kFloat);
  b.Ints("ids", {3}, {0, 5, 9}).Ints("five", {}, {5});
  b.Node("GreaterOrEqual", {"ids", "five"}, {"ge"});
  b.Node("LessOrEqual", {"ids", "five"}, {"le"});
  b.Node("Or", {"ge", "le"}, {"all"});
  b.Node("And", {"ge", "le"}, {"only_five"});
  OnnxBuilder::AttrInt(b.Node("Cast", {"only_five"}, {"w"}), "to", kFloat);
  b.Node("Mul", {"x", "w"}, {"y0"});
  OnnxBuilder::AttrInt(b.Node("Cast", {"all"}, {"one"}), "to", kFloat);
  b.Node("Add", {"y0", "one"}, {"y"});
  auto graph = ImportOnnx(b.Bytes());
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (const Node& node : graph->nodes) EXPECT_THAT(node.op_type, ::testing::AnyOf("Mul", "Add"));
  auto y = RunModel(b, {*Tensor::FromValues<float>({3}, std::vector<float>{7, 8, 9})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT((*y)[0].values<float>(), ElementsAre(1, 9, 1));
}

void ExpectInvalid(const OnnxBuilder& b, const std::string& needle) {
  auto graph = ImportOnnx(b.Bytes());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument) << graph.status();
  EXPECT_THAT(std::string(graph.status().message()), HasSubstr(needle));
}

TEST(LogicOpsTest, OrderedComparisonsNeedOpset12) {
  ExpectInvalid(CompareModel(kInt64, 11),
                "GreaterOrEqual node '/GreaterOrEqual_1': op needs "
                "opset >= 12, model has 11");
}

TEST(LogicOpsTest, AndOfNonBoolOperandsIsRejected) {
  OnnxBuilder b(14);
  b.Input("a", kInt64, {2}).Input("c", kBool, {2}).Output("y", kBool);
  b.Node("And", {"a", "c"}, {"y"}, "/and");
  ExpectInvalid(b, "And node '/and': input 0 has dtype int64; supported: bool");
}

TEST(LogicOpsTest, ComparisonOfDifferentDtypesIsRejected) {
  OnnxBuilder b(14);
  b.Input("a", kInt64, {2}).Input("c", kFloat, {2}).Output("y", kBool);
  b.Node("GreaterOrEqual", {"a", "c"}, {"y"}, "/ge");
  ExpectInvalid(b, "inputs 0 and 1 have dtypes int64 and float32; they must match");
}

TEST(LogicOpsTest, OrOfShapesThatDoNotBroadcastIsRejected) {
  OnnxBuilder b(14);
  b.Input("a", kBool, {2, 3}).Input("c", kBool, {2}).Output("y", kBool);
  b.Node("Or", {"a", "c"}, {"y"}, "/or");
  auto graph = ImportOnnx(b.Bytes());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument) << graph.status();
  EXPECT_THAT(std::string(graph.status().message()), HasSubstr("Or node '/or'"));
}

}  // namespace
}  // namespace ipupod::graph
