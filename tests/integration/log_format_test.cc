// End to end: ipupodd --log-format json. Calls that succeed, fail and end
// normally (a detached attach stream) are driven through the CLI, one with
// a partition name full of quotes, backslashes, newlines and control
// characters; after SIGTERM every line the server wrote on stderr must parse
// as one JSON object with a time and a level, the request log's lines must
// carry their fields as keys (the hostile text intact inside them), and the
// ready line on stdout is unchanged.
#include <chrono>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_split.h"
#include "tests/integration/harness.h"
#include <signal.h>

namespace ipupod::testing {
namespace {

using ::testing::HasSubstr;

const std::string kHostileName = "p\"q\\r\ns\x01t {\"event\":\"forged\"}";

std::vector<nlohmann::json> ParseLines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    nlohmann::json parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(parsed.is_object()) << "not one JSON object: " << line;
    if (!parsed.is_object()) continue;
    EXPECT_TRUE(parsed["time"].is_string()) << line;
    EXPECT_TRUE(parsed["level"].is_string()) << line;
    lines.push_back(std::move(parsed));
  }
  return lines;
}

// The rpc line of `method` whose code is `code`, or null.
nlohmann::json Rpc(const std::vector<nlohmann::json>& lines, const std::string& method,
                   const std::string& code) {
  for (const nlohmann::json& line : lines) {
    if (line.value("event", "") == "rpc" && line["method"] == method && line["code"] == code) {
      return line;
    }
  }
  return nullptr;
}

TEST(LogFormatIntegrationTest, EveryStderrLineIsJsonAndRpcLinesCarryTheirFields) {
  ServerUnderTest server({"--pod", "POD4", "--log-format", "json"});
  const std::string address = server.address();
  EXPECT_EQ(RunCli(address, "alice", {"info"}).exit_code, 0);
  EXPECT_EQ(RunCli(address, "alice", {"partition", "show", kHostileName}).exit_code, 3);
  EXPECT_EQ(
      RunCli(address, "alice", {"partition", "create", kHostileName, "--size", "2"}).exit_code, 9);
  EXPECT_EQ(
      RunCli(address, "bob", {"fault", "inject", "--ipu", "0", "--kind", "ipu-reset"}).exit_code,
      4);
  EXPECT_EQ(RunCli(address, "alice", {"attach", "--ipus", "1", "--", "true"}).exit_code, 0);
  server.Kill(SIGTERM);
  const std::string err = server.process().stderr_text();
  const std::vector<nlohmann::json> lines = ParseLines(err);
  ASSERT_GT(lines.size(), 5u) << err;

  const nlohmann::json info = Rpc(lines, "GetPodInfo", "OK");
  ASSERT_TRUE(info.is_object()) << err;
  EXPECT_EQ(info["user"], "alice");
  EXPECT_EQ(info["level"], "info");
  EXPECT_TRUE(info["ms"].is_number());
  EXPECT_FALSE(info.contains("error"));
  EXPECT_FALSE(info.contains("msg"));

  // The name comes back raw in one error and C-escaped in the other: both survive.
  const nlohmann::json missing = Rpc(lines, "GetPartition", "NOT_FOUND");
  ASSERT_TRUE(missing.is_object()) << err;
  EXPECT_THAT(missing["error"].get<std::string>(), HasSubstr(kHostileName)) << missing.dump();
  const nlohmann::json bad = Rpc(lines, "CreatePartition", "INVALID_ARGUMENT");
  ASSERT_TRUE(bad.is_object()) << err;
  EXPECT_THAT(bad["error"].get<std::string>(), HasSubstr("p\\\"q\\\\r\\n")) << bad.dump();
  for (const nlohmann::json& line : lines) EXPECT_NE(line.value("event", ""), "forged");

  const nlohmann::json denied = Rpc(lines, "InjectFault", "PERMISSION_DENIED");
  ASSERT_TRUE(denied.is_object()) << err;
  EXPECT_EQ(denied["user"], "bob");
  EXPECT_THAT(denied["error"].get<std::string>(), HasSubstr("only an admin"));

  const nlohmann::json attach = Rpc(lines, "Hold", "OK");  // the CLI's attach
  ASSERT_TRUE(attach.is_object()) << err;
  EXPECT_THAT(attach["ended"].get<std::string>(), HasSubstr("released by its holder"));

  // Plain lines keep their text under "msg"; the last one says the server stopped.
  EXPECT_EQ(lines.back()["msg"], "stopped");
  EXPECT_THAT(lines.front()["time"].get<std::string>(), ::testing::EndsWith("Z"));
  // stdout carried the ready line, as ever (the harness parsed it to find the port).
  EXPECT_THAT(server.process().stdout_text(), HasSubstr("ipupodd listening on 127.0.0.1:"));
}

TEST(LogFormatIntegrationTest, ABadFormatIsRefusedAtStart) {
  Process p = Process::Start({ServerBinary(), "--listen", "127.0.0.1:0", "--log-format", "xml"});
  EXPECT_EQ(p.Wait(std::chrono::seconds(20)), 2);
  EXPECT_THAT(p.stderr_text(), HasSubstr("log format 'xml' is not one of text"));
}

}  // namespace
}  // namespace ipupod::testing
