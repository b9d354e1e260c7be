#include "accounting/background_ledger.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/sync.h"

namespace ipupod::accounting {

BackgroundLedger::BackgroundLedger(Ledger* target, BackgroundLedgerOptions options)
    : target_(target), options_(std::move(options)) {
  writer_ = std::thread([this] { WriterLoop(); });
}

BackgroundLedger::~BackgroundLedger() { Stop(); }

void BackgroundLedger::Stop() {
  {
    sync::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  if (writer_.joinable()) writer_.join();  // it writes what is queued first
}

absl::Status BackgroundLedger::Open(const UsageRecord& record) {
  Op op;
  op.open = true;
  op.record = record;
  return Enqueue(std::move(op));
}

absl::Status BackgroundLedger::Close(absl::string_view id, int64_t end_unix_ms, double ipu_seconds,
                                     absl::string_view state) {
  Op op;
  op.record.id = std::string(id);
  op.record.end_unix_ms = end_unix_ms;
  op.record.ipu_seconds = ipu_seconds;
  op.record.state = std::string(state);
  return Enqueue(std::move(op));
}

absl::Status BackgroundLedger::Enqueue(Op op) {
  {
    sync::MutexLock lock(&mu_);
    const absl::Time deadline = absl::Now() + options_.wait;
    while (!stopping_ && queue_.size() >= options_.queue_max) {
      if (sync::WaitWithDeadline(&changed_, &mu_, deadline) &&
          queue_.size() >= options_.queue_max) {
        return absl::ResourceExhaustedError(absl::StrCat("the usage ledger's writer is ",
                                                         queue_.size(), " records behind; record ",
                                                         op.record.id, " was not written"));
      }
    }
    if (!stopping_) {
      queue_.push_back(std::move(op));
      ++queued_;
      changed_.SignalAll();
      return absl::OkStatus();
    }
  }
  // Stopped: the writer is gone (or going, after what was queued), so in order.
  absl::Status drained = Drain();
  if (!drained.ok()) return drained;
  return op.open ? target_->Open(op.record)
                 : target_->Close(op.record.id, op.record.end_unix_ms, op.record.ipu_seconds,
                                  op.record.state);
}

void BackgroundLedger::WriteBatch(const std::vector<Op>& ops) {
  // Opens first, then closes: each kind in one durable write (OpenAll,
  // CloseAll). A close in the batch is of a session opened in it or before
  // it (ids are never reused), so the records end as if written one by one.
  std::vector<const Op*> opens, closes;
  std::vector<UsageRecord> records;
  std::vector<RecordEnd> ends;
  for (const Op& op : ops) {
    if (op.open) {
      opens.push_back(&op);
      records.push_back(op.record);
    } else {
      closes.push_back(&op);
      const UsageRecord& r = op.record;
      ends.push_back({r.id, r.end_unix_ms, r.ipu_seconds, r.state});
    }
  }
  const auto report = [this](const std::vector<const Op*>& done,
                             const std::vector<absl::Status>& written) {
    if (!options_.on_error) return;
    for (size_t i = 0; i < done.size(); ++i) {
      const absl::Status status =
          i < written.size() ? written[i] : absl::InternalError("the ledger did not say");
      if (!status.ok()) options_.on_error(done[i]->record.id, status);
    }
  };
  if (!records.empty()) report(opens, target_->OpenAll(records));
  if (!ends.empty()) report(closes, target_->CloseAll(ends));
}

void BackgroundLedger::WriterLoop() {
  while (true) {
    std::vector<Op> batch;
    {
      sync::MutexLock lock(&mu_);
      // Woken by every Enqueue and by Stop; the timeout only bounds the wait.
      while (queue_.empty() && !stopping_) sync::WaitWithTimeout(&changed_, &mu_, absl::Seconds(1));
      if (queue_.empty()) return;  // stopping, and everything is written
      // Everything queued while the previous batch was written: one write
      // per run, not one per record (at most queue_max records).
      batch.reserve(queue_.size());
      for (Op& op : queue_) batch.push_back(std::move(op));
      queue_.clear();
    }
    WriteBatch(batch);
    sync::MutexLock lock(&mu_);
    written_ += batch.size();
    changed_.SignalAll();
  }
}

absl::Status BackgroundLedger::Drain() {
  sync::MutexLock lock(&mu_);
  const uint64_t target = queued_;
  const absl::Time deadline = absl::Now() + options_.wait;
  while (written_ < target) {
    if (sync::WaitWithDeadline(&changed_, &mu_, deadline) && written_ < target) {
      return absl::UnavailableError(absl::StrCat("the usage ledger's writer is ", target - written_,
                                                 " records behind and did not catch up in ",
                                                 absl::FormatDuration(options_.wait), "; retry"));
    }
  }
  return absl::OkStatus();
}

absl::Status BackgroundLedger::Put(const UsageRecord& record) {
  if (absl::Status drained = Drain(); !drained.ok()) return drained;
  return target_->Put(record);
}

absl::StatusOr<std::vector<UsageRecord>> BackgroundLedger::Query(const LedgerQuery& query) {
  if (absl::Status drained = Drain(); !drained.ok()) return drained;
  return target_->Query(query);
}

absl::Status BackgroundLedger::Scan(const LedgerQuery& query,
                                    const std::function<bool(const UsageRecord&)>& visit) {
  if (absl::Status drained = Drain(); !drained.ok()) return drained;
  return target_->Scan(query, visit);
}

absl::StatusOr<int> BackgroundLedger::CloseOpenRecords(int64_t end_unix_ms) {
  if (absl::Status drained = Drain(); !drained.ok()) return drained;
  return target_->CloseOpenRecords(end_unix_ms);
}

}  // namespace ipupod::accounting
