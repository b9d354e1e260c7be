// End to end: partitions through the ipupod CLI against a real ipupodd
// (POD16, open mode; "admin" is the open-mode admin). Checks the documented
// JSON shapes, gc-info device ids, ownership rules and every error's exit code.
#include <gtest/gtest.h>

#include "tests/integration/harness.h"

namespace ipupod::testing {
namespace {

using std::chrono::seconds;

class PartitionTest : public ::testing::Test {
 protected:
  CliResult Cli(const std::string& user, std::vector<std::string> args) {
    args.insert(args.begin(), "--json");
    return RunCli(server_.address(), user, args);
  }
  // The partitions array whether the CLI prints a bare array or an object.
  static nlohmann::json Partitions(const nlohmann::json& doc) {
    return doc.is_array() ? doc : doc.at("partitions");
  }
  ServerUnderTest server_;
};

TEST_F(PartitionTest, CreatePrintsDocumentedJsonWithGcInfoDeviceId) {
  CliResult r = Cli("alice", {"partition", "create", "p1", "--size", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  nlohmann::json p = r.json();
  EXPECT_EQ(p["name"], "p1");
  EXPECT_EQ(p["size"], 4);
  EXPECT_EQ(p["owner"], "alice");
  ASSERT_EQ(p["ipus"].size(), 4u);
  int start = p["ipus"][0];
  EXPECT_EQ(start % 4, 0) << "partitions are aligned blocks";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(p["ipus"][i], start + i);
  EXPECT_EQ(p["device_id"], 24 + start / 4) << "POD16 quads are ids 24-27";

  CliResult eight = Cli("alice", {"partition", "create", "p8", "--size", "8"});
  ASSERT_EQ(eight.exit_code, 0) << eight.err;
  int start8 = eight.json()["ipus"][0];
  EXPECT_EQ(eight.json()["device_id"], 28 + start8 / 8);
  EXPECT_EQ(start8, 8) << "the free aligned eight is 8-15";
}

TEST_F(PartitionTest, ListShowAndRemove) {
  ASSERT_EQ(Cli("alice", {"partition", "create", "a", "--size", "2"}).exit_code, 0);
  ASSERT_EQ(Cli("bob", {"partition", "create", "b", "--size", "1"}).exit_code, 0);
  CliResult list = Cli("carol", {"partition", "list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(Partitions(list.json()).size(), 2u);

  CliResult show = Cli("carol", {"partition", "show", "b"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_EQ(show.json()["owner"], "bob");
  EXPECT_EQ(show.json()["size"], 1);

  EXPECT_EQ(Cli("alice", {"partition", "remove", "a"}).exit_code, 0);
  EXPECT_EQ(Cli("alice", {"partition", "show", "a"}).exit_code, 3);
  EXPECT_EQ(Partitions(Cli("alice", {"partition", "list"}).json()).size(), 1u);
}

TEST_F(PartitionTest, NonPowerOfTwoSizeNamesNearestValidSizes) {
  CliResult r = Cli("alice", {"partition", "create", "p", "--size", "3"});
  EXPECT_EQ(r.exit_code, 9);
  nlohmann::json e = r.json()["error"];
  EXPECT_EQ(e["code"], "INVALID_ARGUMENT");
  std::string message = e["message"];
  EXPECT_NE(message.find('2'), std::string::npos) << message;
  EXPECT_NE(message.find('4'), std::string::npos) << message;
  EXPECT_EQ(Partitions(Cli("alice", {"partition", "list"}).json()).size(), 0u)
      << "a failed call changes nothing";
}

TEST_F(PartitionTest, BadInputGetsClearErrorsAndChangesNothing) {
  EXPECT_EQ(Cli("alice", {"partition", "create", "big", "--size", "32"}).exit_code, 9)
      << "larger than the pod";
  EXPECT_EQ(Cli("alice", {"partition", "create", "zero", "--size", "0"}).exit_code, 9);
  EXPECT_EQ(Cli("alice", {"partition", "create", "neg", "--size", "-4"}).exit_code, 2);
  EXPECT_EQ(Cli("alice", {"partition", "create", "huge", "--size", "99999999999999"}).exit_code, 2);
  EXPECT_EQ(Cli("alice", {"partition", "create", "nan", "--size", "four"}).exit_code, 2);
  EXPECT_EQ(Cli("alice", {"partition", "create", std::string(5000, 'x'), "--size", "2"}).exit_code,
            9);
  EXPECT_EQ(Cli("alice", {"partition", "create", "bad/name", "--size", "2"}).exit_code, 9);
  EXPECT_EQ(Cli("alice", {"partition", "show", "nope"}).exit_code, 3);
  EXPECT_EQ(Cli("alice", {"partition", "remove", "nope"}).exit_code, 3);
  EXPECT_EQ(Partitions(Cli("alice", {"partition", "list"}).json()).size(), 0u);

  ASSERT_EQ(Cli("alice", {"partition", "create", "dup", "--size", "2"}).exit_code, 0);
  CliResult dup = Cli("alice", {"partition", "create", "dup", "--size", "2"});
  EXPECT_EQ(dup.exit_code, 10);
  EXPECT_EQ(dup.json()["error"]["code"], "ALREADY_EXISTS");
}

TEST_F(PartitionTest, FullPodIsResourceExhausted) {
  ASSERT_EQ(Cli("alice", {"partition", "create", "all", "--size", "16"}).exit_code, 0);
  CliResult r = Cli("bob", {"partition", "create", "more", "--size", "1"});
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_EQ(r.json()["error"]["code"], "RESOURCE_EXHAUSTED");
}

TEST_F(PartitionTest, OnlyOwnerOrAdminMayRemoveResetOrAttachInside) {
  ASSERT_EQ(Cli("alice", {"partition", "create", "mine", "--size", "4"}).exit_code, 0);
  EXPECT_EQ(Cli("bob", {"partition", "remove", "mine"}).exit_code, 4);
  EXPECT_EQ(Cli("bob", {"partition", "reset", "mine"}).exit_code, 4);
  CliResult attach = Cli("bob", {"attach", "--ipus", "1", "--partition", "mine"});
  EXPECT_EQ(attach.exit_code, 4);
  EXPECT_EQ(attach.json()["error"]["code"], "PERMISSION_DENIED");
  EXPECT_EQ(Cli("alice", {"partition", "reset", "mine"}).exit_code, 0);
  EXPECT_EQ(Cli("admin", {"partition", "reset", "mine"}).exit_code, 0);
  EXPECT_EQ(Cli("admin", {"partition", "remove", "mine"}).exit_code, 0);
}

TEST_F(PartitionTest, RemoveWithAttachedSessionNeedsForce) {
  ASSERT_EQ(Cli("alice", {"partition", "create", "busy", "--size", "4"}).exit_code, 0);
  Process holder = StartCli(server_.address(), "alice",
                            {"--json", "attach", "--ipus", "2", "--partition", "busy"});
  auto grant = holder.ReadStdoutJson(seconds(10));
  ASSERT_TRUE(grant) << holder.stderr_text();
  EXPECT_EQ((*grant)["ipus"].size(), 2u);

  CliResult refused = Cli("alice", {"partition", "remove", "busy"});
  EXPECT_EQ(refused.exit_code, 7);
  std::string message = refused.json()["error"]["message"];
  EXPECT_NE(message.find((*grant)["session"].get<std::string>()), std::string::npos) << message;
  EXPECT_NE(message.find("--force"), std::string::npos) << message;

  EXPECT_EQ(Cli("bob", {"partition", "remove", "busy", "--force"}).exit_code, 4);
  EXPECT_EQ(Cli("alice", {"partition", "remove", "busy", "--force"}).exit_code, 0);
  auto code = holder.Wait(seconds(10));
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 11) << "the holder's session was ended by someone else (ABORTED)";
}

}  // namespace
}  // namespace ipupod::testing
