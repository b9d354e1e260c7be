// Crash points: for every durable write point of the state store
// (server/store/write_points.h, kAllWritePoints) and every fault - a crash just
// before the commit, a crash just after it, a failed write - a real ipupodd
// is driven to that write with the test-only IPUPOD_TEST_STORE_FAULT set,
// then restarted without it. The state must then be exactly the model's:
// every acknowledged change survived; an unacknowledged change is there
// only if its commit completed (crash-after), never half-applied. A failed
// write also changes nothing in the running server, but for a session's
// usage record, which is held and written again (a session that ended while
// the disk was full still gets its record; issue 29).
//
// A new write point adds a case to Reach below. The usage ledger's writes
// are never acknowledged to a client (an attach goes on when its record
// cannot be written), so for them the model is what survives: an
// interactive session's record (counted, and counted closed unless it ended
// SERVER_RESTART) exists once its open committed; and after every restart
// each finished job has its usage record (a put lost to a crash is put
// again at start). The audit log's writes are reached at every start
// (its retention purge, then the server.start record); a failed one is
// logged and the server serves on.
#include <cmath>
#include <filesystem>
#include <set>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/tensor/tensor_files.h"
#include "server/store/write_points.h"
#include "tests/integration/harness.h"
#include "tests/support/models.h"
#include <signal.h>

namespace ipupod::testing {
namespace {

using store::FaultAction;
using store::WritePoint;

// What the store holds that the test can see through the CLI.
struct PodState {
  std::set<std::string> partitions;
  std::set<int> failed_ipus;
  size_t jobs = 0;  // batch jobs kept, every state (ids depend on numbers taken)
  // Usage records of interactive sessions, and of those the ones closed in
  // order (not RUNNING, not SERVER_RESTART).
  size_t sessions = 0;
  size_t closed = 0;
  bool operator==(const PodState&) const = default;
};

std::string Describe(const PodState& s) {
  std::string out = "partitions {";
  for (const auto& p : s.partitions) absl::StrAppend(&out, " ", p);
  absl::StrAppend(&out, " } failed {");
  for (int i : s.failed_ipus) absl::StrAppend(&out, " ", i);
  return absl::StrCat(out, " } jobs ", s.jobs, " sessions ", s.sessions, " closed ", s.closed);
}

class CrashPointsTest : public ::testing::Test {
 protected:
  CliResult Cli(const std::string& user, std::vector<std::string> args) {
    args.insert(args.begin(), "--json");
    return RunCli(server_.address(), user, args);
  }
  PodState Observe() {
    PodState s;
    nlohmann::json list = Cli("alice", {"partition", "list"}).json();
    if (list.is_object()) list = list["partitions"];
    for (const auto& p : list) s.partitions.insert(p["name"].get<std::string>());
    nlohmann::json info = Cli("alice", {"info"}).json();
    for (const auto& ipu : info["ipus"]) {
      if (ipu["state"] == "failed") s.failed_ipus.insert(ipu["id"].get<int>());
    }
    s.jobs = Jobs().size();
    for (const auto& r : History()) {
      if (r["kind"] != "session" || r["job"] != "") continue;
      s.sessions += 1;
      s.closed += r["state"] != "RUNNING" && r["state"] != "SERVER_RESTART";
    }
    return s;
  }
  nlohmann::json History() {
    const nlohmann::json h = Cli("admin", {"history", "--limit", "10000"}).json();
    return h.is_object() && h.contains("records") ? h["records"] : nlohmann::json::array();
  }
  // Every finished job has its usage record (kind job) in the ledger.
  void ExpectEveryFinishedJobHasItsUsageRecord() {
    std::set<std::string> missing;
    const nlohmann::json jobs = Cli("alice", {"jobs", "--all"}).json()["jobs"];
    for (const auto& job : jobs) {
      const std::string state = job["state"].get<std::string>();
      if (state != "PENDING" && state != "RUNNING") missing.insert(job["id"].get<std::string>());
    }
    EXPECT_TRUE(Eventually(
        [&] {
          for (const auto& r : History()) {
            if (r["kind"] == "job") missing.erase(r["id"].get<std::string>());
          }
          return missing.empty();
        },
        std::chrono::seconds(10)))
        << "finished jobs without a usage record: " << *missing.begin();
  }
  std::vector<std::string> Jobs() {
    std::vector<std::string> ids;
    const nlohmann::json list = Cli("alice", {"jobs", "--all"}).json();
    if (list.is_object() && list.contains("jobs")) {
      for (const auto& job : list["jobs"]) ids.push_back(job["id"].get<std::string>());
    }
    return ids;
  }
  // A one-step inference job: it runs and completes within moments.
  bool SubmitJob() {
    if (!std::filesystem::exists(files_.path() + "/m.ipx")) {
      EXPECT_TRUE(tensor::WriteFileAtomically(
                      files_.path() + "/m.onnx",
                      test_support::RegressorModel(2, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}))
                      .ok());
      EXPECT_TRUE(tensor::WriteTensorFile(
                      files_.path() + "/d.npz",
                      {{"x", *tensor::Tensor::FromValues<float>({2, 3}, {1, 2, 3, 4, 5, 6})},
                       {"t", *tensor::Tensor::FromValues<float>({2, 2}, {1, 2, 3, 4})}})
                      .ok());
      CliResult c =
          Cli("alice", {"compile", files_.path() + "/m.onnx", "-o", files_.path() + "/m.ipx"});
      EXPECT_EQ(c.exit_code, 0) << c.err;
    }
    return Cli("alice", {"submit", files_.path() + "/m.ipx", "--inputs", files_.path() + "/d.npz"})
               .exit_code == 0;
  }
  // Acknowledged: a job that has finished.
  void Job() {
    ASSERT_TRUE(SubmitJob());
    model_.jobs += 1;
    SettleJobs();
  }
  // Every job finished, so no later write of one races the next case's fault.
  void SettleJobs() {
    for (const std::string& id : Jobs()) {
      CliResult c = RunCli(server_.address(), "alice", {"job", "wait", id, "--timeout", "60s"});
      ASSERT_EQ(c.exit_code, 0) << "job " << id << ": " << c.out << c.err;
    }
  }
  // Acknowledged setup steps (no fault armed for their write point).
  void Create(const std::string& name) {
    ASSERT_EQ(Cli("alice", {"partition", "create", name, "--size", "1"}).exit_code, 0);
    model_.partitions.insert(name);
  }
  void Fail(int ipu) {
    CliResult c =
        Cli("admin", {"fault", "inject", "--ipu", std::to_string(ipu), "--kind", "unrecoverable"});
    ASSERT_EQ(c.exit_code, 0) << "IPU " << ipu << ": " << c.out << c.err;
    model_.failed_ipus.insert(ipu);
  }
  void RunCase(WritePoint point, FaultAction action, int round);
  // Drives the server to `point` (armed); returns whether the client was
  // told the change is done, and applies the change to `changed`.
  bool Reach(WritePoint point, int round, PodState& changed);

  ServerUnderTest server_{{"--pod", "POD16"}};
  TempDir files_;
  PodState model_;
};

bool CrashPointsTest::Reach(WritePoint point, int round, PodState& changed) {
  const std::string name = absl::StrCat("c", round);
  int ipu = 15;  // a healthy IPU to fail
  while (model_.failed_ipus.count(ipu)) --ipu;
  switch (point) {
    case WritePoint::kPutPartition:
      changed.partitions.insert(name);
      return Cli("alice", {"partition", "create", name, "--size", "1"}).exit_code == 0;
    case WritePoint::kDeletePartition:
      changed.partitions.erase(*changed.partitions.begin());
      return Cli("alice", {"partition", "remove", *model_.partitions.begin()}).exit_code == 0;
    case WritePoint::kPutFailure:
      changed.failed_ipus.insert(ipu);
      return Cli("admin",
                 {"fault", "inject", "--ipu", std::to_string(ipu), "--kind", "unrecoverable"})
                 .exit_code == 0;
    case WritePoint::kDeleteFailure:
      changed.failed_ipus.erase(*changed.failed_ipus.begin());
      return Cli("admin", {"ipu", "repair", std::to_string(*model_.failed_ipus.begin())})
                 .exit_code == 0;
    case WritePoint::kCleanStop:
      server_.Kill(SIGTERM);
      return false;
    case WritePoint::kJobNumber:  // a number taken alone is no job
      return SubmitJob();
    case WritePoint::kPutJobs:
      changed.jobs += 1;
      return SubmitJob();
    case WritePoint::kDeleteJob:
      changed.jobs -= 1;
      return Cli("alice", {"job", "delete", Jobs().front()}).exit_code == 0;
    case WritePoint::kLedgerOpen:  // the record exists only if its open committed
      changed.sessions += 1;
      (void)Cli("alice", {"attach", "--ipus", "1", "--", "true"});
      return false;
    case WritePoint::kLedgerClose:  // the open committed first: the record survives
      model_.sessions += 1;
      changed.sessions += 1;
      changed.closed += 1;
      (void)Cli("alice", {"attach", "--ipus", "1", "--", "true"});
      return false;
    case WritePoint::kLedgerPut:  // a job's end; its record is checked after the restart
      model_.jobs += 1;
      changed.jobs += 1;
      (void)SubmitJob();
      return false;
    case WritePoint::kAuditAppend:  // the first is server.start's, before the ready line
    case WritePoint::kAuditPurge:   // the audit log's retention, at every start
    default:                        // written while the server starts (the restart reached them)
      return false;
  }
}

std::string ActionName(FaultAction action) {
  switch (action) {
    case FaultAction::kCrashBeforeCommit:
      return "crash-before";
    case FaultAction::kCrashAfterCommit:
      return "crash-after";
    case FaultAction::kFail:
      return "fail";
  }
  return "?";
}

void CrashPointsTest::RunCase(WritePoint point, FaultAction action, int round) {
  const std::string fault = absl::StrCat(store::WritePointName(point), ":1:", ActionName(action));
  SCOPED_TRACE(fault);
  if (model_.partitions.empty()) Create(absl::StrCat("d", round));  // something to remove
  if (model_.failed_ipus.empty()) Fail(round % 8);                  // something to repair
  if (model_.jobs == 0) Job();                                      // something to delete
  server_.Kill(SIGKILL);
  server_.set_env({{store::kWriteFaultEnv, fault}});
  const bool initialise = point == WritePoint::kInitialise;
  if (initialise) server_.set_extra_args({"--reinitialise"});
  PodState changed = initialise ? PodState{} : model_;
  bool acknowledged = false;
  if (server_.Restart()) {
    acknowledged = Reach(point, round, changed);
    if (action == FaultAction::kFail &&
        (point == WritePoint::kLedgerOpen || point == WritePoint::kLedgerClose)) {
      // A usage write the store refused is held and written again once it
      // accepts writes (scheduler/accounting/background_ledger.h): the session's
      // record lands, opened and closed, and survives the kill below.
      PodState landed = changed;
      landed.closed = model_.closed + 1;
      EXPECT_TRUE(Eventually([&] { return Observe() == landed; }, std::chrono::seconds(20)))
          << "want " << Describe(landed) << "; got " << Describe(Observe());
      model_ = landed;
    } else if (action == FaultAction::kFail && !initialise && point != WritePoint::kCleanStop) {
      EXPECT_EQ(Observe(), model_) << "a failed write changes nothing in the running server";
    }
  }
  EXPECT_FALSE(acknowledged) << "the faulted write was acknowledged";
  if (action != FaultAction::kFail) {
    const std::string threads = server_.process().DescribeThreads();
    EXPECT_EQ(server_.process().Wait(std::chrono::seconds(10)), 128 + SIGKILL)
        << "the server did not crash at the write point: " << server_.process().stderr_text()
        << threads;
  }
  const bool applied = action == FaultAction::kCrashAfterCommit || initialise;
  if (applied) model_ = changed;
  server_.Kill(SIGKILL);
  server_.set_env({});
  server_.set_extra_args({});
  ASSERT_TRUE(server_.Restart()) << server_.process().stderr_text();
  EXPECT_EQ(Observe(), model_) << "want " << Describe(model_) << "; got " << Describe(Observe());
  SettleJobs();
  ExpectEveryFinishedJobHasItsUsageRecord();
}

TEST_F(CrashPointsTest, EveryWritePointCrashedOrFailedKeepsExactlyTheAcknowledgedState) {
  int round = 0;
  for (WritePoint point : store::kAllWritePoints) {
    for (FaultAction action :
         {FaultAction::kCrashBeforeCommit, FaultAction::kCrashAfterCommit, FaultAction::kFail}) {
      RunCase(point, action, round++);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace ipupod::testing
