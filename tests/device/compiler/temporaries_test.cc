// The IPUConfig options that change the memory plan and simulated time:
// matmul_proportion (per IPU, and a node's own set_available_memory),
// embedding_serialization_factor, replicated_tensor_sharding and
// recompute_checkpoint_every_layer at layer granularity.
#include "device/compiler/temporaries.h"

#include <memory>
#include <set>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/compiler/layer_blocks.h"
#include "device/compiler/memory_plan.h"
#include "device/graph/interpreter.h"
#include "device/graph/onnx_import.h"
#include "device/graph/ops.h"
#include "device/hardware.h"
#include "tests/device/compiler/test_models.h"

namespace ipupod::compiler {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using testing::GptBuilder;
using testing::GptSpec;
using ::testing::HasSubstr;

constexpr int64_t kMemory = 900'000'000;

std::unique_ptr<graph::Interpreter> Load(const std::string& bytes) {
  auto g = graph::ImportOnnx(bytes);
  EXPECT_TRUE(g.ok()) << g.status();
  auto interp = graph::Interpreter::Create(*std::move(g));
  EXPECT_TRUE(interp.ok()) << interp.status();
  return *std::move(interp);
}

PlanOptions Options(int64_t ipus, ExecutionStrategy strategy = ExecutionStrategy::kPipelined) {
  PlanOptions o;
  o.strategy = strategy;
  o.count = {ipus, 1, ipus, ipus};
  o.device_iterations = 4;
  return o;
}

Placement Place(const graph::Graph& g, std::vector<int64_t> layers, int64_t ipus) {
  auto p = PlaceByLayers(g, layers, ipus);
  EXPECT_TRUE(p.ok()) << p.status();
  return *p;
}

// d 64, micro-batch 64 x 512 tokens: the mlp's fc product needs 8.4 MB
// (input) + 65.5 kB (weight) + 33.6 MB (output) of temporary.
GptSpec Big(int layers) { return GptSpec{.layers = layers, .d = 64, .batch = 64, .seq = 512}; }

const graph::Node& NodeNamed(const graph::Graph& g, const std::string& name) {
  for (const graph::Node& n : g.nodes) {
    if (n.name == name) return n;
  }
  ADD_FAILURE() << "no node " << name;
  return g.nodes.front();
}

TEST(TemporariesTest, ProductsRunInMorePassesUnderASmallerProportion) {
  auto interp = Load(GptBuilder(Big(1)).Bytes());
  const graph::Graph& g = interp->graph();
  const graph::Node& fc = NodeNamed(g, "/h.0/mlp/fc/MatMul");
  const int64_t natural = 64 * 512 * 64 * 4 + 64 * 256 * 4 + 64 * 512 * 256 * 4;
  NodeTemporary t = PlanNodeTemporary(g, fc, 0.6, kMemory, std::nullopt);
  EXPECT_EQ(t.natural_bytes, natural);
  EXPECT_EQ(t.passes, 1);
  EXPECT_EQ(t.bytes, natural);
  t = PlanNodeTemporary(g, fc, 0.01, kMemory, std::nullopt);  // cap 9 MB
  EXPECT_EQ(t.passes, (natural + 9'000'000 - 1) / 9'000'000);
  EXPECT_LE(t.bytes, 9'000'000);
  // A proportion of 0 still leaves one tile's memory.
  t = PlanNodeTemporary(g, fc, 0.0, kMemory, std::nullopt);
  EXPECT_LE(t.bytes, kMemory / device::kGc200.tiles);
  // Element-wise ops have no modelled temporary.
  EXPECT_EQ(PlanNodeTemporary(g, NodeNamed(g, "/h.0/mlp/act/Relu"), 0.6, kMemory, std::nullopt)
                .natural_bytes,
            0);
}

// A convolution's temporary: its expanded input windows, weights and output.
TEST(TemporariesTest, ConvolutionsHaveTemporariesToo) {
  testing::OnnxBuilder b(14);
  b.Input("x", graph::testing::kFloat, {2, 3, 8, 8});
  b.Output("y", graph::testing::kFloat, {2, 4, 8, 8});
  b.Floats("w", {4, 3, 3, 3}, testing::Zeros(4 * 3 * 3 * 3));
  auto& conv = b.Node("Conv", {"x", "w"}, {"y"}, "/conv/Conv");
  testing::OnnxBuilder::AttrInts(conv, "kernel_shape", {3, 3});
  testing::OnnxBuilder::AttrInts(conv, "pads", {1, 1, 1, 1});
  auto interp = Load(b.Bytes());
  const graph::Graph& g = interp->graph();
  // 2 images x 3 channels x (8 x 3) x (8 x 3) window elements, 432 B of
  // weights, 2048 B of output.
  const int64_t natural = 2 * 3 * 24 * 24 * 4 + 432 + 2048;
  NodeTemporary t = PlanNodeTemporary(g, g.nodes[0], 0.6, kMemory, std::nullopt);
  EXPECT_EQ(t.natural_bytes, natural);
  EXPECT_EQ(t.passes, 1);
  // With a memory of 1472 tiles x 4 kB and proportion 0, one tile's 4 kB.
  t = PlanNodeTemporary(g, g.nodes[0], 0.0, 1472 * 4096, std::nullopt);
  EXPECT_EQ(t.passes, (natural + 4095) / 4096);
  EXPECT_LE(t.bytes, 4096);
}

TEST(TemporariesTest, MatmulProportionPerIpuChangesMemoryAndTime) {
  auto interp = Load(GptBuilder(Big(2)).Bytes());
  const graph::Graph& g = interp->graph();
  const Placement p = Place(g, {1, 1}, 2);
  PlanOptions o = Options(2);
  auto roomy = PlanMemory(g, interp->node_costs(), p, o);
  o.matmul_proportion = PerIpuFloat{{0.01, 0.6}, true};
  auto tight = PlanMemory(g, interp->node_costs(), p, o);
  ASSERT_TRUE(roomy.ok() && tight.ok()) << roomy.status() << tight.status();
  // IPU 1 keeps 0.6: unchanged. IPU 0 at 0.01 caps its products at 9 MB.
  EXPECT_EQ(tight->ipus[1].temporary_bytes, roomy->ipus[1].temporary_bytes);
  EXPECT_EQ(tight->ipus[1].serial_passes, 0);
  EXPECT_GT(roomy->ipus[0].temporary_bytes, 9'000'000);
  EXPECT_LE(tight->ipus[0].temporary_bytes, 9'000'000);
  EXPECT_EQ(tight->ipus[0].total_bytes - roomy->ipus[0].total_bytes,
            tight->ipus[0].temporary_bytes - roomy->ipus[0].temporary_bytes);
  EXPECT_GT(tight->ipus[0].serial_passes, 0);
  EXPECT_DOUBLE_EQ(tight->ipus[0].compute_s - roomy->ipus[0].compute_s,
                   tight->ipus[0].serial_passes * kSerialPassSeconds);
  EXPECT_GT(tight->step_s, roomy->step_s);  // IPU 0 is the slower
  EXPECT_THAT(tight->Table(), HasSubstr("serial passes"));
  // Written to the report's JSON and read back.
  auto back = ReportFromJson(tight->Json());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Json(), tight->Json());
}

TEST(TemporariesTest, ANodesOwnProportionOverridesTheConfig) {
  auto interp = Load(GptBuilder(Big(1)).Bytes());
  graph::Graph g = interp->graph();
  const Placement p = Place(g, {-1}, 1);
  auto before = PlanMemory(g, interp->node_costs(), p, Options(1));
  for (graph::Node& n : g.nodes) {
    if (n.op_type == "MatMul") n.attributes[std::string(graph::kAvailableMemoryProportion)] = 0.01f;
  }
  auto after = PlanMemory(g, interp->node_costs(), p, Options(1));
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_EQ(before->ipus[0].serial_passes, 0);
  EXPECT_GT(after->ipus[0].serial_passes, 0);
  EXPECT_LT(after->ipus[0].temporary_bytes, before->ipus[0].temporary_bytes);
}

// poptorch.serializedMatMul's attributes on the mlp's fc product: A [64,
// 512, 64] 8.4 MB, B [64, 256] 65.5 kB, output [64, 512, 256] 33.6 MB.
TEST(TemporariesTest, SerializedMatMulSplitsOneOperandAndTheOutput) {
  auto interp = Load(GptBuilder(Big(1)).Bytes());
  graph::Graph g = interp->graph();
  const int64_t a = 64 * 512 * 64 * 4, b = 64 * 256 * 4, out = 64 * 512 * 256 * 4;
  auto plan = [&](const std::string& mode, int64_t factor) {
    for (graph::Node& n : g.nodes) {
      if (n.name != "/h.0/mlp/fc/MatMul") continue;
      n.attributes[std::string(graph::kSerializationMode)] = mode;
      n.attributes[std::string(graph::kSerializationFactor)] = factor;
      EXPECT_TRUE(CheckPlanningAttributes(g).ok()) << CheckPlanningAttributes(g);
      return PlanNodeTemporary(g, n, 0.6, kMemory, std::nullopt);
    }
    return NodeTemporary{};
  };
  NodeTemporary t = plan("output_channels", 4);
  EXPECT_EQ(t.passes, 4);
  EXPECT_EQ(t.bytes, a + b / 4 + out / 4);
  t = plan("input_channels", 8);
  EXPECT_EQ(t.passes, 8);
  EXPECT_EQ(t.bytes, a / 8 + b + out / 8);
  t = plan("reducing_dim", 4);  // the whole output holds partials
  EXPECT_EQ(t.passes, 4);
  EXPECT_EQ(t.bytes, a / 4 + b / 4 + out);
  // In the plan: less temporary, more passes, more time.
  const Placement p = Place(g, {-1}, 1);
  plan("output_channels", 4);
  auto serialized = PlanMemory(g, interp->node_costs(), p, Options(1));
  auto plain = PlanMemory(interp->graph(), interp->node_costs(), p, Options(1));
  ASSERT_TRUE(serialized.ok() && plain.ok()) << serialized.status();
  EXPECT_EQ(serialized->ipus[0].serial_passes, plain->ipus[0].serial_passes + 3);
  EXPECT_GT(serialized->step_s, plain->step_s);
}

TEST(TemporariesTest, BadPlanningAttributesNameTheNode) {
  auto interp = Load(GptBuilder(GptSpec{.layers = 1}).Bytes());  // fc: [2, 4, 8] x [8, 32]
  struct Case {
    std::string mode;
    int64_t factor;
    float proportion;
    std::string message;
  };
  const Case cases[] = {
      {"output_channels", 3, 0.5f,
       "serialization_factor 3 does not divide the output_channels "
       "dimension (32); use a divisor of 32"},
      {"reducing_dim", 16, 0.5f, "does not divide the reducing_dim dimension (8)"},
      {"sideways", 2, 0.5f,
       "serialization_mode must be input_channels, reducing_dim or "
       "output_channels"},
      {"input_channels", 2, 1.5f, "available_memory_proportion must be a number between 0 and 1"},
  };
  for (const Case& c : cases) {
    graph::Graph g = interp->graph();
    for (graph::Node& n : g.nodes) {
      if (n.name != "/h.0/mlp/fc/MatMul") continue;
      n.attributes[std::string(graph::kSerializationMode)] = c.mode;
      n.attributes[std::string(graph::kSerializationFactor)] = c.factor;
      n.attributes[std::string(graph::kAvailableMemoryProportion)] = c.proportion;
    }
    auto r = PlanMemory(g, interp->node_costs(), Place(g, {-1}, 1), Options(1));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.mode;
    EXPECT_THAT(r.status().message(),
                AllOf(HasSubstr("MatMul node '/h.0/mlp/fc/MatMul'"), HasSubstr(c.message)));
  }
}

TEST(TemporariesTest, EmbeddingSerializationPadsAndSlicesTheVocabulary) {
  auto interp = Load(GptBuilder(GptSpec{.layers = 1, .vocab = 16}).Bytes());
  const graph::Graph& g = interp->graph();
  auto none = FindSerializedEmbedding(g, 1);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto e = FindSerializedEmbedding(g, 3);
  ASSERT_TRUE(e.ok() && e->has_value()) << e.status();
  EXPECT_EQ((*e)->table, "wte.weight");
  EXPECT_EQ((*e)->vocab, 16);
  EXPECT_EQ((*e)->padded_vocab, 18);  // optimum's resize to a multiple of 3
  EXPECT_EQ((*e)->PaddingBytes(), 2 * 8 * 4);
  const graph::Node& lookup = NodeNamed(g, "/wte/Gather");
  const NodeTemporary plain = PlanNodeTemporary(g, lookup, 0.6, kMemory, std::nullopt);
  const NodeTemporary sliced = PlanNodeTemporary(g, lookup, 0.6, kMemory, *e);
  EXPECT_EQ(plain.passes, 1);
  EXPECT_EQ(sliced.passes, 3);
  EXPECT_EQ(sliced.natural_bytes, plain.natural_bytes + 64);
  EXPECT_LT(sliced.bytes, plain.bytes);
  // A factor larger than the vocabulary cannot be sliced.
  auto bad = FindSerializedEmbedding(g, 17);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              AllOf(HasSubstr("embedding_serialization_factor is 17"), HasSubstr("'wte.weight'"),
                    HasSubstr("vocabulary of 16 rows"), HasSubstr("between 1 and 16")));
}

TEST(TemporariesTest, EmbeddingSerializationInThePlan) {
  auto interp = Load(GptBuilder(GptSpec{.layers = 1}).Bytes());
  const graph::Graph& g = interp->graph();
  const Placement p = Place(g, {-1}, 1);
  PlanOptions o = Options(1);
  auto plain = PlanMemory(g, interp->node_costs(), p, o);
  o.embedding_serialization_factor = 3;
  auto sliced = PlanMemory(g, interp->node_costs(), p, o);
  ASSERT_TRUE(plain.ok() && sliced.ok());
  EXPECT_EQ(sliced->ipus[0].weight_bytes, plain->ipus[0].weight_bytes + 64);
  EXPECT_EQ(sliced->ipus[0].serial_passes, 2);
  EXPECT_GT(sliced->step_s, plain->step_s);
  EXPECT_THAT(sliced->notes, ::testing::Contains(HasSubstr("looked up in 3 slices of 6 rows")));
  o.embedding_serialization_factor = 17;
  EXPECT_EQ(PlanMemory(g, interp->node_costs(), p, o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TemporariesTest, EmbeddingSerializationWithoutALookupSaysItChangesNothing) {
  auto interp = Load(testing::MlpBytes());
  const graph::Graph& g = interp->graph();
  const Placement p = Place(g, {-1}, 1);
  PlanOptions o = Options(1);
  auto plain = PlanMemory(g, interp->node_costs(), p, o);
  o.embedding_serialization_factor = 2;
  auto factor = PlanMemory(g, interp->node_costs(), p, o);
  ASSERT_TRUE(plain.ok() && factor.ok());
  EXPECT_EQ(factor->ipus[0].total_bytes, plain->ipus[0].total_bytes);
  EXPECT_THAT(factor->notes,
              ElementsAre(AllOf(HasSubstr("embedding_serialization_factor 2 changes nothing"),
                                HasSubstr("SerializedEmbedding"))));
}

// GPT-2 ties its LM head to the word embedding: lm_head reads wte.weight
// transposed, as torch exports x @ wte.weight.T.
TEST(TemporariesTest, EmbeddingSerializationAlsoSerializesATiedHead) {
  auto interp = Load(GptBuilder(GptSpec{.layers = 1}).Bytes());  // vocab 16, d 8
  graph::Graph g = interp->graph();
  std::vector<graph::NodeCost> costs = interp->node_costs();
  size_t head = 0;
  while (g.nodes[head].name != "/lm_head/MatMul") ++head;
  graph::Node transpose;
  transpose.name = "/lm_head/Transpose";
  transpose.op_type = "Transpose";
  transpose.module_path = "lm_head";
  transpose.inputs = {"wte.weight"};
  transpose.outputs = {"wte.weight.T"};
  g.value_types["wte.weight.T"] = graph::TensorType{tensor::DType::kFloat32, {8, 16}};
  g.nodes[head].inputs[1] = "wte.weight.T";
  g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(head), transpose);
  costs.insert(costs.begin() + static_cast<std::ptrdiff_t>(head),
               graph::NodeCost{transpose.name, "Transpose", "lm_head", 0});
  auto e = FindSerializedEmbedding(g, 4);
  ASSERT_TRUE(e.ok() && e->has_value()) << e.status();
  EXPECT_EQ((*e)->tied_products, std::set<std::string>{"/lm_head/MatMul"});
  const graph::Node& lm_head = NodeNamed(g, "/lm_head/MatMul");
  const NodeTemporary t = PlanNodeTemporary(g, lm_head, 0.6, kMemory, *e);
  const int64_t a = 2 * 4 * 8 * 4, b = 8 * 16 * 4, out = 2 * 4 * 16 * 4;
  EXPECT_EQ(t.passes, 4);
  EXPECT_EQ(t.bytes, a + b / 4 + out / 4);
  PlanOptions o = Options(1);
  o.embedding_serialization_factor = 4;
  auto r = PlanMemory(g, costs, Place(g, {-1}, 1), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ipus[0].serial_passes, 3 + 3);  // the lookup's and the head's
  EXPECT_THAT(r->notes, ::testing::Contains(HasSubstr(
                            "its tied product '/lm_head/MatMul' runs in 4 passes over its "
                            "output channels")));
}

PlanOptions Training(const graph::Graph& g, int64_t ipus, int64_t slots) {
  PlanOptions o = Options(ipus);
  o.training.emplace();
  o.training->gradient_accumulation_steps = 4;
  for (const auto& [name, tensor] : g.initializers)
    o.training->state_element_bytes[name] = 4 * slots;
  return o;
}

TEST(TemporariesTest, ReplicatedTensorShardingSplitsOptimizerState) {
  auto interp = Load(GptBuilder(GptSpec{.layers = 2}).Bytes());
  const graph::Graph& g = interp->graph();
  const Placement p = Place(g, {1, 1}, 2);
  PlanOptions o = Training(g, 2, 2);
  o.count = {2, 4, 8, 8};
  auto whole = PlanMemory(g, interp->node_costs(), p, o);
  o.training->replicated_tensor_sharding = true;
  auto sharded = PlanMemory(g, interp->node_costs(), p, o);
  ASSERT_TRUE(whole.ok() && sharded.ok());
  const IpuPlan& a = sharded->ipus[0];
  EXPECT_EQ(a.optimizer_state_bytes, whole->ipus[0].optimizer_state_bytes / 4);
  EXPECT_EQ(a.total_bytes,
            whole->ipus[0].total_bytes - whole->ipus[0].optimizer_state_bytes * 3 / 4);
  // Reduce-scatter of gradients + all-gather of weights: the all-reduce's bytes.
  EXPECT_EQ(a.all_reduce_bytes, whole->ipus[0].all_reduce_bytes);
  EXPECT_TRUE(sharded->replicated_tensor_sharding);
  EXPECT_THAT(sharded->Table(), AllOf(HasSubstr("optimizer state sharded over 4 replicas"),
                                      HasSubstr("(reduce-scatter of gradients and all-gather of "
                                                "weights, ")));
  EXPECT_THAT(whole->Table(), HasSubstr("(all-reduce of "));
  // Off-chip, the state's host traffic per weight update shrinks as much.
  o.training->optimizer_state_offchip = true;
  auto offchip = PlanMemory(g, interp->node_costs(), p, o);
  o.training->replicated_tensor_sharding = false;
  auto offchip_whole = PlanMemory(g, interp->node_costs(), p, o);
  ASSERT_TRUE(offchip.ok() && offchip_whole.ok());
  EXPECT_DOUBLE_EQ(offchip->ipus[0].update_host_s * 4, offchip_whole->ipus[0].update_host_s);
  EXPECT_LT(offchip->step_s, offchip_whole->step_s);
  // One replica: nothing to shard over.
  o.count = {2, 1, 2, 2};
  o.training->replicated_tensor_sharding = true;
  auto single = PlanMemory(g, interp->node_costs(), p, o);
  ASSERT_TRUE(single.ok());
  EXPECT_FALSE(single->replicated_tensor_sharding);
}

// Nine layers of 101 MB of values per micro-batch on one IPU: with
// checkpoints only at the stage boundary the recompute needs all of them at
// once (over 900 MB); with one per layer, the checkpoints and one layer.
TEST(TemporariesTest, PerLayerRecomputeFitsWherePerStageDoesNot) {
  auto interp = Load(GptBuilder(Big(9)).Bytes());
  const graph::Graph& g = interp->graph();
  const Placement p = Place(g, {-1}, 1);
  PlanOptions o = Training(g, 1, 2);
  o.device_iterations = 1;
  o.training->recompute_checkpoint_every_layer = true;
  auto per_stage = PlanMemory(g, interp->node_costs(), p, o);
  auto blocks = FindLayerBlocks(g);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  o.training->node_layer = blocks->node_layer;
  auto per_layer = PlanMemory(g, interp->node_costs(), p, o);
  ASSERT_TRUE(per_stage.ok() && per_layer.ok());
  EXPECT_EQ(per_stage->recompute_checkpoints, "stage");
  EXPECT_EQ(per_layer->recompute_checkpoints, "layer");
  const absl::Status stage_fits = CheckMemoryFits(*per_stage);
  EXPECT_EQ(stage_fits.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(stage_fits.message(), HasSubstr("out of memory on IPU 0"));
  EXPECT_TRUE(CheckMemoryFits(*per_layer).ok()) << CheckMemoryFits(*per_layer);
  // One layer's values to recompute in: x, a, r, o, y 8.4 MB, m and g 33.6 MB.
  const int64_t x = 64 * 512 * 64 * 4;
  EXPECT_EQ(per_layer->ipus[0].recompute_bytes, 5 * x + 2 * 4 * x);
  EXPECT_LT(per_layer->ipus[0].activation_bytes, per_stage->ipus[0].activation_bytes / 4);
  // Both recompute every forward: the same FLOPs (4x the forward).
  EXPECT_EQ(per_layer->ipus[0].flops, per_stage->ipus[0].flops);
  EXPECT_THAT(per_layer->Table(), HasSubstr("checkpoints at every layer boundary"));
}

}  // namespace
}  // namespace ipupod::compiler
