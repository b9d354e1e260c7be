// Waiting on a job costs a watcher, not a JobService call slot (issue 29,
// finding 2): with more `ipupod job wait` and `job logs --follow` open than
// the JobService admits calls - server-wide and for one user - the short
// calls (`jobs`, `submit`, `job show`) of that user, of another and of an
// admin still go through; the watchers' own bounds are settings, named in
// their refusal; and a watch the server ends at jobs_watch_max_seconds is
// opened again by the CLI without a line lost or printed twice.
#include <chrono>
#include <csignal>
#include <string>
#include <vector>

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

// A server whose IPUs are all held by an attach, so submitted jobs stay
// PENDING (and their watches open) for as long as the test likes.
class JobWatchTest : public ::testing::Test {
 protected:
  void Start(const std::string& config_json, bool hold = true) {
    server_.emplace(std::vector<std::string>{"--pod", "POD4"}, config_json);
    ASSERT_TRUE(
        tensor::WriteFileAtomically(Path("m.onnx"), test_support::RegressorModel(2, Wave(6, 1.0f)))
            .ok());
    ASSERT_TRUE(tensor::WriteTensorFile(Path("data.npz"),
                                        {{"x", *Tensor::FromValues<float>({4, 3}, Wave(12, 0.3f))},
                                         {"t", *Tensor::FromValues<float>({4, 2}, Wave(8, 1.7f))}})
                    .ok());
    CliResult c = Cli("alice", {"compile", Path("m.onnx"), "-o", Path("m.ipx")});
    ASSERT_EQ(c.exit_code, 0) << c.err;
    if (!hold) return;
    holder_.emplace(StartCli(server_->address(), "carol", {"--json", "attach", "--ipus", "4"}));
    ASSERT_TRUE(holder_->ReadStdoutJson(std::chrono::seconds(15))) << holder_->stderr_text();
  }
  void TearDown() override {
    if (holder_) holder_->Signal(SIGINT);
  }
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }
  CliResult Cli(const std::string& user, std::vector<std::string> args) {
    return RunCli(server_->address(), user, args);
  }
  std::string Submit(const std::string& user) {
    CliResult c = Cli(user, {"--json", "submit", Path("m.ipx"), "--inputs", Path("data.npz")});
    EXPECT_EQ(c.exit_code, 0) << user << ": " << c.out << c.err;
    const nlohmann::json doc = c.json();
    if (!doc.is_object() || !doc.contains("jobs") || doc["jobs"].empty()) return "";
    return doc["jobs"][0]["id"].get<std::string>();
  }
  // `job logs --follow` of the job, once its first line (the job's
  // `submitted` event) shows the watch open on the server.
  Process Follow(const std::string& user, const std::string& id) {
    Process p = StartCli(server_->address(), user, {"job", "logs", id, "--follow"});
    const std::optional<std::string> line = p.ReadStdoutLine(std::chrono::seconds(20));
    EXPECT_TRUE(line.has_value()) << user << " " << id << ": " << p.stderr_text();
    return p;
  }
  // The short calls of `user` all succeed.
  void ExpectShortCallsServed(const std::string& user, const std::string& job) {
    CliResult list = Cli(user, {"jobs"});
    EXPECT_EQ(list.exit_code, 0) << user << ": " << list.err;
    CliResult show = Cli(user, {"job", "show", job});
    EXPECT_EQ(show.exit_code, 0) << user << ": " << show.err;
    EXPECT_NE(Submit(user), "") << user;
  }

  TempDir dir_;
  std::optional<ServerUnderTest> server_;
  std::optional<Process> holder_;
};

TEST_F(JobWatchTest, ManyWaitsLeaveEveryUsersShortCallsServed) {
  ASSERT_NO_FATAL_FAILURE(Start(""));  // the default bounds: 16 job calls, 4 per user
  std::vector<Process> waits;
  std::string alices_job;
  for (const char* user : {"alice", "bob", "dave"}) {
    const std::string id = Submit(user);
    ASSERT_NE(id, "");
    if (alices_job.empty()) alices_job = id;
    for (int i = 0; i < 5; ++i) waits.push_back(Follow(user, id));
    for (int i = 0; i < 2; ++i) {
      waits.push_back(StartCli(server_->address(), user, {"job", "wait", id, "--timeout", "60s"}));
    }
  }
  // 21 waits, 7 of each user: more than the 16 calls the service admits,
  // and than the 4 one user may hold.
  ExpectShortCallsServed("alice", alices_job);
  ExpectShortCallsServed("erin", alices_job);
  ExpectShortCallsServed("admin", alices_job);
  for (Process& p : waits) EXPECT_TRUE(p.Running()) << p.stderr_text();
}

// The watchers' bounds are settings, and a refusal names the one reached.
TEST_F(JobWatchTest, WatcherBoundsAreSettingsNamedInTheirRefusal) {
  ASSERT_NO_FATAL_FAILURE(Start(R"({"jobs_max_watchers": 3, "jobs_max_watchers_per_user": 2})"));
  const std::string id = Submit("alice");
  ASSERT_NE(id, "");
  Process first = Follow("alice", id);
  Process second = Follow("alice", id);
  const CliResult mine = Cli("alice", {"job", "logs", id});
  EXPECT_NE(mine.exit_code, 0);
  EXPECT_NE(mine.err.find("ipupodd config jobs_max_watchers_per_user 2"), std::string::npos)
      << mine.err;
  const std::string bobs = Submit("bob");
  ASSERT_NE(bobs, "");
  Process bob = Follow("bob", bobs);
  const CliResult all = Cli("bob", {"job", "logs", bobs});
  EXPECT_NE(all.exit_code, 0);
  EXPECT_NE(all.err.find("ipupodd config jobs_max_watchers 3"), std::string::npos) << all.err;
  // The short calls are not watches.
  ExpectShortCallsServed("alice", id);
  ExpectShortCallsServed("bob", bobs);
}

// A watch ends after jobs_watch_max_seconds; `job logs --follow` and `job
// wait` watch again, printing nothing twice and failing nothing.
TEST_F(JobWatchTest, AWatchEndedAtItsLimitIsOpenedAgain) {
  ASSERT_NO_FATAL_FAILURE(Start(R"({"jobs_watch_max_seconds": 1})"));
  const std::string id = Submit("alice");
  ASSERT_NE(id, "");
  Process follower = Follow("alice", id);
  // Outlives three watch limits: `job wait` gives up after its --timeout,
  // as it does when no watch ends.
  Process wait = StartCli(server_->address(), "alice", {"job", "wait", id, "--timeout", "4s"});
  ASSERT_TRUE(wait.Wait(std::chrono::seconds(20)).has_value());
  EXPECT_NE(wait.stderr_text().find("gave up waiting after 4s"), std::string::npos)
      << wait.stderr_text();
  EXPECT_TRUE(follower.Running()) << follower.stderr_text();
  follower.Signal(SIGINT);
  follower.Wait(std::chrono::seconds(10));
  const std::string& out = follower.stdout_text();
  const size_t at = out.find("submitted");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_EQ(out.find("submitted", at + 1), std::string::npos) << "printed twice: " << out;
}

// Issue 29, finding 6: another user's `job fetch` of a completed job gets
// the PERMISSION_DENIED every request for its details gets (not "ended
// COMPLETED without results"), and `job show` says the details are hidden.
TEST_F(JobWatchTest, AnotherUsersFetchIsDeniedAndShowSaysHidden) {
  ASSERT_NO_FATAL_FAILURE(Start("", /*hold=*/false));
  const std::string id = Submit("alice");
  ASSERT_NE(id, "");
  Process wait = StartCli(server_->address(), "alice", {"job", "wait", id, "--timeout", "60s"});
  ASSERT_EQ(wait.Wait(std::chrono::seconds(70)), 0) << wait.stderr_text();
  const CliResult fetch = Cli("bob", {"job", "fetch", id, "-o", Path("stolen")});
  const CliResult logs = Cli("bob", {"job", "logs", id});
  EXPECT_NE(fetch.exit_code, 0);
  EXPECT_EQ(fetch.exit_code, logs.exit_code) << "the same answer as for the job's events";
  EXPECT_NE(fetch.err.find("belongs to alice"), std::string::npos) << fetch.err;
  EXPECT_EQ(fetch.err.find("without results"), std::string::npos) << fetch.err;
  const CliResult show = Cli("bob", {"job", "show", id});
  EXPECT_EQ(show.exit_code, 0) << show.err;
  EXPECT_NE(show.out.find("details:       hidden"), std::string::npos) << show.out;
  EXPECT_EQ(show.out.find("none yet"), std::string::npos) << show.out;
  EXPECT_EQ(show.out.find("started:"), std::string::npos) << show.out;
}

}  // namespace
}  // namespace ipupod::testing
