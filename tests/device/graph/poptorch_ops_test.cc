// PopTorch's ops in domain ai.graphcore (device/graph/ops_poptorch.cc), the node
// attributes PopTorch's annotations become (device/graph/ops.h) and training-mode
// Dropout's random stream (device/graph/run_context.h), through
// ImportOnnx and the Interpreter. Numerics against torch are in
// python/tests/test_poptorch.py (the same ops exported by ipupod.poptorch).
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/graph/interpreter.h"
#include "device/graph/onnx_import.h"
#include "device/graph/ops.h"
#include "device/graph/run_context.h"
#include "tests/device/graph/onnx_builder.h"

namespace ipupod::graph {
namespace {

using ::testing::HasSubstr;
using testing::kFloat;
using testing::kInt64;
using testing::OnnxBuilder;

OnnxBuilder Builder(int64_t opset = 14) {
  OnnxBuilder b(opset);
  auto* o = b.model().add_opset_import();
  o->set_domain("ai.graphcore");
  o->set_version(1);
  return b;
}

onnx::NodeProto& Graphcore(OnnxBuilder& b, const std::string& op,
                           const std::vector<std::string>& in, const std::string& out,
                           const std::string& name = "") {
  onnx::NodeProto& n = b.Node(op, in, {out}, name.empty() ? "/m/" + op : name);
  n.set_domain("ai.graphcore");
  return n;
}

std::unique_ptr<Interpreter> Load(const OnnxBuilder& b) {
  auto g = ImportOnnx(b.Bytes());
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  auto interpreter = Interpreter::Create(*std::move(g));
  EXPECT_TRUE(interpreter.ok()) << interpreter.status();
  return interpreter.ok() ? *std::move(interpreter) : nullptr;
}

Tensor Iota(const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(tensor::NumElements(shape).value()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return *Tensor::FromValues<float>(shape, v);
}

Tensor Start(int64_t s) { return *Tensor::FromValues<int64_t>({1}, std::vector<int64_t>{s}); }

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements());
}

// x [3, 5] sliced along axis 1 at a runtime start, 2 wide.
OnnxBuilder SliceModel() {
  OnnxBuilder b = Builder();
  b.Input("x", kFloat, {3, 5}).Input("start", kInt64, {1});
  auto& n = Graphcore(b, "DynamicSlice", {"x", "start"}, "y");
  OnnxBuilder::AttrInts(n, "axes", {1});
  OnnxBuilder::AttrInts(n, "sizes", {2});
  b.Output("y", kFloat);
  return b;
}

TEST(PoptorchOpsTest, ImportKeepsTheDomainInTheOpType) {
  auto g = ImportOnnx(SliceModel().Bytes());
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->nodes.size(), 1u);
  EXPECT_EQ(g->nodes[0].op_type, "ai.graphcore.DynamicSlice");
  EXPECT_EQ(g->value_types.at("y").shape, (Shape{3, 2}));
}

TEST(PoptorchOpsTest, NopOfAConstantIsKept) {
  OnnxBuilder b = Builder();
  b.Input("x", kFloat, {2}).Floats("c", {2}, {7, 8});
  Graphcore(b, "Nop", {"c"}, "nc");
  b.Node("Add", {"x", "nc"}, {"y"});
  b.Output("y", kFloat);
  auto g = ImportOnnx(b.Bytes());
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->nodes.size(), 2u);
  EXPECT_EQ(g->nodes[0].op_type, "ai.graphcore.Nop");
}

TEST(PoptorchOpsTest, UnsupportedGraphcoreOpAndForeignDomainsFailNamingTheNode) {
  OnnxBuilder b = Builder();
  b.Input("x", kFloat, {2});
  Graphcore(b, "Ctc", {"x"}, "y");
  b.Output("y", kFloat);
  auto g = ImportOnnx(b.Bytes());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("ai.graphcore.Ctc"));
  EXPECT_THAT(g.status().message(), HasSubstr("/m/Ctc"));

  OnnxBuilder other = Builder();
  other.Input("x", kFloat, {2});
  other.Node("Nop", {"x"}, {"y"}, "/m/Nop").set_domain("com.microsoft");
  other.Output("y", kFloat);
  g = ImportOnnx(other.Bytes());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("op domain 'com.microsoft' is a custom op's"));
}

constexpr int kInt32 = onnx::TensorProto::INT32;

// log_probs [2 steps, 2 sequences, 2 classes] and lengths [2] -> the decoder's three outputs.
OnnxBuilder CtcModel(int64_t top_paths = 1, int64_t beam_width = 4) {
  OnnxBuilder b = Builder();
  b.Input("log_probs", kFloat, {2, 2, 2}).Input("lengths", kInt32, {2});
  onnx::NodeProto& n = b.Node("CtcBeamSearchDecoder", {"log_probs", "lengths"},
                              {"probs", "path_lengths", "paths"}, "/m/CtcBeamSearchDecoder");
  n.set_domain("ai.graphcore");
  OnnxBuilder::AttrInt(n, "blank", 0);
  OnnxBuilder::AttrInt(n, "beam_width", beam_width);
  OnnxBuilder::AttrInt(n, "top_paths", top_paths);
  b.Output("probs", kFloat).Output("path_lengths", kInt32).Output("paths", kInt32);
  return b;
}

// Sequence 0: (0.6, 0.4) then (0.3, 0.7); sequence 1: (0.2, 0.8) then anything.
Tensor CtcLogProbs() {
  const std::vector<double> p = {0.6, 0.4, 0.2, 0.8, 0.3, 0.7, 0.5, 0.5};
  std::vector<float> logs;
  for (double v : p) logs.push_back(static_cast<float>(std::log(v)));
  return *Tensor::FromValues<float>({2, 2, 2}, logs);
}

Tensor Lengths(int32_t a, int32_t b) {
  return *Tensor::FromValues<int32_t>({2}, std::vector<int32_t>{a, b});
}

TEST(PoptorchOpsTest, CtcBeamSearchDecoderDecodesEverySequenceToItsLength) {
  auto interpreter = Load(CtcModel(2));
  ASSERT_NE(interpreter, nullptr);
  auto out = interpreter->Run({CtcLogProbs(), Lengths(2, 1)});
  ASSERT_TRUE(out.ok()) << out.status();
  const Tensor& probs = (*out)[0];
  EXPECT_EQ(probs.shape(), (Shape{2, 2}));
  EXPECT_NEAR(probs.data<float>()[0], std::log(0.82), 1e-6);  // [1]: 1 1, 1 _, _ 1
  EXPECT_NEAR(probs.data<float>()[1], std::log(0.18), 1e-6);  // []: _ _
  EXPECT_NEAR(probs.data<float>()[2], std::log(0.8), 1e-6);   // one step only
  EXPECT_EQ((*out)[1].dtype(), tensor::DType::kInt32);
  const int32_t* lengths = (*out)[1].data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(lengths, lengths + 4), (std::vector<int32_t>{1, 0, 1, 0}));
  EXPECT_EQ((*out)[2].shape(), (Shape{2, 2, 2}));
  const int32_t* paths = (*out)[2].data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(paths, paths + 8), (std::vector<int32_t>{1, 0, 0, 0, 1, 0, 0, 0}));
}

TEST(PoptorchOpsTest, CtcBeamSearchDecoderRefusesBadLengthsAndOptions) {
  auto interpreter = Load(CtcModel());
  ASSERT_NE(interpreter, nullptr);
  auto out = interpreter->Run({CtcLogProbs(), Lengths(3, 1)});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("length 3 of sequence 0 is outside [0, 2]"));
  auto g = ImportOnnx(CtcModel(/*top_paths=*/3, /*beam_width=*/2).Bytes());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("top_paths <= beam_width"));
  OnnxBuilder b = Builder();
  b.Input("log_probs", kFloat, {2, 2}).Input("lengths", kInt32, {2});
  b.Node("CtcBeamSearchDecoder", {"log_probs", "lengths"}, {"p"}, "/m/Ctc")
      .set_domain("ai.graphcore");
  b.Output("p", kFloat);
  EXPECT_THAT(ImportOnnx(b.Bytes()).status().message(),
              HasSubstr("must be float [input_length, batch_size, num_classes]"));
}

TEST(PoptorchOpsTest, DynamicSliceReadsTheRuntimeStart) {
  auto interpreter = Load(SliceModel());
  ASSERT_NE(interpreter, nullptr);
  for (int64_t s : {0, 2, 3}) {
    auto out = interpreter->Run({Iota({3, 5}), Start(s)});
    ASSERT_TRUE(out.ok()) << out.status();
    const float f = static_cast<float>(s);
    EXPECT_EQ(Values((*out)[0]), (std::vector<float>{f, f + 1, f + 5, f + 6, f + 10, f + 11}))
        << "start " << s;
  }
}

TEST(PoptorchOpsTest, OutOfRangeStartIsRefusedNamingTheRange) {
  auto interpreter = Load(SliceModel());
  ASSERT_NE(interpreter, nullptr);
  for (int64_t s : {-1, 4, 1000}) {
    auto out = interpreter->Run({Iota({3, 5}), Start(s)});
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(out.status().message(), HasSubstr("starts in [0, 3]"));
    EXPECT_THAT(out.status().message(), HasSubstr("/m/DynamicSlice"));
  }
}

TEST(PoptorchOpsTest, DynamicUpdateReplacesTheRegion) {
  OnnxBuilder b = Builder();
  b.Input("x", kFloat, {2, 4}).Input("start", kInt64, {1}).Input("u", kFloat, {2, 2});
  auto& n = Graphcore(b, "DynamicUpdate", {"x", "start", "u"}, "y");
  OnnxBuilder::AttrInts(n, "axes", {1});
  OnnxBuilder::AttrInts(n, "sizes", {2});
  b.Output("y", kFloat);
  auto interpreter = Load(b);
  ASSERT_NE(interpreter, nullptr);
  const Tensor u = *Tensor::FromValues<float>({2, 2}, std::vector<float>{-1, -2, -3, -4});
  auto out = interpreter->Run({Iota({2, 4}), Start(1), u});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<float>{0, -1, -2, 3, 4, -3, -4, 7}));
  EXPECT_EQ(interpreter->Run({Iota({2, 4}), Start(3), u}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PoptorchOpsTest, DynamicUpdateChecksTheUpdateShapeAtImport) {
  OnnxBuilder b = Builder();
  b.Input("x", kFloat, {2, 4}).Input("start", kInt64, {1}).Input("u", kFloat, {2, 3});
  auto& n = Graphcore(b, "DynamicUpdate", {"x", "start", "u"}, "y");
  OnnxBuilder::AttrInts(n, "axes", {1});
  OnnxBuilder::AttrInts(n, "sizes", {2});
  b.Output("y", kFloat);
  auto g = ImportOnnx(b.Bytes());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("the region it replaces is float32[2, 2]"));
}

TEST(PoptorchOpsTest, IpuPrintLogsEveryRunEvenOfAConstant) {
  OnnxBuilder b = Builder();
  b.Input("x", kFloat, {2}).Floats("c", {2}, {7, 8});
  OnnxBuilder::AttrString(Graphcore(b, "IpuPrint", {"x"}, "px"), "title", "x");
  Graphcore(b, "IpuPrint", {"c"}, "pc", "/m/c/IpuPrint");
  Graphcore(b, "Nop", {"px"}, "nx");
  b.Node("Add", {"nx", "pc"}, {"y"});
  b.Output("y", kFloat);
  auto interpreter = Load(b);
  ASSERT_NE(interpreter, nullptr);
  std::vector<std::string> log;
  RunContext context;
  context.log = &log;
  {
    ScopedRunContext scope(&context);
    auto out = interpreter->Run({*Tensor::FromValues<float>({2}, std::vector<float>{1.5f, -2})});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Values((*out)[0]), (std::vector<float>{8.5f, 6}));
  }
  EXPECT_THAT(
      log, ::testing::ElementsAre("x: float32[2] [1.5, -2]", "/m/c/IpuPrint: float32[2] [7, 8]"));
  ASSERT_TRUE(interpreter->Run({Iota({2})}).ok()) << "without a context the lines go nowhere";
  EXPECT_EQ(log.size(), 2u);
}

// ---- PopTorch's annotations as node attributes (device/graph/ops.h) ----

// y = (x + 1) * 2 with the Add annotated as optimum's GPT-2 annotates a layer's
// output (recomputation checkpoint) and its ln_f (an outlining attribute).
OnnxBuilder AnnotatedModel() {
  OnnxBuilder b = Builder();
  b.Input("x", kFloat, {2}).Floats("one", {}, {1}).Floats("two", {}, {2}).Output("y", kFloat);
  onnx::NodeProto& add = b.Node("Add", {"x", "one"}, {"h"}, "/h.0/Add");
  OnnxBuilder::AttrInt(add, "recompute_checkpoint", 1);
  onnx::AttributeProto* outline = add.add_attribute();
  outline->set_name("__outline");
  outline->set_type(onnx::AttributeProto::STRINGS);
  outline->add_strings("layer");
  outline->add_strings("LayerNorm");
  b.Node("Mul", {"h", "two"}, {"y"}, "/ln_f/Mul");
  return b;
}

TEST(AnnotationTest, CheckpointAndPopartAttributesAreCarriedAndChangeNothing) {
  auto g = ImportOnnx(AnnotatedModel().Bytes());
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->nodes.size(), 2u);
  const Node& add = g->nodes[0];
  ASSERT_NE(add.FindAttribute(kRecomputeCheckpoint), nullptr);
  EXPECT_EQ(std::get<int64_t>(*add.FindAttribute(kRecomputeCheckpoint)), 1);
  ASSERT_NE(add.FindAttribute("__outline"), nullptr);
  EXPECT_THAT(std::get<std::vector<std::string>>(*add.FindAttribute("__outline")),
              ::testing::ElementsAre("layer", "LayerNorm"));
  auto interpreter = Interpreter::Create(*std::move(g));
  ASSERT_TRUE(interpreter.ok()) << interpreter.status();
  auto y = (*interpreter)->Run({*Tensor::FromValues<float>({2}, std::vector<float>{1, 2})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Values((*y)[0]), (std::vector<float>{4, 6}));
}

TEST(AnnotationTest, AnAnnotatedConstantKeepsItsValue) {
  OnnxBuilder b = Builder();
  b.Input("x", kFloat, {2}).Output("y", kFloat);
  onnx::NodeProto& c = b.Node("Constant", {}, {"c"}, "/ln_f/Constant");
  OnnxBuilder::AttrFloatTensor(c, "value", {2}, {3, 4});
  OnnxBuilder::AttrString(c, "__outline", "layer");
  OnnxBuilder::AttrInt(c, "recompute_checkpoint", 1);
  b.Node("Add", {"x", "c"}, {"y"}, "/ln_f/Add");
  auto g = ImportOnnx(b.Bytes());
  ASSERT_TRUE(g.ok()) << g.status();
  auto interpreter = Interpreter::Create(*std::move(g));
  ASSERT_TRUE(interpreter.ok()) << interpreter.status();
  auto y = (*interpreter)->Run({*Tensor::FromValues<float>({2}, std::vector<float>{1, 2})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Values((*y)[0]), (std::vector<float>{4, 6}));
  // A Constant whose only attribute is an annotation has no value.
  OnnxBuilder empty = Builder();
  empty.Input("x", kFloat, {2}).Output("y", kFloat);
  OnnxBuilder::AttrString(empty.Node("Constant", {}, {"c"}, "/c"), "__outline", "layer");
  empty.Node("Add", {"x", "c"}, {"y"});
  auto bad = ImportOnnx(empty.Bytes());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("needs exactly one value attribute"));
}

TEST(AnnotationTest, OnlyDoubleUnderscoreNamesArePopartAttributes) {
  EXPECT_TRUE(IsPopartBuilderAttribute("__outline"));
  EXPECT_TRUE(IsPlanningAttribute("Softmax", kRecomputeCheckpoint));
  for (const char* name : {"_outline", "__", "outline", "__ipu_number", "__pipeline_stage"}) {
    SCOPED_TRACE(name);
    EXPECT_FALSE(IsPopartBuilderAttribute(name));
    OnnxBuilder b = AnnotatedModel();
    OnnxBuilder::AttrString(*b.model().mutable_graph()->mutable_node(1), name, "x");
    auto g = ImportOnnx(b.Bytes());
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(g.status().message()),
                HasSubstr(std::string("attribute '") + name + "' is not supported"));
  }
}

// ---- training-mode Dropout ----

OnnxBuilder DropoutModel(float ratio, int64_t training, int64_t n = 4096) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {n});
  b.Floats("ratio", {}, {ratio});
  onnx::TensorProto* mode = b.model().mutable_graph()->add_initializer();
  mode->set_name("training");
  mode->set_data_type(onnx::TensorProto::BOOL);
  mode->add_int32_data(static_cast<int32_t>(training));
  b.Node("Dropout", {"x", "ratio", "training"}, {"y", "mask"}, "/drop/Dropout");
  b.Output("y", kFloat).Output("mask", testing::kBool);
  return b;
}

std::vector<Tensor> RunWith(const Interpreter& interpreter, const RunContext& context,
                            const Tensor& x) {
  ScopedRunContext scope(&context);
  auto out = interpreter.Run({x});
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *std::move(out) : std::vector<Tensor>{};
}

TEST(DropoutTest, TrainingModeDropsAtTheRatioAndScalesExactly) {
  auto interpreter = Load(DropoutModel(0.25f, 1));
  ASSERT_NE(interpreter, nullptr);
  std::vector<float> ones(4096, 1.5f);
  const Tensor x = *Tensor::FromValues<float>({4096}, ones);
  RunContext context;
  context.seed = 42;
  std::vector<Tensor> out = RunWith(*interpreter, context, x);
  ASSERT_EQ(out.size(), 2u);
  int64_t dropped = 0;
  const float scale = 1.0f / static_cast<float>(1.0 - 0.25f);
  for (int64_t i = 0; i < 4096; ++i) {
    const float y = out[0].data<float>()[i];
    const bool kept = out[1].data<bool>()[i];
    EXPECT_EQ(y, kept ? 1.5f * scale : 0.0f) << i;
    dropped += kept ? 0 : 1;
  }
  // Binomial(4096, 0.25): sd 27.7; 5 sd either side.
  EXPECT_NEAR(static_cast<double>(dropped), 1024.0, 140.0);
}

TEST(DropoutTest, MasksAreAFunctionOfSeedStepReplicaAndMicroBatch) {
  auto interpreter = Load(DropoutModel(0.5f, 1));
  ASSERT_NE(interpreter, nullptr);
  const Tensor x = Iota({4096});
  RunContext base;
  base.seed = 7;
  const std::vector<float> first = Values(RunWith(*interpreter, base, x)[0]);
  EXPECT_EQ(Values(RunWith(*interpreter, base, x)[0]), first) << "same coordinates, same mask";
  std::set<std::vector<float>> seen = {first};
  for (int k = 0; k < 4; ++k) {
    RunContext c = base;
    if (k == 0) c.seed = 8;
    if (k == 1) c.step = 1;
    if (k == 2) c.replica = 1;
    if (k == 3) c.micro_batch = 1;
    EXPECT_TRUE(seen.insert(Values(RunWith(*interpreter, c, x)[0])).second) << "change " << k;
  }
  // A pinned value: the stream must not change between releases (checkpoints
  // resumed by a newer server must draw the same masks).
  const std::vector<uint32_t> bits = RandomBitsAt(1, 2, 3, 4, "/drop/Dropout", 5);
  EXPECT_EQ(bits, RandomBitsAt(1, 2, 3, 4, "/drop/Dropout", 5));
  EXPECT_NE(bits, RandomBitsAt(1, 2, 3, 4, "/drop/Dropout_1", 5));
}

TEST(DropoutTest, InferenceModeAndRatioZeroAreTheIdentity) {
  for (const auto& [ratio, training] : {std::pair{0.5f, 0}, std::pair{0.0f, 1}}) {
    auto interpreter = Load(DropoutModel(ratio, training, 8));
    ASSERT_NE(interpreter, nullptr);
    auto out = interpreter->Run({Iota({8})});  // no context needed: nothing is drawn
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Values((*out)[0]), Values(Iota({8})));
  }
}

TEST(DropoutTest, RandomOpWithoutASeedFailsWithFailedPrecondition) {
  auto interpreter = Load(DropoutModel(0.5f, 1, 8));
  ASSERT_NE(interpreter, nullptr);
  auto out = interpreter->Run({Iota({8})});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(out.status().message(), HasSubstr("/drop/Dropout"));
}

TEST(DropoutTest, BeforeOpset12TheRunDecides) {
  OnnxBuilder b(11);
  b.Input("x", kFloat, {64});
  OnnxBuilder::AttrFloat(b.Node("Dropout", {"x"}, {"y"}, "/drop/Dropout"), "ratio", 0.5f);
  b.Output("y", kFloat);
  auto interpreter = Load(b);
  ASSERT_NE(interpreter, nullptr);
  const Tensor x = Iota({64});
  RunContext context;
  context.seed = 3;
  EXPECT_EQ(Values(RunWith(*interpreter, context, x)[0]), Values(x)) << "inference: identity";
  context.training = true;
  const std::vector<float> y = Values(RunWith(*interpreter, context, x)[0]);
  EXPECT_NE(y, Values(x));
  for (size_t i = 0; i < y.size(); ++i) EXPECT_TRUE(y[i] == 0.0f || y[i] == 2.0f * i) << i;
}

TEST(DropoutTest, RatioOutsideZeroOneIsRefusedAtImport) {
  auto g = ImportOnnx(DropoutModel(1.5f, 1, 8).Bytes());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("ratio 1.5 is outside [0, 1]"));
}

TEST(DropoutTest, HasRandomOpsSeesOnlyDroppingNodes) {
  auto drops = ImportOnnx(DropoutModel(0.5f, 1, 8).Bytes());
  auto eval = ImportOnnx(DropoutModel(0.5f, 0, 8).Bytes());
  auto zero = ImportOnnx(DropoutModel(0.0f, 1, 8).Bytes());
  ASSERT_TRUE(drops.ok() && eval.ok() && zero.ok());
  EXPECT_TRUE(HasRandomOps(*drops, false));
  EXPECT_FALSE(HasRandomOps(*eval, true));
  EXPECT_FALSE(HasRandomOps(*zero, true));
}

}  // namespace
}  // namespace ipupod::graph
