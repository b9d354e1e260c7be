// End to end: the ipupod CLI surface — info JSON shape, help on every
// command, identity (open mode and tokens), unreachable servers, and 32
// concurrent CLI clients sharing a POD16 without ever overlapping.
#include <filesystem>

#include <gtest/gtest.h>

#include "tests/integration/harness.h"

namespace ipupod::testing {
namespace {

using std::chrono::seconds;

TEST(CliTest, InfoPrintsThePodAndEveryIpu) {
  ServerUnderTest server;
  CliResult r = RunCli(server.address(), "alice", {"--json", "info"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json info = r.json();
  EXPECT_EQ(info["pod"]["num_ipus"], 16);
  ASSERT_EQ(info["ipus"].size(), 16u);
  for (int i = 0; i < 16; ++i) {
    const nlohmann::json& ipu = info["ipus"][i];
    EXPECT_EQ(ipu["id"], i);
    EXPECT_EQ(ipu["state"], "idle");
    for (const char* key : {"partition", "session", "owner", "memory_used_bytes"}) {
      EXPECT_TRUE(ipu.contains(key)) << key;
    }
    EXPECT_EQ(ipu["memory_total_bytes"], 900000000);
  }
  EXPECT_TRUE(info["partitions"].is_array());

  CliResult human = RunCli(server.address(), "alice", {"info"});
  ASSERT_EQ(human.exit_code, 0);
  EXPECT_NE(human.out.find("POD16"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("idle"), std::string::npos) << human.out;
}

TEST(CliTest, PodPresetsAndSizesAreHonoured) {
  ServerUnderTest pod4({"--pod", "POD4"});
  EXPECT_EQ(RunCli(pod4.address(), "a", {"--json", "info"}).json()["ipus"].size(), 4u);
  ServerUnderTest pod64({"--pod", "64"});
  EXPECT_EQ(RunCli(pod64.address(), "a", {"--json", "info"}).json()["ipus"].size(), 64u);
  Process bad = Process::Start({ServerBinary(), "--listen", "127.0.0.1:0", "--pod", "24"});
  EXPECT_EQ(bad.Wait(seconds(10)), 2);
  EXPECT_NE(bad.stderr_text().find("32"), std::string::npos) << bad.stderr_text();
}

TEST(CliTest, EveryCommandHasHelpWithAnExample) {
  const std::vector<std::vector<std::string>> commands = {
      {},
      {"info"},
      {"partition"},
      {"partition", "create"},
      {"partition", "list"},
      {"partition", "show"},
      {"partition", "remove"},
      {"partition", "reset"},
      {"attach"},
      {"detach"},
      {"queue"},
      {"session", "show"},
      {"session", "reset"},
      {"ipu", "reset"},
      {"ipu", "repair"},
      {"pod", "reset"},
      {"fault", "inject"},
      {"compile"},
      {"run"},
  };
  for (auto args : commands) {
    args.push_back("--help");
    Process p = Process::Start([&] {
      std::vector<std::string> argv = {CliBinary()};
      argv.insert(argv.end(), args.begin(), args.end());
      return argv;
    }());
    ASSERT_EQ(p.Wait(seconds(10)), 0) << args[0];
    EXPECT_NE(p.stdout_text().find("xample"), std::string::npos)
        << "help of `" << (args.size() > 1 ? args[0] : "ipupod") << "` has no example:\n"
        << p.stdout_text();
  }
}

TEST(CliTest, UnreachableServerIsUnavailableWithAHint) {
  CliResult r = RunCli("127.0.0.1:1", "alice", {"--json", "info"});
  EXPECT_EQ(r.exit_code, 8);
  EXPECT_EQ(r.json()["error"]["code"], "UNAVAILABLE");
  CliResult human = RunCli("127.0.0.1:1", "alice", {"info"});
  EXPECT_EQ(human.exit_code, 8);
  EXPECT_NE(human.err.find("127.0.0.1:1"), std::string::npos) << human.err;
}

TEST(CliTest, ServerAddressAndTokenComeFromTheEnvironment) {
  ServerUnderTest server({}, R"({"tokens": [
      {"token": "alice-secret", "user": "alice", "role": "user"},
      {"token": "root-secret", "user": "root", "role": "admin"}]})");
  Process p =
      Process::Start({CliBinary(), "--json", "partition", "create", "t", "--size", "2"},
                     {{"IPUPOD_SERVER", server.address()}, {"IPUPOD_TOKEN", "alice-secret"}});
  ASSERT_EQ(p.Wait(seconds(10)), 0) << p.stderr_text();
  EXPECT_NE(p.stdout_text().find("\"alice\""), std::string::npos) << "owner from the token";
}

TEST(CliTest, TokenModeRejectsBadTokensAndIgnoresClaimedNames) {
  ServerUnderTest server({}, R"({"tokens": [
      {"token": "alice-secret", "user": "alice", "role": "user"},
      {"token": "root-secret", "user": "root", "role": "admin"}]})");
  auto cli = [&](const std::string& token, std::vector<std::string> args) {
    args.insert(args.begin(), {"--json", "--token", token});
    return RunCli(server.address(), "admin", args);
  };
  CliResult bad = cli("wrong", {"info"});
  EXPECT_EQ(bad.exit_code, 4);
  EXPECT_EQ(bad.json()["error"]["code"], "UNAUTHENTICATED");
  EXPECT_EQ(cli(std::string(10000, 'x'), {"info"}).exit_code, 4);
  EXPECT_EQ(RunCli(server.address(), "admin", {"--json", "info"}).exit_code, 4) << "no token";
  // --user admin is ignored in token mode: alice is a plain user.
  EXPECT_EQ(cli("alice-secret", {"pod", "reset"}).exit_code, 4);
  EXPECT_EQ(cli("root-secret", {"pod", "reset"}).exit_code, 0);
}

TEST(CliTest, OpenModeRefusesToListenBeyondLoopback) {
  Process p = Process::Start({ServerBinary(), "--listen", "0.0.0.0:0"});
  EXPECT_EQ(p.Wait(seconds(10)), 2);
  EXPECT_NE(p.stderr_text().find("loopback"), std::string::npos) << p.stderr_text();
}

// 32 CLI clients ask for 1, 2, 4 or 8 IPUs with --wait; each holds its IPUs
// while a command claims a marker directory per IPU (mkdir fails if another
// session holds that IPU at the same time). All must finish, none overlap.
TEST(CliTest, ThirtyTwoConcurrentClientsNeverOverlapAndAllFinish) {
  ServerUnderTest server;
  TempDir log;
  const std::string markers = log.path() + "/markers";
  std::filesystem::create_directory(markers);
  const std::string script =
      "test -n \"$IPUPOD_IPUS\" || exit 98;"
      "echo \"$IPUPOD_SESSION $IPUPOD_IPUS\" >> \"$MARKERS/../held-$IPUPOD_SESSION\";"
      "for i in $(echo \"$IPUPOD_IPUS\" | tr , ' '); do mkdir \"$MARKERS/ipu-$i\" || exit 99; done;"
      "sleep 0.05;"
      "for i in $(echo \"$IPUPOD_IPUS\" | tr , ' '); do rmdir \"$MARKERS/ipu-$i\"; done";
  std::vector<Process> clients;
  for (int i = 0; i < 32; ++i) {
    std::string n = std::to_string(1 << (i % 4));
    clients.push_back(StartCli(server.address(), "user" + std::to_string(i % 5),
                               {"attach", "--wait", "--ipus", n, "--", "/bin/sh", "-c", script},
                               {{"MARKERS", markers}}));
  }
  for (auto& c : clients) {
    auto code = c.Wait(seconds(120));
    ASSERT_TRUE(code) << "a client did not finish";
    EXPECT_EQ(*code, 0) << c.stderr_text();
  }
  int held = 0;
  for (const auto& entry : std::filesystem::directory_iterator(log.path())) {
    held += entry.path().filename().string().rfind("held-", 0) == 0;
  }
  EXPECT_EQ(held, 32) << "every client ran its command in its own session";
  nlohmann::json info = RunCli(server.address(), "a", {"--json", "info"}).json();
  for (const auto& ipu : info["ipus"]) EXPECT_EQ(ipu["state"], "idle");
}

}  // namespace
}  // namespace ipupod::testing
