#include "device/compiler/compile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "device/graph/onnx_import.h"
#include "tests/device/compiler/test_models.h"
#include "tests/support/models.h"

namespace ipupod::compiler {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using testing::GptBuilder;
using testing::GptSpec;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::OnnxBuilder;
using ::testing::StartsWith;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

IpuConfig Config(const std::string& update) {
  IpuConfig c;
  const absl::Status s = UpdateFromString(c, update);
  EXPECT_TRUE(s.ok()) << s;
  return c;
}

std::string Gpt4() { return GptBuilder(GptSpec{.layers = 4}).Bytes(); }

TEST(CompileTest, DefaultConfigRunsOnOneIpu) {
  Report report;
  auto exe = Compile(Gpt4(), IpuConfig(), {}, &report);
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_THAT(exe->producer, StartsWith("ipupod "));
  EXPECT_EQ(exe->mode, ExecutableMode::kInference);
  EXPECT_EQ(exe->placement.num_stages(), 1);
  EXPECT_EQ(exe->ipus.reserved, 1);
  EXPECT_EQ(exe->micro_batch_size, 2);
  EXPECT_EQ(exe->batch_size_factor, 1);
  EXPECT_EQ(exe->output_mode.kind, OutputMode::Kind::kAll);
  ASSERT_EQ(exe->inputs.size(), 1u);
  EXPECT_EQ(exe->inputs[0], (TensorSpec{"ids", tensor::DType::kInt64, {2, 4}}));
  EXPECT_EQ(exe->outputs[0], (TensorSpec{"logits", tensor::DType::kFloat32, {2, 4, 16}}));
  EXPECT_EQ(exe->content_hash.size(), 64u);
  EXPECT_EQ(report.ipus.size(), 1u);
  EXPECT_EQ(exe->report_json, report.Json());
  // The stored model imports to the placement's nodes.
  auto g = graph::ImportOnnx(exe->model_bytes);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(CheckPlacementMatchesGraph(exe->placement, *g).ok());
}

TEST(CompileTest, AHugeConstantIsChargedAsMemoryNotMaterialised) {
  // 30000 x 30000 floats: refused as out of IPU memory at once, without allocating 3.6 GB.
  Report report;
  auto e = Compile(graph::testing::ConstantOfShapeBomb(30000), IpuConfig{}, {}, &report);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(e.status().message(),
              AllOf(HasSubstr("out of memory on IPU 0"), HasSubstr("'big' 3.60 GB (activation)")));
  ASSERT_EQ(report.ipus.size(), 1u);
  EXPECT_GT(report.ipus[0].activation_bytes, int64_t{3'600'000'000});
  // The same model with a small constant folds away and compiles.
  EXPECT_TRUE(Compile(graph::testing::ConstantOfShapeBomb(100), IpuConfig{}, {}).ok());
}

TEST(CompileTest, ExecutableRoundTripKeepsTheHash) {
  auto exe = Compile(Gpt4(), Config("layers_per_ipu=[2 2],inference_device_iterations=2"), {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto bytes = WriteExecutable(*exe);
  ASSERT_TRUE(bytes.ok());
  auto back = ReadExecutable(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *exe);
}

TEST(CompileTest, LayersPerIpuPipelinesOverTwoIpus) {
  Report report;
  auto exe =
      Compile(Gpt4(), Config("layers_per_ipu=[1 3],inference_device_iterations=2"), {}, &report);
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ(exe->placement.method, PlacementMethod::kLayersPerIpu);
  EXPECT_THAT(exe->placement.stage_ipu, ElementsAre(0, 1));
  EXPECT_EQ(exe->ipus.needed, 2);
  EXPECT_THAT(report.notes, Contains("IPU 1: layers 1-3"));
  EXPECT_EQ(report.ipus[0].micro_batches_in_flight, 2);
  EXPECT_THAT(report.Table(), HasSubstr("pipelined over 2 stages"));
}

TEST(CompileTest, PipelinedInferenceNeedsDeviceIterationsOrSharding) {
  const IpuConfig c = Config("layers_per_ipu=[2 2]");
  auto exe = Compile(Gpt4(), c, {});
  EXPECT_EQ(exe.status().code(), kInvalid);
  EXPECT_THAT(exe.status().message(), HasSubstr("inference_device_iterations >= 2 (it is 1)"));
  CompileOptions sharded;
  sharded.strategy = ExecutionStrategy::kSharded;
  auto ok = Compile(Gpt4(), c, sharded);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->strategy, ExecutionStrategy::kSharded);
}

TEST(CompileTest, ShardedExecutionForInferenceRunsOneIpuAtATime) {
  const std::string update = "layers_per_ipu=[2 2],inference_device_iterations=2";
  Report pipelined;
  auto exe = Compile(Gpt4(), Config(update), {}, &pipelined);
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ(exe->strategy, ExecutionStrategy::kPipelined);
  Report sharded;
  auto shard =
      Compile(Gpt4(), Config(update + ",sharded_execution_for_inference=true"), {}, &sharded);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(shard->strategy, ExecutionStrategy::kSharded);
  EXPECT_EQ(sharded.strategy, ExecutionStrategy::kSharded);
  // Pipelined: a micro-batch per stage in flight, (2 iterations + 2 stages - 1) x the slower
  // IPU. Sharded: one micro-batch, each IPU in turn, no ramp.
  EXPECT_EQ(pipelined.ipus[0].micro_batches_in_flight, 2);
  EXPECT_EQ(sharded.ipus[0].micro_batches_in_flight, 1);
  EXPECT_DOUBLE_EQ(pipelined.step_s,
                   3 * std::max(pipelined.ipus[0].busy_s(), pipelined.ipus[1].busy_s()));
  EXPECT_DOUBLE_EQ(sharded.step_s, 2 * (sharded.ipus[0].busy_s() + sharded.ipus[1].busy_s()));
  EXPECT_NE(sharded.step_s, pipelined.step_s);
  EXPECT_THAT(sharded.Table(), HasSubstr("sharded over 2 stages"));
  // Sharded inference needs no device iterations to fill a pipeline.
  auto one =
      Compile(Gpt4(), Config("layers_per_ipu=[2 2],sharded_execution_for_inference=true"), {});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->strategy, ExecutionStrategy::kSharded);
  // The key is read back from the executable, and keys the executable cache.
  auto back = ReadExecutable(*WriteExecutable(*shard));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->config.sharded_execution_for_inference);
  EXPECT_NE(
      ExecutableCacheKey(Gpt4(), Config(update), {}),
      ExecutableCacheKey(Gpt4(), Config(update + ",sharded_execution_for_inference=true"), {}));
}

TEST(CompileTest, PipelineDepthErrorNamesTheShardingKey) {
  auto exe = Compile(Gpt4(), Config("layers_per_ipu=[2 2]"), {});
  EXPECT_EQ(exe.status().code(), kInvalid);
  EXPECT_THAT(exe.status().message(), HasSubstr("sharded_execution_for_inference=true"));
}

TEST(CompileTest, KeysThatTakeEffectDoNotWarn) {
  for (const char* update : {"seed=42", "matmul_proportion=0.3", "inference_matmul_proportion=0.3",
                             "enable_half_partials=false", "embedding_serialization_factor=2"}) {
    Report report;
    auto exe = Compile(Gpt4(), Config(update), {}, &report);
    ASSERT_TRUE(exe.ok()) << update << ": " << exe.status();
    EXPECT_THAT(exe->warnings, Not(Contains(HasSubstr("is ignored")))) << update;
    EXPECT_THAT(report.notes, Not(Contains(HasSubstr("is ignored")))) << update;
  }
}

TEST(CompileTest, TrainingOnlyKeysWarnOnlyForTraining) {
  IpuConfig c = Config("auto_loss_scaling=true,replicated_tensor_sharding=true");
  EXPECT_THAT(IgnoredKeyWarnings(c, /*for_inference=*/true), ::testing::IsEmpty());
  EXPECT_THAT(IgnoredKeyWarnings(c, /*for_inference=*/false),
              ElementsAre(AllOf(HasSubstr("'replicated_tensor_sharding' is ignored"),
                                HasSubstr("replication_factor 1"))));
  // With replicas it shards the state (memory_plan_test), silently.
  c.replication_factor = 2;
  EXPECT_THAT(IgnoredKeyWarnings(c, /*for_inference=*/false), ::testing::IsEmpty());
}

TEST(CompileTest, StrategyKeysWarnWhenTheyDoNotApply) {
  IpuConfig c = Config("tensors_liveness=off_chip_after_fwd,sharded_execution_for_inference=true");
  EXPECT_THAT(IgnoredKeyWarnings(c, /*for_inference=*/false),
              ElementsAre(HasSubstr("'tensors_liveness' is ignored: it applies to the phased "
                                    "strategies only")));
  c.execution_strategy = "serial_phased";
  EXPECT_THAT(IgnoredKeyWarnings(c, /*for_inference=*/false), ::testing::IsEmpty());
  EXPECT_THAT(IgnoredKeyWarnings(c, /*for_inference=*/true),
              ElementsAre(HasSubstr("'sharded_execution_for_inference' is ignored: "
                                    "execution_strategy=serial_phased chooses the strategy")));
}

TEST(CompileTest, ThreeIpusNeedAutoRound) {
  const std::string update = "layers_per_ipu=[2 1 1],inference_device_iterations=3";
  auto exe = Compile(Gpt4(), Config(update), {});
  EXPECT_EQ(exe.status().code(), kInvalid);
  EXPECT_THAT(exe.status().message(), HasSubstr("needs 3 IPUs"));
  Report report;
  auto rounded = Compile(Gpt4(), Config(update + ",auto_round_num_ipus=true"), {}, &report);
  ASSERT_TRUE(rounded.ok()) << rounded.status();
  EXPECT_EQ(rounded->ipus.needed, 3);
  EXPECT_EQ(rounded->ipus.reserved, 4);
  EXPECT_THAT(report.Table(), HasSubstr("reserves 4 (1 idle, auto-round)"));
}

TEST(CompileTest, ReplicationMultipliesTheHostBatch) {
  auto exe = Compile(Gpt4(),
                     Config("layers_per_ipu=[2 2],inference_device_iterations=3,"
                            "inference_replication_factor=2"),
                     {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ(exe->ipus.needed, 4);
  EXPECT_EQ(exe->batch_size_factor, 6);
  EXPECT_EQ(HostInputShape(*exe, exe->inputs[0]), (tensor::Shape{12, 4}));
  EXPECT_EQ(HostOutputShape(*exe, exe->outputs[0]), (tensor::Shape{12, 4, 16}));
}

// broadcast_buffers=false: replicas 1..R-1 keep their own copies of the
// buffers on the host, which the report's host bytes count ((R - 1) x the
// buffers' bytes) and its IPUs do not (each replica's IPUs hold their own).
TEST(CompileTest, ReplicasOwnBufferCopiesAreHostMemory) {
  constexpr int64_t kElements = 1000, kReplicas = 4, kCopyBytes = (kReplicas - 1) * kElements * 4;
  const std::string model = test_support::BufferModel(kElements);
  CompileOptions options;
  options.training.buffers = {{"state", "state_next"}};
  const std::string replicated = absl::StrCat("inference_replication_factor=", kReplicas);
  Report shared, own;
  auto shared_exe = Compile(model, Config(replicated), options, &shared);
  ASSERT_TRUE(shared_exe.ok()) << shared_exe.status();
  auto own_exe = Compile(model, Config(replicated + ",broadcast_buffers=false"), options, &own);
  ASSERT_TRUE(own_exe.ok()) << own_exe.status();
  EXPECT_EQ(shared.replica_buffer_bytes, 0);
  EXPECT_EQ(own.replica_buffer_bytes, kCopyBytes);
  EXPECT_EQ(own.host_bytes() - shared.host_bytes(), kCopyBytes);
  ASSERT_EQ(own.ipus.size(), shared.ipus.size());
  for (size_t i = 0; i < own.ipus.size(); ++i) {
    EXPECT_EQ(own.ipus[i].total_bytes, shared.ipus[i].total_bytes) << i;
  }
  EXPECT_THAT(own.Table(), HasSubstr("replicas 1..3 keep their own copies"));
  EXPECT_THAT(shared.Table(), Not(HasSubstr("broadcast_buffers")));
  // Stored with the executable; absent (so those bytes are unchanged) without copies.
  auto stored = ReportFromJson(own_exe->report_json);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->host_bytes(), own.host_bytes());
  EXPECT_THAT(shared_exe->report_json, Not(HasSubstr("replica_buffer_bytes")));
  // One replica has no other copies (the key is ignored with a warning).
  Report single;
  ASSERT_TRUE(Compile(model, Config("broadcast_buffers=false"), options, &single).ok());
  EXPECT_EQ(single.replica_buffer_bytes, 0);
}

// The same for training's buffers: CounterModel's count, one float.
TEST(CompileTest, TrainingReplicasOwnBufferCopiesAreHostMemory) {
  const std::string model = test_support::CounterModel({0.5f, -0.3f, 0.2f, 0.1f, -0.4f, 0.6f});
  CompileOptions options;
  options.for_inference = false;
  options.training.buffers = {{"count", "count_next"}};
  Report shared, own;
  auto shared_exe = Compile(model, Config("replication_factor=4"), options, &shared);
  ASSERT_TRUE(shared_exe.ok()) << shared_exe.status();
  auto own_exe =
      Compile(model, Config("replication_factor=4,broadcast_buffers=false"), options, &own);
  ASSERT_TRUE(own_exe.ok()) << own_exe.status();
  EXPECT_EQ(own.replica_buffer_bytes, 3 * 4);
  EXPECT_EQ(own.host_bytes() - shared.host_bytes(), 3 * 4);
}

TEST(CompileTest, ModuleMapPlacesAndWarnsAboutIgnoredConfig) {
  CompileOptions options;
  options.module_map = ModuleMap{{"", 0}, {"h.2", 1}};
  auto exe = Compile(Gpt4(), Config("ipus_per_replica=4,inference_device_iterations=2"), options);
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ(exe->placement.method, PlacementMethod::kModuleMap);
  EXPECT_EQ(exe->placement.ipus_per_replica, 2);
  EXPECT_THAT(exe->warnings,
              Contains(HasSubstr("ipus_per_replica (4) and layers_per_ipu are ignored")));
}

TEST(CompileTest, OnnxAttributesPlaceTheModel) {
  GptBuilder gpt(GptSpec{.layers = 4});
  OnnxBuilder::AttrInt(gpt.NodeNamed("/h.2/attn/MatMul"), "__ipu_number", 1);
  auto exe = Compile(gpt.Bytes(), Config("inference_device_iterations=2"), {});
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ(exe->placement.method, PlacementMethod::kOnnxAttributes);
  EXPECT_THAT(exe->placement.stage_ipu, ElementsAre(0, 1));
  auto g = graph::ImportOnnx(exe->model_bytes);  // stored without the attributes
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(CheckPlacementMatchesGraph(exe->placement, *g).ok());
  // A module map overrides the attributes, with a warning.
  CompileOptions options;
  options.module_map = ModuleMap{{"", 0}};
  auto mapped = Compile(gpt.Bytes(), IpuConfig(), options);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_THAT(mapped->warnings, Contains(HasSubstr("attributes are ignored")));
}

TEST(CompileTest, DescendingAttributesAreACompileError) {
  GptBuilder gpt(GptSpec{.layers = 2});
  OnnxBuilder::AttrInt(gpt.NodeNamed("/h.0/attn/MatMul"), "__ipu_number", 1);
  OnnxBuilder::AttrInt(gpt.NodeNamed("/h.1/attn/MatMul"), "__ipu_number", 0);
  auto exe = Compile(gpt.Bytes(), Config("inference_device_iterations=2"), {});
  EXPECT_EQ(exe.status().code(), kInvalid);
  EXPECT_THAT(exe.status().message(),
              AllOf(HasSubstr("stages must ascend"), HasSubstr("'/h.1/attn/MatMul'")));
}

// Four layers in four phases, alternating IPUs 0-2 and 1-3 (two layers a
// phase: h.0 on IPU 0 and h.1 on IPU 2 in phase 0, h.2 on 1 and h.3 on 3
// in phase 1).
GptBuilder PhasedGpt(bool with_loss = false, std::vector<int64_t> ipus = {0, 2, 1, 3}) {
  GptBuilder gpt(GptSpec{.layers = 4, .with_loss = with_loss});
  for (int l = 0; l < 4; ++l) {
    onnx::NodeProto& n = gpt.NodeNamed(absl::StrCat("/h.", l, "/attn/MatMul"));
    OnnxBuilder::AttrInt(n, "__ipu_number", ipus[l]);
    OnnxBuilder::AttrInt(n, "__execution_phase", l / 2);
  }
  return gpt;
}

TEST(CompileTest, PhasedExecutionPlacesByPhase) {
  GptBuilder gpt = PhasedGpt();
  for (const char* strategy : {"serial_phased", "parallel_phased"}) {
    Report report;
    auto exe =
        Compile(gpt.Bytes(), Config(absl::StrCat("execution_strategy=", strategy)), {}, &report);
    ASSERT_TRUE(exe.ok()) << exe.status();
    EXPECT_EQ(ExecutionStrategyName(exe->strategy), strategy);
    EXPECT_THAT(exe->placement.stage_phase, ElementsAre(0, 0, 1, 1));
    EXPECT_THAT(exe->placement.stage_ipu, ElementsAre(0, 2, 1, 3));
    EXPECT_EQ(exe->ipus.needed, 4);
    EXPECT_EQ(report.phases.size(), 2u);
    EXPECT_EQ(report.liveness, "always_live");
    auto back = ReadExecutable(*WriteExecutable(*exe));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->placement, exe->placement);
  }
  // Serially on IPUs 0 and 1, each IPU holds one of its two phases at a time.
  Report live, off;
  const std::string serial = PhasedGpt(false, {0, 1, 0, 1}).Bytes();
  ASSERT_TRUE(Compile(serial, Config("execution_strategy=serial_phased"), {}, &live).ok());
  auto exe = Compile(serial,
                     Config("execution_strategy=serial_phased,"
                            "tensors_liveness=off_chip_after_each_phase"),
                     {}, &off);
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ(off.liveness, "off_chip_after_each_phase");
  EXPECT_GT(off.ipus[0].streaming_memory_bytes, 0);
  EXPECT_LT(off.ipus[0].total_bytes, live.ipus[0].total_bytes);
  EXPECT_GT(off.step_s, live.step_s);
}

TEST(CompileTest, PhasedExecutionErrors) {
  const std::string even = PhasedGpt(false, {0, 2, 2, 3}).Bytes();  // phase 1 on IPU 2
  auto parity = Compile(even, Config("execution_strategy=parallel_phased"), {});
  EXPECT_EQ(parity.status().code(), kInvalid);
  EXPECT_THAT(parity.status().message(),
              HasSubstr("even phases must run on even IPUs and odd phases on odd IPUs"));
  // Without phases: the phased strategies need them, the others ignore them.
  auto plain = Compile(Gpt4(), Config("execution_strategy=serial_phased"), {});
  EXPECT_EQ(plain.status().code(), kInvalid);
  EXPECT_THAT(plain.status().message(),
              HasSubstr("serial_phased execution places the model by its __execution_phase and "
                        "__ipu_number attributes"));
  auto pipelined =
      Compile(PhasedGpt(false, {0, 1, 2, 3}).Bytes(), Config("inference_device_iterations=4"), {});
  ASSERT_TRUE(pipelined.ok()) << pipelined.status();
  EXPECT_FALSE(pipelined->placement.phased());
  EXPECT_THAT(pipelined->warnings,
              Contains(HasSubstr("__execution_phase attributes are ignored: execution is "
                                 "pipelined")));
  // PopTorch runs the no-overlap livenesses serially only; a config says so at once.
  IpuConfig parallel;
  parallel.execution_strategy = "parallel_phased";
  parallel.tensors_liveness = "off_chip_after_each_phase";
  auto liveness = Compile(PhasedGpt().Bytes(), parallel, {});
  EXPECT_EQ(liveness.status().code(), kInvalid);
  EXPECT_THAT(liveness.status().message(), HasSubstr("only supported for serial phased"));
}

TEST(CompileTest, OutOfMemoryFailsWithTheReportFilled) {
  Report report;
  auto exe = Compile(testing::HugeActivationBytes({16, 4096, 4096}), IpuConfig(), {}, &report);
  EXPECT_EQ(exe.status().code(), kInvalid);
  EXPECT_THAT(exe.status().message(),
              HasSubstr("out of memory on IPU 0: needs 2.17 GB of 900.0 MB"));
  ASSERT_EQ(report.ipus.size(), 1u);
  EXPECT_GT(report.ipus[0].total_bytes, report.memory_bytes_per_ipu);
}

// Convolutions count their FLOPs and activations like any op: a batch of 32
// images through a 64-channel 3x3 convolution at 512x512 does not fit an
// IPU, and half of it at 128x128 does.
std::string ConvModel(int64_t batch, int64_t side) {
  OnnxBuilder b(13);
  b.Input("x", testing::kFloat, {batch, 3, side, side});
  b.Output("y", testing::kFloat);
  b.Floats("w", {64, 3, 3, 3}, std::vector<float>(64 * 27, 0.1f));
  OnnxBuilder::AttrInts(b.Node("Conv", {"x", "w"}, {"c"}, "/conv/Conv"), "pads", {1, 1, 1, 1});
  b.Node("Relu", {"c"}, {"y"}, "/act/Relu");
  return b.Bytes();
}

TEST(CompileTest, ConvolutionsCountTheirActivationsAndFlops) {
  Report report;
  auto big = Compile(ConvModel(32, 512), IpuConfig(), {}, &report);
  EXPECT_EQ(big.status().code(), kInvalid);
  EXPECT_THAT(big.status().message(), HasSubstr("out of memory on IPU 0"));
  Report small_report;
  auto small = Compile(ConvModel(16, 128), IpuConfig(), {}, &small_report);
  ASSERT_TRUE(small.ok()) << small.status();
  ASSERT_EQ(small_report.ipus.size(), 1u);
  // 16 x 64 x 128 x 128 outputs of 27 multiply-adds each, plus the ReLU.
  const int64_t outputs = int64_t{16} * 64 * 128 * 128;
  EXPECT_EQ(small_report.ipus[0].flops, 2 * 27 * outputs + outputs);
}

TEST(CompileTest, RequestErrors) {
  CompileOptions training;
  training.for_inference = false;
  EXPECT_THAT(Compile(Gpt4(), IpuConfig(), training).status().message(),
              HasSubstr("no scalar float output to train on"));
  IpuConfig bad;
  bad.inference_device_iterations = 0;
  EXPECT_THAT(Compile(Gpt4(), bad, {}).status().message(),
              HasSubstr("inference_device_iterations"));
  EXPECT_THAT(Compile("garbage", IpuConfig(), {}).status().message(),
              HasSubstr("not an ONNX model"));
  EXPECT_THAT(Compile(testing::MlpBytes(), Config("ipus_per_replica=2"), {}).status().message(),
              HasSubstr("found no repeated layers"));
  CompileOptions map_without_map;
  map_without_map.placement = PlacementMethod::kModuleMap;
  EXPECT_EQ(Compile(Gpt4(), IpuConfig(), map_without_map).status().code(), kInvalid);
  CompileOptions attrs_without_attrs;
  attrs_without_attrs.placement = PlacementMethod::kOnnxAttributes;
  EXPECT_THAT(Compile(Gpt4(), IpuConfig(), attrs_without_attrs).status().message(),
              HasSubstr("the model has none"));
  EXPECT_THAT(
      Compile(Gpt4(), Config("inference_output_mode=every_n:3,inference_device_iterations=4"), {})
          .status()
          .message(),
      HasSubstr("every_n:3"));
}

CompileOptions Training(TrainingOptions t = {}) {
  CompileOptions o;
  o.for_inference = false;
  o.training = std::move(t);
  return o;
}

TEST(CompileTest, ShardedAndPhasedTrainingNeedNoAccumulation) {
  const std::string gpt = GptBuilder(GptSpec{.layers = 4, .with_loss = true}).Bytes();
  Report report;
  auto sharded =
      Compile(gpt, Config("layers_per_ipu=[2 2],execution_strategy=sharded"), Training(), &report);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  EXPECT_EQ(sharded->strategy, ExecutionStrategy::kSharded);
  EXPECT_EQ(report.ipus[0].micro_batches_in_flight, 1);
  // Forward through the shards, then backward: one IPU at a time.
  EXPECT_DOUBLE_EQ(report.step_s,
                   report.ipus[0].busy_s() + report.ipus[1].busy_s() +
                       std::max(report.ipus[0].update_s(), report.ipus[1].update_s()));
  Report phased;
  auto exe = Compile(PhasedGpt(true).Bytes(), Config("execution_strategy=parallel_phased"),
                     Training(), &phased);
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ(phased.mode, "training");
  EXPECT_GT(phased.phases[0].compute_s, 0);
}

TEST(CompileTest, TrainingExecutableCarriesItsSpecAndTrainingReport) {
  Report report;
  TrainingOptions adam;
  adam.optimizer = "adam";
  adam.optimizer_attrs = {{"lr", 1e-3}};
  auto exe = Compile(testing::MlpWithLossBytes(),
                     Config("device_iterations=2,gradient_accumulation_steps=3,"
                            "replication_factor=2,optimizer_state_offchip=false"),
                     Training(adam), &report);
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_EQ(exe->mode, ExecutableMode::kTraining);
  EXPECT_EQ(exe->batch_size_factor, 2 * 3 * 2);
  EXPECT_EQ(exe->training.loss, "loss");
  EXPECT_THAT(exe->training.weights, ElementsAre("fc1.w", "fc2.w"));
  EXPECT_EQ(exe->training.gradient_accumulation_steps, 3);
  EXPECT_EQ(exe->training.optimizer, "adam");
  EXPECT_EQ(report.mode, "training");
  EXPECT_EQ(report.gradient_accumulation_steps, 3);
  EXPECT_EQ(report.samples_per_step(), 4 * 2 * 3 * 2);
  const int64_t weights = (8 * 16 + 16 * 4) * 4;
  EXPECT_EQ(report.ipus[0].gradient_bytes, weights);
  EXPECT_EQ(report.ipus[0].optimizer_state_bytes, 2 * weights);
  EXPECT_EQ(exe->report_json, report.Json());
  auto bytes = WriteExecutable(*exe);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto back = ReadExecutable(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->training, exe->training);
  EXPECT_EQ(*back, *exe);
  // The config's default keeps optimizer state off the chip.
  Report offchip;
  ASSERT_TRUE(Compile(testing::MlpWithLossBytes(), IpuConfig(), Training(adam), &offchip).ok());
  EXPECT_EQ(offchip.ipus[0].optimizer_state_bytes, 0);
  EXPECT_EQ(offchip.ipus[0].optimizer_state_offchip_bytes, 2 * weights);
}

TEST(CompileTest, RecomputeConfigLowersTrainingActivations) {
  Report keep, recompute;
  const std::string gpt = testing::GptBuilder(testing::GptSpec{.with_loss = true}).Bytes();
  ASSERT_TRUE(Compile(gpt, IpuConfig(), Training(), &keep).ok());
  auto re = Compile(gpt, Config("recompute_checkpoint_every_layer=true"), Training(), &recompute);
  ASSERT_TRUE(re.ok()) << re.status();
  EXPECT_TRUE(recompute.recompute);
  EXPECT_EQ(recompute.recompute_checkpoints, "layer");
  EXPECT_LT(recompute.ipus[0].activation_bytes, keep.ipus[0].activation_bytes);
  EXPECT_GT(recompute.ipus[0].flops, keep.ipus[0].flops);
}

// The GPT with loss, h.0's last Add a recomputation checkpoint and ln_f
// carrying PopART's __outline (as optimum's parallelize() leaves GPT-2).
std::string AnnotatedGpt() {
  GptBuilder gpt(GptSpec{.layers = 4, .with_loss = true});
  OnnxBuilder::AttrInt(gpt.NodeNamed("/h.0/Add_1"), "recompute_checkpoint", 1);
  onnx::AttributeProto* outline = gpt.NodeNamed("/ln_f/Mul").add_attribute();
  outline->set_name("__outline");
  outline->set_type(onnx::AttributeProto::STRINGS);
  outline->add_strings("layer");
  outline->add_strings("LayerNorm");
  return gpt.Bytes();
}

TEST(CompileTest, CheckpointsRecomputeAPipelineAndAttributesAreNoted) {
  Report report;
  auto exe = Compile(AnnotatedGpt(), Config("layers_per_ipu=[2 2],gradient_accumulation_steps=4"),
                     Training(), &report);
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_TRUE(report.recompute);
  EXPECT_EQ(report.recompute_checkpoints, "checkpoint");
  EXPECT_THAT(exe->warnings, Not(Contains(HasSubstr("recomputation checkpoint"))));
  EXPECT_THAT(report.notes, Contains(HasSubstr("PopART attribute '__outline' (poptorch.Attribute) "
                                               "on 1 node changes nothing")));
  // Inference has no backward pass: checkpoints are not mentioned.
  CompileOptions inference;
  auto infer = Compile(AnnotatedGpt(), Config("layers_per_ipu=[2 2],inference_device_iterations=2"),
                       inference);
  ASSERT_TRUE(infer.ok()) << infer.status();
  EXPECT_THAT(infer->warnings, Not(Contains(HasSubstr("recomputation checkpoint"))));
}

TEST(CompileTest, CheckpointsOfOneStageWarnThatTheyChangeNothing) {
  Report report;
  auto exe = Compile(AnnotatedGpt(), IpuConfig(), Training(), &report);
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_FALSE(report.recompute);
  EXPECT_THAT(exe->warnings,
              Contains(AllOf(HasSubstr("the model's 1 recomputation checkpoint "),
                             HasSubstr("change nothing: a model of one pipeline stage is not "
                                       "recomputed"))));
  EXPECT_THAT(report.notes, Contains(HasSubstr("recomputation checkpoint")));
  Report layers;
  auto re =
      Compile(AnnotatedGpt(), Config("recompute_checkpoint_every_layer=true"), Training(), &layers);
  ASSERT_TRUE(re.ok()) << re.status();
  EXPECT_EQ(layers.recompute_checkpoints, "layer+checkpoint");
  EXPECT_THAT(re->warnings, Not(Contains(HasSubstr("recomputation checkpoint"))));
}

TEST(CompileTest, PipelinedTrainingNeedsAccumulation) {
  const std::string gpt = GptBuilder(GptSpec{.layers = 4, .with_loss = true}).Bytes();
  auto shallow =
      Compile(gpt, Config("layers_per_ipu=[2 2],gradient_accumulation_steps=2"), Training());
  EXPECT_EQ(shallow.status().code(), kInvalid);
  EXPECT_THAT(shallow.status().message(),
              HasSubstr("pipelined training over 2 stages needs gradient_accumulation_steps >= 3 "
                        "(it is 2)"));
  Report report;
  auto ok = Compile(gpt, Config("layers_per_ipu=[2 2],gradient_accumulation_steps=3"), Training(),
                    &report);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(report.ipus[0].micro_batches_in_flight, 3);  // 2(S - 0) - 1
  EXPECT_EQ(report.ipus[1].micro_batches_in_flight, 1);
}

TEST(CompileTest, WeightReadThroughTransposeStaysAWeight) {
  OnnxBuilder b(14);
  b.Input("x", testing::kFloat, {2, 8});
  b.Output("loss", testing::kFloat, {});
  b.Floats("W", {4, 8}, testing::Zeros(32));
  b.Node("Transpose", {"W"}, {"Wt"}, "/fc/Transpose");
  b.Node("MatMul", {"x", "Wt"}, {"y"}, "/fc/MatMul");
  OnnxBuilder::AttrInt(b.Node("ReduceMean", {"y"}, {"loss"}, "/loss/ReduceMean"), "keepdims", 0);
  auto exe = Compile(b.Bytes(), IpuConfig(), Training());
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_THAT(exe->training.weights, ElementsAre("W"));
  EXPECT_THAT(exe->placement.node_names, Contains("/fc/Transpose"));
  // Inference keeps it too: folding it into a constant would freeze W at its
  // compiled value, and a session's later write of W would never reach the
  // product (the interpreter prepares the transpose once per write instead).
  auto inference = Compile(b.Bytes(), IpuConfig(), {});
  ASSERT_TRUE(inference.ok()) << inference.status();
  EXPECT_THAT(inference->placement.node_names, Contains("/fc/Transpose"));
}

TEST(CompileTest, LambWithoutWeightNormClippingRoundTrips) {
  TrainingOptions lamb;
  lamb.optimizer = "lamb";
  auto exe = Compile(testing::MlpWithLossBytes(), IpuConfig(), Training(lamb));
  ASSERT_TRUE(exe.ok()) << exe.status();
  EXPECT_TRUE(std::isinf(exe->training.constants.at("max_weight_norm")));
  auto bytes = WriteExecutable(*exe);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto back = ReadExecutable(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->training, exe->training);
}

TEST(CompileTest, TrainingErrorsAreCompileErrors) {
  TrainingOptions frozen;
  frozen.frozen = {"nope"};
  EXPECT_THAT(
      Compile(testing::MlpWithLossBytes(), IpuConfig(), Training(frozen)).status().message(),
      HasSubstr("--freeze 'nope'"));
  EXPECT_THAT(
      Compile(testing::MlpWithLossBytes(4, "Exp"), IpuConfig(), Training()).status().message(),
      HasSubstr("has no gradient rule"));
}

class CompileCachedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/compile_cache_test");
    std::filesystem::remove_all(dir_);
    config_.executable_cache_dir = dir_;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
  IpuConfig config_;
};

TEST_F(CompileCachedTest, MissThenHit) {
  Report first_report;
  auto first = CompileCached(Gpt4(), config_, {}, &first_report);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->cache_hit);
  EXPECT_EQ(first->path, absl::StrCat(dir_, "/", ExecutableCacheKey(Gpt4(), config_, {}), ".ipx"));
  EXPECT_TRUE(std::filesystem::exists(first->path));
  Report second_report;
  auto second = CompileCached(Gpt4(), config_, {}, &second_report);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->cache_hit);
  EXPECT_EQ(second->executable, first->executable);
  EXPECT_EQ(second_report.Table(), first_report.Table());
}

TEST_F(CompileCachedTest, KeyFollowsEverythingButTheCacheDir) {
  const std::string key = ExecutableCacheKey(Gpt4(), config_, {});
  IpuConfig other_dir = config_;
  other_dir.executable_cache_dir = "/elsewhere";
  EXPECT_EQ(ExecutableCacheKey(Gpt4(), other_dir, {}), key);
  IpuConfig other = config_;
  other.inference_device_iterations = 2;
  EXPECT_NE(ExecutableCacheKey(Gpt4(), other, {}), key);
  EXPECT_NE(ExecutableCacheKey(testing::MlpBytes(), config_, {}), key);
  CompileOptions sharded;
  sharded.strategy = ExecutionStrategy::kSharded;
  EXPECT_NE(ExecutableCacheKey(Gpt4(), config_, sharded), key);
  CompileOptions mapped;
  mapped.module_map = ModuleMap{{"", 0}};
  EXPECT_NE(ExecutableCacheKey(Gpt4(), config_, mapped), key);
}

TEST_F(CompileCachedTest, CorruptEntryIsRecompiledAndReplaced) {
  auto first = CompileCached(Gpt4(), config_, {});
  ASSERT_TRUE(first.ok());
  std::ofstream(first->path, std::ios::binary | std::ios::trunc) << "junk";
  auto again = CompileCached(Gpt4(), config_, {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->cache_hit);
  EXPECT_TRUE(ReadExecutableFile(first->path).ok());
}

TEST_F(CompileCachedTest, DisabledOrEmptyDirDoesNotCache) {
  for (const char* dir : {"", "disabled"}) {
    IpuConfig c;
    c.executable_cache_dir = dir;
    auto out = CompileCached(Gpt4(), c, {});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_FALSE(out->cache_hit);
    EXPECT_EQ(out->path, "");
  }
}

TEST_F(CompileCachedTest, UnwritableCacheIsAWarning) {
  config_.executable_cache_dir = "/proc/ipupod-no-such-dir";
  auto out = CompileCached(Gpt4(), config_, {});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(out->executable.warnings, Contains(HasSubstr("could not store the executable")));
}

}  // namespace
}  // namespace ipupod::compiler
