// BackgroundLedger over a recording fake: records reach the target in the
// order they were given, reads wait for what was queued before them, Stop
// writes everything, a full queue makes writers wait and then refuse, and a
// failed write is reported.
#include "scheduler/accounting/background_ledger.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/sync.h"
#include "tests/support/eventually.h"

namespace ipupod::accounting {
namespace {

using test_support::Eventually;

UsageRecord Named(const std::string& id) {
  UsageRecord record;
  record.id = id;
  return record;
}

// Records "open:ID" / "close:ID:STATE"; can be held (writes block until released).
class RecordingLedger final : public Ledger {
 public:
  absl::Status Open(const UsageRecord& record) override { return Record("open:" + record.id); }
  absl::Status Close(absl::string_view id, int64_t, double, absl::string_view state) override {
    return Record("close:" + std::string(id) + ":" + std::string(state));
  }
  absl::Status Put(const UsageRecord& record) override { return Record("put:" + record.id); }
  absl::StatusOr<std::vector<UsageRecord>> Query(const LedgerQuery&) override {
    std::vector<UsageRecord> out;
    sync::MutexLock lock(&mu_);
    for (const std::string& op : ops_) out.push_back(Named(op));
    return out;
  }
  absl::StatusOr<int> CloseOpenRecords(int64_t) override { return 0; }
  // Each batch's size, then Ledger's one write per record.
  std::vector<absl::Status> OpenAll(const std::vector<UsageRecord>& records) override {
    NoteBatch("opens", records.size());
    return Ledger::OpenAll(records);
  }
  std::vector<absl::Status> CloseAll(const std::vector<RecordEnd>& ends) override {
    NoteBatch("closes", ends.size());
    return Ledger::CloseAll(ends);
  }

  std::vector<std::string> batches() {
    sync::MutexLock lock(&mu_);
    return batches_;
  }
  std::vector<std::string> ops() {
    sync::MutexLock lock(&mu_);
    return ops_;
  }
  void Hold() { release_ = std::make_unique<absl::Notification>(); }
  void Release() { sync::Notify(release_.get()); }
  void FailNext() { fail_next_ = true; }
  // Opens fail with `error`; a close of a record never opened is NOT_FOUND,
  // as the store answers.
  void FailOpens(absl::Status error) {
    sync::MutexLock lock(&mu_);
    fail_opens_ = std::move(error);
  }
  // Every write fails with `error` until it is OK again (a full disk).
  void FailAll(absl::Status error) {
    sync::MutexLock lock(&mu_);
    fail_all_ = std::move(error);
  }
  int entered() const { return entered_.load(); }

 private:
  absl::Status Record(std::string op) {
    ++entered_;
    if (release_ != nullptr)
      sync::WaitForNotificationWithTimeout(release_.get(), absl::Seconds(30));
    if (fail_next_.exchange(false)) return absl::InternalError("disk full");
    sync::MutexLock lock(&mu_);
    if (!fail_all_.ok()) return fail_all_;
    if (!fail_opens_.ok() && op.rfind("open:", 0) == 0) return fail_opens_;
    if (!fail_opens_.ok() && op.rfind("close:", 0) == 0 &&
        std::find(ops_.begin(), ops_.end(), "open:" + op.substr(6, op.rfind(':') - 6)) ==
            ops_.end()) {
      return absl::NotFoundError("no such record");
    }
    ops_.push_back(std::move(op));
    return absl::OkStatus();
  }
  void NoteBatch(const char* what, size_t n) {
    sync::MutexLock lock(&mu_);
    batches_.push_back(std::string(what) + ":" + std::to_string(n));
  }
  absl::Mutex mu_;
  std::vector<std::string> ops_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> batches_ ABSL_GUARDED_BY(mu_);
  absl::Status fail_all_ ABSL_GUARDED_BY(mu_);
  absl::Status fail_opens_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<absl::Notification> release_;  // set before the writer can see it
  std::atomic<bool> fail_next_{false};
  std::atomic<int> entered_{0};  // writes begun
};

UsageRecord Record(const std::string& id) { return Named(id); }

// The order the ledger promises: `ids` opened and then closed in this order
// reach the target with the opens in order, the closes in order, and each
// record's close after its open (a batch writes its opens, then its closes).
void ExpectWrittenInOrder(const std::vector<std::string>& ops,
                          const std::vector<std::string>& ids) {
  std::map<std::string, size_t> at;
  for (size_t i = 0; i < ops.size(); ++i) at[ops[i]] = i;
  size_t last_open = 0, last_close = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    const auto open = at.find("open:" + ids[k]);
    const auto close = at.find("close:" + ids[k] + ":RELEASED");
    ASSERT_TRUE(open != at.end() && close != at.end()) << ids[k] << " not written";
    EXPECT_LT(open->second, close->second) << ids[k] << " closed before it was opened";
    if (k > 0) {
      EXPECT_GT(open->second, last_open) << ids[k] << " opened out of order";
      EXPECT_GT(close->second, last_close) << ids[k] << " closed out of order";
    }
    last_open = open->second;
    last_close = close->second;
  }
}

TEST(BackgroundLedgerTest, WritesInOrderAndReadsAfterWhatWasQueued) {
  RecordingLedger target;
  BackgroundLedger ledger(&target, {});
  std::vector<std::string> ids;
  for (int i = 0; i < 200; ++i) {
    ids.push_back("s1-" + std::to_string(i));
    ASSERT_TRUE(ledger.Open(Record(ids.back())).ok());
    ASSERT_TRUE(ledger.Close(ids.back(), 1, 2.0, "RELEASED").ok());
  }
  auto read = ledger.Query({});
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 400u) << "the query came after every record was written";
  std::vector<std::string> ops;
  for (const UsageRecord& r : *read) ops.push_back(r.id);
  ExpectWrittenInOrder(ops, ids);
}

TEST(BackgroundLedgerTest, OpenAndCloseDoNotWaitForTheWrite) {
  RecordingLedger target;
  target.Hold();  // every write blocks until released
  BackgroundLedger ledger(&target, {});
  ASSERT_TRUE(ledger.Open(Record("s1-1")).ok());
  ASSERT_TRUE(ledger.Close("s1-1", 1, 1.0, "RELEASED").ok());
  EXPECT_TRUE(target.ops().empty()) << "answered before written";
  target.Release();
  ASSERT_TRUE(ledger.Drain().ok());
  EXPECT_EQ(target.ops(), (std::vector<std::string>{"open:s1-1", "close:s1-1:RELEASED"}));
}

TEST(BackgroundLedgerTest, WhatQueuedDuringAWriteIsWrittenInOneWritePerKind) {
  RecordingLedger target;
  target.Hold();
  BackgroundLedger ledger(&target, {});
  ASSERT_TRUE(ledger.Open(Record("s1")).ok());
  ASSERT_TRUE(Eventually([&] { return target.entered() == 1; })) << "the writer took s1";
  // Alternating, as sequential attach + detach pairs make them.
  for (const char* id : {"s2", "s3"}) {
    ASSERT_TRUE(ledger.Open(Record(id)).ok());
    ASSERT_TRUE(ledger.Close(id, 1, 1.0, "RELEASED").ok());
  }
  ASSERT_TRUE(ledger.Open(Record("s4")).ok());
  target.Release();
  ASSERT_TRUE(ledger.Drain().ok());
  EXPECT_EQ(target.batches(), (std::vector<std::string>{"opens:1", "opens:3", "closes:2"}));
  EXPECT_EQ(target.ops(), (std::vector<std::string>{"open:s1", "open:s2", "open:s3", "open:s4",
                                                    "close:s2:RELEASED", "close:s3:RELEASED"}));
}

TEST(BackgroundLedgerTest, StopWritesWhatIsQueuedThenWritesDirectly) {
  RecordingLedger target;
  auto ledger = std::make_unique<BackgroundLedger>(&target, BackgroundLedgerOptions{});
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(ledger->Open(Record(std::to_string(i))).ok());
  ledger->Stop();
  EXPECT_EQ(target.ops().size(), 50u);
  ASSERT_TRUE(ledger->Close("0", 1, 1.0, "SHUTDOWN").ok());
  EXPECT_EQ(target.ops().back(), "close:0:SHUTDOWN") << "after Stop, written at once";
  ledger.reset();
  EXPECT_EQ(target.ops().size(), 51u);
}

TEST(BackgroundLedgerTest, AFullQueueWaitsThenRefusesAndAStuckWriterFailsReads) {
  RecordingLedger target;
  target.Hold();
  BackgroundLedgerOptions options;
  options.queue_max = 2;
  options.wait = absl::Milliseconds(100);
  BackgroundLedger ledger(&target, options);
  ASSERT_TRUE(ledger.Open(Record("a")).ok());
  ASSERT_TRUE(Eventually([&] { return target.entered() == 1; }));  // the writer holds a
  ASSERT_TRUE(ledger.Open(Record("b")).ok());
  ASSERT_TRUE(ledger.Open(Record("c")).ok());  // the queue holds b and c
  absl::Status full = ledger.Open(Record("d"));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_NE(full.message().find("record d was not written"), std::string::npos) << full;
  EXPECT_EQ(ledger.Query({}).status().code(), absl::StatusCode::kUnavailable);
  target.Release();
  ASSERT_TRUE(ledger.Drain().ok());
  EXPECT_EQ(target.ops(), (std::vector<std::string>{"open:a", "open:b", "open:c"}));
}

TEST(BackgroundLedgerTest, AFailedWriteIsReportedAndTheRestGoOn) {
  RecordingLedger target;
  absl::Mutex mu;
  std::vector<std::string> failed;
  BackgroundLedgerOptions options;
  options.on_error = [&](const std::string& id, const absl::Status& e) {
    sync::MutexLock lock(&mu);
    failed.push_back(id + ": " + std::string(e.message()));
  };
  BackgroundLedger ledger(&target, options);
  target.FailNext();
  ASSERT_TRUE(ledger.Open(Record("lost")).ok());
  ASSERT_TRUE(ledger.Open(Record("kept")).ok());
  ASSERT_TRUE(ledger.Drain().ok());
  EXPECT_EQ(target.ops(), std::vector<std::string>{"open:kept"});
  sync::MutexLock lock(&mu);
  EXPECT_EQ(failed, std::vector<std::string>{"lost: disk full"});
}

// Issue 29: sessions that ended while the disk was full left no record,
// even after space returned. Their writes are held and written, in order,
// once the store accepts writes again; beyond retry_max the oldest held is
// dropped, counted and reported.
TEST(BackgroundLedgerTest, WritesRefusedByAFullStoreAreWrittenOnceItAcceptsThem) {
  RecordingLedger target;
  ASSERT_TRUE(target.Open(Record("s1")).ok());  // opened before the disk filled
  absl::Mutex mu;
  std::vector<std::string> errors;
  BackgroundLedgerOptions options;
  options.retry_interval = absl::Milliseconds(50);
  options.retry_max = 3;
  options.on_error = [&](const std::string& id, const absl::Status& e) {
    sync::MutexLock lock(&mu);
    errors.push_back(id + ": " + std::string(e.message()));
  };
  BackgroundLedger ledger(&target, options);
  target.FailAll(absl::ResourceExhaustedError("database or disk is full"));
  ASSERT_TRUE(ledger.Close("s1", 1, 1.0, "RELEASED").ok());
  ASSERT_TRUE(ledger.Drain().ok());
  ASSERT_TRUE(ledger.Open(Record("s2")).ok());
  ASSERT_TRUE(ledger.Drain().ok());
  ASSERT_TRUE(ledger.Close("s2", 2, 1.0, "RELEASED").ok());
  ASSERT_TRUE(ledger.Drain().ok());
  EXPECT_TRUE(Eventually([&] { return ledger.counts().held == 3; }, absl::Seconds(10)));
  ASSERT_TRUE(ledger.Open(Record("s3")).ok());  // one more than retry_max: s1's close goes
  EXPECT_TRUE(Eventually([&] { return ledger.counts().dropped == 1; }, absl::Seconds(10)));
  {
    sync::MutexLock lock(&mu);
    ASSERT_EQ(errors.size(), 5u);  // each failure once (not at every retry), and the drop
    EXPECT_EQ(errors[0],
              "s1: database or disk is full; held in memory and written again when the store "
              "accepts writes");
    EXPECT_THAT(errors[4], ::testing::StartsWith("s1: dropped: 3 failed usage writes are held"));
  }
  target.FailAll(absl::OkStatus());  // space again
  EXPECT_TRUE(Eventually([&] { return ledger.counts().held == 0; }, absl::Seconds(10)));
  EXPECT_EQ(target.ops(),
            (std::vector<std::string>{"open:s1", "open:s2", "open:s3", "close:s2:RELEASED"}));
  EXPECT_EQ(ledger.counts().retried, 3u);
}

// A close whose open is held waits with it; what still fails at Stop is
// reported dropped, not kept forever.
TEST(BackgroundLedgerTest, AHeldOpensCloseWaitsWithItAndStopDropsWhatStillFails) {
  RecordingLedger target;
  absl::Mutex mu;
  std::vector<std::string> errors;
  BackgroundLedgerOptions options;
  options.retry_interval = absl::Milliseconds(50);
  options.on_error = [&](const std::string& id, const absl::Status& e) {
    sync::MutexLock lock(&mu);
    errors.push_back(id + ": " + std::string(e.message()));
  };
  {
    BackgroundLedger ledger(&target, options);
    target.FailOpens(absl::UnavailableError("injected"));
    ASSERT_TRUE(ledger.Open(Record("s1")).ok());
    ASSERT_TRUE(ledger.Close("s1", 1, 1.0, "RELEASED").ok());
    ASSERT_TRUE(ledger.Drain().ok());
    EXPECT_TRUE(Eventually([&] { return ledger.counts().held == 2; }, absl::Seconds(10)));
  }
  sync::MutexLock lock(&mu);
  ASSERT_EQ(errors.size(), 4u);
  EXPECT_THAT(errors[1], ::testing::StartsWith("s1: no such record; held in memory"));
  EXPECT_THAT(errors[2], ::testing::StartsWith("s1: dropped at the stop"));
  EXPECT_TRUE(target.ops().empty());
}

TEST(BackgroundLedgerTest, ConcurrentWritersKeepEachOnesOrder) {
  RecordingLedger target;
  BackgroundLedger ledger(&target, {});
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&ledger, w] {
      for (int i = 0; i < 100; ++i) {
        const std::string id = std::to_string(w) + "-" + std::to_string(i);
        EXPECT_TRUE(ledger.Open(Record(id)).ok());
        EXPECT_TRUE(ledger.Close(id, 1, 1.0, "RELEASED").ok());
      }
    });
  }
  for (std::thread& t : writers) t.join();
  ASSERT_TRUE(ledger.Drain().ok());
  const std::vector<std::string> ops = target.ops();
  ASSERT_EQ(ops.size(), 800u);
  for (int w = 0; w < 4; ++w) {  // each writer's records in its own order
    std::vector<std::string> ids;
    for (int i = 0; i < 100; ++i) ids.push_back(std::to_string(w) + "-" + std::to_string(i));
    ExpectWrittenInOrder(ops, ids);
  }
}

}  // namespace
}  // namespace ipupod::accounting
