// AccountingUpkeep against a real SQLite store and a fake clock: open
// records end SERVER_RESTART at the last heartbeat before anything else,
// retention purges, the heartbeat thread and the clean stop's heartbeat.
#include "server/accounting_upkeep.h"

#include <atomic>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/audit/audit_log.h"
#include "tests/support/eventually.h"
#include "tests/support/temp_dir.h"

namespace ipupod::server {
namespace {

using accounting::UsageRecord;
using test_support::TempDir;

constexpr int64_t kT0 = 1'800'000'000'000;

UsageRecord Session(const std::string& id, int64_t start_ms) {
  UsageRecord r;
  r.id = id;
  r.user = "alice";
  r.account = "alice";
  r.qos = "normal";
  r.ipus = 2;
  r.submit_unix_ms = start_ms;
  r.start_unix_ms = start_ms;
  return r;
}

class AccountingUpkeepTest : public ::testing::Test {
 protected:
  void OpenStore(std::optional<store::WriteFault> fault = std::nullopt) {
    store_.reset();
    store::StoreOptions options;
    options.fault = fault;
    auto opened = store::SqliteStateStore::Open(dir_.path(), options);
    ASSERT_TRUE(opened.ok()) << opened.status();
    store_ = *std::move(opened);
  }
  AccountingUpkeepOptions Options(absl::Duration heartbeat = absl::Hours(1)) {
    AccountingUpkeepOptions o;
    o.heartbeat = heartbeat;
    o.retention = absl::Hours(24 * 30);
    o.clock = [this] { return absl::FromUnixMillis(now_ms_.load()); };
    return o;
  }
  UsageRecord Find(const std::string& id) {
    absl::StatusOr<std::vector<UsageRecord>> records = store_->Query(accounting::LedgerQuery());
    if (!records.ok()) return UsageRecord();
    for (const UsageRecord& r : *records) {
      if (r.id == id) return r;
    }
    return UsageRecord();
  }

  TempDir dir_;
  std::unique_ptr<store::SqliteStateStore> store_;
  std::atomic<int64_t> now_ms_{kT0};
};

TEST_F(AccountingUpkeepTest, StartEndsOpenRecordsAtTheLastHeartbeatThenBeatsItself) {
  OpenStore();
  ASSERT_TRUE(store_->PutHeartbeat(kT0 + 60'000).ok());  // the previous run's last sign
  ASSERT_TRUE(store_->Open(Session("s1-1", kT0)).ok());
  now_ms_ = kT0 + 600'000;  // the restart, ten minutes later
  auto upkeep = AccountingUpkeep::Start(store_.get(), Options());
  ASSERT_TRUE(upkeep.ok()) << upkeep.status();
  const UsageRecord r = Find("s1-1");
  EXPECT_EQ(r.state, "SERVER_RESTART");
  EXPECT_EQ(r.end_unix_ms, kT0 + 60'000);  // not the restart's time
  EXPECT_DOUBLE_EQ(r.ipu_seconds, 2 * 60.0);
  EXPECT_EQ(*store_->LastHeartbeat(), kT0 + 600'000);
  now_ms_ = kT0 + 700'000;
  (*upkeep)->Stop();  // the clean stop's heartbeat
  EXPECT_EQ(*store_->LastHeartbeat(), kT0 + 700'000);
}

TEST_F(AccountingUpkeepTest, TheThreadWritesAHeartbeatEveryInterval) {
  OpenStore();
  auto upkeep = AccountingUpkeep::Start(store_.get(), Options(absl::Milliseconds(10)));
  ASSERT_TRUE(upkeep.ok()) << upkeep.status();
  now_ms_ = kT0 + 5000;
  EXPECT_TRUE(test_support::Eventually([&] { return *store_->LastHeartbeat() == kT0 + 5000; },
                                       absl::Seconds(10), absl::Milliseconds(5)));
}

TEST_F(AccountingUpkeepTest, StartPurgesRecordsPastRetentionUnlessKeptForever) {
  OpenStore();
  const int64_t day_ms = 24 * 3600 * 1000;
  UsageRecord old = Session("s1-1", kT0 - 40 * day_ms);
  ASSERT_TRUE(store_->Open(old).ok());
  ASSERT_TRUE(store_->Close("s1-1", kT0 - 40 * day_ms + 1000, 2, "RELEASED").ok());
  ASSERT_TRUE(store_->Open(Session("s1-2", kT0 - day_ms)).ok());
  ASSERT_TRUE(store_->Close("s1-2", kT0 - day_ms + 1000, 2, "RELEASED").ok());
  AccountingUpkeepOptions forever = Options();
  forever.retention = absl::ZeroDuration();
  ASSERT_TRUE(AccountingUpkeep::Start(store_.get(), forever).ok());
  EXPECT_EQ(store_->Query(accounting::LedgerQuery())->size(), 2u);
  ASSERT_TRUE(AccountingUpkeep::Start(store_.get(), Options()).ok());  // 30 days
  EXPECT_EQ(store_->Query(accounting::LedgerQuery())->size(), 1u);
  EXPECT_EQ(Find("s1-2").state, "RELEASED");
}

TEST_F(AccountingUpkeepTest, AStoreThatCannotEndOpenRecordsStopsTheStart) {
  OpenStore(store::WriteFault{store::WritePoint::kLedgerCloseOpen, 1, store::FaultAction::kFail});
  ASSERT_TRUE(store_->Open(Session("s1-1", kT0)).ok());
  auto upkeep = AccountingUpkeep::Start(store_.get(), Options());
  ASSERT_FALSE(upkeep.ok());
  EXPECT_EQ(upkeep.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(upkeep.status().message()), ::testing::HasSubstr("left open"));
  EXPECT_EQ(Find("s1-1").state, "RUNNING");  // changed nothing
  EXPECT_EQ(*store_->LastHeartbeat(), 0) << "a server that did not start vouches for nothing";
}

TEST_F(AccountingUpkeepTest, BadOptionsAreRefused) {
  OpenStore();
  AccountingUpkeepOptions o = Options(absl::ZeroDuration());
  EXPECT_EQ(AccountingUpkeep::Start(store_.get(), o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

audit::AuditRecord AuditAt(int64_t time_ms) {
  audit::AuditRecord r;
  r.time_unix_ms = time_ms;
  r.user = "admin";
  r.action = std::string(audit::kPodReset);
  r.code = "OK";
  return r;
}

std::vector<int64_t> AuditSeqs(store::SqliteStateStore& store) {
  std::vector<int64_t> seqs;
  audit::AuditQuery q;
  q.limit = audit::kMaxQueryLimit;
  const absl::StatusOr<audit::AuditPage> page = store.Query(q);
  if (!page.ok()) return {-1};
  for (const audit::AuditRecord& r : page->records) seqs.push_back(r.seq);
  return seqs;
}

TEST_F(AccountingUpkeepTest, AuditRecordsPastRetentionOrTheCapGoAtStartAndEveryHeartbeat) {
  OpenStore();
  const int64_t day_ms = 24 * 3600 * 1000;
  ASSERT_TRUE(store_->Append(AuditAt(kT0 - 40 * day_ms)).ok());  // 1: past 30 days
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(store_->Append(AuditAt(kT0 - day_ms + i)).ok());  // 2-6
  AccountingUpkeepOptions o = Options(absl::Milliseconds(10));
  o.audit_retention = absl::Hours(24 * 30);
  o.audit_max_records = 4;
  auto upkeep = AccountingUpkeep::Start(store_.get(), o);
  ASSERT_TRUE(upkeep.ok()) << upkeep.status();
  EXPECT_EQ(AuditSeqs(*store_), (std::vector<int64_t>{3, 4, 5, 6}))
      << "the old one by retention, then the oldest beyond the cap";
  // Records appended while it runs are held to the cap at the next beat.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store_->Append(AuditAt(kT0 + i)).ok());  // 7-9
  EXPECT_TRUE(test_support::Eventually(
      [&] {
        return AuditSeqs(*store_) == std::vector<int64_t>{6, 7, 8, 9};
      },
      absl::Seconds(10), absl::Milliseconds(5)));
  (*upkeep)->Stop();
  AccountingUpkeepOptions forever = Options();
  forever.audit_retention = absl::ZeroDuration();
  forever.audit_max_records = 0;
  ASSERT_TRUE(AccountingUpkeep::Start(store_.get(), forever).ok());
  EXPECT_EQ(AuditSeqs(*store_).size(), 4u) << "kept forever, no cap";
}

}  // namespace
}  // namespace ipupod::server
