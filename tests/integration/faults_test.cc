// End to end: injected faults reach the session's next operation with their
// kind and recovery action (trailing metadata -> CLI JSON and exit codes
// 20-24), resets clear exactly the errors at or below their level, an
// unrecoverable fault takes the IPU out of service until repaired, and
// seeded random faults are reproducible.
#include <gtest/gtest.h>

#include "tests/integration/harness.h"
#include <signal.h>

namespace ipupod::testing {
namespace {

using std::chrono::seconds;

class FaultsTest : public ::testing::Test {
 protected:
  CliResult Cli(const std::string& user, std::vector<std::string> args) {
    args.insert(args.begin(), "--json");
    return RunCli(server_.address(), user, args);
  }
  // Holds `n` IPUs for alice (optionally in a partition); returns the session.
  std::string Hold(int n, const std::string& partition = "") {
    std::vector<std::string> args = {"--json", "attach", "--ipus", std::to_string(n)};
    if (!partition.empty()) args.insert(args.end(), {"--partition", partition});
    holders_.push_back(StartCli(server_.address(), "alice", args));
    auto grant = holders_.back().ReadStdoutJson(seconds(15));
    EXPECT_TRUE(grant) << holders_.back().stderr_text();
    first_ipu_ = grant ? (*grant)["ipus"][0].get<int>() : -1;
    return grant ? (*grant)["session"].get<std::string>() : "";
  }
  void Inject(int ipu, const std::string& kind) {
    CliResult r = Cli("admin", {"fault", "inject", "--ipu", std::to_string(ipu), "--kind", kind});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  // `session show` until the session is usable again (resets take a moment).
  bool SessionHealthy(const std::string& session) {
    return Eventually(
        [&] {
          return Cli("alice", {"session", "show", session}).exit_code == 0;
        },
        seconds(10));
  }
  ServerUnderTest server_{{}, R"({"reset_ms": {"ipu": 50, "partition": 100, "pod": 150}})"};
  std::vector<Process> holders_;
  int first_ipu_ = -1;
};

TEST_F(FaultsTest, OnlyAdminsInjectFaults) {
  CliResult r = Cli("alice", {"fault", "inject", "--ipu", "0", "--kind", "ipu-reset"});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_EQ(r.json()["error"]["code"], "PERMISSION_DENIED");
  EXPECT_EQ(Cli("admin", {"fault", "inject", "--ipu", "0", "--kind", "bogus"}).exit_code, 2);
  EXPECT_EQ(Cli("admin", {"fault", "inject", "--ipu", "-1", "--kind", "ipu-reset"}).exit_code, 2);
  EXPECT_NE(Cli("admin", {"fault", "inject", "--ipu", "16", "--kind", "ipu-reset"}).exit_code, 0);
  nlohmann::json info = Cli("alice", {"info"}).json();
  for (const auto& ipu : info["ipus"]) EXPECT_EQ(ipu["state"], "idle");
}

TEST_F(FaultsTest, IpuResetFaultSurfacesOnNextOperationAndIpuResetClearsIt) {
  std::string session = Hold(2);
  Inject(first_ipu_, "ipu-reset");
  CliResult r = Cli("alice", {"session", "show", session});
  EXPECT_EQ(r.exit_code, 20);
  nlohmann::json e = r.json()["error"];
  EXPECT_EQ(e["code"], "ABORTED");
  EXPECT_EQ(e["kind"], "recoverable");
  EXPECT_EQ(e["recovery_action"], "IPU_RESET");
  nlohmann::json ipu = Cli("alice", {"info"}).json()["ipus"][first_ipu_];
  EXPECT_EQ(ipu["state"], "error");
  EXPECT_EQ(ipu["recovery_action"], "IPU_RESET");

  EXPECT_EQ(Cli("bob", {"ipu", "reset", std::to_string(first_ipu_)}).exit_code, 4);
  EXPECT_EQ(Cli("alice", {"ipu", "reset", std::to_string(first_ipu_)}).exit_code, 0);
  ASSERT_TRUE(SessionHealthy(session));
  nlohmann::json shown = Cli("alice", {"session", "show", session}).json();
  EXPECT_EQ(shown["needs_load"], true) << "a reset clears device memory";
}

TEST_F(FaultsTest, PartitionResetFaultNeedsAPartitionReset) {
  ASSERT_EQ(Cli("alice", {"partition", "create", "p", "--size", "4"}).exit_code, 0);
  std::string session = Hold(4, "p");
  Inject(first_ipu_ + 1, "partition-reset");
  CliResult r = Cli("alice", {"session", "show", session});
  EXPECT_EQ(r.exit_code, 22);
  EXPECT_EQ(r.json()["error"]["recovery_action"], "PARTITION_RESET");
  CliResult too_small = Cli("alice", {"ipu", "reset", std::to_string(first_ipu_)});
  EXPECT_EQ(too_small.exit_code, 7);
  EXPECT_NE(too_small.json()["error"]["message"].get<std::string>().find("partition reset"),
            std::string::npos);
  EXPECT_EQ(Cli("alice", {"partition", "reset", "p"}).exit_code, 0);
  EXPECT_TRUE(SessionHealthy(session));
}

TEST_F(FaultsTest, LinkResetFaultIsClearedBySessionReset) {
  std::string session = Hold(4);
  Inject(first_ipu_, "link-reset");
  CliResult r = Cli("alice", {"session", "show", session});
  EXPECT_EQ(r.exit_code, 21);
  EXPECT_EQ(r.json()["error"]["recovery_action"], "LINK_RESET");
  EXPECT_EQ(Cli("alice", {"session", "reset", session}).exit_code, 0);
  EXPECT_TRUE(SessionHealthy(session));
}

TEST_F(FaultsTest, FullResetFaultNeedsAnAdminPodReset) {
  std::string session = Hold(1);
  Inject(0, "full-reset");
  EXPECT_EQ(Cli("alice", {"session", "show", session}).exit_code, 23);
  EXPECT_EQ(Cli("alice", {"session", "reset", session}).exit_code, 7);
  EXPECT_EQ(Cli("alice", {"pod", "reset"}).exit_code, 4);
  EXPECT_EQ(Cli("admin", {"pod", "reset"}).exit_code, 0);
  EXPECT_TRUE(SessionHealthy(session));
}

TEST_F(FaultsTest, UnrecoverableFaultTakesTheIpuOutOfServiceUntilRepaired) {
  std::string session = Hold(1);
  int ipu = first_ipu_;
  Inject(ipu, "unrecoverable");
  CliResult r = Cli("alice", {"session", "show", session});
  EXPECT_EQ(r.exit_code, 24);
  EXPECT_EQ(r.json()["error"]["code"], "DATA_LOSS");
  EXPECT_EQ(r.json()["error"]["kind"], "unrecoverable");
  holders_.back().Signal(SIGINT);
  holders_.back().Wait(seconds(10));

  EXPECT_EQ(Cli("alice", {"info"}).json()["ipus"][ipu]["state"], "failed");
  EXPECT_EQ(Cli("bob", {"attach", "--ipus", "16"}).exit_code, 5) << "a failed IPU is never granted";
  EXPECT_EQ(Cli("alice", {"ipu", "repair", std::to_string(ipu)}).exit_code, 4);
  EXPECT_EQ(Cli("admin", {"ipu", "repair", std::to_string(ipu)}).exit_code, 0);
  EXPECT_EQ(Cli("alice", {"info"}).json()["ipus"][ipu]["state"], "idle");
}

// Same seed, same sequence of operations: the same faults.
TEST(RandomFaultsTest, SeededFaultsAreReproducible) {
  const std::string config =
      R"({"random_faults": {"seed": 11, "probability_per_operation": 0.5, "kinds": ["ipu-reset"]},
          "reset_ms": {"ipu": 10, "partition": 10, "pod": 10}})";
  auto run = [&] {
    ServerUnderTest server({}, config);
    Process holder = StartCli(server.address(), "alice", {"--json", "attach", "--ipus", "1"});
    auto grant = holder.ReadStdoutJson(seconds(15));
    std::string session = (*grant)["session"];
    int ipu = (*grant)["ipus"][0];
    std::string outcomes;
    for (int i = 0; i < 12; ++i) {
      int code = RunCli(server.address(), "alice", {"session", "show", session}).exit_code;
      outcomes += std::to_string(code) + ",";
      if (code == 20) {
        RunCli(server.address(), "alice", {"session", "reset", session});
        // `info` is not a session operation: polling it draws no faults.
        Eventually(
            [&] {
              nlohmann::json info = RunCli(server.address(), "alice", {"--json", "info"}).json();
              return info["ipus"][ipu]["state"] == "attached";
            },
            seconds(5));
      }
    }
    return outcomes;
  };
  std::string first = run();
  EXPECT_NE(first.find("20"), std::string::npos) << first;
  EXPECT_EQ(first, run());
}

}  // namespace
}  // namespace ipupod::testing
