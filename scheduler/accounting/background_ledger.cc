#include "scheduler/accounting/background_ledger.h"

#include <algorithm>
#include <set>
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

namespace {

// What a full or failing store answers; worth another try later.
bool Retryable(const absl::Status& status) {
  return absl::IsResourceExhausted(status) || absl::IsUnavailable(status);
}

absl::Status Explained(const absl::Status& status, absl::string_view what) {
  return absl::Status(status.code(), absl::StrCat(status.message(), "; ", what));
}

}  // namespace

std::vector<BackgroundLedger::Op> BackgroundLedger::WriteBatch(std::vector<Op> ops) {
  // Opens first, then closes: each kind in one durable write (OpenAll,
  // CloseAll). A close in the batch is of a session opened in it or before
  // it (ids are never reused), so the records end as if written one by one.
  std::vector<size_t> opens, closes;
  std::vector<UsageRecord> records;
  std::vector<RecordEnd> ends;
  for (size_t i = 0; i < ops.size(); ++i) {
    const UsageRecord& r = ops[i].record;
    if (ops[i].open) {
      opens.push_back(i);
      records.push_back(r);
    } else {
      closes.push_back(i);
      ends.push_back({r.id, r.end_unix_ms, r.ipu_seconds, r.state});
    }
  }
  std::vector<bool> hold(ops.size(), false);
  std::set<std::string> held_opens;  // a close of one of these waits with it
  const auto sort = [&](const std::vector<size_t>& done, const std::vector<absl::Status>& written) {
    for (size_t k = 0; k < done.size(); ++k) {
      const absl::Status status =
          k < written.size() ? written[k] : absl::InternalError("the ledger did not say");
      if (status.ok()) continue;
      const Op& op = ops[done[k]];
      hold[done[k]] = Retryable(status) || (!op.open && held_opens.contains(op.record.id));
      if (hold[done[k]] && op.open) held_opens.insert(op.record.id);
      if (!options_.on_error || (hold[done[k]] && op.held)) continue;  // reported when it failed
      options_.on_error(op.record.id, hold[done[k]]
                                          ? Explained(status,
                                                      "held in memory and written again when the "
                                                      "store accepts writes")
                                          : status);
    }
  };
  if (!records.empty()) sort(opens, target_->OpenAll(records));
  if (!ends.empty()) sort(closes, target_->CloseAll(ends));
  std::vector<Op> failed;  // in the order they came, so the oldest is dropped first
  for (size_t i = 0; i < ops.size(); ++i) {
    if (hold[i]) failed.push_back(std::move(ops[i]));
  }
  return failed;
}

void BackgroundLedger::Hold(std::vector<Op> failed, size_t retried, size_t keep) {
  std::vector<Op> dropped;
  size_t held = 0;
  {
    sync::MutexLock lock(&mu_);
    for (Op& op : failed) {
      op.held = true;
      held_.push_back(std::move(op));
    }
    while (held_.size() > keep) {
      dropped.push_back(std::move(held_.front()));
      held_.pop_front();
    }
    counts_.retried += retried;
    counts_.dropped += dropped.size();
    counts_.held = held = held_.size();
  }
  if (!options_.on_error) return;
  for (const Op& op : dropped) {
    options_.on_error(
        op.record.id,
        absl::ResourceExhaustedError(
            keep == 0 ? "dropped at the stop: the store still refuses writes (the next start ends "
                        "a record left open SERVER_RESTART)"
                      : absl::StrCat("dropped: ", held,
                                     " failed usage writes are held already, the most kept; the "
                                     "store has refused writes since (a full disk?)")));
  }
}

void BackgroundLedger::WriterLoop() {
  absl::Time next_retry = absl::InfinitePast();
  while (true) {
    std::vector<Op> batch;
    size_t fresh = 0, was_held = 0;
    bool last = false;
    {
      sync::MutexLock lock(&mu_);
      // Woken by every Enqueue and by Stop; the timeout only bounds the wait.
      while (queue_.empty() && !stopping_ && (held_.empty() || absl::Now() < next_retry)) {
        const absl::Time bound = absl::Now() + absl::Seconds(1);
        sync::WaitWithDeadline(
            &changed_, &mu_,
            held_.empty() ? bound : std::max(std::min(next_retry, bound), absl::Now()));
      }
      if (queue_.empty() && held_.empty()) return;  // stopping, and everything is written
      last = stopping_ && queue_.empty();           // the held ones' last try
      // The held ones first (older), then everything queued while the
      // previous batch was written: one write per run, not one per record.
      was_held = held_.size();
      fresh = queue_.size();
      batch.reserve(was_held + fresh);
      for (Op& op : held_) batch.push_back(std::move(op));
      for (Op& op : queue_) batch.push_back(std::move(op));
      held_.clear();
      queue_.clear();
    }
    std::vector<Op> failed = WriteBatch(std::move(batch));
    size_t still_held = 0;
    for (const Op& op : failed) still_held += op.held ? 1 : 0;
    {
      sync::MutexLock lock(&mu_);
      written_ += fresh;
      changed_.SignalAll();
    }
    // Stopping: what still fails is dropped, and said so.
    Hold(std::move(failed), was_held - still_held, last ? 0 : options_.retry_max);
    next_retry = absl::Now() + options_.retry_interval;
    if (last) return;
  }
}

BackgroundLedgerCounts BackgroundLedger::counts() const {
  sync::MutexLock lock(&mu_);
  return counts_;
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
