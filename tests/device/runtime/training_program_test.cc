// runtime::Program on training executables: a step of device_iterations
// updates over accumulation x replicas equals large-batch training,
// losses per update, output modes, checkpoints that resume exactly, and
// SetOptimizer's variables and constants.
#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/compiler/compile.h"
#include "device/compiler/report.h"
#include "device/graph/onnx_import.h"
#include "device/runtime/program.h"
#include "device/training/trainer.h"
#include "tests/device/compiler/test_models.h"
#include "tests/support/models.h"
#include "tests/support/tensors.h"

namespace ipupod::runtime {
namespace {

using tensor::Tensor;
using ::testing::HasSubstr;

using test_support::Wave;

// y = tanh(x W + b), loss = mean((y - t)^2) for `rows` samples.
std::string Regressor(int64_t rows) { return test_support::RegressorModel(rows, Wave(6, 1.0f)); }

constexpr int64_t kMicroBatch = 2, kAccumulation = 2, kReplicas = 2, kIterations = 3;
constexpr int64_t kSamples = kMicroBatch * kAccumulation * kReplicas * kIterations;

std::unique_ptr<Program> TrainingProgram(const std::string& extra = "",
                                         std::vector<compiler::ParamGroup> groups = {}) {
  compiler::IpuConfig config;
  const absl::Status set = compiler::UpdateFromString(
      config, absl::StrCat("gradient_accumulation_steps=2,replication_factor=2,"
                           "device_iterations=3",
                           extra));
  EXPECT_TRUE(set.ok()) << set;
  compiler::CompileOptions options;
  options.for_inference = false;
  options.training.optimizer = "sgd";
  options.training.optimizer_attrs = {{"lr", 0.1}, {"momentum", 0.9}};
  options.training.param_groups = std::move(groups);
  auto e = compiler::Compile(Regressor(kMicroBatch), config, options);
  EXPECT_TRUE(e.ok()) << e.status();
  auto p = Program::Create(std::make_shared<const compiler::Executable>(*std::move(e)));
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

tensor::NamedTensors StepInputs(float seed) {
  return {{"x", *Tensor::FromValues<float>({kSamples, 3}, Wave(kSamples * 3, seed))},
          {"t", *Tensor::FromValues<float>({kSamples, 2}, Wave(kSamples * 2, seed + 5))}};
}

Tensor Rows(const Tensor& t, int64_t begin, int64_t count) {
  const int64_t cols = t.shape()[1];
  return *Tensor::FromValues<float>(
      {count, cols}, absl::MakeConstSpan(t.data<float>() + begin * cols, count * cols));
}

TEST(TrainingProgramTest, StepEqualsLargeBatchTraining) {
  std::unique_ptr<Program> program = TrainingProgram();
  const tensor::NamedTensors inputs = StepInputs(0.5f);
  auto step = program->RunStep(inputs);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(step->losses.size(), 3u);
  EXPECT_EQ(step->step, 3);

  training::TrainerOptions options;
  options.loss = "loss";
  options.optimizer = *training::OptimizerSpec::Create(training::OptimizerKind::kSgd,
                                                       {{"lr", 0.1}, {"momentum", 0.9}});
  auto large = training::Trainer::Create(*graph::ImportOnnx(Regressor(8)), options);
  ASSERT_TRUE(large.ok()) << large.status();
  for (int64_t i = 0; i < kIterations; ++i) {
    auto r = (*large)->Step({{Rows(inputs[0].second, 8 * i, 8), Rows(inputs[1].second, 8 * i, 8)}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NEAR(step->losses[i], r->losses[0], 1e-6) << "update " << i;
  }
  auto weights = program->GetWeights({});
  ASSERT_TRUE(weights.ok()) << weights.status();
  ASSERT_EQ(weights->size(), 2u);  // W and bias; the rank-0 "two" is a constant
  for (const auto& [name, t] : *weights) {
    const Tensor& want = (*large)->weights().at(name);
    for (int64_t k = 0; k < t.num_elements(); ++k) {
      EXPECT_NEAR(t.data<float>()[k], want.data<float>()[k], 1e-6) << name << "[" << k << "]";
    }
  }
}

TEST(TrainingProgramTest, SimulatedTimeIsTheReportsStepTime) {
  std::unique_ptr<Program> p = TrainingProgram();
  auto step = p->RunStep(StepInputs(0.4f));
  ASSERT_TRUE(step.ok()) << step.status();
  auto report = compiler::ReportFromJson(p->executable().report_json);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_GT(step->simulated.total_s(), 0);
  EXPECT_NEAR(step->simulated.total_s(), report->step_s, 1e-9 * report->step_s);
}

// A GPT of 4 layers with a loss, trained by `strategy` (sharded over two
// IPUs by layers, or phased: layer l in phase l on IPU l % 2).
std::unique_ptr<Program> GptProgram(const std::string& update, bool phases) {
  compiler::testing::GptBuilder gpt(compiler::testing::GptSpec{.layers = 4, .with_loss = true});
  for (int l = 0; phases && l < 4; ++l) {
    onnx::NodeProto& n = gpt.NodeNamed(absl::StrCat("/h.", l, "/attn/MatMul"));
    compiler::testing::OnnxBuilder::AttrInt(n, "__ipu_number", l % 2);
    compiler::testing::OnnxBuilder::AttrInt(n, "__execution_phase", l);
  }
  compiler::IpuConfig config;
  const absl::Status set = compiler::UpdateFromString(config, update);
  EXPECT_TRUE(set.ok()) << set;
  compiler::CompileOptions options;
  options.for_inference = false;
  auto e = compiler::Compile(gpt.Bytes(), config, options);
  EXPECT_TRUE(e.ok()) << e.status();
  auto p = Program::Create(std::make_shared<const compiler::Executable>(*std::move(e)));
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

TEST(TrainingProgramTest, ShardedAndPhasedTrainingTimeIsTheReportsAndLossesAgree) {
  const std::string common = "gradient_accumulation_steps=2,device_iterations=2";
  std::unique_ptr<Program> one = GptProgram(common, false);
  std::unique_ptr<Program> sharded =
      GptProgram(common + ",layers_per_ipu=[2 2],execution_strategy=sharded", false);
  std::unique_ptr<Program> phased = GptProgram(
      common + ",execution_strategy=parallel_phased,tensors_liveness=off_chip_after_fwd", true);
  std::vector<int64_t> ids(8 * 4);
  for (size_t k = 0; k < ids.size(); ++k) ids[k] = static_cast<int64_t>((k * 7) % 16);
  const tensor::NamedTensors in = {{"ids", *Tensor::FromValues<int64_t>({8, 4}, ids)}};
  auto want = one->RunStep(in);
  ASSERT_TRUE(want.ok()) << want.status();
  for (Program* p : {sharded.get(), phased.get()}) {
    auto step = p->RunStep(in);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(step->losses, want->losses);
    auto report = compiler::ReportFromJson(p->executable().report_json);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(step->simulated.pipeline_ramp_s, 0);
    EXPECT_NEAR(step->simulated.total_s(), report->step_s, 1e-9 * report->step_s);
  }
}

TEST(TrainingProgramTest, OutputModesCountAccumulation) {
  std::unique_ptr<Program> final_mode = TrainingProgram();
  auto step = final_mode->RunStep(StepInputs(0.1f));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->outputs[0].second.shape(), (tensor::Shape{kReplicas * kMicroBatch, 2}));
  EXPECT_EQ(step->outputs[1].second.shape(), (tensor::Shape{kReplicas}));

  std::unique_ptr<Program> all_mode = TrainingProgram(",output_mode=all");
  const tensor::NamedTensors inputs = StepInputs(0.1f);
  auto all = all_mode->RunStep(inputs);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->outputs[0].second.shape(), (tensor::Shape{kSamples, 2}));
  ASSERT_EQ(all->outputs[1].second.shape(), (tensor::Shape{kSamples / kMicroBatch}));
  // final = the last micro-batch of each replica in the last iteration.
  const float* all_y = all->outputs[0].second.data<float>();
  const float* final_y = step->outputs[0].second.data<float>();
  const int64_t last = kSamples / kMicroBatch - kReplicas;  // first of the last R micro-batches
  for (int64_t k = 0; k < kReplicas * kMicroBatch * 2; ++k) {
    EXPECT_FLOAT_EQ(final_y[k], all_y[last * kMicroBatch * 2 + k]);
  }
}

TEST(TrainingProgramTest, CheckpointResumesExactly) {
  std::unique_ptr<Program> a = TrainingProgram();
  ASSERT_TRUE(a->RunStep(StepInputs(0.2f)).ok());
  auto checkpoint = a->GetCheckpoint();
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  auto next = a->RunStep(StepInputs(0.9f));
  ASSERT_TRUE(next.ok());

  std::unique_ptr<Program> b = TrainingProgram();
  ASSERT_TRUE(b->SetWeights(*checkpoint).ok());
  EXPECT_EQ(b->GetOptimizer()->step, 3);
  auto resumed = b->RunStep(StepInputs(0.9f));
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(resumed->losses, next->losses);
  EXPECT_EQ(resumed->step, 6);
  auto wa = a->GetWeights({});
  auto wb = b->GetWeights({});
  for (size_t i = 0; i < wa->size(); ++i) {
    EXPECT_EQ((*wa)[i].second.bytes(), (*wb)[i].second.bytes()) << (*wa)[i].first;
  }
}

TEST(TrainingProgramTest, BadCheckpointChangesNothing) {
  std::unique_ptr<Program> p = TrainingProgram();
  auto checkpoint = *p->GetCheckpoint();
  const auto before = *p->GetWeights({});
  tensor::NamedTensors partial;
  for (auto& [name, t] : checkpoint) {
    if (name != "W") partial.emplace_back(name, t);
  }
  EXPECT_THAT(p->SetWeights(partial).message(), HasSubstr("lacks weight 'W'"));
  tensor::NamedTensors foreign = checkpoint;
  foreign.emplace_back("optimizer_attr/dampening", *Tensor::FromValues<float>({}, {0.5f}));
  EXPECT_THAT(p->SetWeights(foreign).message(), HasSubstr("fixed dampening=0 at compile time"));
  const auto after = *p->GetWeights({});
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(before[i].second.bytes(), after[i].second.bytes());
  }
}

TEST(TrainingProgramTest, SetOptimizerChangesVariablesOnly) {
  std::unique_ptr<Program> p = TrainingProgram();
  auto changed = p->SetOptimizer({{"lr", 0.01}, {"momentum", 0.5}});
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(changed->variables.at("lr"), 0.01);
  EXPECT_EQ(changed->variables.at("momentum"), 0.5);
  auto constant = p->SetOptimizer({{"lr", 0.2}, {"dampening", 0.1}});
  EXPECT_EQ(constant.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(constant.status().message(), HasSubstr("'dampening' is a constant"));
  EXPECT_EQ(p->GetOptimizer()->variables.at("lr"), 0.01);  // all or nothing
  EXPECT_EQ(p->SetOptimizer({{"lr", -1}}).status().code(), absl::StatusCode::kInvalidArgument);
}

// Param group 0 holds the bias at lr 0: it stays until SetOptimizer sets
// "group/0/lr", while W trains at the optimizer's lr throughout; a
// checkpoint carries the group's lr to another program.
TEST(TrainingProgramTest, ParamGroupVariablesAreSetByTheirQualifiedNames) {
  std::unique_ptr<Program> p = TrainingProgram("", {{{"bias"}, {{"lr", 0}}}});
  const auto before = *p->GetWeights({"bias", "W"});
  ASSERT_TRUE(p->RunStep(StepInputs(0.3f)).ok());
  const auto after = *p->GetWeights({"bias", "W"});
  EXPECT_EQ(after[0].second.bytes(), before[0].second.bytes());
  EXPECT_NE(after[1].second.bytes(), before[1].second.bytes());
  auto state = p->GetOptimizer();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->variables.at("group/0/lr"), 0.0);
  EXPECT_EQ(state->variables.at("lr"), 0.1);
  EXPECT_EQ(p->SetOptimizer({{"group/1/lr", 0.1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p->SetOptimizer({{"group/0/lr", 0.1}, {"group/0/momentum", 0.5}}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(p->SetOptimizer({{"group/0/lr", 0.05}}).ok());
  ASSERT_TRUE(p->RunStep(StepInputs(0.6f)).ok());
  EXPECT_NE(p->GetWeights({"bias"})->at(0).second.bytes(), after[0].second.bytes());
  auto checkpoint = p->GetCheckpoint();
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  std::unique_ptr<Program> q = TrainingProgram("", {{{"bias"}, {{"lr", 0}}}});
  ASSERT_TRUE(q->SetWeights(*checkpoint).ok());
  EXPECT_FLOAT_EQ(q->GetOptimizer()->variables.at("group/0/lr"), 0.05);  // float32 in transit
  auto next_p = p->RunStep(StepInputs(0.8f));
  auto next_q = q->RunStep(StepInputs(0.8f));
  ASSERT_TRUE(next_p.ok() && next_q.ok());
  EXPECT_EQ(next_p->losses, next_q->losses);
}

TEST(TrainingProgramTest, SetWeightsTakesAWholeCheckpoint) {
  auto p = TrainingProgram();
  EXPECT_EQ(p->max_set_weights_bytes(),
            p->weight_bytes() * kCheckpointWeightMultiple + kWeightSlackBytes);
  absl::StatusOr<tensor::NamedTensors> checkpoint = p->GetCheckpoint();
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  int64_t checkpoint_bytes = 0;
  for (const auto& [name, t] : *checkpoint) {
    checkpoint_bytes += static_cast<int64_t>(t.byte_size());
  }
  EXPECT_LE(checkpoint_bytes, p->max_set_weights_bytes());
}

TEST(TrainingProgramTest, InferenceProgramsHaveNoTrainingState) {
  auto e = compiler::Compile(Regressor(2), compiler::IpuConfig(), {});
  ASSERT_TRUE(e.ok()) << e.status();
  auto p = Program::Create(std::make_shared<const compiler::Executable>(*std::move(e)));
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE((*p)->is_training());
  EXPECT_EQ((*p)->GetCheckpoint().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*p)->SetOptimizer({{"lr", 1}}).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ipupod::runtime
