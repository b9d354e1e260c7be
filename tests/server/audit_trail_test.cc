// server/audit_trail.h: a record is stamped, bounded and appended; a failed
// append is logged at error level with the whole record and counted, never
// silently dropped; a reset's record carries its result and comes before
// the answer.
#include "server/audit_trail.h"

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/sqlite_state_store.h"
#include "tests/support/temp_dir.h"

namespace ipupod::server {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kNowMs = 1'800'000'000'000;

class AuditTrailTest : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = spdlog::default_logger();
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
  }
  void TearDown() override { spdlog::set_default_logger(previous_); }
  std::unique_ptr<store::SqliteStateStore> Open(std::optional<store::WriteFault> fault) {
    store::StoreOptions options;
    options.fault = fault;
    auto opened = store::SqliteStateStore::Open(dir_.path(), options);
    EXPECT_TRUE(opened.ok()) << opened.status();
    return opened.ok() ? *std::move(opened) : nullptr;
  }
  std::vector<audit::AuditRecord> All(store::SqliteStateStore& store) {
    return store.Query(audit::AuditQuery())->records;
  }
  static audit::AuditRecord Fault(const std::string& user) {
    audit::AuditRecord r;
    r.user = user;
    r.peer = "ipv4:127.0.0.1:1234";
    r.action = std::string(audit::kFaultInject);
    r.target = "ipu 3";
    r.details = std::string(10000, 'd');
    audit::SetResult(r, absl::OkStatus());
    return r;
  }

  test_support::TempDir dir_;
  std::ostringstream log_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST_F(AuditTrailTest, RecordsAreStampedBoundedAndAppended) {
  auto store = Open(std::nullopt);
  AuditTrail trail(store.get(), [] { return absl::FromUnixMillis(kNowMs); });
  EXPECT_TRUE(trail.Record(Fault("admin")).ok());
  const std::vector<audit::AuditRecord> records = All(*store);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].time_unix_ms, kNowMs);
  EXPECT_EQ(records[0].details.size(), audit::kTextBytesMax);
  EXPECT_EQ(trail.written(), 1u);
  EXPECT_EQ(trail.failed_writes(), 0u);
}

TEST_F(AuditTrailTest, AFailedAppendIsLoggedWithTheRecordAndCounted) {
  auto store =
      Open(store::WriteFault{store::WritePoint::kAuditAppend, 1, store::FaultAction::kFail});
  AuditTrail trail(store.get());
  audit::AuditRecord r = Fault("alice");
  r.details = "kind=unrecoverable";
  const absl::Status status = trail.Record(r);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(trail.failed_writes(), 1u);
  EXPECT_EQ(trail.written(), 0u);
  EXPECT_TRUE(All(*store).empty());
  const std::string log = log_.str();
  EXPECT_THAT(log, HasSubstr("[error]"));
  EXPECT_THAT(log, HasSubstr("audit: the record of fault.inject by alice"));
  EXPECT_THAT(log, HasSubstr("ipv4:127.0.0.1:1234"));
  EXPECT_THAT(log, HasSubstr("kind=unrecoverable"));
  EXPECT_TRUE(trail.Record(Fault("alice")).ok()) << "the next write goes through";
}

// One plain user refusing in a loop (issue 29): the first refusal of each
// (user, action, code) in a window is recorded, the rest counted into one
// summary when the window ends; admins' records and others' refusals are
// written as ever.
TEST_F(AuditTrailTest, RepeatedRefusalsAreSummarisedPerUserActionAndWindow) {
  auto store = Open(std::nullopt);
  absl::Time now = absl::FromUnixMillis(kNowMs);
  AuditTrail trail(
      store.get(), [&now] { return now; }, absl::Seconds(60));
  audit::AuditRecord refused = Fault("mallory");
  audit::SetResult(refused, absl::PermissionDeniedError("only an admin may inject faults"));
  audit::AuditRecord reset = refused;
  reset.action = std::string(audit::kIpuReset);
  for (int i = 0; i < 5000; ++i) {
    now += absl::Milliseconds(1);  // 5 s of refusals
    ASSERT_TRUE(trail.Record(refused).ok());
    if (i % 2 == 0) {
      ASSERT_TRUE(trail.Record(reset).ok());
    }
  }
  ASSERT_TRUE(trail.Record(Fault("admin")).ok());
  audit::AuditRecord other = refused;
  other.user = "bob";
  ASSERT_TRUE(trail.Record(other).ok());
  EXPECT_EQ(All(*store).size(), 4u) << "mallory's two firsts, the admin's, bob's";
  trail.FlushRefusals();
  EXPECT_EQ(All(*store).size(), 4u) << "no window has ended yet";

  now += absl::Seconds(61);
  trail.FlushRefusals();
  const std::vector<audit::AuditRecord> records = All(*store);
  ASSERT_EQ(records.size(), 6u);
  std::map<std::string, std::string> summaries;  // action -> details
  for (size_t i = 4; i < records.size(); ++i) {
    EXPECT_EQ(records[i].user, "mallory");
    EXPECT_EQ(records[i].code, "PERMISSION_DENIED");
    summaries[records[i].action] = records[i].details;
  }
  EXPECT_THAT(summaries["fault.inject"], ::testing::StartsWith("refused=4999 "));
  EXPECT_THAT(summaries["ipu.reset"], ::testing::StartsWith("refused=2499 "));
  EXPECT_EQ(trail.summarised(), 4999u + 2499u);
  // A new window: its first refusal is recorded again; Stop summarises the
  // open windows.
  ASSERT_TRUE(trail.Record(refused).ok());
  ASSERT_TRUE(trail.Record(refused).ok());
  EXPECT_EQ(All(*store).size(), 7u);
  trail.Stop();
  ASSERT_EQ(All(*store).size(), 8u);
  EXPECT_THAT(All(*store).back().details, ::testing::StartsWith("refused=1 "));
}

TEST(AuditListsTest, IpusAsRangesAndSessionsJoined) {
  EXPECT_EQ(IpuList({3, 0, 1, 2, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(IpuList({}), "-");
  EXPECT_EQ(SessionList({"s1-1", "s1-2"}), "s1-1,s1-2");
  EXPECT_EQ(SessionList({}), "-");
  EXPECT_EQ(IpuTarget(4), "ipu 4");
  EXPECT_EQ(NamedTarget("partition", "exp1"), "partition exp1");
}

}  // namespace
}  // namespace ipupod::server
