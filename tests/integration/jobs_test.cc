// Batch jobs end to end through the real ipupodd and the `ipupod` CLI
// (issue 12): jobs submitted by several users complete with outputs and
// weights bit-identical to interactive `ipupod run`s of the same work; a
// server killed with SIGKILL mid-training resumes each job to the same
// final weights; faults are recovered or requeued; cancel, hold/release,
// time limits, dependencies, sweeps, the blob store bound and other users'
// jobs behave as documented.
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/tensor/tensor_files.h"
#include "tests/integration/harness.h"
#include "tests/support/models.h"
#include "tests/support/tensors.h"

namespace ipupod::testing {
namespace {

using tensor::Tensor;

using test_support::Wave;

class JobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        tensor::WriteFileAtomically(Path("m.onnx"), test_support::RegressorModel(2, Wave(6, 1.0f)))
            .ok());
    // 32 samples: 16 inference steps of 2, 8 training runs of 2 x 2.
    ASSERT_TRUE(tensor::WriteTensorFile(
                    Path("data.npz"), {{"x", *Tensor::FromValues<float>({32, 3}, Wave(96, 0.3f))},
                                       {"t", *Tensor::FromValues<float>({32, 2}, Wave(64, 1.7f))}})
                    .ok());
    Compile({"-o", Path("infer.ipx")});
    Compile({"--set", "inference_replication_factor=2", "-o", Path("infer2.ipx")});
    Compile({"--train", "--optimizer", "adam", "--opt", "lr=0.05", "--set",
             "gradient_accumulation_steps=2", "-o", Path("train.ipx")});
    Compile({"--train", "--optimizer", "sgd", "--opt", "lr=0.05", "--opt", "momentum=0.9", "--set",
             "gradient_accumulation_steps=2", "--set", "replication_factor=2", "-o",
             Path("train2.ipx")});
  }

  void Compile(std::vector<std::string> args) {
    args.insert(args.begin(), {"compile", Path("m.onnx")});
    CliResult c = Cli("alice", args);
    ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
  }
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }
  CliResult Cli(const std::string& user, std::vector<std::string> args) {
    return RunCli(server_.address(), user, args);
  }
  // Submits; returns the job ids (several with --sweep).
  std::vector<std::string> Submit(const std::string& user, std::vector<std::string> args) {
    args.insert(args.begin(), {"--json", "submit"});
    CliResult c = Cli(user, args);
    EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
    std::vector<std::string> ids;
    const nlohmann::json doc = c.json();
    if (doc.is_object() && doc.contains("jobs")) {
      for (const auto& job : doc["jobs"]) ids.push_back(job["id"].get<std::string>());
    }
    return ids;
  }
  nlohmann::json Show(const std::string& user, const std::string& id) {
    return Cli(user, {"--json", "job", "show", id}).json();
  }
  // `job wait`'s exit code.
  int Wait(const std::string& user, const std::string& id) {
    // RunCli gives a command 30 s; a job under a sanitizer (or on a busy
    // machine) may need the whole --timeout (TSan, 2026-11-26).
    Process p = StartCli(server_.address(), user, {"job", "wait", id, "--timeout", "120s"});
    return p.Wait(std::chrono::seconds(130)).value_or(-1);
  }
  tensor::NamedTensors Fetch(const std::string& user, const std::string& id,
                             const std::string& file) {
    const std::string out = Path("fetched-" + id);
    CliResult c = Cli(user, {"job", "fetch", id, "-o", out});
    EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
    auto t = tensor::ReadTensorFile(out + "/" + file);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : tensor::NamedTensors{};
  }
  tensor::NamedTensors Read(const std::string& name) {
    auto t = tensor::ReadTensorFile(Path(name));
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : tensor::NamedTensors{};
  }
  static void ExpectSameBytes(const tensor::NamedTensors& a, const tensor::NamedTensors& b,
                              const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    ASSERT_FALSE(a.empty()) << what;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first) << what;
      EXPECT_EQ(a[i].second.bytes(), b[i].second.bytes()) << what << ": " << a[i].first;
    }
  }

  TempDir dir_;
  ServerUnderTest server_{{"--pod", "POD4"}};
};

// The issue's first test: three users, thirty jobs of 1 and 2 IPUs,
// inference and training, submitted and left; every result equals the
// interactive run of the same executable bit for bit.
TEST_F(JobsTest, ThirtyJobsOfThreeUsersEqualInteractiveRuns) {
  struct Work {
    std::string ipx;
    bool train;
  };
  const std::vector<Work> kinds = {
      {"infer.ipx", false}, {"infer2.ipx", false}, {"train.ipx", true}, {"train2.ipx", true}};
  std::map<std::string, tensor::NamedTensors> expected;
  for (const Work& w : kinds) {
    const std::string out = Path(w.ipx + ".expected.npz");
    std::vector<std::string> run = {"run", Path(w.ipx), "--inputs", Path("data.npz")};
    if (w.train) {
      run.insert(run.end(), {"--train", "--steps", "8", "--save-weights", out});
    } else {
      run.insert(run.end(), {"--outputs", out});
    }
    CliResult c = Cli("carol", run);
    ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
    expected[w.ipx] = Read(w.ipx + ".expected.npz");
  }
  struct Submitted {
    std::string user, id;
    const Work* work;
  };
  std::vector<Submitted> jobs;
  const std::vector<std::string> users = {"alice", "bob", "carol"};
  for (int i = 0; i < 30; ++i) {
    const Work& w = kinds[static_cast<size_t>(i) % kinds.size()];
    const std::string& user = users[static_cast<size_t>(i) % users.size()];
    std::vector<std::string> args = {Path(w.ipx), "--inputs", Path("data.npz")};
    if (w.train) args.insert(args.end(), {"--train", "--steps", "8"});
    const std::vector<std::string> ids = Submit(user, args);
    ASSERT_EQ(ids.size(), 1u);
    jobs.push_back({user, ids[0], &w});
  }
  for (const Submitted& j : jobs) {
    ASSERT_EQ(Wait(j.user, j.id), 0) << "job " << j.id << ": " << Show(j.user, j.id).dump();
    const tensor::NamedTensors got =
        Fetch(j.user, j.id, j.work->train ? "weights.npz" : "outputs.npz");
    ExpectSameBytes(got, expected[j.work->ipx], absl::StrCat("job ", j.id, " ", j.work->ipx));
  }
}

// Killed with SIGKILL twice in the middle of training, the server resumes
// the job from its last checkpoint; the final weights equal those of the
// same job run without interruption.
TEST_F(JobsTest, TrainingSurvivesKillNineBitIdentical) {
  const std::vector<std::string> args = {
      Path("train.ipx"), "--inputs", Path("data.npz"),     "--train",
      "--epochs",        "800",      "--checkpoint-every", "50"};
  const std::vector<std::string> whole = Submit("alice", args);
  ASSERT_EQ(whole.size(), 1u);
  ASSERT_EQ(Wait("alice", whole[0]), 0);
  const std::vector<std::string> ids = Submit("alice", args);
  ASSERT_EQ(ids.size(), 1u);
  // Early kills (of 6400 runs), so a slow poll (a sanitizer build) still
  // catches the job in the middle.
  for (int64_t at : {100, 500}) {
    ASSERT_TRUE(test_support::Eventually(
        [&] {
          const nlohmann::json job = Show("alice", ids[0]);
          return job.is_object() && job.value("runs_done", int64_t{0}) >= at;
        },
        absl::Seconds(120)));
    server_.KillAndRestart();
    const nlohmann::json job = Show("alice", ids[0]);
    ASSERT_TRUE(job.is_object());
    ASSERT_NE(job["state"], "COMPLETED") << "finished before the kill; nothing was resumed";
  }
  ASSERT_EQ(Wait("alice", ids[0]), 0) << Show("alice", ids[0]).dump();
  ExpectSameBytes(Fetch("alice", ids[0], "weights.npz"), Fetch("alice", whole[0], "weights.npz"),
                  "resumed job");
}

// Issue 13: a scavenger training job preempted for a normal request is
// checkpointed and requeued, lets the request start, and then finishes with
// the same final weights as the same job never preempted.
TEST_F(JobsTest, APreemptedScavengerTrainingJobFinishesAsIfNeverPreempted) {
  const std::vector<std::string> args = {
      Path("train.ipx"), "--inputs", Path("data.npz"),     "--train",
      "--epochs",        "800",      "--checkpoint-every", "50"};
  const std::vector<std::string> whole = Submit("alice", args);
  ASSERT_EQ(whole.size(), 1u);
  ASSERT_EQ(Wait("alice", whole[0]), 0);
  std::vector<std::string> scavenger_args = args;
  scavenger_args.insert(scavenger_args.end(), {"--qos", "scavenger"});
  const std::vector<std::string> ids = Submit("alice", scavenger_args);
  ASSERT_EQ(ids.size(), 1u);
  ASSERT_TRUE(test_support::Eventually(
      [&] {
        const nlohmann::json job = Show("alice", ids[0]);
        return job.is_object() && job.value("runs_done", int64_t{0}) >= 100;
      },
      absl::Seconds(120)));
  // bob's normal request needs the whole pod: only the scavenger job stands
  // in its way, so the job is preempted and bob starts.
  CliResult bob = Cli(
      "bob", {"--json", "attach", "--ipus", "4", "--wait", "--wait-timeout", "60", "--", "true"});
  EXPECT_EQ(bob.exit_code, 0) << bob.out << bob.err;
  const nlohmann::json preempted = Show("alice", ids[0]);
  ASSERT_TRUE(preempted.is_object());
  ASSERT_NE(preempted["state"], "COMPLETED") << "finished before bob came; nothing was preempted";
  ASSERT_EQ(Wait("alice", ids[0]), 0) << Show("alice", ids[0]).dump();
  ExpectSameBytes(Fetch("alice", ids[0], "weights.npz"), Fetch("alice", whole[0], "weights.npz"),
                  "preempted job");
  // Its history says so: the preempted session's usage record ended PREEMPTED.
  CliResult history = Cli("alice", {"--json", "history", "--state", "PREEMPTED"});
  EXPECT_EQ(history.exit_code, 0) << history.out << history.err;
  EXPECT_NE(history.out.find(ids[0]), std::string::npos) << history.out;
}

TEST_F(JobsTest, FaultsAreRecoveredOrRequeued) {
  const auto submit_long = [&] {
    const std::vector<std::string> ids = Submit(
        "alice", {Path("train.ipx"), "--inputs", Path("data.npz"), "--train", "--epochs", "300"});
    EXPECT_EQ(ids.size(), 1u);
    return ids.empty() ? std::string() : ids[0];
  };
  const auto running_ipu = [&](const std::string& id) {
    int ipu = -1;
    EXPECT_TRUE(test_support::Eventually(
        [&] {
          const nlohmann::json job = Show("alice", id);
          if (!job.is_object() || job["state"] != "RUNNING" || job["ipus"].empty()) return false;
          if (job.value("runs_done", int64_t{0}) < 5) return false;
          ipu = job["ipus"][0].get<int>();
          return true;
        },
        absl::Seconds(60)));
    return ipu;
  };
  const std::string recovered = submit_long();
  const int ipu = running_ipu(recovered);
  ASSERT_GE(ipu, 0);
  CliResult fault =
      Cli("admin", {"fault", "inject", "--ipu", std::to_string(ipu), "--kind", "ipu-reset"});
  ASSERT_EQ(fault.exit_code, 0) << fault.out << fault.err;
  ASSERT_EQ(Wait("alice", recovered), 0);
  EXPECT_GE(Show("alice", recovered)["recoveries"].get<int>(), 1);

  const std::string requeued = submit_long();
  const int failed_ipu = running_ipu(requeued);
  ASSERT_GE(failed_ipu, 0);
  fault = Cli("admin",
              {"fault", "inject", "--ipu", std::to_string(failed_ipu), "--kind", "unrecoverable"});
  ASSERT_EQ(fault.exit_code, 0) << fault.out << fault.err;
  ASSERT_EQ(Wait("alice", requeued), 0) << Show("alice", requeued).dump();
  const nlohmann::json job = Show("alice", requeued);
  EXPECT_GE(job["requeues"].get<int>(), 1) << job.dump();
}

TEST_F(JobsTest, CancelHoldReleaseTimeLimitDependencyAndOthersJobs) {
  // A 4-IPU job (4 replicas) takes the whole POD4, so 1-IPU jobs wait behind it.
  Compile({"--train", "--optimizer", "sgd", "--opt", "lr=0.05", "--set",
           "gradient_accumulation_steps=2", "--set", "replication_factor=4", "-o",
           Path("train4.ipx")});
  const std::vector<std::string> big = Submit(
      "alice", {Path("train4.ipx"), "--inputs", Path("data.npz"), "--train", "--epochs", "100000"});
  ASSERT_EQ(big.size(), 1u);
  ASSERT_TRUE(test_support::Eventually([&] { return Show("alice", big[0])["state"] == "RUNNING"; },
                                       absl::Seconds(60)));
  const std::vector<std::string> small =
      Submit("alice", {Path("infer.ipx"), "--inputs", Path("data.npz")});
  ASSERT_EQ(small.size(), 1u);
  EXPECT_EQ(Show("alice", small[0])["state"], "PENDING");
  ASSERT_EQ(Cli("alice", {"job", "hold", small[0]}).exit_code, 0);
  EXPECT_EQ(Show("alice", small[0])["reason"], "Held");
  // Another user sees the queue line only, and may change nothing.
  const nlohmann::json seen = Show("bob", small[0]);
  EXPECT_TRUE(seen["spec"].is_null()) << seen.dump();
  EXPECT_EQ(seen["user"], "alice");
  CliResult denied = Cli("bob", {"job", "cancel", small[0]});
  EXPECT_NE(denied.exit_code, 0);
  EXPECT_NE(denied.err.find("belongs to alice"), std::string::npos) << denied.err;
  EXPECT_NE(Cli("bob", {"job", "fetch", small[0], "-o", Path("b")}).exit_code, 0);
  ASSERT_EQ(Cli("alice", {"job", "release", small[0]}).exit_code, 0);
  // A dependency that ends otherwise than COMPLETED cancels its dependent.
  const std::vector<std::string> after =
      Submit("alice", {Path("infer.ipx"), "--inputs", Path("data.npz"), "--after", big[0]});
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(Show("alice", after[0])["reason"], "Dependency");
  ASSERT_EQ(Cli("alice", {"job", "cancel", big[0]}).exit_code, 0);
  EXPECT_EQ(Wait("alice", big[0]), 31);  // CANCELLED
  EXPECT_EQ(Wait("alice", after[0]), 31);
  EXPECT_NE(Show("alice", after[0])["reason"].get<std::string>().find("dependency"),
            std::string::npos);
  EXPECT_EQ(Wait("alice", small[0]), 0);  // released, it ran once the IPUs were free
  // A time limit ends a job TIMEOUT; its last checkpoint stays among its results.
  const std::vector<std::string> timed =
      Submit("alice", {Path("train.ipx"), "--inputs", Path("data.npz"), "--train", "--epochs",
                       "100000", "--checkpoint-every", "10", "--time-limit", "2s"});
  ASSERT_EQ(timed.size(), 1u);
  EXPECT_EQ(Wait("alice", timed[0]), 32);
  EXPECT_FALSE(Fetch("alice", timed[0], "checkpoint.npz").empty());
  // Delete: gone, and others cannot.
  EXPECT_NE(Cli("bob", {"job", "delete", timed[0]}).exit_code, 0);
  ASSERT_EQ(Cli("alice", {"job", "delete", timed[0]}).exit_code, 0);
  EXPECT_NE(Cli("alice", {"job", "show", timed[0]}).exit_code, 0);
}

TEST_F(JobsTest, SweepMakesOneJobPerValueSharingOneUpload) {
  const std::vector<std::string> ids =
      Submit("alice", {Path("train.ipx"), "--inputs", Path("data.npz"), "--train", "--steps", "8",
                       "--sweep", "lr=0.1,0.01,0.001"});
  ASSERT_EQ(ids.size(), 3u);
  const std::string number = ids[0].substr(0, ids[0].find('.'));
  EXPECT_EQ(ids[1], number + ".1");
  std::vector<tensor::NamedTensors> weights;
  for (const std::string& id : ids) {
    ASSERT_EQ(Wait("alice", id), 0);
    weights.push_back(Fetch("alice", id, "weights.npz"));
  }
  ASSERT_EQ(weights[0].size(), weights[1].size());
  EXPECT_NE(weights[0][0].second.bytes(), weights[1][0].second.bytes()) << "lr had no effect";
  // The log and the report: every run with its losses; times and IPU-seconds.
  CliResult logs = Cli("alice", {"job", "logs", ids[0]});
  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_NE(logs.out.find("run 8 of 8"), std::string::npos) << logs.out;
  EXPECT_NE(logs.out.find("COMPLETED"), std::string::npos) << logs.out;
  std::ifstream report_file(Path("fetched-" + ids[0]) + "/report.json");
  const nlohmann::json report = nlohmann::json::parse(report_file, nullptr, false);
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(report["losses"].size(), 8u) << report.dump();
  EXPECT_GT(report["wall_seconds"].get<double>(), 0);
  EXPECT_GT(report["simulated_seconds"].get<double>(), 0);
  EXPECT_GT(report["ipu_seconds"].get<double>(), 0);
  // Bad input changes nothing.
  CliResult bad = Cli("alice", {"submit", Path("train.ipx"), "--inputs", Path("data.npz"),
                                "--train", "--steps", "8", "--sweep", "lr=0.1,fast"});
  EXPECT_NE(bad.exit_code, 0);
  CliResult missing =
      Cli("alice", {"submit", Path("infer.ipx"), "--inputs", Path("data.npz"), "--after", "999"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("does not exist"), std::string::npos) << missing.err;
  const nlohmann::json all = Cli("alice", {"--json", "jobs", "--all"}).json();
  EXPECT_EQ(all["jobs"].size(), 3u) << all.dump();
}

TEST(JobsBlobBoundTest, AnUploadOverTheUserBoundIsRefusedAndStoresNothing) {
  ServerUnderTest server({"--pod", "POD4"}, R"({"jobs_blob_store_user_mb": 1})");
  TempDir dir;
  const std::string data = dir.path() + "/big.npz";
  ASSERT_TRUE(tensor::WriteTensorFile(
                  data, {{"x", *Tensor::FromValues<float>({300000, 1}, Wave(300000, 0.1f))}})
                  .ok());
  ASSERT_TRUE(tensor::WriteFileAtomically(dir.path() + "/m.onnx",
                                          test_support::RegressorModel(2, Wave(6, 1.0f)))
                  .ok());
  CliResult c = RunCli(server.address(), "alice",
                       {"compile", dir.path() + "/m.onnx", "-o", dir.path() + "/m.ipx"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  CliResult refused =
      RunCli(server.address(), "alice", {"submit", dir.path() + "/m.ipx", "--inputs", data});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("per-user"), std::string::npos) << refused.err;
  const nlohmann::json all = RunCli(server.address(), "alice", {"--json", "jobs", "--all"}).json();
  EXPECT_TRUE(all["jobs"].empty()) << all.dump();
  std::error_code ec;
  size_t blobs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(server.state_dir() + "/blobs", ec)) {
    if (entry.path().filename().string().size() == 64) ++blobs;
  }
  EXPECT_LE(blobs, 1u) << "only the small executable may be stored";
}

// An operator's limits on jobs (docs/configuration.md): a user's active
// jobs stop at jobs_max_active_per_user, others' are not counted, and the
// refused submit names the key and changes nothing. A listing limited to
// its head says how many more match.
TEST(JobsLimitTest, AUsersActiveJobsStopAtTheConfiguredLimitAndListingsShowTheirHead) {
  ServerUnderTest server({"--pod", "POD4"}, R"({"jobs_max_active_per_user": 2})");
  TempDir dir;
  const std::string ipx = dir.path() + "/m.ipx", data = dir.path() + "/data.npz";
  ASSERT_TRUE(tensor::WriteFileAtomically(dir.path() + "/m.onnx",
                                          test_support::RegressorModel(2, Wave(6, 1.0f)))
                  .ok());
  ASSERT_TRUE(
      tensor::WriteTensorFile(data, {{"x", *Tensor::FromValues<float>({4, 3}, Wave(12, 0.3f))},
                                     {"t", *Tensor::FromValues<float>({4, 2}, Wave(8, 1.7f))}})
          .ok());
  ASSERT_EQ(
      RunCli(server.address(), "alice", {"compile", dir.path() + "/m.onnx", "-o", ipx}).exit_code,
      0);
  // Every IPU held, so the jobs stay PENDING.
  Process holder = StartCli(server.address(), "carol", {"--json", "attach", "--ipus", "4"});
  ASSERT_TRUE(holder.ReadStdoutJson(std::chrono::seconds(15))) << holder.stderr_text();
  const std::vector<std::string> submit = {"submit", ipx, "--inputs", data};
  for (const char* user : {"alice", "alice", "bob"}) {
    CliResult c = RunCli(server.address(), user, submit);
    ASSERT_EQ(c.exit_code, 0) << user << ": " << c.err;
  }
  CliResult refused = RunCli(server.address(), "alice", submit);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("at most 2 are allowed"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("jobs_max_active_per_user"), std::string::npos) << refused.err;
  const nlohmann::json all = RunCli(server.address(), "alice", {"--json", "jobs", "--all"}).json();
  EXPECT_EQ(all["jobs"].size(), 3u) << all.dump();
  EXPECT_EQ(all["total"], 3) << all.dump();
  // A listing's head, and how many more match.
  const CliResult head = RunCli(server.address(), "alice", {"jobs", "--limit", "2"});
  EXPECT_EQ(head.exit_code, 0) << head.err;
  EXPECT_NE(head.out.find("... and 1 more (3 in all); --limit N shows more, --json every one"),
            std::string::npos)
      << head.out;
  const nlohmann::json first =
      RunCli(server.address(), "bob", {"--json", "jobs", "--limit", "1"}).json();
  ASSERT_EQ(first["jobs"].size(), 1u) << first.dump();
  EXPECT_EQ(first["jobs"][0]["user"], "alice");
  EXPECT_EQ(first["total"], 3);
  holder.Signal(SIGINT);
  EXPECT_EQ(holder.Wait(std::chrono::seconds(10)), 0);
}

}  // namespace
}  // namespace ipupod::testing
