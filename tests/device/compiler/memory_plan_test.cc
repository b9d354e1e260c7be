#include "device/compiler/memory_plan.h"

#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "device/compiler/layer_blocks.h"
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
using ::testing::Not;
using testing::OnnxBuilder;

constexpr const device::IpuSpec& kIpu = device::kGc200;
constexpr int64_t kBaseCode = int64_t{1472} * kCodeBytesPerTile;

std::unique_ptr<graph::Interpreter> Load(const std::string& bytes) {
  auto g = graph::ImportOnnx(bytes);
  EXPECT_TRUE(g.ok()) << g.status();
  auto interp = graph::Interpreter::Create(*std::move(g));
  EXPECT_TRUE(interp.ok()) << interp.status();
  return *std::move(interp);
}

PlanOptions Options(ExecutionStrategy strategy, int64_t ipus, int64_t device_iterations) {
  PlanOptions o;
  o.strategy = strategy;
  o.count = {ipus, 1, ipus, ipus};
  o.micro_batch_size = 2;
  o.device_iterations = device_iterations;
  return o;
}

// GPT spec d=8, vocab=16, batch 2 x seq 4, two layers, one per IPU.
struct TwoIpuGpt : public ::testing::Test {
  void SetUp() override {
    interp = Load(GptBuilder(GptSpec{.layers = 2}).Bytes());
    auto p = PlaceByLayers(interp->graph(), {1, 1}, 2);
    ASSERT_TRUE(p.ok()) << p.status();
    placement = *p;
  }
  std::unique_ptr<graph::Interpreter> interp;
  Placement placement;
};

TEST_F(TwoIpuGpt, WeightsActivationsAndCodePerIpu) {
  auto r = PlanMemory(interp->graph(), interp->node_costs(), placement,
                      Options(ExecutionStrategy::kPipelined, 2, 2));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->ipus.size(), 2u);
  const IpuPlan& a = r->ipus[0];
  const IpuPlan& b = r->ipus[1];
  // wte 16x8 + attn 8x8 + fc 8x32 + proj 32x8 floats.
  EXPECT_EQ(a.weight_bytes, 512 + 2304);
  EXPECT_EQ(b.weight_bytes, 2304 + 32 + 512);
  // Peak of one micro-batch: the residual (256 B) + fc out (1024 B) + Relu
  // out (1024 B). Stage 0 of 2 holds 2 micro-batches, stage 1 holds 1.
  EXPECT_EQ(a.activation_bytes_per_micro_batch, 2304);
  EXPECT_EQ(a.micro_batches_in_flight, 2);
  EXPECT_EQ(a.activation_bytes, 4608);
  EXPECT_EQ(b.activation_bytes, 2304);
  EXPECT_EQ(a.nodes, 7);
  EXPECT_EQ(b.nodes, 8);
  EXPECT_EQ(a.code_bytes, kBaseCode + 7 * kCodeBytesPerNode);
  EXPECT_EQ(a.total_bytes, a.weight_bytes + a.activation_bytes + a.temporary_bytes + a.code_bytes);
  EXPECT_THAT(a.stages, ElementsAre(0));
  EXPECT_THAT(b.stages, ElementsAre(1));
}

TEST_F(TwoIpuGpt, TrafficAndTime) {
  auto r = PlanMemory(interp->graph(), interp->node_costs(), placement,
                      Options(ExecutionStrategy::kPipelined, 2, 2));
  ASSERT_TRUE(r.ok()) << r.status();
  const IpuPlan& a = r->ipus[0];
  const IpuPlan& b = r->ipus[1];
  EXPECT_EQ(a.flops + b.flops, interp->total_flops());
  EXPECT_EQ(a.ipu_link_bytes, 256);  // h.0's output, float [2, 4, 8]
  EXPECT_EQ(b.ipu_link_bytes, 0);
  EXPECT_EQ(a.host_in_bytes, 64);    // ids, int64 [2, 4]
  EXPECT_EQ(b.host_out_bytes, 512);  // logits, float [2, 4, 16]
  EXPECT_DOUBLE_EQ(a.compute_s, a.flops / kIpu.fp32_flops);
  EXPECT_DOUBLE_EQ(a.ipu_link_s, 256 / kIpu.ipu_link_bytes_per_s);
  EXPECT_DOUBLE_EQ(b.host_s, 512 / kIpu.host_link_bytes_per_s);
  // Pipelined: (2 iterations + 2 stages - 1) x the slower IPU.
  EXPECT_DOUBLE_EQ(r->step_s, 3 * std::max(a.busy_s(), b.busy_s()));
  EXPECT_DOUBLE_EQ(r->samples_per_s, 4 / r->step_s);
}

TEST_F(TwoIpuGpt, ShardedHoldsOneMicroBatchAndSerializes) {
  auto r = PlanMemory(interp->graph(), interp->node_costs(), placement,
                      Options(ExecutionStrategy::kSharded, 2, 2));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ipus[0].activation_bytes, 2304);
  EXPECT_EQ(r->ipus[0].micro_batches_in_flight, 1);
  EXPECT_DOUBLE_EQ(r->step_s, 2 * (r->ipus[0].busy_s() + r->ipus[1].busy_s()));
}

TEST_F(TwoIpuGpt, FinalOutputModeReturnsOnePerStep) {
  PlanOptions o = Options(ExecutionStrategy::kPipelined, 2, 4);
  o.output_mode.kind = OutputMode::Kind::kFinal;
  auto r = PlanMemory(interp->graph(), interp->node_costs(), placement, o);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->ipus[1].host_s, 512 / 4.0 / kIpu.host_link_bytes_per_s);
}

TEST_F(TwoIpuGpt, ReportTableAndJsonRoundTrip) {
  auto r = PlanMemory(interp->graph(), interp->node_costs(), placement,
                      Options(ExecutionStrategy::kPipelined, 2, 2));
  ASSERT_TRUE(r.ok());
  r->notes = {"a note"};
  const std::string table = r->Table();
  EXPECT_THAT(table, AllOf(HasSubstr("IPU  stages"), HasSubstr("2 IPUs per replica"),
                           HasSubstr("pipelined over 2 stages"),
                           HasSubstr("micro-batch 2 x 2 device iterations x 1 replica = 4 samples"),
                           HasSubstr("per step"), HasSubstr("note: a note")));
  auto back = ReportFromJson(r->Json(2));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Table(), table);
  EXPECT_EQ(back->ipus[1].largest.size(), r->ipus[1].largest.size());
  EXPECT_EQ(ReportFromJson("{}").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReportFromJson("nope").status().code(), absl::StatusCode::kInvalidArgument);
  // A report read from an .ipx may come from anywhere: types are checked, keys are known.
  nlohmann::json doc = nlohmann::json::parse(r->Json());
  doc["ipus"][1]["nodes"] = "3";
  EXPECT_THAT(ReportFromJson(doc.dump()).status().message(),
              AllOf(HasSubstr("ipus[1].nodes"), HasSubstr("expected an integer")));
  doc = nlohmann::json::parse(r->Json());
  doc["ipus"][0]["largest_tensors"][0]["kind"] = "gradient";
  EXPECT_THAT(ReportFromJson(doc.dump()).status().message(), HasSubstr("'gradient'"));
  doc = nlohmann::json::parse(r->Json());
  doc["step_seconds"] = 1.0;
  EXPECT_THAT(ReportFromJson(doc.dump()).status().message(),
              AllOf(HasSubstr("unknown compile report key 'step_seconds'"), HasSubstr("step_s")));
  // The replicas' buffer copies (broadcast_buffers=false) read back; never negative.
  doc = nlohmann::json::parse(r->Json());
  doc["replica_buffer_bytes"] = 4000;
  auto copies = ReportFromJson(doc.dump());
  ASSERT_TRUE(copies.ok()) << copies.status();
  EXPECT_EQ(copies->host_bytes(), r->host_bytes() + 4000);
  doc["replica_buffer_bytes"] = -4000;
  EXPECT_EQ(ReportFromJson(doc.dump()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ReportFromJson(doc.dump()).status().message(),
              AllOf(HasSubstr("replica_buffer_bytes"), HasSubstr("is negative")));
}

// Training over the same two IPUs: every weight trainable with `slots`
// optimizer state slots.
PlanOptions TrainingOptions(ExecutionStrategy strategy, const graph::Graph& g, int64_t slots,
                            int64_t accumulation) {
  PlanOptions o = Options(strategy, 2, 2);
  o.training.emplace();
  o.training->gradient_accumulation_steps = accumulation;
  for (const auto& [name, tensor] : g.initializers)
    o.training->state_element_bytes[name] = 4 * slots;
  return o;
}

TEST_F(TwoIpuGpt, TrainingCountsGradientsAndOptimizerState) {
  PlanOptions o = TrainingOptions(ExecutionStrategy::kPipelined, interp->graph(), 2, 3);  // adam
  auto r = PlanMemory(interp->graph(), interp->node_costs(), placement, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->mode, "training");
  const IpuPlan& a = r->ipus[0];
  EXPECT_EQ(a.weight_bytes, 512 + 2304);
  EXPECT_EQ(a.gradient_bytes, a.weight_bytes);
  EXPECT_EQ(a.optimizer_state_bytes, 2 * a.weight_bytes);
  EXPECT_EQ(a.optimizer_state_offchip_bytes, 0);
  EXPECT_EQ(a.total_bytes, a.weight_bytes + a.gradient_bytes + a.optimizer_state_bytes +
                               a.activation_bytes + a.temporary_bytes + a.code_bytes);
  EXPECT_EQ(a.update_host_s, 0);
  // A frozen weight has neither gradient nor state.
  o.training->state_element_bytes.erase("wte.weight");
  auto frozen = PlanMemory(interp->graph(), interp->node_costs(), placement, o);
  ASSERT_TRUE(frozen.ok());
  EXPECT_EQ(frozen->ipus[0].gradient_bytes, 2304);
  EXPECT_EQ(frozen->ipus[0].optimizer_state_bytes, 2 * 2304);
}

TEST_F(TwoIpuGpt, OffchipStateLeavesTheTotalAndCostsHostTime) {
  PlanOptions o = TrainingOptions(ExecutionStrategy::kPipelined, interp->graph(), 2, 3);
  auto on_chip = PlanMemory(interp->graph(), interp->node_costs(), placement, o);
  o.training->optimizer_state_offchip = true;
  auto off = PlanMemory(interp->graph(), interp->node_costs(), placement, o);
  ASSERT_TRUE(on_chip.ok() && off.ok());
  const IpuPlan& a = off->ipus[0];
  EXPECT_EQ(a.optimizer_state_bytes, 0);
  EXPECT_EQ(a.optimizer_state_offchip_bytes, 2 * a.weight_bytes);
  EXPECT_EQ(a.total_bytes, on_chip->ipus[0].total_bytes - 2 * a.weight_bytes);
  // Read and written once per weight update: 2 device iterations = 2 updates.
  EXPECT_DOUBLE_EQ(a.update_host_s,
                   2.0 * a.optimizer_state_offchip_bytes / kIpu.host_link_bytes_per_s);
  const double slowest_update = std::max(a.update_s(), off->ipus[1].update_s());
  EXPECT_DOUBLE_EQ(off->step_s, on_chip->step_s + 2 * slowest_update);
}

TEST_F(TwoIpuGpt, TrainingStashesActivationsAndRecomputeLowersThem) {
  PlanOptions o = TrainingOptions(ExecutionStrategy::kPipelined, interp->graph(), 0, 3);
  auto r = PlanMemory(interp->graph(), interp->node_costs(), placement, o);
  ASSERT_TRUE(r.ok());
  const IpuPlan& a = r->ipus[0];
  const IpuPlan& b = r->ipus[1];
  // Stage 0 of 2 stashes 2(2-0)-1 = 3 micro-batches, stage 1 one. Kept per
  // micro-batch: every value the stage makes or reads. Stage 0: ids 64 B,
  // x0, a, r, o, y 256 B each, m and g 1024 B each.
  EXPECT_EQ(a.micro_batches_in_flight, 3);
  EXPECT_EQ(b.micro_batches_in_flight, 1);
  EXPECT_EQ(a.activation_bytes_per_micro_batch, 64 + 5 * 256 + 2 * 1024);
  EXPECT_EQ(a.activation_bytes, 3 * (64 + 5 * 256 + 2 * 1024));
  // Stage 1: h.0.y in, a, r, o, y, xf 256 B, m and g 1024 B, logits 512 B.
  EXPECT_EQ(b.activation_bytes, 256 + 5 * 256 + 2 * 1024 + 512);
  o.training->recompute_checkpoint_every_layer = true;
  auto re = PlanMemory(interp->graph(), interp->node_costs(), placement, o);
  ASSERT_TRUE(re.ok());
  // Without layers, checkpoints at stage boundaries: stage 0 keeps its
  // inputs per micro-batch in flight plus all of one micro-batch's values
  // to recompute in; the last stage of the pipeline is not recomputed.
  EXPECT_EQ(re->ipus[0].recompute_bytes, 64 + 5 * 256 + 2 * 1024);
  EXPECT_EQ(re->ipus[0].activation_bytes, 3 * 64 + re->ipus[0].recompute_bytes);
  EXPECT_EQ(re->ipus[1].recompute_bytes, 0);
  EXPECT_EQ(re->ipus[1].activation_bytes, b.activation_bytes);
  EXPECT_LT(re->ipus[0].activation_bytes, a.activation_bytes);
  EXPECT_TRUE(re->recompute);
  EXPECT_EQ(re->recompute_checkpoints, "stage");
  // Sharded: one micro-batch per stage.
  auto sharded = PlanMemory(interp->graph(), interp->node_costs(), placement,
                            TrainingOptions(ExecutionStrategy::kSharded, interp->graph(), 0, 3));
  ASSERT_TRUE(sharded.ok());
  EXPECT_EQ(sharded->ipus[0].micro_batches_in_flight, 1);
  EXPECT_EQ(sharded->ipus[0].activation_bytes, a.activation_bytes / 3);
}

TEST_F(TwoIpuGpt, TrainingFlopsTrafficAndStepTime) {
  auto inference = PlanMemory(interp->graph(), interp->node_costs(), placement,
                              Options(ExecutionStrategy::kPipelined, 2, 2));
  PlanOptions o = TrainingOptions(ExecutionStrategy::kPipelined, interp->graph(), 0, 3);
  auto r = PlanMemory(interp->graph(), interp->node_costs(), placement, o);
  ASSERT_TRUE(inference.ok() && r.ok());
  const IpuPlan& a = r->ipus[0];
  const IpuPlan& b = r->ipus[1];
  EXPECT_EQ(a.flops, 3 * inference->ipus[0].flops);
  EXPECT_EQ(b.flops, 3 * inference->ipus[1].flops);
  // h.0's output goes forward; its gradient comes back from IPU 1.
  EXPECT_EQ(a.ipu_link_bytes, 256);
  EXPECT_EQ(b.ipu_link_bytes, 256);
  EXPECT_EQ(r->samples_per_step(), 2 * 3 * 2);  // micro-batch x GA x device iterations
  // 2 updates, each (GA 3 + 2 x 2 stages - 2) cycles of the slower IPU; no
  // replicas and state on chip: updates cost nothing.
  EXPECT_DOUBLE_EQ(r->step_s, 2 * 5 * std::max(a.busy_s(), b.busy_s()));
  o.training->recompute_checkpoint_every_layer = true;
  auto re = PlanMemory(interp->graph(), interp->node_costs(), placement, o);
  ASSERT_TRUE(re.ok());
  EXPECT_EQ(re->ipus[0].flops, 4 * inference->ipus[0].flops);
  auto sharded = PlanMemory(interp->graph(), interp->node_costs(), placement,
                            TrainingOptions(ExecutionStrategy::kSharded, interp->graph(), 0, 3));
  ASSERT_TRUE(sharded.ok());
  EXPECT_DOUBLE_EQ(sharded->step_s,
                   2 * 3 * (sharded->ipus[0].busy_s() + sharded->ipus[1].busy_s()));
}

TEST_F(TwoIpuGpt, ReplicasAllReduceGradientsOncePerUpdate) {
  PlanOptions o = TrainingOptions(ExecutionStrategy::kPipelined, interp->graph(), 0, 3);
  o.count = {2, 4, 8, 8};
  auto r = PlanMemory(interp->graph(), interp->node_costs(), placement, o);
  ASSERT_TRUE(r.ok());
  const IpuPlan& a = r->ipus[0];
  EXPECT_EQ(a.all_reduce_bytes, 2 * a.gradient_bytes * 3 / 4);
  EXPECT_DOUBLE_EQ(a.update_ipu_link_s, a.all_reduce_bytes / kIpu.ipu_link_bytes_per_s);
  EXPECT_EQ(r->samples_per_step(), 2 * 3 * 2 * 4);
  const double update = std::max(a.update_s(), r->ipus[1].update_s());
  EXPECT_DOUBLE_EQ(r->step_s, 2 * (5 * std::max(a.busy_s(), r->ipus[1].busy_s()) + update));
}

TEST_F(TwoIpuGpt, TrainingReportTableAndJsonRoundTrip) {
  PlanOptions o = TrainingOptions(ExecutionStrategy::kPipelined, interp->graph(), 2, 3);
  o.training->optimizer_state_offchip = true;
  o.count = {2, 2, 4, 4};
  auto r = PlanMemory(interp->graph(), interp->node_costs(), placement, o);
  ASSERT_TRUE(r.ok());
  const std::string table = r->Table();
  EXPECT_THAT(table,
              AllOf(HasSubstr("gradients"), HasSubstr("opt state"),
                    HasSubstr("micro-batch 2 x 3 accumulated x 2 device iterations x 2 replicas = "
                              "24 samples per step"),
                    HasSubstr("2 weight updates per step"), HasSubstr("3x its forward FLOPs"),
                    HasSubstr("optimizer state off-chip"), HasSubstr("per weight update")));
  auto back = ReportFromJson(r->Json());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Table(), table);
  EXPECT_EQ(back->Json(), r->Json());
  EXPECT_EQ(back->gradient_accumulation_steps, 3);
  EXPECT_EQ(back->ipus[0].optimizer_state_offchip_bytes, r->ipus[0].optimizer_state_offchip_bytes);
  EXPECT_EQ(back->ipus[0].all_reduce_bytes, r->ipus[0].all_reduce_bytes);
  EXPECT_EQ(back->samples_per_step(), 24);
  // Reports written before training (no mode, no training keys) read as inference.
  nlohmann::json old =
      nlohmann::json::parse(PlanMemory(interp->graph(), interp->node_costs(), placement,
                                       Options(ExecutionStrategy::kPipelined, 2, 2))
                                ->Json());
  EXPECT_FALSE(old["ipus"][0].contains("gradient_bytes"));
  old.erase("mode");
  auto inference = ReportFromJson(old.dump());
  ASSERT_TRUE(inference.ok()) << inference.status();
  EXPECT_EQ(inference->mode, "inference");
  EXPECT_EQ(inference->gradient_accumulation_steps, 1);
  EXPECT_EQ(inference->ipus[0].gradient_bytes, 0);
  EXPECT_THAT(inference->Table(), Not(HasSubstr("gradients")));
  old["mode"] = "testing";
  EXPECT_THAT(ReportFromJson(old.dump()).status().message(), HasSubstr("mode is 'testing'"));
}

// The TwoIpuGpt model with h.0's first residual Add marked as a
// recomputation checkpoint (poptorch.recomputationCheckpoint on its output).
struct CheckpointedGpt : public TwoIpuGpt {
  void SetUp() override {
    GptBuilder gpt(GptSpec{.layers = 2});
    OnnxBuilder::AttrInt(gpt.NodeNamed("/h.0/Add"), std::string(graph::kRecomputeCheckpoint), 1);
    interp = Load(gpt.Bytes());
    auto p = PlaceByLayers(interp->graph(), {1, 1}, 2);
    ASSERT_TRUE(p.ok()) << p.status();
    placement = *p;
  }
  PlanOptions Training() {
    PlanOptions o = TrainingOptions(ExecutionStrategy::kPipelined, interp->graph(), 0, 3);
    o.training->node_checkpoint = NodeCheckpoints(interp->graph());
    return o;
  }
};

TEST_F(CheckpointedGpt, NodeCheckpointsListsTheMarkedNode) {
  const std::vector<bool> marks = NodeCheckpoints(interp->graph());
  ASSERT_EQ(marks.size(), interp->graph().nodes.size());
  for (size_t i = 0; i < marks.size(); ++i) {
    EXPECT_EQ(marks[i], interp->graph().nodes[i].name == "/h.0/Add") << i;
  }
  auto plain = Load(GptBuilder(GptSpec{.layers = 2}).Bytes());
  EXPECT_TRUE(NodeCheckpoints(plain->graph()).empty());
}

TEST_F(CheckpointedGpt, CheckpointsRecomputeAPipelineWithoutTheConfigKey) {
  auto r = PlanMemory(interp->graph(), interp->node_costs(), placement, Training());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->recompute);
  EXPECT_EQ(r->recompute_checkpoints, "checkpoint");
  // Stage 0 is [wte Gather, attn MatMul, Add*] | [fc MatMul, Relu, proj
  // MatMul, Add_1]: it keeps the ids (64 B, from the host) and the
  // checkpoint r (256 B) per micro-batch in flight, and recomputes in its
  // larger segment: r, m and g (1024 B each), o and y (256 B each).
  EXPECT_EQ(r->ipus[0].recompute_bytes, 256 + 2 * 1024 + 2 * 256);
  EXPECT_EQ(r->ipus[0].activation_bytes, 3 * (64 + 256) + r->ipus[0].recompute_bytes);
  // The last stage of the pipeline is not recomputed.
  EXPECT_EQ(r->ipus[1].recompute_bytes, 0);
  EXPECT_EQ(r->ipus[1].activation_bytes, 256 + 5 * 256 + 2 * 1024 + 512);
  // A recomputed micro-batch costs 4x its forward FLOPs.
  auto inference = PlanMemory(interp->graph(), interp->node_costs(), placement,
                              Options(ExecutionStrategy::kPipelined, 2, 2));
  ASSERT_TRUE(inference.ok());
  EXPECT_EQ(r->ipus[0].flops, 4 * inference->ipus[0].flops);
  EXPECT_THAT(r->Table(), HasSubstr("the model's recomputation checkpoints and each stage's "
                                    "inputs per micro-batch in flight + one segment's values"));
  EXPECT_TRUE(CheckpointWarnings(*Training().training, ExecutionStrategy::kPipelined, 2).empty());
}

TEST_F(CheckpointedGpt, CheckpointsSplitTheStageSegmentsOfTheConfigKey) {
  PlanOptions o = Training();
  o.training->recompute_checkpoint_every_layer = true;
  auto r = PlanMemory(interp->graph(), interp->node_costs(), placement, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->recompute_checkpoints, "stage+checkpoint");
  // Without the checkpoint the whole stage is one segment (64 + 5 x 256 + 2 x 1024).
  EXPECT_EQ(r->ipus[0].recompute_bytes, 256 + 2 * 1024 + 2 * 256);
  auto back = ReportFromJson(r->Json());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->recompute_checkpoints, "stage+checkpoint");
  EXPECT_EQ(back->Table(), r->Table());
}

TEST_F(CheckpointedGpt, CheckpointsSplitLayers) {
  PlanOptions o = Training();
  o.training->recompute_checkpoint_every_layer = true;
  o.training->node_layer = FindLayerBlocks(interp->graph())->node_layer;
  auto r = PlanMemory(interp->graph(), interp->node_costs(), placement, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->recompute_checkpoints, "layer+checkpoint");
  // Stage 0: [Gather] | [attn MatMul, Add*] | [fc, Relu, proj, Add_1]; its
  // largest segment is the last, as above.
  EXPECT_EQ(r->ipus[0].recompute_bytes, 256 + 2 * 1024 + 2 * 256);
  // With layers every stage recomputes, the last one too.
  EXPECT_GT(r->ipus[1].recompute_bytes, 0);
  EXPECT_THAT(r->Table(), HasSubstr("the model's recomputation checkpoints, every layer boundary "
                                    "and each stage's inputs"));
}

TEST_F(CheckpointedGpt, CheckpointsOfOneStageChangeNothingAndSaySo) {
  auto one = PlaceByLayers(interp->graph(), {2}, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  PlanOptions o = Training();
  o.count = {1, 1, 1, 1};
  auto r = PlanMemory(interp->graph(), interp->node_costs(), *one, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->recompute);
  EXPECT_EQ(r->ipus[0].recompute_bytes, 0);
  const std::vector<std::string> warnings =
      CheckpointWarnings(*o.training, ExecutionStrategy::kPipelined, 1);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], AllOf(HasSubstr("the model's 1 recomputation checkpoint "),
                                 HasSubstr("set recompute_checkpoint_every_layer=true")));
  o.training->recompute_checkpoint_every_layer = true;
  EXPECT_TRUE(CheckpointWarnings(*o.training, ExecutionStrategy::kPipelined, 1).empty());
  EXPECT_TRUE(Recomputes(*o.training, ExecutionStrategy::kPipelined, 1));
}

TEST(MemoryPlanTest, PopartAttributesAreNotedAndChangeNothing) {
  GptBuilder plain(GptSpec{.layers = 2});
  GptBuilder outlined(GptSpec{.layers = 2});
  for (const char* name : {"/ln_f/Mul", "/h.1/Add"}) {
    onnx::AttributeProto* a = outlined.NodeNamed(name).add_attribute();
    a->set_name("__outline");
    a->set_type(onnx::AttributeProto::STRINGS);
    a->add_strings("layer");
    a->add_strings("LayerNorm");
  }
  auto a = Load(plain.Bytes());
  auto b = Load(outlined.Bytes());
  auto pa = PlaceByLayers(a->graph(), {1, 1}, 2);
  auto pb = PlaceByLayers(b->graph(), {1, 1}, 2);
  ASSERT_TRUE(pa.ok() && pb.ok());
  auto ra =
      PlanMemory(a->graph(), a->node_costs(), *pa, Options(ExecutionStrategy::kPipelined, 2, 2));
  auto rb =
      PlanMemory(b->graph(), b->node_costs(), *pb, Options(ExecutionStrategy::kPipelined, 2, 2));
  ASSERT_TRUE(ra.ok() && rb.ok());
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(ra->ipus[i].total_bytes, rb->ipus[i].total_bytes);
  EXPECT_THAT(rb->notes, ::testing::Contains(AllOf(
                             HasSubstr("PopART attribute '__outline' (poptorch.Attribute) on 2 "
                                       "nodes changes nothing"),
                             HasSubstr("code model charges every node without outlining"))));
  EXPECT_TRUE(ra->notes.empty());
}

TEST(MemoryPlanTest, TrainingOutOfMemoryNamesGradientsStateAndTheTrainingFixes) {
  Report r;
  r.memory_bytes_per_ipu = 900'000'000;
  r.mode = "training";
  IpuPlan p;
  p.weight_bytes = 300'000'000;
  p.gradient_bytes = 300'000'000;
  p.optimizer_state_bytes = 600'000'000;
  p.activation_bytes = 50'000'000;
  p.micro_batches_in_flight = 3;
  p.total_bytes = 1'250'000'000;
  r.ipus.push_back(p);
  const std::string message(CheckMemoryFits(r).message());
  EXPECT_THAT(message,
              AllOf(HasSubstr("needs 1.25 GB of 900.0 MB (weights 300.0 MB, gradients 300.0 MB, "
                              "optimizer state 600.0 MB, activations 50.0 MB for 3 micro-batches"),
                    HasSubstr("use more IPUs per replica"),
                    HasSubstr("optimizer_state_offchip=true (frees 600.0 MB"),
                    HasSubstr("recompute_checkpoint_every_layer=true")));
  // Already off-chip and recomputing: neither is suggested.
  r.recompute = true;
  r.ipus[0].optimizer_state_bytes = 0;
  r.ipus[0].optimizer_state_offchip_bytes = 600'000'000;
  const std::string done(CheckMemoryFits(r).message());
  EXPECT_THAT(done, AllOf(HasSubstr("(+600.0 MB off-chip)"), HasSubstr("(recomputing)"),
                          Not(HasSubstr("optimizer_state_offchip=true")),
                          Not(HasSubstr("recompute_checkpoint_every_layer=true"))));
}

TEST(MemoryPlanTest, TiedWeightCountsOnEveryIpuThatReadsIt) {
  OnnxBuilder b(14);
  b.Input("ids", testing::kInt64, {2});
  b.Output("out", testing::kFloat, {2, 8});
  b.Floats("w", {8, 8}, testing::Zeros(64));
  b.Node("Gather", {"w", "ids"}, {"e"}, "/embed/Gather");
  b.Node("Relu", {"e"}, {"r"}, "/blocks.0/Relu");
  b.Node("MatMul", {"r", "w"}, {"out"}, "/blocks.1/MatMul");
  auto interp = Load(b.Bytes());
  auto p = PlaceByLayers(interp->graph(), {1, 1}, 2);
  ASSERT_TRUE(p.ok());
  auto r = PlanMemory(interp->graph(), interp->node_costs(), *p,
                      Options(ExecutionStrategy::kPipelined, 2, 2));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ipus[0].weight_bytes, 256);
  EXPECT_EQ(r->ipus[1].weight_bytes, 256);
}

TEST(MemoryPlanTest, IdleIpuHoldsNothing) {
  auto interp = Load(GptBuilder(GptSpec{.layers = 2}).Bytes());
  auto p = PlaceByLayers(interp->graph(), {2, 0}, 2);
  ASSERT_TRUE(p.ok());
  auto r = PlanMemory(interp->graph(), interp->node_costs(), *p,
                      Options(ExecutionStrategy::kPipelined, 2, 1));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ipus[1].total_bytes, 0);
  EXPECT_TRUE(r->ipus[1].stages.empty());
  EXPECT_TRUE(CheckMemoryFits(*r).ok());
}

TEST(MemoryPlanTest, OutOfMemoryNamesIpuSizesAndLargestTensors) {
  // float [16, 4096, 4096] is 1.07 GB: input and output of each Relu are live together.
  auto interp = Load(testing::HugeActivationBytes({16, 4096, 4096}));
  auto p = PlaceByLayers(interp->graph(), {-1}, 1);
  ASSERT_TRUE(p.ok());
  auto r = PlanMemory(interp->graph(), interp->node_costs(), *p,
                      Options(ExecutionStrategy::kPipelined, 1, 1));
  ASSERT_TRUE(r.ok());
  auto status = CheckMemoryFits(*r);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("out of memory on IPU 0: needs 2.17 GB of 900.0 MB"),
                    HasSubstr("activations 2.15 GB for 1 micro-batch in flight"),
                    HasSubstr("largest tensors: 'x' 1.07 GB (activation)"),
                    HasSubstr("'y' 1.07 GB"), HasSubstr("use more IPUs per replica")));
}

TEST(MemoryPlanTest, OutOfMemoryListsOtherIpusOver) {
  auto interp = Load(testing::HugeActivationBytes({16, 4096, 4096}));
  auto p = PlaceByLayers(interp->graph(), {1, 1}, 2);
  ASSERT_TRUE(p.ok());
  auto r = PlanMemory(interp->graph(), interp->node_costs(), *p,
                      Options(ExecutionStrategy::kSharded, 2, 1));
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(CheckMemoryFits(*r).message(),
              AllOf(HasSubstr("out of memory on IPU 0"), HasSubstr("also over: IPU 1")));
}

TEST(MemoryPlanTest, MismatchedInputsAreRejected) {
  auto interp = Load(testing::MlpBytes());
  auto p = PlaceByLayers(interp->graph(), {-1}, 1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(PlanMemory(interp->graph(), {}, *p, PlanOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
  Placement wrong = *p;
  wrong.node_names[0] = "x";
  EXPECT_EQ(PlanMemory(interp->graph(), interp->node_costs(), wrong, PlanOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// GPT with two layers in two phases on IPU 0 (what precedes layer 1 in phase 0).
struct PhasedGpt : public ::testing::Test {
  void SetUp() override {
    interp = Load(GptBuilder(GptSpec{.layers = 2}).Bytes());
    NodeAnnotations a;
    a["/wte/Gather"] = {.ipu = 0, .phase = 0};
    a["/h.1/attn/MatMul"] = {.ipu = 0, .phase = 1};
    auto p = PlaceByAnnotations(interp->graph(), a, ExecutionStrategy::kSerialPhased);
    ASSERT_TRUE(p.ok()) << p.status();
    placement = *p;
  }
  absl::StatusOr<Report> Plan(Liveness liveness, bool training = false) {
    PlanOptions o = Options(ExecutionStrategy::kSerialPhased, 1, 2);
    o.liveness = liveness;
    if (training) {
      o.training = TrainingPlan{};
      for (const auto& [name, t] : interp->graph().initializers) {
        o.training->state_element_bytes[name] = 4;  // one float slot (momentum)
      }
      o.training->optimizer_state_offchip = false;
    }
    return PlanMemory(interp->graph(), interp->node_costs(), placement, o);
  }
  std::unique_ptr<graph::Interpreter> interp;
  Placement placement;
};

TEST_F(PhasedGpt, AlwaysLiveHoldsEveryPhaseAndPhasesRunInTurn) {
  auto r = Plan(Liveness::kAlwaysLive);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->liveness, "always_live");
  ASSERT_EQ(r->phases.size(), 2u);
  EXPECT_THAT(r->phases[1].ipus, ElementsAre(0));
  EXPECT_EQ(r->ipus[0].held_phase, -1);
  // 16x8 table + 2 layers of 8x8, 8x32, 32x8 + 8 + 8x16, float.
  EXPECT_EQ(r->ipus[0].weight_bytes, 4 * (128 + 2 * (64 + 256 + 256) + 8 + 128));
  const double micro_batch = r->phases[0].time_s + r->phases[1].time_s + r->ipus[0].host_s;
  EXPECT_DOUBLE_EQ(r->step_s, 2 * micro_batch);
  EXPECT_EQ(r->phases[0].streaming_bytes, 0);
}

TEST_F(PhasedGpt, OffChipHoldsTheLargestPhaseAndStreamsTheRest) {
  auto live = Plan(Liveness::kAlwaysLive, true);
  auto off = Plan(Liveness::kOffChipAfterFwdNoOverlap, true);
  ASSERT_TRUE(live.ok() && off.ok());
  const IpuPlan& l = live->ipus[0];
  const IpuPlan& o = off->ipus[0];
  EXPECT_EQ(o.held_phase, 1);  // layer 1 with ln_f and lm_head
  EXPECT_EQ(o.weight_bytes, 4 * (64 + 256 + 256 + 8 + 128));
  EXPECT_EQ(o.gradient_bytes, o.weight_bytes);
  EXPECT_EQ(o.optimizer_state_bytes, o.weight_bytes);
  EXPECT_EQ(o.total_bytes + o.streaming_memory_bytes, l.total_bytes);
  EXPECT_EQ(off->host_bytes(), live->host_bytes());  // the host holds every phase
  EXPECT_GT(off->phases[0].streaming_bytes, 0);
  EXPECT_GT(off->step_s, live->step_s);
  auto overlapped = Plan(Liveness::kOffChipAfterFwd, true);
  ASSERT_TRUE(overlapped.ok());
  EXPECT_LT(overlapped->step_s, off->step_s);
  EXPECT_GT(overlapped->ipus[0].weight_bytes, o.weight_bytes);  // the next phase prefetched
}

TEST_F(PhasedGpt, ReportTableAndJsonCarryThePhases) {
  auto r = Plan(Liveness::kOffChipAfterEachPhase);
  ASSERT_TRUE(r.ok());
  const std::string table = r->Table();
  EXPECT_THAT(table, AllOf(HasSubstr("serial_phased over 2 stages in 2 phases (liveness "
                                     "off_chip_after_each_phase)"),
                           HasSubstr("phase 1 on IPU 0: "),
                           HasSubstr("IPU 0 holds one phase at a time: its largest, phase 1")));
  auto back = ReportFromJson(r->Json());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Table(), table);
  EXPECT_EQ(back->phases.size(), 2u);
  EXPECT_EQ(back->ipus[0].streaming_memory_bytes, r->ipus[0].streaming_memory_bytes);
  nlohmann::json doc = nlohmann::json::parse(r->Json());
  doc.erase("liveness");
  EXPECT_THAT(ReportFromJson(doc.dump()).status().message(),
              HasSubstr("a phased report needs its liveness and phases"));
  doc["liveness"] = "sometimes";
  EXPECT_EQ(ReportFromJson(doc.dump()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PhasedGpt, PlacementAndStrategyMustAgreeOnPhases) {
  auto pipelined = PlanMemory(interp->graph(), interp->node_costs(), placement,
                              Options(ExecutionStrategy::kPipelined, 1, 2));
  EXPECT_EQ(pipelined.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pipelined.status().message(),
              HasSubstr("the placement has execution phases but the strategy is pipelined"));
  auto layers = PlaceByLayers(interp->graph(), {-1}, 1);
  ASSERT_TRUE(layers.ok());
  auto phased = PlanMemory(interp->graph(), interp->node_costs(), *layers,
                           Options(ExecutionStrategy::kParallelPhased, 1, 2));
  EXPECT_THAT(phased.status().message(),
              HasSubstr("the placement has no execution phases but the strategy is "
                        "parallel_phased"));
}

TEST(MemoryPlanTest, OutOfMemoryAlwaysLiveSuggestsSendingPhasesOffChip) {
  auto interp = Load(testing::HugeActivationBytes({16, 4096, 4096}));
  NodeAnnotations a;
  a["/blocks.0/Relu"] = {.ipu = 0, .phase = 0};
  a["/blocks.1/Relu"] = {.ipu = 0, .phase = 1};
  auto p = PlaceByAnnotations(interp->graph(), a, ExecutionStrategy::kSerialPhased);
  ASSERT_TRUE(p.ok());
  auto r = PlanMemory(interp->graph(), interp->node_costs(), *p,
                      Options(ExecutionStrategy::kSerialPhased, 1, 1));
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(CheckMemoryFits(*r).message(),
              HasSubstr("tensors_liveness=off_chip_after_fwd: PopTorch's "
                        "Liveness.OffChipAfterFwd"));
}

TEST(MemoryPlanTest, FormatCountUsesDecimalPrefixes) {
  EXPECT_EQ(FormatCount(950), "950");
  EXPECT_EQ(FormatCount(436'288), "436.3 k");
  EXPECT_EQ(FormatCount(1'200'000'000), "1.2 G");
}

}  // namespace
}  // namespace ipupod::compiler
