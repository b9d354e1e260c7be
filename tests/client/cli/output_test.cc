#include "client/cli/output.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/errors.h"

namespace ipupod::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> Keys(const Json& doc) {
  std::vector<std::string> keys;
  for (auto it = doc.begin(); it != doc.end(); ++it) keys.push_back(it.key());
  return keys;
}

v1::Partition MakePartition() {
  v1::Partition p;
  p.set_name("p1");
  p.set_size(4);
  for (int i = 4; i < 8; ++i) p.add_ipus(i);
  p.set_device_id(25);
  p.set_owner("alice");
  p.set_created_unix_ms(1700000000000);
  p.add_sessions("s1-2");
  return p;
}

v1::SessionInfo MakeSession() {
  v1::SessionInfo s;
  s.set_session("s1-2");
  s.set_user("alice");
  for (int i = 4; i < 8; ++i) s.add_ipus(i);
  s.set_device_id(25);
  s.set_requested_ipus(3);
  s.add_idle_ipus(7);
  s.set_attached_unix_ms(1700000000000);
  s.set_client("host pid 1: hold");
  return s;
}

TEST(CompactIpusTest, CompactsRunsSortsAndDropsDuplicates) {
  EXPECT_EQ(CompactIpus(std::vector<int64_t>{}), "");
  EXPECT_EQ(CompactIpus(std::vector<int64_t>{5}), "5");
  EXPECT_EQ(CompactIpus(std::vector<int64_t>{0, 1, 2, 3, 8}), "0-3,8");
  EXPECT_EQ(CompactIpus(std::vector<int64_t>{8, 3, 1, 2, 0, 3}), "0-3,8");
  EXPECT_EQ(CompactIpus(std::vector<int64_t>{1, 3, 5}), "1,3,5");
  EXPECT_EQ(CompactIpus(std::vector<int64_t>{0, 1, 4, 5, 6, 7, 15}), "0-1,4-7,15");
  EXPECT_EQ(CompactIpus(std::vector<int>{10, 11}), "10-11");
}

TEST(TableTest, AlignsColumnsWithoutTrailingSpaces) {
  Table table({{"ID", Table::Align::kRight}, {"NAME"}, {"NOTE"}});
  table.AddRow({"1", "alpha", "x"});
  table.AddRow({"12", "b", ""});
  EXPECT_EQ(table.Render(),
            "ID  NAME   NOTE\n"
            " 1  alpha  x\n"
            "12  b\n");
}

// A cell shows one line: a client's label with "\n" or ESC in it forges no
// row of `ipupod sessions` and moves no cursor (nor does `session show`).
TEST(TableTest, ControlCharactersInCellsAreEscaped) {
  Table table({{"A"}, {"B"}});
  table.AddRow({"x\n2  forged", "\x1b[2Jy"});
  const std::string text = table.Render();
  EXPECT_EQ(text, "A             B\nx\\n2  forged  \\x1b[2Jy\n");
  v1::SessionInfo s;
  s.set_session("s1");
  s.set_user("alice");
  s.set_client("host\x1b]0;t\x07\nclient:    forged");
  const std::string shown = SessionText(s, absl::Now());
  EXPECT_EQ(shown.find('\x1b'), std::string::npos) << shown;
  EXPECT_EQ(shown.find("\nclient:    forged"), std::string::npos) << shown;
}

TEST(JsonTest, PartitionHasTheDocumentedKeys) {
  Json doc = PartitionJson(MakePartition());
  EXPECT_EQ(Keys(doc), (std::vector<std::string>{"name", "size", "ipus", "device_id", "owner",
                                                 "sessions", "created_unix_ms"}));
  EXPECT_EQ(doc["ipus"], Json::array({4, 5, 6, 7}));
  EXPECT_EQ(doc["device_id"], 25);
  EXPECT_EQ(doc["owner"], "alice");
}

TEST(JsonTest, IpuStateIsALowerCaseWordAndErrorFieldsAppearWhenRelevant) {
  v1::Ipu ipu;
  ipu.set_id(3);
  ipu.set_state(v1::IPU_STATE_IDLE);
  ipu.set_memory_total_bytes(900000000);
  Json idle = IpuJson(ipu);
  EXPECT_EQ(Keys(idle), (std::vector<std::string>{"id", "state", "partition", "session", "owner",
                                                  "memory_used_bytes", "memory_total_bytes"}));
  EXPECT_EQ(idle["state"], "idle");
  EXPECT_EQ(idle["partition"], "");

  ipu.set_state(v1::IPU_STATE_ERROR);
  ipu.set_recovery_action(v1::RECOVERY_ACTION_PARTITION_RESET);
  EXPECT_EQ(IpuJson(ipu)["state"], "error");
  EXPECT_EQ(IpuJson(ipu)["recovery_action"], "PARTITION_RESET");
  EXPECT_FALSE(IpuJson(ipu).contains("failure_reason"));

  ipu.set_state(v1::IPU_STATE_FAILED);
  ipu.set_recovery_action(v1::RECOVERY_ACTION_NONE);
  ipu.set_failure_reason("injected");
  EXPECT_EQ(IpuJson(ipu)["state"], "failed");
  EXPECT_EQ(IpuJson(ipu)["failure_reason"], "injected");
  EXPECT_FALSE(IpuJson(ipu).contains("recovery_action"));
}

TEST(JsonTest, EveryStateHasAName) {
  EXPECT_EQ(IpuStateName(v1::IPU_STATE_ATTACHED), "attached");
  EXPECT_EQ(IpuStateName(v1::IPU_STATE_BUSY), "busy");
  EXPECT_EQ(IpuStateName(v1::IPU_STATE_RESETTING), "resetting");
  EXPECT_EQ(IpuStateName(v1::IPU_STATE_UNSPECIFIED), "unknown");
}

TEST(JsonTest, PodInfoHasPodIpusPartitionsSessions) {
  v1::GetPodInfoResponse info;
  info.mutable_pod()->set_name("POD16");
  info.mutable_pod()->set_num_ipus(16);
  info.mutable_pod()->mutable_ipu()->set_name("GC200");
  info.add_ipus()->set_state(v1::IPU_STATE_IDLE);
  *info.add_partitions() = MakePartition();
  *info.add_sessions() = MakeSession();
  Json doc = PodInfoJson(info);
  EXPECT_EQ(Keys(doc), (std::vector<std::string>{"pod", "ipus", "partitions", "sessions"}));
  EXPECT_EQ(doc["pod"]["name"], "POD16");
  EXPECT_EQ(doc["pod"]["num_ipus"], 16);
  EXPECT_EQ(doc["pod"]["ipu"]["name"], "GC200");
  EXPECT_EQ(doc["ipus"][0]["state"], "idle");
  EXPECT_EQ(doc["partitions"][0]["name"], "p1");
  EXPECT_EQ(doc["sessions"][0]["session"], "s1-2");
  EXPECT_TRUE(PodInfoJson(v1::GetPodInfoResponse())["partitions"].is_array());
}

TEST(JsonTest, GrantCarriesSessionIpusDeviceAndExtras) {
  Json doc = SessionJson(MakeSession());
  EXPECT_EQ(doc["session"], "s1-2");
  EXPECT_EQ(doc["ipus"], Json::array({4, 5, 6, 7}));
  EXPECT_EQ(doc["device_id"], 25);
  EXPECT_EQ(doc["idle_ipus"], Json::array({7}));
  EXPECT_EQ(doc["partition"], "");
  EXPECT_EQ(doc["needs_load"], false);
}

TEST(JsonTest, QueueAndQueuedShapes) {
  v1::QueuePosition q;
  q.set_ticket("t-7");
  q.set_position(2);
  q.set_queue_length(3);
  q.add_blocking_sessions("s1-1");
  EXPECT_EQ(JsonLine(QueuedJson(q)), R"({"queued":{"ticket":"t-7","position":2,"queue_length":3,)"
                                     R"("blocking_sessions":["s1-1"]}})"
                                     "\n");
  v1::ListQueueResponse queue;
  v1::QueueEntry* e = queue.add_entries();
  e->set_position(1);
  e->set_user("bob");
  e->set_num_ipus(8);
  Json doc = QueueJson(queue);
  EXPECT_EQ(doc["entries"][0]["user"], "bob");
  EXPECT_EQ(doc["entries"][0]["num_ipus"], 8);
  EXPECT_TRUE(QueueJson(v1::ListQueueResponse())["entries"].is_array());
}

TEST(JsonTest, ErrorDocumentCarriesCodeMessageKindAndAction) {
  absl::Status device = RecoverableError(RecoveryAction::kIpuReset, {4, 5}, "IPU 4 faulted");
  EXPECT_EQ(JsonLine(ErrorJson(device)),
            R"({"error":{"code":"ABORTED","message":"IPU 4 faulted","kind":"recoverable",)"
            R"("recovery_action":"IPU_RESET","ipus":[4,5]}})"
            "\n");
  Json plain = ErrorJson(absl::NotFoundError("no partition 'x'"));
  EXPECT_EQ(Keys(plain["error"]), (std::vector<std::string>{"code", "message"}));
  EXPECT_EQ(plain["error"]["code"], "NOT_FOUND");
  Json lost = ErrorJson(UnrecoverableError({9}, "IPU 9 failed"));
  EXPECT_EQ(lost["error"]["code"], "DATA_LOSS");
  EXPECT_EQ(lost["error"]["kind"], "unrecoverable");
  EXPECT_FALSE(lost["error"].contains("recovery_action"));
  EXPECT_EQ(UsageErrorJson("bad")["error"]["usage"], true);
}

TEST(JsonTest, InvalidUtf8IsReplacedNotThrown) {
  Json doc = {{"name", std::string("bad\xff")}};
  EXPECT_NO_THROW(JsonLine(doc));
  EXPECT_THAT(JsonLine(doc), HasSubstr("bad"));
}

TEST(TextTest, GrantLineNamesSessionIpusDeviceAndAutoRoundExtras) {
  v1::SessionInfo s = MakeSession();
  EXPECT_EQ(GrantText(s),
            "attached session s1-2: IPUs 4-7 (device 25); requested 3, --auto-round reserved "
            "IPU 7 extra (left idle)\n");
  s.clear_idle_ipus();
  s.set_partition("p1");
  EXPECT_EQ(GrantText(s), "attached session s1-2: IPUs 4-7 (device 25) in partition p1\n");
}

TEST(TextTest, QueuedLineShowsPositionAndHolders) {
  v1::QueuePosition q;
  q.set_ticket("t-7");
  q.set_position(1);
  q.set_queue_length(2);
  q.add_blocking_sessions("s1-1");
  EXPECT_EQ(QueuedText(q),
            "waiting in the queue: position 1 of 2 (ticket t-7); IPUs held by s1-1\n");
}

TEST(TextTest, PodInfoTableHasAnAlignedRowPerIpu) {
  v1::GetPodInfoResponse info;
  info.mutable_pod()->set_name("POD16");
  info.mutable_pod()->set_num_ipus(2);
  v1::Ipu* a = info.add_ipus();
  a->set_id(0);
  a->set_state(v1::IPU_STATE_ERROR);
  a->set_recovery_action(v1::RECOVERY_ACTION_IPU_RESET);
  a->set_session("s1-2");
  a->set_owner("alice");
  a->set_memory_total_bytes(900000000);
  v1::Ipu* b = info.add_ipus();
  b->set_id(10);
  b->set_state(v1::IPU_STATE_FAILED);
  b->set_failure_reason("injected unrecoverable fault");
  std::string text = PodInfoText(info, absl::FromUnixMillis(1700000000000));
  EXPECT_THAT(text, HasSubstr("pod POD16: 2 IPUs"));
  EXPECT_THAT(text, HasSubstr("IPU  STATE   RECOVERY   PARTITION  SESSION  OWNER  MEMORY\n"
                              "  0  error   IPU_RESET  -          s1-2     alice  0 B / 900 MB\n"
                              " 10  failed  repair     -          -        -      0 B / 0 B\n"));
  EXPECT_THAT(text, HasSubstr("IPU 10 failed: injected unrecoverable fault"));
  EXPECT_THAT(text, HasSubstr("no partitions"));
  EXPECT_THAT(text, HasSubstr("no sessions"));
}

TEST(TextTest, SessionsAndQueueTables) {
  google::protobuf::RepeatedPtrField<v1::SessionInfo> sessions;
  *sessions.Add() = MakeSession();
  std::string text = SessionsText(sessions, absl::FromUnixMillis(1700000000000 + 184000));
  EXPECT_THAT(text, HasSubstr("SESSION  USER   IPUS  DEVICE  PARTITION    AGE  CLIENT\n"));
  EXPECT_THAT(text, HasSubstr("s1-2     alice  4-7       25  -          3m04s  host pid 1: hold"));

  v1::ListQueueResponse queue;
  EXPECT_EQ(QueueText(queue), "the queue is empty\n");
  v1::QueueEntry* e = queue.add_entries();
  e->set_position(1);
  e->set_ticket("t-1");
  e->set_user("bob");
  e->set_num_ipus(8);
  e->set_waited_seconds(12);
  e->set_account("speech");
  e->set_qos("normal");
  e->set_priority(11050.4);
  e->set_reason("Resources");
  EXPECT_EQ(QueueText(queue),
            "POS  TICKET  USER  ACCOUNT  QOS     IPUS  PARTITION  PRIORITY  REASON     WAITED  "
            "TIMEOUT  CLIENT\n"
            "  1  t-1     bob   speech   normal     8  -             11050  Resources     12s  "
            "   none  -\n");
}

TEST(ErrorTextTest, DeviceErrorsNameKindActionAndTheCommandToRun) {
  absl::Status ipu = RecoverableError(RecoveryAction::kIpuReset, {4}, "IPU 4 faulted");
  EXPECT_EQ(ErrorText(ipu, {}),
            "error: IPU 4 faulted\n"
            "kind: recoverable, recovery action: IPU_RESET\n"
            "ipus: 4\n"
            "hint: run `ipupod ipu reset 4`, then load again\n");
  EXPECT_THAT(ErrorText(ipu, {.session = "s1-2"}), HasSubstr("`ipupod session reset s1-2`"));

  absl::Status partition =
      RecoverableError(RecoveryAction::kPartitionReset, {4, 5, 6, 7}, "links down");
  EXPECT_THAT(ErrorText(partition, {.partition = "p1"}),
              HasSubstr("hint: run `ipupod partition reset p1`"));
  EXPECT_THAT(ErrorText(partition, {}), HasSubstr("holding IPUs 4-7"));

  EXPECT_THAT(ErrorText(RecoverableError(RecoveryAction::kFullReset, {}, "x"), {}),
              HasSubstr("`ipupod pod reset`"));
  std::string lost = ErrorText(UnrecoverableError({9}, "IPU 9 failed"), {});
  EXPECT_THAT(lost, HasSubstr("kind: unrecoverable\n"));
  EXPECT_THAT(lost, HasSubstr("`ipupod ipu repair 9`"));
}

TEST(ErrorTextTest, PlainErrorsHaveNoKindLine) {
  std::string text = ErrorText(absl::NotFoundError("no session s9-9"), {});
  EXPECT_EQ(text, "error: no session s9-9\n");
  EXPECT_EQ(ErrorText(AsApplicationError(absl::AlreadyExistsError("taken")), {}), "error: taken\n");
  EXPECT_THAT(ErrorText(absl::ResourceExhaustedError("busy"), {.attach_without_wait = true}),
              HasSubstr("add --wait"));
  EXPECT_THAT(ErrorText(absl::UnauthenticatedError("no token"), {}), HasSubstr("--token"));
  // A failed TLS handshake is not about tokens: its message says its own fix.
  EXPECT_EQ(ErrorText(absl::UnauthenticatedError("TLS handshake with h:1 failed: x"), {}),
            "error: TLS handshake with h:1 failed: x\n");
  EXPECT_THAT(ErrorText(absl::ResourceExhaustedError("busy"), {}), Not(HasSubstr("hint")));
}

}  // namespace
}  // namespace ipupod::cli
