// A bounded chaos run against a real ipupodd process. Three users attach,
// load, run and detach through the client library while the server injects
// seeded random faults, clients vanish mid-session, a hostile user sends
// requests that must be refused, an admin creates and removes partitions, and
// the server is killed with SIGKILL and restarted. The server checks the pod's
// invariants after every change to its state (--check-invariants: a breach
// aborts it, and the test fails on the dead server). After every round the
// invariants seen through the API are checked and at the end a summary says
// what ran and what held:
//   * no IPU is in two sessions, and a session's IPUs are its partition's;
//   * every acknowledged partition change survived, nothing else appeared;
//   * every run that succeeded computed the same outputs;
//   * no call ended UNKNOWN or INTERNAL (only documented codes);
//   * the server's resident memory and thread count stay under their bounds.
//
// The CI run lasts IPUPOD_SOAK_SECONDS (default 20); a long run is
//   IPUPOD_SOAK_SECONDS=3600 ctest --test-dir build -R soak --output-on-failure
// (docs/testing.md records the results of long runs).
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "common/sync.h"
#include "device/compiler/compile.h"
#include "device/compiler/executable.h"
#include "tests/integration/harness.h"
#include "tests/support/models.h"
#include "tests/support/tensors.h"

namespace ipupod::testing {
namespace {

using std::chrono::seconds;
namespace v1 = ::ipupod::v1;

constexpr int64_t kServerRssMaxBytes = int64_t{1} << 30;
constexpr int kServerThreadsMax = 256;

// "VmRSS" or "Threads" of /proc/PID/status (0 when the process is gone).
int64_t ProcStatus(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::atoll(line.c_str() + key.size() + 1);
  }
  return 0;
}

// What a run saw, per call and outcome, printed at the end.
class Tally {
 public:
  void Count(const std::string& what, const absl::Status& status) {
    sync::MutexLock lock(&mu_);
    ++counts_[what + " " + absl::StatusCodeToString(status.code())];
    if (status.code() == absl::StatusCode::kUnknown ||
        status.code() == absl::StatusCode::kInternal) {
      failures_.push_back(absl::StrCat(what, ": ", status.ToString()));
    }
  }
  void Fail(const std::string& what) {
    sync::MutexLock lock(&mu_);
    failures_.push_back(what);
  }
  std::vector<std::string> failures() const {
    sync::MutexLock lock(&mu_);
    return failures_;
  }
  std::string Summary() const {
    sync::MutexLock lock(&mu_);
    std::string out;
    for (const auto& [key, n] : counts_) absl::StrAppend(&out, "  ", key, ": ", n, "\n");
    return out;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, int> counts_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> failures_ ABSL_GUARDED_BY(mu_);
};

std::string CompileRegressor() {
  auto e = compiler::Compile(test_support::RegressorModel(4, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}),
                             compiler::IpuConfig{}, {});
  EXPECT_TRUE(e.ok()) << e.status();
  auto bytes = compiler::WriteExecutable(*e);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : "";
}

tensor::NamedTensors RegressorInputs() {
  return {{"x", test_support::Iota({4, 3})}, {"t", test_support::Iota({4, 2})}};
}

class SoakTest : public ::testing::Test {
 protected:
  SoakTest()
      : server_({"--check-invariants", "true"},
                R"({"random_faults": {"seed": 7, "probability_per_operation": 0.02},
                       "reset_ms": {"ipu": 5, "partition": 5, "pod": 5},
                       "session_lease_seconds": 2})") {}

  std::unique_ptr<client::Client> Connect(const std::string& user) {
    client::ClientOptions options;
    options.server = server_.address();
    options.user = user;
    options.rpc_timeout = absl::Seconds(10);
    options.stream_timeout = absl::Seconds(30);
    auto c = client::Client::Connect(options);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  void UserSessions(const std::string& user, int round);
  void OneSession(client::Client& c, std::mt19937& rng);
  void CheckOutputs(const tensor::NamedTensors& outputs);
  void HostileRequests(client::Client& c);
  void PartitionChanges(client::Client& admin, std::mt19937& rng);
  void CheckInvariants(client::Client& admin, bool partitions_settled);

  ServerUnderTest server_;
  Tally tally_;
  std::string ipx_ = CompileRegressor();
  std::string sha256_;
  absl::Mutex mu_;
  std::optional<tensor::NamedTensors> reference_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> partitions_;  // acknowledged; admin thread only
  int next_partition_ = 0;
  int64_t max_rss_ = 0;
  int64_t max_threads_ = 0;
};

void SoakTest::CheckOutputs(const tensor::NamedTensors& outputs) {
  sync::MutexLock lock(&mu_);
  if (!reference_.has_value()) {
    reference_ = outputs;
    return;
  }
  if (outputs.size() != reference_->size()) return tally_.Fail("a run returned other outputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].second.bytes() != (*reference_)[i].second.bytes()) {
      tally_.Fail("a run computed different values for " + outputs[i].first);
    }
  }
}

// Attach, maybe load and run, then end the session: orderly, or by vanishing.
void SoakTest::OneSession(client::Client& c, std::mt19937& rng) {
  v1::AttachRequest request;
  request.set_num_ipus(1u << (rng() % 3));
  request.set_wait(rng() % 2 == 0);
  request.set_wait_timeout_seconds(2);
  std::unique_ptr<client::AttachCall> call = c.StartAttach(request);
  absl::StatusOr<v1::SessionInfo> grant = call->WaitForGrant(nullptr);
  tally_.Count("attach", grant.status());
  if (!grant.ok()) return;
  if (request.num_ipus() == 1) {
    absl::Status load = c.Load(grant->session(), sha256_).status();
    tally_.Count("load", load);
    for (int i = 0; load.ok() && i < 3; ++i) {
      absl::StatusOr<client::RunResult> run = c.Run(grant->session(), RegressorInputs());
      tally_.Count("run", run.status());
      if (run.ok()) CheckOutputs(run->outputs);
    }
  }
  if (rng() % 4 == 0) {
    call->Cancel();  // the client vanishes: the stream ends without a Detach
  } else {
    tally_.Count("release", call->Release());
  }
}

void SoakTest::UserSessions(const std::string& user, int round) {
  std::mt19937 rng(static_cast<unsigned>(round * 31 + user.size()));
  std::unique_ptr<client::Client> c = Connect(user);
  if (c == nullptr) return;
  absl::StatusOr<v1::ExecutableRef> uploaded = c->UploadExecutable(ipx_);
  tally_.Count("upload", uploaded.status());
  for (int i = 0; i < 4; ++i) OneSession(*c, rng);
}

// Requests that must be refused with a documented code, changing nothing.
void SoakTest::HostileRequests(client::Client& c) {
  auto expect = [this](const std::string& what, const absl::Status& s, absl::StatusCode code) {
    tally_.Count("hostile " + what, s);
    // UNAVAILABLE: the server was being killed meanwhile.
    if (s.code() != code && s.code() != absl::StatusCode::kUnavailable) {
      tally_.Fail(absl::StrCat("hostile ", what, ": ", s.ToString()));
    }
  };
  expect("garbage upload", c.UploadExecutable("garbage that is not an executable").status(),
         absl::StatusCode::kInvalidArgument);
  expect("unknown hash", c.StatExecutable(std::string(64, 'f')).status(),
         absl::StatusCode::kNotFound);
  expect("bad partition", c.CreatePartition("../etc", 3).status(),
         absl::StatusCode::kInvalidArgument);
  expect("no such session", c.Detach("s999999-1").status(), absl::StatusCode::kNotFound);
  v1::AttachRequest three;
  three.set_num_ipus(3);
  expect("three ipus", c.StartAttach(three)->WaitForGrant(nullptr).status(),
         absl::StatusCode::kInvalidArgument);
}

void SoakTest::PartitionChanges(client::Client& admin, std::mt19937& rng) {
  if (!partitions_.empty() && rng() % 2 == 0) {
    const std::string name = *partitions_.begin();
    absl::Status s = admin.RemovePartition(name, /*force=*/true).status();
    tally_.Count("partition remove", s);
    if (s.ok()) partitions_.erase(name);
    return;
  }
  const std::string name = absl::StrCat("soak", next_partition_++);
  absl::Status s = admin.CreatePartition(name, 2).status();
  tally_.Count("partition create", s);
  if (s.ok()) partitions_.insert(name);
}

void SoakTest::CheckInvariants(client::Client& admin, bool partitions_settled) {
  absl::StatusOr<v1::GetPodInfoResponse> pod;
  ASSERT_TRUE(Eventually([&] { return (pod = admin.GetPodInfo()).ok(); }, seconds(15)))
      << pod.status();
  std::set<uint32_t> held;
  for (const v1::SessionInfo& s : pod->sessions()) {
    for (uint32_t ipu : s.ipus()) {
      if (!held.insert(ipu).second) tally_.Fail(absl::StrCat("IPU ", ipu, " in two sessions"));
    }
  }
  std::set<std::string> listed;
  for (const v1::Partition& p : pod->partitions()) listed.insert(p.name());
  if (partitions_settled && listed != partitions_) {
    tally_.Fail(absl::StrCat("partitions: the server has ", listed.size(), ", acknowledged ",
                             partitions_.size()));
  }
  const pid_t pid = server_.process().pid();
  const int64_t rss = ProcStatus(pid, "VmRSS") << 10;
  const int64_t threads = ProcStatus(pid, "Threads");
  max_rss_ = std::max(max_rss_, rss);
  max_threads_ = std::max(max_threads_, threads);
  if (rss > kServerRssMaxBytes) tally_.Fail(absl::StrCat("server resident memory ", rss));
  if (threads > kServerThreadsMax) tally_.Fail(absl::StrCat("server threads ", threads));
}

int SoakSeconds() {
  const char* value = std::getenv("IPUPOD_SOAK_SECONDS");
  return value != nullptr && std::atoi(value) > 0 ? std::atoi(value) : 20;
}

TEST_F(SoakTest, InvariantsHoldUnderFaultsDeathsHostilityAndKills) {
  ASSERT_FALSE(ipx_.empty());
  auto executable = compiler::ReadExecutable(ipx_);
  ASSERT_TRUE(executable.ok()) << executable.status();
  sha256_ = executable->content_hash;
  std::unique_ptr<client::Client> admin = Connect("admin");
  ASSERT_NE(admin, nullptr);
  std::mt19937 rng(2026);
  const auto deadline = std::chrono::steady_clock::now() + seconds(SoakSeconds());
  int rounds = 0, kills = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    ++rounds;
    std::vector<std::thread> users;
    for (const char* user : {"alice", "bob", "carol"}) {
      users.emplace_back([this, user, rounds] { UserSessions(user, rounds); });
    }
    HostileRequests(*Connect("mallory"));
    PartitionChanges(*admin, rng);
    const bool kill = rng() % 4 == 0;
    if (kill) {
      ++kills;
      server_.KillAndRestart();  // SIGKILL while the users are mid-session
    }
    for (std::thread& t : users) t.join();
    CheckInvariants(*admin, /*partitions_settled=*/true);
  }
  const std::vector<std::string> failures = tally_.failures();
  std::printf("soak: %d rounds in %d s, %d SIGKILLs; server peak RSS %lld MiB, %lld threads\n%s",
              rounds, SoakSeconds(), kills, static_cast<long long>(max_rss_ >> 20),
              static_cast<long long>(max_threads_), tally_.Summary().c_str());
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_GT(rounds, 1);
}

}  // namespace
}  // namespace ipupod::testing
