#include "device/runtime/program.h"

#include <cmath>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/compiler/compile.h"
#include "device/compiler/report.h"
#include "device/graph/interpreter.h"
#include "device/graph/onnx_import.h"
#include "device/hardware.h"
#include "tests/device/compiler/test_models.h"
#include "tests/support/models.h"

namespace ipupod::runtime {
namespace {

using compiler::Executable;
using tensor::Tensor;
using ::testing::AllOf;
using ::testing::HasSubstr;

// 4 layers of d=8; micro-batch ids[2, 4] -> logits[2, 4, 16].
std::string Gpt4() {
  compiler::testing::GptSpec spec;
  spec.layers = 4;
  return compiler::testing::GptBuilder(spec).Bytes();
}

// Pipelined over 4 IPUs, replication 2, device_iterations 4.
std::shared_ptr<const Executable> Compiled(
    const std::string& output_mode,
    compiler::ExecutionStrategy strategy = compiler::ExecutionStrategy::kPipelined) {
  compiler::IpuConfig c;
  const absl::Status s =
      compiler::UpdateFromString(c,
                                 "layers_per_ipu=[1 1 1 1],inference_replication_factor=2,"
                                 "inference_device_iterations=4,inference_output_mode=" +
                                     output_mode);
  EXPECT_TRUE(s.ok()) << s;
  compiler::CompileOptions options;
  options.strategy = strategy;
  auto e = compiler::Compile(Gpt4(), c, options);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::make_shared<const Executable>(*std::move(e));
}

// Deterministic, distinct values for every weight.
tensor::NamedTensors RandomWeights(const Program& p, float seed) {
  tensor::NamedTensors out;
  for (const compiler::TensorSpec& s : p.weight_specs()) {
    Tensor t = *Tensor::Create(s.dtype, s.shape);
    float* v = t.mutable_data<float>();
    for (int64_t k = 0; k < t.num_elements(); ++k) {
      v[k] = 0.3f * std::sin(seed + 0.7f * static_cast<float>(k) + static_cast<float>(out.size()));
    }
    out.emplace_back(s.name, std::move(t));
  }
  return out;
}

std::unique_ptr<Program> Loaded(const std::string& mode, float seed = 1) {
  auto p = Program::Create(Compiled(mode));
  EXPECT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE((*p)->SetWeights(RandomWeights(**p, seed)).ok());
  return *std::move(p);
}

// ids for 8 micro-batches of [2, 4]: micro-batch j holds tokens (j + k) % 16.
tensor::NamedTensors StepInputs() {
  std::vector<int64_t> ids(16 * 4);
  for (size_t k = 0; k < ids.size(); ++k) ids[k] = static_cast<int64_t>((k / 8 + k * 3) % 16);
  tensor::NamedTensors in;
  in.emplace_back("ids", *Tensor::FromValues<int64_t>({16, 4}, ids));
  return in;
}

// The unsplit model, one micro-batch at a time, with the same weights.
std::vector<Tensor> Reference(const tensor::NamedTensors& weights) {
  graph::Graph g = *graph::ImportOnnx(Gpt4());
  for (const auto& [name, t] : weights) g.initializers[name] = t;
  auto interp = *graph::Interpreter::Create(std::move(g));
  const tensor::NamedTensors in = StepInputs();
  const Tensor& ids = in[0].second;
  std::vector<Tensor> out;
  for (int j = 0; j < 8; ++j) {
    Tensor mb = *Tensor::FromBytes(tensor::DType::kInt64, {2, 4}, ids.bytes().substr(j * 64, 64));
    out.push_back((*interp->Run({mb}))[0]);
  }
  return out;
}

// Micro-batches `js` of the reference, concatenated along dim 0.
std::vector<float> Concat(const std::vector<Tensor>& ref, std::vector<int> js) {
  std::vector<float> out;
  for (int j : js)
    out.insert(out.end(), ref[j].values<float>().begin(), ref[j].values<float>().end());
  return out;
}

std::vector<float> Values(const StepResult& r) {
  const auto v = r.outputs.at(0).second.values<float>();
  return {v.begin(), v.end()};
}

TEST(ProgramTest, OutputModesHavePopartShapesAndSampleOrder) {
  const std::vector<Tensor> ref = Reference(RandomWeights(*Loaded("all"), 1));
  struct Case {
    std::string mode;
    int64_t micro_batches;
    std::vector<int> order;  // micro-batch j = iteration x 2 + replica
  };
  for (const Case& c : {Case{"all", 8, {0, 1, 2, 3, 4, 5, 6, 7}}, Case{"final", 2, {6, 7}},
                        Case{"every_n:2", 4, {2, 3, 6, 7}}}) {
    auto p = Loaded(c.mode);
    ASSERT_EQ(p->host_outputs().at(0).shape, (tensor::Shape{2 * c.micro_batches, 4, 16}));
    auto r = p->RunStep(StepInputs());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->outputs.at(0).first, "logits");
    EXPECT_EQ(r->outputs.at(0).second.shape(), p->host_outputs().at(0).shape) << c.mode;
    EXPECT_EQ(Values(*r), Concat(ref, c.order)) << c.mode;  // bit-identical
  }
}

TEST(ProgramTest, SumModeAddsDeviceIterationsPerReplica) {
  const std::vector<Tensor> ref = Reference(RandomWeights(*Loaded("all"), 1));
  auto p = Loaded("sum");
  auto r = p->RunStep(StepInputs());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->outputs.at(0).second.shape(), (tensor::Shape{4, 4, 16}));
  const std::vector<float> got = Values(*r);
  for (int replica = 0; replica < 2; ++replica) {
    for (int k = 0; k < 2 * 4 * 16; ++k) {
      float want = 0;
      for (int i = 0; i < 4; ++i) want += ref[i * 2 + replica].values<float>()[k];
      EXPECT_EQ(got[replica * 128 + k], want) << "replica " << replica << " element " << k;
    }
  }
}

TEST(ProgramTest, RunShapeAndCounts) {
  auto p = Loaded("all");
  EXPECT_EQ(p->samples_per_step(), 16);
  ASSERT_EQ(p->host_inputs().size(), 1u);
  EXPECT_EQ(p->host_inputs()[0].shape, (tensor::Shape{16, 4}));
  auto r = p->RunStep(StepInputs());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->samples, 16);
  auto interp = *graph::Interpreter::Create(*graph::ImportOnnx(Gpt4()));
  EXPECT_EQ(r->flops, 8 * interp->total_flops());
  EXPECT_GT(r->wall_s, 0);
}

TEST(ProgramTest, WeightsAreTheModelsFloatInitializers) {
  auto p = Program::Create(Compiled("all"));
  ASSERT_TRUE(p.ok()) << p.status();
  const auto specs = (*p)->weight_specs();
  ASSERT_EQ(specs.size(), 4u * 3 + 3);  // per layer attn, fc, proj; wte, ln_f, lm_head
  EXPECT_EQ(specs[0].name, "h.0.attn.w");
  EXPECT_TRUE(std::is_sorted(specs.begin(), specs.end(),
                             [](const auto& a, const auto& b) { return a.name < b.name; }));
  EXPECT_EQ((*p)->weight_bytes(), 4 * (4 * (64 + 256 + 256) + 16 * 8 + 8 + 8 * 16));
  const tensor::NamedTensors w = RandomWeights(**p, 2);
  ASSERT_TRUE((*p)->SetWeights(w).ok());
  auto all = (*p)->GetWeights({});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, w);  // RandomWeights follows weight_specs order
  const std::vector<std::string> names = {"lm_head.weight", "h.1.fc.w"};
  auto some = (*p)->GetWeights(names);
  ASSERT_TRUE(some.ok()) << some.status();
  ASSERT_EQ(some->size(), 2u);
  EXPECT_EQ((*some)[0].first, "lm_head.weight");
  const std::vector<std::string> bad = {"lm_head.weigth"};
  const absl::Status s = (*p)->GetWeights(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("did you mean 'lm_head.weight'"));
}

TEST(ProgramTest, SetWeightsErrorsChangeNothing) {
  auto p = Loaded("all");
  const tensor::NamedTensors before = *p->GetWeights({});
  const auto expect_rejected = [&](tensor::NamedTensors w, const std::string& message) {
    const absl::Status s = p->SetWeights(std::move(w));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(message));
    EXPECT_EQ(*p->GetWeights({}), before);
  };
  const Tensor good = *Tensor::Create(tensor::DType::kFloat32, {8, 8});
  expect_rejected({{"h.0.attn.w", good}, {"h.0.atn.w", good}},
                  "unknown weight 'h.0.atn.w' (did you mean 'h.0.attn.w'?)");
  expect_rejected(
      {{"h.0.attn.w", good}, {"h.1.attn.w", *Tensor::Create(tensor::DType::kFloat32, {8, 9})}},
      "weight 'h.1.attn.w' is float32[8, 8] but the new value is float32[8, 9]");
  expect_rejected(
      {{"h.0.attn.w", good}, {"h.1.attn.w", *Tensor::Create(tensor::DType::kInt32, {8, 8})}},
      "but the new value is int32[8, 8]");
  expect_rejected({{"h.0.attn.w", good}, {"h.0.attn.w", good}}, "'h.0.attn.w' is given twice");
}

TEST(ProgramTest, RunStepRejectsBadInputs) {
  auto p = Loaded("all");
  const auto expect_rejected = [&](const tensor::NamedTensors& in, const std::string& message) {
    const absl::Status s = p->RunStep(in).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(message));
  };
  const std::string how =
      "a step takes int64[16, 4]: 8 micro-batches (device_iterations 4 x replication 2) of "
      "int64[2, 4] concatenated along dim 0";
  expect_rejected({}, "input 'ids' is missing; " + how);
  tensor::NamedTensors in = StepInputs();
  in.emplace_back("idz", in[0].second);
  expect_rejected(in, "unknown input 'idz' (did you mean 'ids'?)");
  expect_rejected(in, "`ipupod inspect FILE.ipx` lists the executable's inputs");
  in[1].first = "ids";
  expect_rejected(in, "input 'ids' is given twice");
  expect_rejected({{"ids", *Tensor::Create(tensor::DType::kInt64, {2, 4})}},
                  "input 'ids' is int64[2, 4]; " + how);
  expect_rejected({{"ids", *Tensor::Create(tensor::DType::kFloat32, {16, 4})}},
                  "input 'ids' is float32[16, 4]");
  Tensor out_of_range = StepInputs()[0].second;
  out_of_range.mutable_data<int64_t>()[3 * 8] = 99;  // micro-batch 3
  expect_rejected({{"ids", out_of_range}}, "micro-batch 3 (device iteration 1, replica 1)");
}

compiler::Report ReportOf(const Program& p) {
  return *compiler::ReportFromJson(p.executable().report_json);
}

TEST(ProgramTest, SimulatedTimePipelinedIsLockstepWithRamp) {
  auto p = Loaded("all");
  const compiler::Report report = ReportOf(*p);
  ASSERT_EQ(report.num_stages, 4);
  const compiler::IpuPlan* slowest = &report.ipus[0];
  for (const auto& ipu : report.ipus) {
    if (ipu.busy_s() > slowest->busy_s()) slowest = &ipu;
  }
  const SimulatedTime t = p->RunStep(StepInputs())->simulated;
  EXPECT_DOUBLE_EQ(t.compute_s, 4 * slowest->compute_s);
  EXPECT_DOUBLE_EQ(t.ipu_link_s, 4 * slowest->ipu_link_s);
  EXPECT_DOUBLE_EQ(t.host_s, 4 * slowest->host_s);
  EXPECT_DOUBLE_EQ(t.pipeline_ramp_s, 3 * slowest->busy_s());
  EXPECT_GT(t.ipu_link_s, 0);
  EXPECT_NEAR(t.total_s(), report.step_s, 1e-12 * report.step_s);  // (M + S - 1) x slowest
}

TEST(ProgramTest, SimulatedTimeShardedIsSequential) {
  auto p = Program::Create(Compiled("all", compiler::ExecutionStrategy::kSharded));
  ASSERT_TRUE(p.ok()) << p.status();
  const compiler::Report report = ReportOf(**p);
  double compute = 0, busy = 0;
  for (const auto& ipu : report.ipus) {
    compute += ipu.compute_s;
    busy += ipu.busy_s();
  }
  const SimulatedTime t = (*p)->RunStep(StepInputs())->simulated;
  EXPECT_EQ(t.pipeline_ramp_s, 0);
  EXPECT_DOUBLE_EQ(t.compute_s, 4 * compute);
  EXPECT_NEAR(t.total_s(), 4 * busy, 1e-12 * busy);
  EXPECT_NEAR(t.total_s(), report.step_s, 1e-12 * report.step_s);
}

// Gpt4 in two serial phases on IPUs 0 and 1 (layers 0-1 in phase 0, 2-3 in
// phase 1), replication 2, device_iterations 4.
std::shared_ptr<const Executable> Phased(const std::string& liveness) {
  compiler::testing::GptBuilder gpt(compiler::testing::GptSpec{.layers = 4});
  for (int l = 0; l < 4; ++l) {
    onnx::NodeProto& n = gpt.NodeNamed(absl::StrCat("/h.", l, "/attn/MatMul"));
    compiler::testing::OnnxBuilder::AttrInt(n, "__ipu_number", l % 2);
    compiler::testing::OnnxBuilder::AttrInt(n, "__execution_phase", l / 2);
  }
  compiler::IpuConfig c;
  const absl::Status s =
      compiler::UpdateFromString(c,
                                 "inference_replication_factor=2,inference_device_iterations=4,"
                                 "execution_strategy=serial_phased,tensors_liveness=" +
                                     liveness);
  EXPECT_TRUE(s.ok()) << s;
  auto e = compiler::Compile(gpt.Bytes(), c, {});
  EXPECT_TRUE(e.ok()) << e.status();
  return std::make_shared<const Executable>(*std::move(e));
}

TEST(ProgramTest, SimulatedTimePhasedRunsPhasesInTurnWithTheSameResults) {
  auto phased = Program::Create(Phased("off_chip_after_fwd_no_overlap"));
  ASSERT_TRUE(phased.ok()) << phased.status();
  std::unique_ptr<Program> pipelined = Loaded("all");
  ASSERT_TRUE((*phased)->SetWeights(RandomWeights(**phased, 1)).ok());
  const compiler::Report report = ReportOf(**phased);
  ASSERT_EQ(report.phases.size(), 2u);
  auto step = (*phased)->RunStep(StepInputs());
  ASSERT_TRUE(step.ok()) << step.status();
  const SimulatedTime& t = step->simulated;
  double compute = 0, streaming = 0, host = 0;
  for (const compiler::PhasePlan& phase : report.phases) {
    compute += phase.compute_s;
    streaming += phase.streaming_s;
  }
  for (const compiler::IpuPlan& ipu : report.ipus) host += ipu.host_s;
  EXPECT_EQ(t.pipeline_ramp_s, 0);
  EXPECT_DOUBLE_EQ(t.compute_s, 4 * compute);
  EXPECT_GT(streaming, 0);  // the phases' weights come from streaming memory
  EXPECT_DOUBLE_EQ(t.host_s, 4 * (streaming + host));
  EXPECT_NEAR(t.total_s(), report.step_s, 1e-12 * report.step_s);
  // Phases change where and when, not what.
  auto want = pipelined->RunStep(StepInputs());
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(step->outputs[0].second, want->outputs[0].second);
}

TEST(ProgramTest, SimulatedTransfersAndMemoryFollowTheReport) {
  auto p = Loaded("all");
  const compiler::Report report = ReportOf(*p);
  EXPECT_EQ(p->SimulatedHostToDeviceSeconds(0), 0);
  EXPECT_EQ(SimulatedTime{}.total_s(), 0);
  // Two replicas share the host link.
  EXPECT_DOUBLE_EQ(p->SimulatedHostToDeviceSeconds(int64_t{32'000'000'000}),
                   2 * 32e9 / device::kGc200.host_link_bytes_per_s);
  std::vector<int64_t> memory;
  int64_t load_bytes = 0;
  for (const auto& ipu : report.ipus) {
    memory.push_back(ipu.total_bytes);
    load_bytes += ipu.code_bytes + ipu.weight_bytes;
  }
  EXPECT_EQ(p->memory_bytes_per_ipu(), memory);
  EXPECT_EQ(memory.size(), 4u);
  EXPECT_DOUBLE_EQ(p->SimulatedLoadSeconds(), p->SimulatedHostToDeviceSeconds(load_bytes));
}

TEST(ProgramTest, ASessionIsChargedEachReplicasPlanAndNothingOnIdleIpus) {
  auto p = Loaded("all");
  const std::vector<int64_t> plan = p->memory_bytes_per_ipu();
  ASSERT_EQ(plan.size(), 4u);
  // Two replicas of four IPUs: replica r on IPUs 4r..4r+3.
  std::vector<uint64_t> want;
  for (int r = 0; r < 2; ++r) {
    for (int64_t bytes : plan) want.push_back(static_cast<uint64_t>(bytes));
  }
  EXPECT_EQ(p->MemoryChargePerIpu(8), want);
  // Auto-rounded extras stay empty; a shorter list is cut (the caller's
  // count decides).
  want.resize(16, 0);
  EXPECT_EQ(p->MemoryChargePerIpu(16), want);
  EXPECT_EQ(p->MemoryChargePerIpu(2), std::vector<uint64_t>(want.begin(), want.begin() + 2));
}

// PopTorch's enableSyntheticData: host I/O off, inputs made on the device,
// zeros back, no host transfers in the simulated time; inputs still checked.
TEST(ProgramTest, SyntheticDataRunsWithoutHostIo) {
  compiler::IpuConfig c;
  ASSERT_TRUE(
      compiler::UpdateFromString(c, "inference_device_iterations=8,synthetic_data=true").ok());
  auto e = compiler::Compile(Gpt4(), c, compiler::CompileOptions{});
  ASSERT_TRUE(e.ok()) << e.status();
  auto synthetic = Program::Create(std::make_shared<const Executable>(*std::move(e)));
  ASSERT_TRUE(synthetic.ok()) << synthetic.status();
  ASSERT_TRUE((*synthetic)->SetWeights(RandomWeights(**synthetic, 1)).ok());
  auto step = (*synthetic)->RunStep(StepInputs());
  ASSERT_TRUE(step.ok()) << step.status();
  auto real = Loaded("all")->RunStep(StepInputs());
  ASSERT_TRUE(real.ok()) << real.status();
  EXPECT_EQ(step->outputs.at(0).second.shape(), real->outputs.at(0).second.shape());
  for (float v : Values(*step)) ASSERT_EQ(v, 0.0f) << "nothing comes back to the host";
  EXPECT_GT(step->flops, 0) << "the device still computes";
  EXPECT_EQ(step->simulated.host_s, 0.0);
  EXPECT_GT(real->simulated.host_s, 0.0);
  tensor::NamedTensors bad;
  bad.emplace_back("ids", *Tensor::Create(tensor::DType::kInt64, {3, 4}));
  EXPECT_EQ((*synthetic)->RunStep(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ProgramTest, SetWeightsTakesAtMostTheWeightsPlusSlack) {
  auto p = Loaded("all");
  EXPECT_EQ(p->max_set_weights_bytes(), p->weight_bytes() + kWeightSlackBytes);
}

TEST(ProgramTest, CreateRejectsExecutablesThatDisagreeWithTheirModel) {
  Executable garbage = *Compiled("all");
  garbage.model_bytes = "not onnx";
  auto p = Program::Create(std::make_shared<const Executable>(garbage));
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("model does not import"));

  Executable reshaped = *Compiled("all");
  reshaped.inputs[0].shape = {3, 4};
  p = Program::Create(std::make_shared<const Executable>(reshaped));
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(p.status().message()),
      HasSubstr("input 0 is recorded as 'ids' int64[3, 4] but the model has 'ids' int64[2, 4]"));

  Executable no_report = *Compiled("all");
  no_report.report_json = "{";
  EXPECT_EQ(Program::Create(std::make_shared<const Executable>(no_report)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Program::Create(nullptr).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ProgramTest, CreateRejectsAReportThatUnderstatesItsModel) {
  // A server charges the report's memory: a crafted .ipx must not claim less than its model needs.
  Executable understated = *Compiled("all");
  auto report = compiler::ReportFromJson(understated.report_json);
  ASSERT_TRUE(report.ok()) << report.status();
  const auto host_bytes = HostMemoryBytes(*report);
  EXPECT_GT(host_bytes, 0);
  report->ipus[2].total_bytes /= 2;
  report->ipus[2].activation_bytes = 0;
  understated.report_json = report->Json();
  auto p = Program::Create(std::make_shared<const Executable>(understated));
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()),
              AllOf(HasSubstr("report charges IPU 2"), HasSubstr("recompile it")));

  // The same totals, with the bytes moved into what the host does not hold.
  for (bool into_code : {true, false}) {
    auto moved = compiler::ReportFromJson(Compiled("all")->report_json);
    ASSERT_TRUE(moved.ok());
    compiler::IpuPlan& ipu = moved->ipus[0];
    (into_code ? ipu.code_bytes : ipu.temporary_bytes) += ipu.weight_bytes + ipu.activation_bytes;
    ipu.weight_bytes = ipu.activation_bytes = 0;
    Executable crafted = *Compiled("all");
    crafted.report_json = moved->Json();
    auto refused = Program::Create(std::make_shared<const Executable>(crafted));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(refused.status().message()),
                AllOf(HasSubstr("of host memory but its model needs"), HasSubstr("recompile it")));
  }

  auto honest = Program::Create(Compiled("all"));
  ASSERT_TRUE(honest.ok()) << honest.status();
  EXPECT_EQ((*honest)->host_memory_bytes(), host_bytes);
}

// broadcast_buffers=false: the replicas' own buffer copies are host memory
// the report must charge; one that leaves them out (a crafted report, or one
// written before they were counted) is refused as any understatement is.
TEST(ProgramTest, CreateRejectsAReportWithoutTheReplicasBufferCopies) {
  compiler::IpuConfig c;
  ASSERT_TRUE(
      compiler::UpdateFromString(c, "inference_replication_factor=2,broadcast_buffers=false").ok());
  compiler::CompileOptions options;
  options.training.buffers = {{"state", "state_next"}};
  auto e = compiler::Compile(test_support::BufferModel(1000), c, options);
  ASSERT_TRUE(e.ok()) << e.status();
  auto report = compiler::ReportFromJson(e->report_json);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->replica_buffer_bytes, 4000);
  auto honest = Program::Create(std::make_shared<const Executable>(*e));
  ASSERT_TRUE(honest.ok()) << honest.status();
  EXPECT_EQ((*honest)->host_memory_bytes(), report->host_bytes());

  report->replica_buffer_bytes = 0;
  Executable understated = *e;
  understated.report_json = report->Json();
  auto refused = Program::Create(std::make_shared<const Executable>(understated));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              AllOf(HasSubstr("of host memory but its model needs"), HasSubstr("recompile it")));
}

TEST(ProgramTest, ACancelledCreateStopsWithCancelled) {
  LoadOptions options;
  options.cancelled = [] { return true; };
  auto p = Program::Create(Compiled("all"), options);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kCancelled);
}

TEST(ProgramTest, ConcurrentRunStepsAgree) {
  auto p = Loaded("all");
  const std::vector<float> want = Values(*p->RunStep(StepInputs()));
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> got(3);
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] { got[i] = Values(*p->RunStep(StepInputs())); });
  }
  for (auto& t : threads) t.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
}

}  // namespace
}  // namespace ipupod::runtime

namespace ipupod::runtime {
namespace {

using compiler::testing::kFloat;
using compiler::testing::OnnxBuilder;

// ids -> a head tied to its table: x[2, 3] @ Transpose(table[4, 3]), with
// the metadata ipupod.poptorch writes (head.weight is table).
std::unique_ptr<Program> TiedHeadProgram() {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {2, 3}).Output("y", kFloat);
  b.Floats("table", {4, 3}, std::vector<float>(12, 1.0f));
  auto& t = b.Node("Transpose", {"table"}, {"tableT"}, "/head/Transpose");
  OnnxBuilder::AttrInts(t, "perm", {1, 0});
  b.Node("MatMul", {"x", "tableT"}, {"y"}, "/head/MatMul");
  for (const auto& [key, value] : {std::pair{graph::kParametersMetadataKey, "table"},
                                   std::pair{graph::kAliasesMetadataKey, "head.weight=table"}}) {
    auto* entry = b.model().add_metadata_props();
    entry->set_key(key);
    entry->set_value(value);
  }
  auto e = compiler::Compile(b.Bytes(), compiler::IpuConfig{}, compiler::CompileOptions{});
  EXPECT_TRUE(e.ok()) << e.status();
  auto p = Program::Create(std::make_shared<const Executable>(*std::move(e)));
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

Tensor Filled(float value) { return *Tensor::FromValues<float>({4, 3}, std::vector(12, value)); }

TEST(ProgramTest, ATiedWeightIsWrittenAndReadByEitherName) {
  std::unique_ptr<Program> p = TiedHeadProgram();
  EXPECT_EQ(p->weight_aliases().at("head.weight"), "table");
  ASSERT_TRUE(p->SetWeights({{"head.weight", Filled(2)}}).ok());
  auto all = p->GetWeights({});
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);  // the weight, then its alias
  EXPECT_EQ((*all)[0], std::pair(std::string("table"), Filled(2)));
  EXPECT_EQ((*all)[1], std::pair(std::string("head.weight"), Filled(2)));
  auto step = p->RunStep({{"x", *Tensor::FromValues<float>({2, 3}, std::vector(6, 1.0f))}});
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->outputs[0].second.values<float>()[0], 6.0f);  // the prepared transpose followed
  EXPECT_TRUE(p->SetWeights({{"table", Filled(3)}, {"head.weight", Filled(3)}}).ok());
}

TEST(ProgramTest, TwoValuesForOneTiedTensorAreRefusedAndChangeNothing) {
  std::unique_ptr<Program> p = TiedHeadProgram();
  const absl::Status s = p->SetWeights({{"table", Filled(3)}, {"head.weight", Filled(4)}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("are one tensor in the model"));
  EXPECT_EQ((*p->GetWeights({"table"}))[0].second, Filled(1));
}

}  // namespace
}  // namespace ipupod::runtime
