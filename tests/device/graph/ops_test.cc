// The op registry's contracts that hold for every op at once (device/graph/ops.h):
// an op marked writes_every_output really writes every output element, so
// CreateOutputs may skip the zero fill for it.
#include "device/graph/ops.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ipupod::graph {
namespace {

// Float input shapes for each op marked writes_every_output. A newly marked
// op must be added here (the test fails otherwise).
const std::map<std::string, std::vector<Shape>>& OverwritingOpInputs() {
  static const auto* inputs = new std::map<std::string, std::vector<Shape>>{
      {"Add", {{2, 3}, {3}}},
      {"Sub", {{2, 3}, {1, 3}}},
      {"Mul", {{2, 1}, {1, 3}}},
      {"Div", {{2, 3}, {2, 3}}},
      {"Pow", {{2, 3}, {}}},
      {"Neg", {{2, 3}}},
      {"Abs", {{2, 3}}},
      {"Relu", {{2, 3}}},
      {"Sqrt", {{2, 3}}},
      {"Exp", {{2, 3}}},
      {"Log", {{2, 3}}},
      {"Erf", {{2, 3}}},
      {"Sigmoid", {{2, 3}}},
      {"Tanh", {{2, 3}}},
      {"Reciprocal", {{2, 3}}},
      {"LeakyRelu", {{2, 3}}},
      {"Clip", {{2, 3}}},
      {"Mod", {{2, 3}, {3}}},
      {"HardSigmoid", {{2, 3}}},
      {"HardSwish", {{2, 3}}},
      {"MatMul", {{2, 2, 3}, {3, 4}}},
      {"Gemm", {{2, 3}, {3, 4}, {4}}},
      {"Conv", {{1, 2, 5, 5}, {3, 2, 3, 3}, {3}}},
      {"MaxPool", {{1, 2, 5, 5}}},
      {"AveragePool", {{1, 2, 5, 5}}},
      {"GlobalAveragePool", {{1, 2, 4, 4}}},
  };
  return *inputs;
}

// Attributes an op needs to run at all.
std::map<std::string, AttributeValue> OverwritingOpAttributes(const std::string& op) {
  if (op == "Mod") return {{"fmod", int64_t{1}}};  // float Mod is C's fmod
  if (op == "MaxPool" || op == "AveragePool") {
    return {{"kernel_shape", std::vector<int64_t>{2, 2}},
            {"pads", std::vector<int64_t>{1, 1, 1, 1}}};
  }
  return {};
}

// Positive values (Log, Sqrt and Pow need them), distinct per input.
Tensor Input(const Shape& shape, int seed) {
  Tensor t = *Tensor::Create(DType::kFloat32, shape);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = 0.25f + 0.5f * ((i * 7 + seed * 3) % 5);
  return t;
}

TEST(OpsTest, WritesEveryOutputOpsOverwriteEveryElement) {
  for (const std::string& op : SupportedOps()) {
    const OpDef& def = *FindOp(op);
    if (!def.writes_every_output) continue;
    SCOPED_TRACE(op);
    auto it = OverwritingOpInputs().find(op);
    ASSERT_NE(it, OverwritingOpInputs().end()) << "add input shapes for " << op;
    Node node{op + "_0", op, "", {}, {"y"}, OverwritingOpAttributes(op), nullptr};
    std::vector<Tensor> inputs;
    std::vector<TensorType> types;
    for (size_t i = 0; i < it->second.size(); ++i) {
      node.inputs.push_back(absl::StrCat("x", i));
      inputs.push_back(Input(it->second[i], static_cast<int>(i)));
      types.push_back({DType::kFloat32, it->second[i]});
    }
    OpContext ctx{node, 17, {}, {}};
    for (size_t i = 0; i < inputs.size(); ++i) {
      ctx.types.push_back(&types[i]);
      ctx.values.push_back(&inputs[i]);
    }
    auto out_types = def.infer(ctx);
    ASSERT_TRUE(out_types.ok()) << out_types.status();
    // The same run into zeroed outputs and into outputs full of NaN.
    std::vector<Tensor> zeroed;
    for (const TensorType& t : *out_types) zeroed.push_back(*Tensor::Create(t.dtype, t.shape));
    auto dirty = CreateOutputs(def, *out_types);
    ASSERT_TRUE(dirty.ok()) << dirty.status();
    for (Tensor& t : *dirty) {
      float* p = t.mutable_data<float>();
      for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = std::numeric_limits<float>::quiet_NaN();
    }
    ASSERT_TRUE(def.run(ctx, absl::MakeSpan(zeroed)).ok());
    ASSERT_TRUE(def.run(ctx, absl::MakeSpan(*dirty)).ok());
    for (size_t k = 0; k < zeroed.size(); ++k) {
      ASSERT_GT(zeroed[k].num_elements(), 0);
      EXPECT_EQ(std::memcmp(zeroed[k].raw_data(), (*dirty)[k].raw_data(), zeroed[k].byte_size()),
                0);
    }
  }
}

TEST(OpsTest, CreateOutputsZeroFillsForOpsThatDoNotSayTheyOverwrite) {
  const OpDef& def = *FindOp("ReduceSum");
  ASSERT_FALSE(def.writes_every_output);
  const TensorType type{DType::kFloat32, {64, 64}};
  {  // Leave dirty memory of the same size behind for the allocator to reuse.
    auto dirty = CreateOutputs(*FindOp("Relu"), {type});
    ASSERT_TRUE(dirty.ok());
    for (float& v : absl::MakeSpan((*dirty)[0].mutable_data<float>(), 64 * 64)) v = 7.0f;
  }
  auto outputs = CreateOutputs(def, {type});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ASSERT_EQ(outputs->size(), 1u);
  for (float v : (*outputs)[0].values<float>()) ASSERT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace ipupod::graph
