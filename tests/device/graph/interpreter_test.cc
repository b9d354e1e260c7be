#include "device/graph/interpreter.h"

#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/graph/onnx_import.h"
#include "device/graph/shape_inference.h"
#include "tests/device/graph/onnx_builder.h"

namespace ipupod::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::kFloat;
using testing::OnnxBuilder;

Tensor F(Shape shape, std::vector<float> v) { return *Tensor::FromValues<float>(shape, v); }

// x[4, 3] -> Gemm(W[2, 3]^T, b[2]) -> Relu -> MatMul(V[2, 5]) -> Softmax.
Graph SmallMlp() {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {4, 3}).Output("p", kFloat);
  b.Floats("W", {2, 3}, {1, 0, 0, 0, 1, 0}).Floats("bias", {2}, {0.5f, -100});
  b.Floats("V", {2, 5}, std::vector<float>(10, 0.1f));
  auto& gemm = b.Node("Gemm", {"x", "W", "bias"}, {"h"}, "/fc1/Gemm");
  OnnxBuilder::AttrInt(gemm, "transB", 1);
  b.Node("Relu", {"h"}, {"r"}, "/act/Relu");
  b.Node("MatMul", {"r", "V"}, {"z"}, "/head/MatMul");
  b.Node("Softmax", {"z"}, {"p"}, "/Softmax");
  return *ImportOnnx(b.Bytes());
}

TEST(InterpreterTest, RunsAndCountsFlops) {
  auto interp = Interpreter::Create(SmallMlp());
  ASSERT_TRUE(interp.ok()) << interp.status();
  const auto& costs = (*interp)->node_costs();
  ASSERT_EQ(costs.size(), 4u);
  EXPECT_EQ(costs[0].name, "/fc1/Gemm");
  EXPECT_EQ(costs[0].module_path, "fc1");
  EXPECT_EQ(costs[0].flops, 2 * 4 * 2 * 3 + 4 * 2);  // 2MNK + bias
  EXPECT_EQ(costs[1].flops, 8);                      // Relu, one per element
  EXPECT_EQ(costs[2].flops, 2 * 4 * 5 * 2);          // MatMul
  EXPECT_EQ(costs[3].flops, 4 * 20);                 // Softmax
  EXPECT_EQ((*interp)->total_flops(), 56 + 8 + 80 + 80);

  RunStats stats;
  auto out = (*interp)->Run({F({4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})}, &stats);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].shape(), (Shape{4, 5}));
  for (float p : (*out)[0].values<float>()) EXPECT_FLOAT_EQ(p, 0.2f);  // equal logits
  ASSERT_EQ(stats.nodes.size(), 4u);
  EXPECT_EQ(stats.total_flops, (*interp)->total_flops());
}

TEST(InterpreterTest, RejectsWrongInputs) {
  auto interp = Interpreter::Create(SmallMlp());
  ASSERT_TRUE(interp.ok());
  EXPECT_EQ((*interp)->Run({}).status().code(), absl::StatusCode::kInvalidArgument);
  auto shape = (*interp)->Run({F({3, 4}, std::vector<float>(12, 0))});
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(shape.status().message()), HasSubstr("float32[4, 3]"));
  auto dtype = (*interp)->Run({*Tensor::Create(DType::kInt64, {4, 3})});
  EXPECT_EQ(dtype.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(InterpreterTest, RejectsGraphWithoutInference) {
  Graph g;
  g.opset = 14;
  g.inputs.push_back({"x", {DType::kFloat32, {2}}});
  g.outputs.push_back({"y", {DType::kFloat32, {2}}});
  Node relu;
  relu.name = "relu";
  relu.op_type = "Relu";
  relu.inputs = {"x"};
  relu.outputs = {"y"};
  g.nodes.push_back(relu);
  EXPECT_EQ(Interpreter::Create(g).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(InferShapesAndFold(g).ok());
  auto interp = Interpreter::Create(g);
  ASSERT_TRUE(interp.ok()) << interp.status();
  auto out = (*interp)->Run({F({2}, {-1, 1})});
  ASSERT_TRUE(out.ok());
  EXPECT_THAT((*out)[0].values<float>(), ElementsAre(0, 1));
}

TEST(InterpreterTest, OutputsMayBeInputsOrConstants) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {2}).Floats("c", {1}, {7}).Output("x", kFloat).Output("c2", kFloat);
  b.Node("Identity", {"c"}, {"c2"});
  auto graph = ImportOnnx(b.Bytes());
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_TRUE(graph->nodes.empty());  // Identity of a constant folds
  auto interp = Interpreter::Create(*graph);
  ASSERT_TRUE(interp.ok());
  auto out = (*interp)->Run({F({2}, {1, 2})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT((*out)[0].values<float>(), ElementsAre(1, 2));
  EXPECT_THAT((*out)[1].values<float>(), ElementsAre(7));
}

TEST(InterpreterTest, ConcurrentRunsAgree) {
  auto interp = Interpreter::Create(SmallMlp());
  ASSERT_TRUE(interp.ok());
  const Tensor x = F({4, 3}, {1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12});
  const auto want = (*interp)->Run({x});
  ASSERT_TRUE(want.ok());
  std::vector<std::thread> threads;
  std::vector<int> same(4, 0);  // not vector<bool>: its bits share words
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto got = (*interp)->Run({x});
      same[t] = got.ok() && (*got)[0] == (*want)[0] ? 1 : 0;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_THAT(same, ElementsAre(1, 1, 1, 1));
}

}  // namespace
}  // namespace ipupod::graph

namespace ipupod::graph {
namespace {

TEST(InterpreterTest, ReplaceInitializersSwapsWeightsAndReturnsOldOnes) {
  auto interp = Interpreter::Create(SmallMlp());
  ASSERT_TRUE(interp.ok()) << interp.status();
  // bias -100 on unit 1 makes Relu zero it; +100 makes unit 1 dominate.
  std::vector<std::pair<std::string, Tensor>> values;
  values.emplace_back("bias", F({2}, {0.5f, 100}));
  values.emplace_back("V", F({2, 5}, {0, 0, 0, 0, 0, 1, 0, 0, 0, 0}));
  ASSERT_TRUE((*interp)->ReplaceInitializers(values).ok());
  EXPECT_EQ(values[0].second, F({2}, {0.5f, -100}));  // the old value comes back
  auto out = (*interp)->Run({F({4, 3}, std::vector<float>(12, 1))});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_GT((*out)[0].values<float>()[0], 0.99f);  // z = [101, 0, 0, 0, 0] per row
}

TEST(InterpreterTest, ReplaceInitializersIsAllOrNothing) {
  auto interp = Interpreter::Create(SmallMlp());
  ASSERT_TRUE(interp.ok()) << interp.status();
  const Tensor before = *(*interp)->graph().FindInitializer("bias");
  const auto expect_rejected = [&](std::vector<std::pair<std::string, Tensor>> values,
                                   const std::string& message) {
    const absl::Status s = (*interp)->ReplaceInitializers(values);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(message));
    EXPECT_EQ(*(*interp)->graph().FindInitializer("bias"), before);
  };
  expect_rejected({{"bias", F({2}, {1, 2})}, {"nope", F({1}, {1})}},
                  "'nope' is not an initializer");
  expect_rejected({{"bias", F({2}, {1, 2})}, {"bias", F({2}, {1, 2})}}, "'bias' is given twice");
  expect_rejected({{"bias", F({3}, {1, 2, 3})}}, "is float32[2] but the new value is float32[3]");
  expect_rejected({{"bias", Tensor::Scalar<int64_t>(1)}}, "but the new value is int64[]");
}

TEST(InterpreterTest, ReplaceInitializersRejectsShapeDeterminingConstants) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {2, 4}).Output("y", kFloat);
  b.Ints("shape", {2}, {4, 2});
  b.Node("Reshape", {"x", "shape"}, {"y"}, "/Reshape");
  auto interp = Interpreter::Create(*ImportOnnx(b.Bytes()));
  ASSERT_TRUE(interp.ok()) << interp.status();
  std::vector<std::pair<std::string, Tensor>> values;
  values.emplace_back("shape", *Tensor::FromValues<int64_t>({2}, std::vector<int64_t>{8, 1}));
  const absl::Status s = (*interp)->ReplaceInitializers(values);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("determines this node's output shape"));
  EXPECT_EQ((*interp)->graph().FindInitializer("shape")->IntAt(0), 4);
  auto out = (*interp)->Run({F({2, 4}, std::vector<float>(8, 1))});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (Shape{4, 2}));
}

}  // namespace
}  // namespace ipupod::graph

namespace ipupod::graph {
namespace {

// x[2, 3] -> MatMul(x, Transpose(W[2, 3])) -> y[2, 2], as torch.onnx writes a
// Linear applied to an input of rank 3 or more; imported with weights kept.
Graph TransposedLinear() {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {2, 3}).Output("y", kFloat);
  b.Floats("W", {2, 3}, {1, 0, 0, 0, 1, 0});
  auto& t = b.Node("Transpose", {"W"}, {"Wt"}, "/fc/Transpose");
  OnnxBuilder::AttrInts(t, "perm", {1, 0});
  b.Node("MatMul", {"x", "Wt"}, {"y"}, "/fc/MatMul");
  return *ImportOnnx(b.Bytes(), FoldOptions{.keep_weights = true});
}

TEST(InterpreterTest, AValueDerivedFromWeightsFollowsTheirReplacement) {
  Graph g = TransposedLinear();
  ASSERT_EQ(g.nodes.size(), 2u);  // the transpose is kept, not folded into a constant
  auto interp = Interpreter::Create(std::move(g));
  ASSERT_TRUE(interp.ok()) << interp.status();
  const Tensor x = F({2, 3}, {1, 2, 3, 4, 5, 6});
  auto before = (*interp)->Run({x});
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ((*before)[0], F({2, 2}, {1, 2, 4, 5}));
  std::vector<std::pair<std::string, Tensor>> values;
  values.emplace_back("W", F({2, 3}, {0, 0, 1, 1, 1, 1}));
  ASSERT_TRUE((*interp)->ReplaceInitializers(values).ok());
  auto after = (*interp)->Run({x});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ((*after)[0], F({2, 2}, {3, 6, 6, 15}));
}

TEST(InterpreterTest, DeclaredScalarParametersStayWritable) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {2}).Output("y", kFloat);
  b.Floats("scale", {}, {2});
  b.Node("Mul", {"x", "scale"}, {"y"}, "/Mul");
  auto* entry = b.model().add_metadata_props();
  entry->set_key(kParametersMetadataKey);
  entry->set_value("scale");
  auto g = ImportOnnx(b.Bytes(), FoldOptions{.keep_weights = true});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->module_state.declared);
  EXPECT_THAT(g->module_state.parameters, ElementsAre("scale"));
  auto interp = Interpreter::Create(*std::move(g));
  ASSERT_TRUE(interp.ok()) << interp.status();
  std::vector<std::pair<std::string, Tensor>> values;
  values.emplace_back("scale", Tensor::Scalar<float>(3));
  ASSERT_TRUE((*interp)->ReplaceInitializers(values).ok());
  auto out = (*interp)->Run({F({2}, {1, 2})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0], F({2}, {3, 6}));
}

TEST(InterpreterTest, ModuleStateMetadataNamingNoInitializerIsRejected) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {2}).Output("y", kFloat);
  b.Floats("w", {2}, {1, 2});
  b.Node("Mul", {"x", "w"}, {"y"}, "/Mul");
  auto* entry = b.model().add_metadata_props();
  entry->set_key(kAliasesMetadataKey);
  entry->set_value("head.weight=missing");
  auto g = ImportOnnx(b.Bytes());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("head.weight=missing"));
}

}  // namespace
}  // namespace ipupod::graph
