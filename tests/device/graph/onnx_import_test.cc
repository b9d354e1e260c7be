// ONNX import: error paths (garbage, truncation, opsets, unsupported ops and
// attributes, dynamic dims, external data) and opset-dependent semantics, on
// models built in C++ with the onnx protobuf.
#include "device/graph/onnx_import.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/graph/interpreter.h"
#include "tests/device/graph/onnx_builder.h"
#include <sys/resource.h>

namespace ipupod::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::kFloat;
using testing::kInt64;
using testing::OnnxBuilder;

Tensor F(Shape shape, std::vector<float> v) { return *Tensor::FromValues<float>(shape, v); }

std::vector<float> Floats(const Tensor& t) {
  return std::vector<float>(t.values<float>().begin(), t.values<float>().end());
}

// Imports, runs on `inputs`, returns output 0.
absl::StatusOr<Tensor> RunModel(const OnnxBuilder& b, std::vector<Tensor> inputs) {
  auto graph = ImportOnnx(b.Bytes());
  if (!graph.ok()) return graph.status();
  auto interp = Interpreter::Create(*std::move(graph));
  if (!interp.ok()) return interp.status();
  auto out = (*interp)->Run(inputs);
  if (!out.ok()) return out.status();
  return (*out)[0];
}

OnnxBuilder AddModel(int64_t opset = 14) {
  OnnxBuilder b(opset);
  b.Input("x", kFloat, {2, 2}).Floats("w", {2}, {10, 20}).Output("y", kFloat, {2, 2});
  b.Node("Add", {"x", "w"}, {"y"}, "/layer/Add");
  return b;
}

void ExpectInvalid(absl::string_view bytes, const std::string& needle) {
  auto graph = ImportOnnx(bytes);
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument) << graph.status();
  EXPECT_THAT(std::string(graph.status().message()), HasSubstr(needle));
}

TEST(OnnxImportTest, ImportsASimpleModel) {
  auto graph = ImportOnnx(AddModel().Bytes());
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->opset, 14);
  ASSERT_EQ(graph->nodes.size(), 1u);
  EXPECT_EQ(graph->nodes[0].module_path, "layer");
  EXPECT_EQ(graph->outputs[0].type.shape, (Shape{2, 2}));
  auto y = RunModel(AddModel(), {F({2, 2}, {1, 2, 3, 4})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Floats(*y), ElementsAre(11, 22, 13, 24));
}

TEST(OnnxImportTest, RejectsGarbageAndEmptyBytes) {
  ExpectInvalid("this is definitely not a protobuf \xff\xff\xff\xff", "not an ONNX model");
  ExpectInvalid("", "not an ONNX model");
  // Parses as a protobuf (one varint field) but is no model.
  ExpectInvalid(std::string("\x08\x01", 2), "ir_version");
}

TEST(OnnxImportTest, RejectsTruncatedModels) {
  OnnxBuilder b = AddModel();
  b.Floats("big", {64}, std::vector<float>(64, 1.0f));
  const std::string bytes = b.Bytes();
  for (size_t keep = 1; keep < bytes.size(); keep += 7) {
    auto graph = ImportOnnx(absl::string_view(bytes).substr(0, keep));
    EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument) << keep;
  }
}

TEST(OnnxImportTest, RejectsMissingAndUnsupportedOpsets) {
  OnnxBuilder none = AddModel();
  none.model().clear_opset_import();
  ExpectInvalid(none.Bytes(), "no opset");
  ExpectInvalid(AddModel(6).Bytes(), "opset 6 is not supported");
  ExpectInvalid(AddModel(18).Bytes(), "opset 18 is not supported");
  OnnxBuilder other = AddModel();
  other.model().mutable_opset_import(0)->set_domain("com.microsoft");
  ExpectInvalid(other.Bytes(), "no opset");
}

TEST(OnnxImportTest, RejectsUnsupportedOpNamingOpAndNode) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {1, 1, 4, 4}).Floats("w", {1, 1, 3, 3}, std::vector<float>(9, 1.0f));
  b.Output("y", kFloat);
  b.Node("ConvInteger", {"x", "w"}, {"y"}, "/features/conv1/ConvInteger");
  ExpectInvalid(b.Bytes(),
                "ConvInteger node '/features/conv1/ConvInteger': op 'ConvInteger' is not "
                "supported");
}

TEST(OnnxImportTest, RejectsUnsupportedAttributeAndDomain) {
  OnnxBuilder b = AddModel();
  OnnxBuilder::AttrInt(*b.model().mutable_graph()->mutable_node(0), "broadcast", 1);
  ExpectInvalid(b.Bytes(), "attribute 'broadcast' is not supported");
  OnnxBuilder d = AddModel();
  d.model().mutable_graph()->mutable_node(0)->set_domain("com.microsoft");
  ExpectInvalid(d.Bytes(), "domain 'com.microsoft'");
}

TEST(OnnxImportTest, RejectsOmittedRequiredInput) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {2, 2}).Output("y", kFloat);
  b.Node("MatMul", {"", "x"}, {"y"}, "/MatMul");
  ExpectInvalid(b.Bytes(), "MatMul node '/MatMul': required input 0 is omitted");
}

TEST(OnnxImportTest, RejectsOpNewerThanTheModelOpset) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {2, 4}).Floats("s", {4}, {1, 1, 1, 1}).Output("y", kFloat);
  b.Node("LayerNormalization", {"x", "s"}, {"y"}, "/ln/LayerNormalization");
  ExpectInvalid(b.Bytes(), "needs opset >= 17");
}

TEST(OnnxImportTest, RejectsDynamicAndMissingInputDims) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {-1, 2}).Floats("w", {2}, {1, 2}).Output("y", kFloat);
  b.Node("Add", {"x", "w"}, {"y"});
  ExpectInvalid(b.Bytes(), "symbolic ('batch')");
  OnnxBuilder c = AddModel();
  c.model().mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  ExpectInvalid(c.Bytes(), "has no shape");
}

TEST(OnnxImportTest, RejectsExternalDataAndUnsupportedTypes) {
  OnnxBuilder b = AddModel();
  auto* w = b.model().mutable_graph()->mutable_initializer(0);
  w->clear_raw_data();
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* entry = w->add_external_data();
  entry->set_key("location");
  entry->set_value("weights.bin");
  ExpectInvalid(b.Bytes(), "external data");

  OnnxBuilder d = AddModel();
  d.model().mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::DOUBLE);
  ExpectInvalid(d.Bytes(), "DOUBLE");

  OnnxBuilder short_raw = AddModel();
  short_raw.model().mutable_graph()->mutable_initializer(0)->set_raw_data("abc");
  ExpectInvalid(short_raw.Bytes(), "initializer 'w'");
}

TEST(OnnxImportTest, RejectsUndefinedAndDuplicateValues) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {2}).Output("y", kFloat);
  b.Node("Add", {"x", "nowhere"}, {"y"}, "/Add");
  ExpectInvalid(b.Bytes(), "input 'nowhere' is not a graph input");
  OnnxBuilder d(14);
  d.Input("x", kFloat, {2}).Output("y", kFloat);
  d.Node("Relu", {"x"}, {"y"});
  d.Node("Neg", {"x"}, {"y"});
  ExpectInvalid(d.Bytes(), "output 'y' is already defined");
  OnnxBuilder o(14);
  o.Input("x", kFloat, {2}).Output("z", kFloat);
  o.Node("Relu", {"x"}, {"y"});
  ExpectInvalid(o.Bytes(), "graph output 'z' is not produced");
}

TEST(OnnxImportTest, RejectsDeclaredOutputMismatchAndShapeErrors) {
  OnnxBuilder b = AddModel();
  b.model()
      .mutable_graph()
      ->mutable_output(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(1)
      ->set_dim_value(3);
  ExpectInvalid(b.Bytes(), "declared float32[2, 3] but computes float32[2, 2]");
  OnnxBuilder m(14);
  m.Input("a", kFloat, {2, 3}).Input("b", kFloat, {2, 3}).Output("c", kFloat);
  m.Node("MatMul", {"a", "b"}, {"c"}, "/fc/MatMul");
  ExpectInvalid(m.Bytes(), "MatMul node '/fc/MatMul': matmul of [2, 3] and [2, 3]");
}

TEST(OnnxImportTest, RejectsShapeOperandThatIsNotConstant) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {2, 3}).Input("s", kInt64, {2}).Output("y", kFloat);
  b.Node("Reshape", {"x", "s"}, {"y"}, "/Reshape");
  ExpectInvalid(b.Bytes(), "must be a constant");
}

OnnxBuilder TrainingDropout(float ratio) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {2}).Output("y", kFloat);
  b.model().mutable_graph()->add_initializer()->CopyFrom([] {
    onnx::TensorProto t;
    t.set_name("train");
    t.set_data_type(onnx::TensorProto::BOOL);
    t.set_raw_data(std::string("\x01", 1));
    return t;
  }());
  b.Floats("ratio", {}, {ratio});
  b.Node("Dropout", {"x", "ratio", "train"}, {"y"}, "/drop/Dropout");
  return b;
}

TEST(OnnxImportTest, ImportsTrainingModeDropout) {
  // It draws its mask when it runs (tests/device/graph/poptorch_ops_test.cc); with
  // ratio 0 it is the identity, as Swin's attention exports it.
  EXPECT_TRUE(ImportOnnx(TrainingDropout(0.5f).Bytes()).ok());
  EXPECT_TRUE(ImportOnnx(TrainingDropout(0.0f).Bytes()).ok());
  ExpectInvalid(TrainingDropout(-0.5f).Bytes(), "outside [0, 1]");
}

TEST(OnnxImportTest, MissingFileIsNotFound) {
  EXPECT_EQ(ImportOnnxFile("/nonexistent/model.onnx").status().code(), absl::StatusCode::kNotFound);
}

TEST(OnnxImportTest, InitializersListedAsInputsAreConstants) {
  OnnxBuilder b = AddModel();
  b.Input("w", kFloat, {2});  // keep_initializers_as_inputs=True style
  auto graph = ImportOnnx(b.Bytes());
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_EQ(graph->inputs.size(), 1u);
  EXPECT_EQ(graph->inputs[0].name, "x");
}

// ---- opset-dependent semantics ----

TEST(OnnxImportTest, SoftmaxBeforeOpset13FlattensFromAxis) {
  const Tensor x = F({2, 2}, {0, 1, 2, 3});
  for (int64_t opset : {11, 13}) {
    OnnxBuilder b(opset);
    b.Input("x", kFloat, {2, 2}).Output("y", kFloat);
    OnnxBuilder::AttrInt(b.Node("Softmax", {"x"}, {"y"}), "axis", 0);
    auto y = RunModel(b, {x});
    ASSERT_TRUE(y.ok()) << y.status();
    const auto v = y->values<float>();
    if (opset == 11) {  // one softmax over all 4 elements
      const double z = 1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
      EXPECT_NEAR(v[3], std::exp(3.0) / z, 1e-6);
    } else {  // per column
      EXPECT_NEAR(v[0], 1 / (1 + std::exp(2.0)), 1e-6);
      EXPECT_NEAR(v[0] + v[2], 1.0, 1e-6);
    }
  }
}

TEST(OnnxImportTest, UnsqueezeAndSqueezeAxesAttributeThenInput) {
  OnnxBuilder old(11);
  old.Input("x", kFloat, {3}).Output("y", kFloat);
  OnnxBuilder::AttrInts(old.Node("Unsqueeze", {"x"}, {"u"}), "axes", {0, -1});
  OnnxBuilder::AttrInts(old.Node("Squeeze", {"u"}, {"y"}), "axes", {0});
  auto g11 = ImportOnnx(old.Bytes());
  ASSERT_TRUE(g11.ok()) << g11.status();
  EXPECT_EQ(g11->value_types.at("u").shape, (Shape{1, 3, 1}));
  EXPECT_EQ(g11->outputs[0].type.shape, (Shape{3, 1}));

  OnnxBuilder now(13);
  now.Input("x", kFloat, {3}).Ints("axes", {2}, {0, -1}).Output("y", kFloat);
  now.Node("Unsqueeze", {"x", "axes"}, {"u"});
  now.Node("Squeeze", {"u"}, {"y"});  // no axes: drop every 1
  auto g13 = ImportOnnx(now.Bytes());
  ASSERT_TRUE(g13.ok()) << g13.status();
  EXPECT_EQ(g13->outputs[0].type.shape, (Shape{3}));

  OnnxBuilder wrong(13);
  wrong.Input("x", kFloat, {3}).Output("y", kFloat);
  OnnxBuilder::AttrInts(wrong.Node("Unsqueeze", {"x"}, {"y"}), "axes", {0});
  ExpectInvalid(wrong.Bytes(), "from opset 13, axes is an input");
}

TEST(OnnxImportTest, ReduceSumAxesAttributeThenInput) {
  const Tensor x = F({2, 3}, {1, 2, 3, 4, 5, 6});
  OnnxBuilder old(11);
  old.Input("x", kFloat, {2, 3}).Output("y", kFloat);
  auto& n = old.Node("ReduceSum", {"x"}, {"y"});
  OnnxBuilder::AttrInts(n, "axes", {1});
  OnnxBuilder::AttrInt(n, "keepdims", 0);
  auto y11 = RunModel(old, {x});
  ASSERT_TRUE(y11.ok()) << y11.status();
  EXPECT_THAT(Floats(*y11), ElementsAre(6, 15));

  OnnxBuilder now(13);
  now.Input("x", kFloat, {2, 3}).Ints("axes", {1}, {0}).Output("y", kFloat, {1, 3});
  now.Node("ReduceSum", {"x", "axes"}, {"y"});
  auto y13 = RunModel(now, {x});
  ASSERT_TRUE(y13.ok()) << y13.status();
  EXPECT_THAT(Floats(*y13), ElementsAre(5, 7, 9));

  OnnxBuilder noop(13);
  noop.Input("x", kFloat, {2, 3}).Output("y", kFloat, {2, 3});
  OnnxBuilder::AttrInt(noop.Node("ReduceSum", {"x"}, {"y"}), "noop_with_empty_axes", 1);
  auto same = RunModel(noop, {x});
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_THAT(Floats(*same), ElementsAre(1, 2, 3, 4, 5, 6));
}

TEST(OnnxImportTest, SliceAttributesBeforeOpset10InputsAfter) {
  const Tensor x = F({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  OnnxBuilder old(9);
  old.Input("x", kFloat, {2, 4}).Output("y", kFloat);
  auto& n = old.Node("Slice", {"x"}, {"y"});
  OnnxBuilder::AttrInts(n, "starts", {1});
  OnnxBuilder::AttrInts(n, "ends", {1000});
  OnnxBuilder::AttrInts(n, "axes", {1});
  auto y9 = RunModel(old, {x});
  ASSERT_TRUE(y9.ok()) << y9.status();
  EXPECT_THAT(Floats(*y9), ElementsAre(1, 2, 3, 5, 6, 7));

  OnnxBuilder now(13);
  now.Input("x", kFloat, {2, 4}).Output("y", kFloat);
  now.Ints("starts", {1}, {-1}).Ints("ends", {1}, {INT64_MIN}).Ints("axes", {1}, {1});
  now.Ints("steps", {1}, {-2});
  now.Node("Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"});
  auto y13 = RunModel(now, {x});
  ASSERT_TRUE(y13.ok()) << y13.status();
  EXPECT_THAT(Floats(*y13), ElementsAre(3, 1, 7, 5));
}

TEST(OnnxImportTest, SplitSizesAttributeThenInput) {
  const Tensor x = F({5}, {0, 1, 2, 3, 4});
  OnnxBuilder old(11);
  old.Input("x", kFloat, {5}).Output("b", kFloat);
  OnnxBuilder::AttrInts(old.Node("Split", {"x"}, {"a", "b"}), "split", {2, 3});
  auto b11 = RunModel(old, {x});
  ASSERT_TRUE(b11.ok()) << b11.status();
  EXPECT_THAT(Floats(*b11), ElementsAre(2, 3, 4));

  OnnxBuilder now(13);
  now.Input("x", kFloat, {5}).Ints("split", {2}, {4, 1}).Output("a", kFloat);
  now.Node("Split", {"x", "split"}, {"a", "b"});
  auto a13 = RunModel(now, {x});
  ASSERT_TRUE(a13.ok()) << a13.status();
  EXPECT_THAT(Floats(*a13), ElementsAre(0, 1, 2, 3));

  OnnxBuilder uneven(13);
  uneven.Input("x", kFloat, {5}).Output("a", kFloat);
  uneven.Node("Split", {"x"}, {"a", "b"});
  ExpectInvalid(uneven.Bytes(), "does not split evenly");
}

TEST(OnnxImportTest, ClipBoundsAttributeThenInput) {
  const Tensor x = F({3}, {-5, 0.5f, 9});
  OnnxBuilder old(10);
  old.Input("x", kFloat, {3}).Output("y", kFloat);
  auto& n = old.Node("Clip", {"x"}, {"y"});
  OnnxBuilder::AttrFloat(n, "min", 0);
  OnnxBuilder::AttrFloat(n, "max", 6);
  auto y10 = RunModel(old, {x});
  ASSERT_TRUE(y10.ok()) << y10.status();
  EXPECT_THAT(Floats(*y10), ElementsAre(0, 0.5f, 6));
  OnnxBuilder now(13);
  now.Input("x", kFloat, {3}).Floats("lo", {}, {0}).Output("y", kFloat);
  now.Node("Clip", {"x", "lo", ""}, {"y"});  // max omitted
  auto y13 = RunModel(now, {x});
  ASSERT_TRUE(y13.ok()) << y13.status();
  EXPECT_THAT(Floats(*y13), ElementsAre(0, 0.5f, 9));
}

TEST(OnnxImportTest, LayerNormalizationWithStatisticsOutputs) {
  OnnxBuilder b(17);
  b.Input("x", kFloat, {2, 2}).Floats("s", {2}, {1, 1}).Floats("bias", {2}, {0, 1});
  b.Output("y", kFloat).Output("mean", kFloat).Output("inv", kFloat);
  OnnxBuilder::AttrFloat(b.Node("LayerNormalization", {"x", "s", "bias"}, {"y", "mean", "inv"}),
                         "epsilon", 0.0f);
  auto graph = ImportOnnx(b.Bytes());
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->value_types.at("mean").shape, (Shape{2, 1}));
  auto interp = Interpreter::Create(*graph);
  ASSERT_TRUE(interp.ok()) << interp.status();
  auto out = (*interp)->Run({F({2, 2}, {1, 3, 4, 6})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Floats((*out)[0]), ElementsAre(-1, 2, -1, 2));
  EXPECT_THAT(Floats((*out)[1]), ElementsAre(2, 5));
  EXPECT_FLOAT_EQ((*out)[2].values<float>()[0], 1.0f);
}

// ---- folding of the chains torch writes around reshapes ----

TEST(OnnxImportTest, FoldsShapeGatherConcatReshapeChain) {
  // x.view(b, t, 2, -1) with b, t read from x.size(), as torch exports it.
  OnnxBuilder b(14);
  b.Input("x", kFloat, {2, 3, 4}).Output("y", kFloat);
  b.Node("Shape", {"x"}, {"shape"}, "/attn/Shape");
  OnnxBuilder::AttrIntTensor(b.Node("Constant", {}, {"i0"}, "/attn/Constant"), "value", {}, {0});
  OnnxBuilder::AttrIntTensor(b.Node("Constant", {}, {"i1"}, "/attn/Constant_1"), "value", {}, {1});
  OnnxBuilder::AttrInt(b.Node("Gather", {"shape", "i0"}, {"b"}, "/attn/Gather"), "axis", 0);
  OnnxBuilder::AttrInt(b.Node("Gather", {"shape", "i1"}, {"t"}, "/attn/Gather_1"), "axis", 0);
  b.Ints("zero", {1}, {0});
  b.Node("Unsqueeze", {"b", "zero"}, {"b1"}, "/attn/Unsqueeze");
  b.Node("Unsqueeze", {"t", "zero"}, {"t1"}, "/attn/Unsqueeze_1");
  b.Ints("rest", {2}, {2, -1});
  OnnxBuilder::AttrInt(b.Node("Concat", {"b1", "t1", "rest"}, {"spec"}, "/attn/Concat"), "axis", 0);
  b.Node("Reshape", {"x", "spec"}, {"r"}, "/attn/Reshape");
  b.Node("Relu", {"r"}, {"y"}, "/attn/Relu");
  auto graph = ImportOnnx(b.Bytes());
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::vector<std::string> ops;
  for (const Node& n : graph->nodes) ops.push_back(n.op_type);
  EXPECT_THAT(ops, ElementsAre("Reshape", "Relu"));
  EXPECT_EQ(graph->outputs[0].type.shape, (Shape{2, 3, 2, 2}));
  EXPECT_EQ(graph->initializers.size(), 1u);  // just the folded spec
}

TEST(OnnxImportTest, FoldsExpandWhereEqualChain) {
  // torch's expand(b, t) with -1 handling: Where(Equal(shape, -1), 1, shape).
  OnnxBuilder b(14);
  b.Input("x", kFloat, {2, 3}).Output("y", kFloat);
  b.Ints("pos", {3}, {0, 1, 2}).Ints("target", {2}, {2, 3}).Ints("two", {1}, {2});
  auto& cos = b.Node("ConstantOfShape", {"two"}, {"ones"});
  OnnxBuilder::AttrIntTensor(cos, "value", {1}, {1});
  b.Ints("minus1", {}, {-1});
  b.Node("Mul", {"ones", "minus1"}, {"neg"});
  b.Node("Equal", {"target", "neg"}, {"is_neg"});
  b.Node("Where", {"is_neg", "ones", "target"}, {"shape"});
  b.Node("Expand", {"pos", "shape"}, {"grid"});
  b.Node("Cast", {"grid"}, {"gridf"});
  OnnxBuilder::AttrInt(*b.model().mutable_graph()->mutable_node(5), "to", kFloat);
  b.Node("Add", {"x", "gridf"}, {"y"});
  auto graph = ImportOnnx(b.Bytes());
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_EQ(graph->nodes.size(), 1u);
  EXPECT_EQ(graph->nodes[0].op_type, "Add");
  auto y = RunModel(b, {F({2, 3}, {10, 10, 10, 20, 20, 20})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Floats(*y), ElementsAre(10, 11, 12, 20, 21, 22));
}

TEST(OnnxImportTest, NonZeroFoldsOnlyWhenConstant) {
  // torch's opset-9 arange: NonZero(ConstantOfShape(n)) -> indices 0..n-1.
  OnnxBuilder b(9);
  b.Input("x", kInt64, {1, 3}).Ints("n", {1}, {3}).Output("y", kInt64);
  OnnxBuilder::AttrIntTensor(b.Node("ConstantOfShape", {"n"}, {"ones"}), "value", {1}, {1});
  b.Node("NonZero", {"ones"}, {"idx"});
  b.Node("Add", {"x", "idx"}, {"y"});
  auto y = RunModel(b, {*Tensor::FromValues<int64_t>({1, 3}, std::vector<int64_t>{10, 10, 10})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(y->values<int64_t>(), ElementsAre(10, 11, 12));
  OnnxBuilder dynamic(13);
  dynamic.Input("x", kFloat, {4}).Output("y", kInt64);
  dynamic.Node("NonZero", {"x"}, {"y"}, "/NonZero");
  ExpectInvalid(dynamic.Bytes(), "depends on the data");
}

TEST(OnnxImportTest, RemovesNodesNoOutputNeeds) {
  OnnxBuilder b = AddModel();
  b.Node("Neg", {"x"}, {"unused"});
  auto graph = ImportOnnx(b.Bytes());
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->nodes.size(), 1u);
  EXPECT_EQ(graph->FindType("unused"), nullptr);
}

TEST(OnnxImportTest, GatherEmbeddingAndMaskedFill) {
  OnnxBuilder b(14);
  b.Input("ids", kInt64, {2}).Floats("table", {3, 2}, {0, 1, 2, 3, 4, 5}).Output("y", kFloat);
  b.Node("Gather", {"table", "ids"}, {"e"}, "/wte/Gather");
  b.Floats("thr", {}, {2.5f});
  b.Node("Less", {"e", "thr"}, {"m"});
  b.Node("Not", {"m"}, {"keep"});
  b.Floats("ninf", {}, {-INFINITY});
  b.Node("Where", {"keep", "e", "ninf"}, {"y"});
  auto y = RunModel(b, {*Tensor::FromValues<int64_t>({2}, std::vector<int64_t>{2, 0})});
  ASSERT_TRUE(y.ok()) << y.status();
  const auto v = Floats(*y);
  EXPECT_EQ(v[0], 4);
  EXPECT_EQ(v[1], 5);
  EXPECT_TRUE(std::isinf(v[2]) && v[3] < 0);
  auto bad = RunModel(b, {*Tensor::FromValues<int64_t>({2}, std::vector<int64_t>{7, 0})});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("/wte/Gather"));
}

int64_t PeakRssBytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t{usage.ru_maxrss} << 10;
}

TEST(OnnxImportTest, FoldingMaterialisesNoMoreThanItsBudget) {
  // 30000 x 30000 floats = 3.6 GB if folded. Within the default budget (256 MiB for a small
  // model) the node stays a node: the memory plan charges it, nothing is materialised here.
  const int64_t before = PeakRssBytes();
  auto graph = ImportOnnx(testing::ConstantOfShapeBomb(30000));
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_LT(PeakRssBytes() - before, int64_t{64} << 20);
  std::vector<std::string> ops;
  for (const Node& n : graph->nodes) ops.push_back(n.op_type);
  EXPECT_THAT(ops, ElementsAre("ConstantOfShape", "ReduceSum", "Add"));
  EXPECT_EQ(graph->value_types.at("big").shape, (std::vector<int64_t>{30000, 30000}));

  // Small enough to fit: folded to a scalar as before.
  auto small = ImportOnnx(testing::ConstantOfShapeBomb(100));
  ASSERT_TRUE(small.ok()) << small.status();
  ASSERT_EQ(small->nodes.size(), 1u);
  EXPECT_EQ(small->nodes[0].op_type, "Add");
  // An explicit budget of 0 folds nothing.
  auto none = ImportOnnx(testing::ConstantOfShapeBomb(100), FoldOptions{.max_folded_bytes = 0});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->nodes.size(), 3u);
}

TEST(OnnxImportTest, ReshapeToTooManyElementsIsRefused) {
  // Each dim is within the element bound; their product overflows int64 (found by fuzzing).
  OnnxBuilder b(14);
  b.Input("x", kFloat, {4}).Output("y", kFloat);
  b.Ints("shape", {2}, {int64_t{549755813890}, int64_t{51539611648}});
  b.Node("Reshape", {"x", "shape"}, {"y"});
  auto graph = ImportOnnx(b.Bytes());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(graph.status().message(), HasSubstr("too many elements"));
}

TEST(OnnxImportTest, ACancelledImportStopsWithCancelled) {
  int polls = 0;
  FoldOptions options;
  options.cancelled = [&polls] { return ++polls > 1; };
  auto graph = ImportOnnx(testing::ConstantOfShapeBomb(100), options);
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(polls, 2);
}

}  // namespace
}  // namespace ipupod::graph
