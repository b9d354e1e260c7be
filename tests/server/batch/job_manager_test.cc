// batch::JobManager over the real scheduler, execution engine, SQLite store
// and blob store (no gRPC): jobs run to the same numbers as the program run
// by hand; a training job stopped mid-way and resumed by a new manager on
// the same state ends with weights bit-identical to an uninterrupted one;
// the lifecycle requests and their errors.
#include "server/batch/job_manager.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/sha256.h"
#include "common/tensor/tensor_files.h"
#include "device/compiler/compile.h"
#include "device/compiler/executable.h"
#include "device/compiler/ipu_config.h"
#include "device/pod_config.h"
#include "device/runtime/program.h"
#include "server/execution/session_execution.h"
#include "server/store/sqlite_state_store.h"
#include "tests/support/eventually.h"
#include "tests/support/models.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tensors.h"

namespace ipupod::batch {
namespace {

using jobs::JobState;
using scheduler::Caller;
using tensor::Tensor;
using ::testing::HasSubstr;

using test_support::Wave;

std::string Ipx(bool training, absl::string_view settings = "") {
  compiler::IpuConfig config;
  if (!settings.empty()) {
    EXPECT_TRUE(compiler::UpdateFromString(config, settings).ok());
  }
  compiler::CompileOptions options;
  if (training) {
    EXPECT_TRUE(compiler::UpdateFromString(config, "gradient_accumulation_steps=2").ok());
    options.for_inference = false;
    options.training.optimizer = "sgd";
    options.training.optimizer_attrs = {{"lr", 0.05}, {"momentum", 0.9}};
  }
  auto e = compiler::Compile(test_support::RegressorModel(2, Wave(6, 1.0f)), config, options);
  EXPECT_TRUE(e.ok()) << e.status();
  auto bytes = compiler::WriteExecutable(*e);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return *bytes;
}

// 16 samples: 8 inference steps of 2, or 4 training runs of 2 x 2.
tensor::NamedTensors Data() {
  return {{"x", *Tensor::FromValues<float>({16, 3}, Wave(48, 0.3f))},
          {"t", *Tensor::FromValues<float>({16, 2}, Wave(32, 1.7f))}};
}

// What a Pod differs in from the defaults: the sharing policy, a store fault.
struct PodSetup {
  std::shared_ptr<const sharing::SharingPolicy> policy = nullptr;
  std::optional<store::WriteFault> fault = std::nullopt;
};

// One server's worth of the pieces a JobManager runs on, on `dir`; the store
// is the usage ledger of the scheduler and the jobs, as in ipupodd.
class Pod {
 public:
  explicit Pod(const std::string& dir, absl::Duration retention = absl::Hours(1),
               PodSetup setup = {}) {
    store::StoreOptions store_options;
    store_options.fault = setup.fault;
    auto store = store::SqliteStateStore::Open(dir + "/state", store_options);
    EXPECT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    scheduler::SchedulerOptions options;
    options.pod = *device::PodFromName("POD4");
    options.ipu_reset_time = absl::Milliseconds(10);
    options.policy = setup.policy;
    options.ledger = store_.get();
    execution::LoadedPrograms* programs = &programs_;
    options.on_session_ended = [programs](const std::string& s) { programs->Drop(s); };
    scheduler_ = *scheduler::Scheduler::Create(options, store_.get());
    execution_ = std::make_unique<execution::SessionExecution>(
        execution::ExecutionResources{scheduler_.get(), &cache_, &programs_, &memory_, &compute_});
    auto blobs = jobs::BlobStore::Open(dir + "/blobs", {});
    EXPECT_TRUE(blobs.ok()) << blobs.status();
    blobs_ = *std::move(blobs);
    JobManagerOptions job_options;
    job_options.jobs_dir = dir + "/jobs";
    job_options.tick = absl::Milliseconds(20);
    job_options.retention = retention;
    auto manager = JobManager::Start(job_options, {scheduler_.get(), execution_.get(), store_.get(),
                                                   blobs_.get(), store_.get()});
    EXPECT_TRUE(manager.ok()) << manager.status();
    manager_ = *std::move(manager);
  }
  ~Pod() {
    manager_->Shutdown();
    scheduler_->Shutdown();
  }

  // Stores `bytes` as `user` and returns its hash.
  std::string Put(const std::string& user, const std::string& bytes) {
    const std::string sha = DigestHex(Sha256Of(bytes));
    auto upload = blobs_->BeginUpload(user, sha, bytes.size());
    EXPECT_TRUE(upload.ok()) << upload.status();
    if (!(*upload)->already_stored()) {
      EXPECT_TRUE((*upload)->Append(bytes).ok());
      EXPECT_TRUE((*upload)->Commit().ok());
    }
    return sha;
  }

  JobManager& jobs() { return *manager_; }
  scheduler::Scheduler& scheduler() { return *scheduler_; }
  // The usage ledger's records (newest first).
  std::vector<accounting::UsageRecord> Usage() {
    auto records = store_->Query(accounting::LedgerQuery());
    EXPECT_TRUE(records.ok()) << records.status();
    return records.ok() ? *records : std::vector<accounting::UsageRecord>{};
  }

 private:
  std::unique_ptr<store::SqliteStateStore> store_;
  runtime::ExecutableCache cache_{int64_t{256} << 20};
  execution::LoadedPrograms programs_{absl::Seconds(10)};
  execution::MemoryBudget memory_{int64_t{1} << 30};
  runtime::ComputeGate compute_{1, 16};
  std::unique_ptr<scheduler::Scheduler> scheduler_;
  std::unique_ptr<execution::SessionExecution> execution_;
  std::unique_ptr<jobs::BlobStore> blobs_;
  std::unique_ptr<JobManager> manager_;
};

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override { pod_ = std::make_unique<Pod>(dir_.path()); }

  jobs::JobSpec Spec(bool training) {
    jobs::JobSpec spec;
    spec.executable_sha256 = pod_->Put("alice", Ipx(training));
    spec.inputs = {pod_->Put("alice", tensor::SerializeNpz(Data())), "npz"};
    spec.train = training;
    if (training) spec.steps = 8;
    return spec;
  }

  JobView WaitFinished(const std::string& id) {
    JobView view;
    EXPECT_TRUE(test_support::Eventually(
        [&] {
          auto got = pod_->jobs().Get(alice_, id);
          if (got.ok()) view = *got;
          return got.ok() && jobs::IsFinished(got->record.state);
        },
        absl::Seconds(60)))
        << "job " << id << " is " << jobs::JobStateName(view.record.state) << ": "
        << view.record.reason;
    return view;
  }

  tensor::NamedTensors ResultTensors(const std::string& id, const std::string& name) {
    auto found = pod_->jobs().Result(alice_, id, name);
    EXPECT_TRUE(found.ok()) << found.status();
    if (!found.ok()) return {};
    auto tensors = tensor::ReadTensorFile(found->first.string());
    EXPECT_TRUE(tensors.ok()) << tensors.status();
    return tensors.ok() ? *tensors : tensor::NamedTensors{};
  }

  test_support::TempDir dir_;
  std::unique_ptr<Pod> pod_;
  const Caller alice_{"alice", false};
  const Caller bob_{"bob", false};
};

TEST_F(JobManagerTest, InferenceJobOutputsEqualTheProgramRunByHand) {
  auto submitted = pod_->jobs().Submit(alice_, Spec(false), "");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  ASSERT_EQ(submitted->size(), 1u);
  const std::string id = (*submitted)[0].record.id;
  const JobView done = WaitFinished(id);
  ASSERT_EQ(done.record.state, JobState::kCompleted) << done.record.reason;
  EXPECT_EQ(done.record.runs_total, 8);
  EXPECT_GT(done.record.ipu_seconds, 0);

  auto exe = compiler::ReadExecutable(Ipx(false));
  ASSERT_TRUE(exe.ok());
  auto program =
      runtime::Program::Create(std::make_shared<const compiler::Executable>(*std::move(exe)));
  ASSERT_TRUE(program.ok());
  const tensor::NamedTensors data = Data();
  const tensor::NamedTensors outputs = ResultTensors(id, "outputs.npz");
  ASSERT_EQ(outputs.size(), 2u);
  const Tensor& y = outputs[0].second;
  ASSERT_EQ(y.shape(), (tensor::Shape{16, 2}));
  for (int64_t step = 0; step < 8; ++step) {
    tensor::NamedTensors inputs;
    for (const auto& [name, t] : data) {
      const int64_t cols = t.shape()[1];
      inputs.emplace_back(
          name, *Tensor::FromValues<float>(
                    {2, cols}, absl::MakeConstSpan(t.data<float>() + step * 2 * cols, 2 * cols)));
    }
    auto ran = (*program)->RunStep(inputs);
    ASSERT_TRUE(ran.ok()) << ran.status();
    const Tensor& want = ran->outputs[0].second;
    EXPECT_EQ(0, std::memcmp(want.data<float>(), y.data<float>() + step * 4, 4 * sizeof(float)))
        << "step " << step;
  }
}

// poptorch.ipu_print_tensor in a batch job: every run's printed value is an
// event of the job's log, after that run's "run" event.
// A blob's hash is no capability (server/jobs/blob_store.h, Ownership): bob names
// alice's executable and inputs and gets the answer for hashes nobody
// stored, until he uploads the same bytes himself.
TEST_F(JobManagerTest, ASubmitNamingAnotherUsersBlobsIsNotFoundUntilTheyUploadThem) {
  const jobs::JobSpec spec = Spec(false);
  auto refused = pod_->jobs().Submit(bob_, spec, "");
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kNotFound) << refused.status();
  jobs::JobSpec unknown = spec;
  unknown.executable_sha256 = DigestHex(Sha256Of("an executable nobody uploaded"));
  auto nobodys = pod_->jobs().Submit(bob_, unknown, "");
  EXPECT_EQ(
      absl::StrReplaceAll(refused.status().message(), {{spec.executable_sha256, "<sha>"}}),
      absl::StrReplaceAll(nobodys.status().message(), {{unknown.executable_sha256, "<sha>"}}));
  EXPECT_TRUE(pod_->jobs().List(bob_, {}, nullptr).empty());
  EXPECT_EQ(pod_->Put("bob", Ipx(false)), spec.executable_sha256);
  EXPECT_EQ(pod_->jobs().Submit(bob_, spec, "").status().code(), absl::StatusCode::kNotFound)
      << "the inputs are still alice's alone";
  EXPECT_EQ(pod_->Put("bob", tensor::SerializeNpz(Data())), spec.inputs.sha256);
  auto submitted = pod_->jobs().Submit(bob_, spec, "");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  auto done = pod_->jobs().Get(bob_, (*submitted)[0].record.id);
  EXPECT_TRUE(done.ok()) << done.status();
}

TEST_F(JobManagerTest, IpuPrintLinesAreEventsOfTheJobsLog) {
  using graph::testing::kFloat;
  graph::testing::OnnxBuilder b(14);
  auto* domain = b.model().add_opset_import();
  domain->set_domain("ai.graphcore");
  domain->set_version(1);
  b.Input("x", kFloat, {2, 3}).Input("t", kFloat, {2, 2});
  onnx::NodeProto& print = b.Node("IpuPrint", {"x"}, {"px"}, "/print/IpuPrint");
  print.set_domain("ai.graphcore");
  graph::testing::OnnxBuilder::AttrString(print, "title", "x");
  b.Node("Identity", {"t"}, {"tt"});
  b.Output("px", kFloat).Output("tt", kFloat);
  auto e = compiler::Compile(b.Bytes(), compiler::IpuConfig(), compiler::CompileOptions());
  ASSERT_TRUE(e.ok()) << e.status();
  jobs::JobSpec spec = Spec(false);
  spec.executable_sha256 = pod_->Put("alice", *compiler::WriteExecutable(*e));
  auto submitted = pod_->jobs().Submit(alice_, spec, "");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string id = (*submitted)[0].record.id;
  ASSERT_EQ(WaitFinished(id).record.state, JobState::kCompleted);
  bool finished = false;
  auto events = pod_->jobs().Events(alice_, id, 0, 1000, &finished);
  ASSERT_TRUE(events.ok()) << events.status();
  std::vector<std::string> printed;
  int64_t last_run = 0;
  for (const JobEvent& event : *events) {
    if (event.kind == "run") last_run = event.run;
    if (event.kind != "print") continue;
    EXPECT_EQ(event.run, last_run) << event.text;
    printed.push_back(event.text);
  }
  ASSERT_EQ(printed.size(), 8u) << "8 runs of one micro-batch";
  EXPECT_EQ(printed[0].rfind("x: float32[2, 3] [", 0), 0u) << printed[0];
}

TEST_F(JobManagerTest, TrainingResumedByANewServerEndsBitIdentical) {
  jobs::JobSpec spec = Spec(true);
  spec.steps = 0;
  spec.epochs = 2000;  // 8000 runs: long enough to stop in the middle
  spec.checkpoint_every = 100;
  auto whole = pod_->jobs().Submit(alice_, spec, "");
  ASSERT_TRUE(whole.ok()) << whole.status();
  const std::string whole_id = (*whole)[0].record.id;
  ASSERT_EQ(WaitFinished(whole_id).record.state, JobState::kCompleted);

  auto cut = pod_->jobs().Submit(alice_, spec, "");
  ASSERT_TRUE(cut.ok()) << cut.status();
  const std::string cut_id = (*cut)[0].record.id;
  ASSERT_TRUE(test_support::Eventually([&] {
    auto got = pod_->jobs().Get(alice_, cut_id);
    return got.ok() && got->record.runs_done >= 300;
  }));
  pod_.reset();  // the server stops; the job's record stays RUNNING
  pod_ = std::make_unique<Pod>(dir_.path());
  pod_.reset();  // and stops again before the job could start
  pod_ = std::make_unique<Pod>(dir_.path());
  auto resumed = pod_->jobs().Get(alice_, cut_id);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ASSERT_LT(resumed->record.runs_done, resumed->record.runs_total)
      << "the job finished before the stop; nothing was resumed";
  const JobView done = WaitFinished(cut_id);
  ASSERT_EQ(done.record.state, JobState::kCompleted) << done.record.reason;
  const tensor::NamedTensors a = ResultTensors(whole_id, "weights.npz");
  const tensor::NamedTensors b = ResultTensors(cut_id, "weights.npz");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.bytes(), b[i].second.bytes()) << a[i].first << " differs";
  }
}

// An inference job's runs_done is durable progress (proto/ipupod/v1/jobs.proto):
// stopped part-way (a kill -9 leaves its record as a stop does: RUNNING,
// runs_done never written), the next server counts the step outputs it kept
// and goes on from them, so the progress never goes back to 0.
TEST_F(JobManagerTest, InferenceProgressSurvivesARestart) {
  jobs::JobSpec spec = Spec(false);
  // 1000 steps: long enough to stop in the middle.
  const tensor::NamedTensors many = {
      {"x", *Tensor::FromValues<float>({2000, 3}, Wave(6000, 0.3f))},
      {"t", *Tensor::FromValues<float>({2000, 2}, Wave(4000, 1.7f))}};
  spec.inputs = {pod_->Put("alice", tensor::SerializeNpz(many)), "npz"};
  auto cut = pod_->jobs().Submit(alice_, spec, "");
  ASSERT_TRUE(cut.ok()) << cut.status();
  const std::string id = (*cut)[0].record.id;
  ASSERT_TRUE(test_support::Eventually([&] {
    auto got = pod_->jobs().Get(alice_, id);
    return got.ok() && got->live_runs >= 100;
  }));
  pod_.reset();
  pod_ = std::make_unique<Pod>(dir_.path());
  auto resumed = pod_->jobs().Get(alice_, id);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ASSERT_NE(resumed->record.state, JobState::kCompleted) << "nothing was cut";
  EXPECT_GE(resumed->record.runs_done, 100) << "the kept steps were forgotten";
  EXPECT_LT(resumed->record.runs_done, resumed->record.runs_total);
  EXPECT_GE(resumed->live_runs, resumed->record.runs_done);
  const JobView done = WaitFinished(id);
  ASSERT_EQ(done.record.state, JobState::kCompleted) << done.record.reason;
  EXPECT_EQ(done.record.runs_done, done.record.runs_total);
}

TEST_F(JobManagerTest, HoldReleaseCancelDeleteAndWhoMay) {
  jobs::JobSpec spec = Spec(false);
  auto submitted = pod_->jobs().Submit(alice_, spec, "");
  ASSERT_TRUE(submitted.ok());
  const std::string id = (*submitted)[0].record.id;
  WaitFinished(id);
  // A held job never starts; released, it runs.
  spec.after = id;
  auto second = pod_->jobs().Submit(alice_, spec, "");
  ASSERT_TRUE(second.ok()) << second.status();
  const std::string id2 = (*second)[0].record.id;
  auto held = pod_->jobs().Hold(alice_, id2);
  if (held.ok()) {
    EXPECT_TRUE(held->record.held);
    EXPECT_EQ(pod_->jobs().Hold(bob_, id2).status().code(), absl::StatusCode::kPermissionDenied);
    ASSERT_TRUE(pod_->jobs().Release(alice_, id2).ok());
  }
  EXPECT_EQ(WaitFinished(id2).record.state, JobState::kCompleted);
  // What the metrics read (ipupod_jobs{state}): counts of every user's jobs.
  const auto counts = pod_->jobs().CountByState();
  EXPECT_EQ(counts[static_cast<size_t>(JobState::kCompleted)], 2);
  EXPECT_EQ(counts[static_cast<size_t>(JobState::kPending)], 0);
  EXPECT_EQ(pod_->jobs().Cancel(alice_, id2).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Others see the queue line only.
  auto seen = pod_->jobs().Get(bob_, id2);
  ASSERT_TRUE(seen.ok());
  EXPECT_FALSE(seen->details);
  EXPECT_TRUE(seen->record.spec.executable_sha256.empty());
  EXPECT_EQ(pod_->jobs().Result(bob_, id2, "outputs.npz").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(pod_->jobs().Delete(bob_, id2).status().code(), absl::StatusCode::kPermissionDenied);
  auto freed = pod_->jobs().Delete(alice_, id2);
  ASSERT_TRUE(freed.ok()) << freed.status();
  EXPECT_GT(*freed, 0u);
  EXPECT_EQ(pod_->jobs().Get(alice_, id2).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, ResultsArePurgedAfterTheRetentionAndTheRecordSaysSo) {
  pod_.reset();
  pod_ = std::make_unique<Pod>(dir_.path(), absl::Milliseconds(50));
  auto submitted = pod_->jobs().Submit(alice_, Spec(false), "");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string id = (*submitted)[0].record.id;
  ASSERT_EQ(WaitFinished(id).record.state, JobState::kCompleted);
  ASSERT_TRUE(test_support::Eventually([&] {
    auto got = pod_->jobs().Get(alice_, id);
    return got.ok() && got->record.results_purged;
  }));
  auto result = pod_->jobs().Result(alice_, id, "outputs.npz");
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("retention"));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/jobs/" + id + "/outputs.npz"));
}

TEST_F(JobManagerTest, AResultNameIsNeverAPath) {
  auto submitted = pod_->jobs().Submit(alice_, Spec(false), "");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string id = (*submitted)[0].record.id;
  WaitFinished(id);
  for (const char* name : {"../../state/state.db", "/etc/passwd", "events.jsonl", ""}) {
    EXPECT_EQ(pod_->jobs().Result(alice_, id, name).status().code(), absl::StatusCode::kNotFound)
        << name;
  }
  EXPECT_EQ(pod_->jobs().Get(alice_, "../1").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(JobManagerTest, BadSubmitsAreRefusedAndStoreNothing) {
  const jobs::JobSpec good = Spec(true);
  const auto refused = [&](jobs::JobSpec spec, absl::string_view sweep, absl::StatusCode code,
                           absl::string_view words) {
    auto got = pod_->jobs().Submit(alice_, spec, sweep);
    EXPECT_EQ(got.status().code(), code) << got.status();
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(std::string(words)));
  };
  jobs::JobSpec s = good;
  s.time_limit_seconds = int64_t{3600} * 24 * 365 * 3;
  refused(s, "", absl::StatusCode::kInvalidArgument, "30 days");
  refused(good, "lr=0.1,x", absl::StatusCode::kInvalidArgument, "'x' is not a finite number");
  refused(good, "beta=0.1", absl::StatusCode::kInvalidArgument, "not a variable");
  s = good;
  s.after = "999";
  refused(s, "", absl::StatusCode::kNotFound, "does not exist");
  s = good;
  s.after = "1;drop";
  refused(s, "", absl::StatusCode::kInvalidArgument, "not a job id");
  s = good;
  s.steps = 3;
  s.num_ipus = 3;
  refused(s, "", absl::StatusCode::kInvalidArgument, "");
  s = good;
  s.inputs.sha256 = std::string(64, 'a');
  refused(s, "", absl::StatusCode::kNotFound, "upload it first");
  s = good;
  s.train = false;
  refused(s, "", absl::StatusCode::kInvalidArgument, "for training");
  // Training lengths whose runs overflow int64 (or pass the bound) are
  // refused, never wrapped into a job that "completes" untrained.
  s = good;
  s.steps = 0;
  for (int64_t epochs : {std::numeric_limits<int64_t>::max(),
                         std::numeric_limits<int64_t>::max() / 2 + 1, int64_t{1} << 62}) {
    s.epochs = epochs;
    refused(s, "", absl::StatusCode::kInvalidArgument, "runs one training may make");
  }
  s = good;
  s.steps = std::numeric_limits<int64_t>::max();  // too many runs, or not a multiple
  refused(s, "", absl::StatusCode::kInvalidArgument, "steps");
  s.steps = int64_t{1} << 62;
  refused(s, "", absl::StatusCode::kInvalidArgument, "runs one training may make");
  // Every optimizer variable is a finite number, as --sweep's values are.
  for (double bad : {std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    s = good;
    s.optimizer["lr"] = bad;
    refused(s, "", absl::StatusCode::kInvalidArgument, "not a finite number");
    s = good;
    s.optimizer["momentum"] = bad;
    refused(s, "", absl::StatusCode::kInvalidArgument, "not a finite number");
  }
  JobFilter all;
  all.all = true;
  EXPECT_TRUE(pod_->jobs().List(alice_, all).empty());

  auto sweep = pod_->jobs().Submit(alice_, good, "lr=0.1,0.01,0.001");
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  ASSERT_EQ(sweep->size(), 3u);
  EXPECT_EQ((*sweep)[2].record.id, absl::StrCat((*sweep)[0].record.id.substr(0, 1), ".2"));
  EXPECT_EQ((*sweep)[1].record.spec.optimizer.at("lr"), 0.01);
}

}  // namespace
}  // namespace ipupod::batch

namespace ipupod::batch {
namespace {

// Two teams; alice is in vision only; normal QoS jobs at most 2 pending per
// user; scavenger is preemptible; high is for admins; QoS "short" has a
// maximum wall time of one hour.
std::shared_ptr<const sharing::SharingPolicy> TeamPolicy() {
  sharing::SharingPolicy p = sharing::DefaultPolicy();
  p.accounts = {{"vision", 3, {"alice"}, {}}, {"speech", 1, {"bob"}, {}}};
  p.qos[0].per_user.max_jobs_pending = 2;
  sharing::Qos short_qos;
  short_qos.name = "short";
  short_qos.priority = 50;
  short_qos.max_wall = absl::Hours(1);
  p.qos.push_back(short_qos);
  return std::make_shared<const sharing::SharingPolicy>(std::move(p));
}

class NullObserver : public scheduler::AttachObserver {
 public:
  void OnQueued(const scheduler::QueuePositionView&) override {}
  void OnGranted(const scheduler::SessionView&) override {}
  void OnEnded(const absl::Status&) override {}
};

class JobSharingTest : public JobManagerTest {
 protected:
  void SetUp() override { Restart({TeamPolicy(), std::nullopt}); }
  void Restart(PodSetup setup) {
    pod_.reset();
    pod_ = std::make_unique<Pod>(dir_.path(), absl::Hours(1), std::move(setup));
  }
  const accounting::UsageRecord* Find(const std::vector<accounting::UsageRecord>& records,
                                      const std::string& id) {
    for (const accounting::UsageRecord& r : records) {
      if (r.id == id) return &r;
    }
    return nullptr;
  }
};

TEST_F(JobSharingTest, AJobCarriesItsAccountAndQosAndEndsInTheLedger) {
  jobs::JobSpec spec = Spec(false);
  spec.qos = "scavenger";
  auto submitted = pod_->jobs().Submit(alice_, spec, "");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const jobs::JobRecord& record = (*submitted)[0].record;
  EXPECT_EQ(record.spec.account, "vision");  // alice's default, resolved at submit
  EXPECT_EQ(record.spec.qos, "scavenger");
  const JobView done = WaitFinished(record.id);
  ASSERT_EQ(done.record.state, JobState::kCompleted) << done.record.reason;
  // The job's record is written when it ends; its session's close a moment
  // after the release (the scheduler writes closes in the background).
  const auto session_closed = [](const std::vector<accounting::UsageRecord>& records) {
    for (const accounting::UsageRecord& r : records) {
      if (r.kind == accounting::RecordKind::kSession && r.end_unix_ms > 0) return true;
    }
    return false;
  };
  std::vector<accounting::UsageRecord> usage;
  ASSERT_TRUE(test_support::Eventually([&] {
    usage = pod_->Usage();
    return Find(usage, record.id) != nullptr && session_closed(usage);
  })) << "no usage record for job "
      << record.id << " or its session still open";
  const accounting::UsageRecord* job = Find(usage, record.id);
  EXPECT_EQ(job->kind, accounting::RecordKind::kJob);
  EXPECT_EQ(job->user, "alice");
  EXPECT_EQ(job->account, "vision");
  EXPECT_EQ(job->qos, "scavenger");
  EXPECT_EQ(job->state, "COMPLETED");
  EXPECT_EQ(job->submit_unix_ms, done.record.submitted_unix_ms);
  EXPECT_EQ(job->start_unix_ms, done.record.first_started_unix_ms);
  EXPECT_EQ(job->end_unix_ms, done.record.ended_unix_ms);
  EXPECT_DOUBLE_EQ(job->ipu_seconds, done.record.ipu_seconds);
  EXPECT_GT(job->ipus, 0);
  // Its session's record names it and is charged as it was.
  int sessions = 0;
  for (const accounting::UsageRecord& r : usage) {
    if (r.kind != accounting::RecordKind::kSession) continue;
    ++sessions;
    EXPECT_EQ(r.job, record.id);
    EXPECT_EQ(r.account, "vision");
    EXPECT_EQ(r.qos, "scavenger");
    EXPECT_EQ(r.state, "RELEASED");
  }
  EXPECT_EQ(sessions, 1);
}

TEST_F(JobSharingTest, SubmitRefusesWhatAnAttachWouldAndStoresNothing) {
  const auto refused = [&](const Caller& who, jobs::JobSpec spec, absl::StatusCode code,
                           absl::string_view words) {
    auto got = pod_->jobs().Submit(who, spec, "");
    EXPECT_EQ(got.status().code(), code) << got.status();
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(std::string(words)));
  };
  jobs::JobSpec s = Spec(false);
  s.qos = "gold";
  refused(alice_, s, absl::StatusCode::kInvalidArgument, "QoS gold does not exist");
  s.qos = "high";
  refused(alice_, s, absl::StatusCode::kPermissionDenied, "may not use QoS high");
  s.qos = "";
  s.account = "speech";
  refused(alice_, s, absl::StatusCode::kPermissionDenied, "not a member of account speech");
  s.account = "nlp";
  refused(alice_, s, absl::StatusCode::kInvalidArgument, "account nlp does not exist");
  s.account = "";
  s.qos = "short";
  s.time_limit_seconds = 2 * 3600;
  refused(alice_, s, absl::StatusCode::kInvalidArgument, "maximum wall time");
  JobFilter all;
  all.all = true;
  EXPECT_TRUE(pod_->jobs().List(alice_, all).empty());
  // An admin may use high; the default time limit is capped by the QoS's wall time.
  s.time_limit_seconds = 0;
  auto capped = pod_->jobs().Submit(alice_, s, "");
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_EQ((*capped)[0].record.spec.time_limit_seconds, 3600);
  s.qos = "high";
  auto admin = pod_->jobs().Submit(Caller{"alice", true}, s, "");
  ASSERT_TRUE(admin.ok()) << admin.status();
  EXPECT_EQ(WaitFinished((*admin)[0].record.id).record.state, JobState::kCompleted)
      << "an admin's job attaches with the admin's QoS";
}

TEST_F(JobSharingTest, AJobOverAMaxIpusLimitIsRefusedAtSubmit) {
  sharing::SharingPolicy p = *TeamPolicy();
  p.user_limits.max_ipus = 1;
  Restart({std::make_shared<const sharing::SharingPolicy>(p), std::nullopt});
  jobs::JobSpec s = Spec(false);
  s.executable_sha256 = pod_->Put("alice", Ipx(false, "inference_replication_factor=2"));
  auto got = pod_->jobs().Submit(alice_, s, "");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  EXPECT_THAT(std::string(got.status().message()),
              HasSubstr("UserMaxIpus: user alice may hold at most 1 IPUs at once and this job "
                        "needs 2, so it could never start"));
}

TEST_F(JobSharingTest, MaxJobsPendingRefusesTheSubmitOverItNamingTheLimit) {
  // The whole pod is held, so the jobs stay pending.
  scheduler::AttachRequest hold;
  hold.num_ipus = 4;
  auto ticket = pod_->scheduler().Attach(bob_, hold, std::make_shared<NullObserver>());
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  const jobs::JobSpec s = Spec(false);
  ASSERT_TRUE(pod_->jobs().Submit(alice_, s, "").ok());
  ASSERT_TRUE(pod_->jobs().Submit(alice_, s, "").ok());
  auto third = pod_->jobs().Submit(alice_, s, "");
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted) << third.status();
  EXPECT_THAT(std::string(third.status().message()),
              HasSubstr("QosMaxJobsPendingPerUser: alice in QoS normal has 2 pending jobs, the "
                        "limit is 2, and this submit adds 1"));
  jobs::JobSpec other = s;
  other.qos = "scavenger";  // another QoS: not counted against normal's
  EXPECT_TRUE(pod_->jobs().Submit(alice_, other, "").ok());
  JobFilter all;
  all.all = true;
  EXPECT_EQ(pod_->jobs().List(alice_, all).size(), 3u);
  pod_->scheduler().Release(*ticket);
  for (const JobView& v : pod_->jobs().List(alice_, all)) {
    EXPECT_EQ(WaitFinished(v.record.id).record.state, JobState::kCompleted);
  }
}

TEST_F(JobSharingTest, MaxJobsRunningLetsOneJobRunAtATime) {
  sharing::SharingPolicy p = *TeamPolicy();
  p.user_limits.max_jobs_running = 1;
  p.qos[0].per_user.max_jobs_pending = 3;  // all three may wait before the first starts
  Restart({std::make_shared<const sharing::SharingPolicy>(p), std::nullopt});
  const jobs::JobSpec s = Spec(true);  // 4 runs each; two would fit on the POD4 at once
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    auto submitted = pod_->jobs().Submit(alice_, s, "");
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    ids.push_back((*submitted)[0].record.id);
  }
  for (const std::string& id : ids) ASSERT_EQ(WaitFinished(id).record.state, JobState::kCompleted);
  std::vector<std::pair<int64_t, int64_t>> runs;  // the jobs' sessions, start and end
  ASSERT_TRUE(test_support::Eventually([&] {
    runs.clear();
    for (const accounting::UsageRecord& r : pod_->Usage()) {
      if (r.kind == accounting::RecordKind::kSession && r.end_unix_ms > 0) {
        runs.emplace_back(r.start_unix_ms, r.end_unix_ms);
      }
    }
    return runs.size() == ids.size();
  }));
  std::sort(runs.begin(), runs.end());
  for (size_t i = 1; i < runs.size(); ++i) {
    EXPECT_LE(runs[i - 1].second, runs[i].first) << "two jobs of alice ran at once";
  }
}

TEST_F(JobSharingTest, AJobWhoseUsageRecordWasLostGetsItAtTheNextStart) {
  Restart({TeamPolicy(),
           store::WriteFault{store::WritePoint::kLedgerPut, 1, store::FaultAction::kFail}});
  auto submitted = pod_->jobs().Submit(alice_, Spec(false), "");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string id = (*submitted)[0].record.id;
  ASSERT_EQ(WaitFinished(id).record.state, JobState::kCompleted);
  EXPECT_EQ(Find(pod_->Usage(), id), nullptr) << "the faulted put wrote it";
  Restart({TeamPolicy(), std::nullopt});
  const std::vector<accounting::UsageRecord> usage = pod_->Usage();
  const accounting::UsageRecord* job = Find(usage, id);
  ASSERT_NE(job, nullptr) << "the restart did not write the lost record";
  EXPECT_EQ(job->state, "COMPLETED");
  EXPECT_EQ(job->account, "vision");
}

}  // namespace
}  // namespace ipupod::batch
