#include "compiler/memory_plan.h"

#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/hardware.h"
#include "graph/interpreter.h"
#include "graph/onnx_import.h"
#include "tests/compiler/test_models.h"

namespace ipupod::compiler {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using testing::GptBuilder;
using testing::GptSpec;
using ::testing::HasSubstr;
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
  EXPECT_EQ(a.total_bytes, a.weight_bytes + a.activation_bytes + a.code_bytes);
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

TEST(MemoryPlanTest, Formatting) {
  EXPECT_EQ(FormatBytes(17), "17 B");
  EXPECT_EQ(FormatBytes(12'300), "12.3 kB");
  EXPECT_EQ(FormatBytes(900'000'000), "900.0 MB");
  EXPECT_EQ(FormatBytes(2'170'000'000), "2.17 GB");
  EXPECT_EQ(FormatCount(950), "950");
  EXPECT_EQ(FormatCount(436'288), "436.3 k");
  EXPECT_EQ(FormatCount(1'200'000'000), "1.2 G");
  EXPECT_EQ(FormatSeconds(12.3e-6), "12.3 us");
  EXPECT_EQ(FormatSeconds(4.56e-3), "4.56 ms");
  EXPECT_EQ(FormatSeconds(1.2), "1.20 s");
}

}  // namespace
}  // namespace ipupod::compiler
