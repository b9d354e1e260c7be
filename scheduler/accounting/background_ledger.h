// File: scheduler/accounting/background_ledger.h
//
// BackgroundLedger: a Ledger that writes sessions' records (Open, Close) on
// a thread of its own, in the order they came, so the attach or release
// that made a record does not wait for its durable write (a SQLite commit,
// an fsync: about a millisecond, most of an attach + detach). Everything
// else goes to the target Ledger after the records queued before it are
// written (Drain), so a report read after an acknowledged release sees it.
//
// What it changes: a record is durable a moment after the call that made it
// was answered, not before. A process killed in that moment loses the
// records not yet written: an open never written leaves no record of that
// session; a close never written leaves the record open, which the next
// start ends SERVER_RESTART at the last heartbeat (docs/accounting.md).
//
// Bounds: at most `queue_max` records wait; a writer further behind makes
// Open and Close wait (at most `wait`) for room, then fail
// RESOURCE_EXHAUSTED (the scheduler logs a record it could not write and
// goes on). A write that fails is reported to `on_error` on the writer
// thread; Open and Close themselves then already returned OK.
//
// A full or failing store: a write that fails RESOURCE_EXHAUSTED (SQLite's
// disk full) or UNAVAILABLE (a busy or failing store; the test-only injected
// write fault) is held in memory and written again, before anything queued
// after it, every `retry_interval` and with the next batch, until the store
// accepts it, so a session that ended while the disk was full still gets its
// record once space returns. At most `retry_max` are held: one more drops
// the oldest held (reported to on_error, saying so, and counted in
// counts().dropped). Other errors (a close of a record never opened) are
// reported and not retried; a close whose open is held is held with it. A
// kill -9 loses what is held as it loses what is queued (the next start ends
// open records SERVER_RESTART); Stop tries the held ones once more and
// reports those still refused as dropped.
//
// The writer takes every record queued while it wrote the previous ones and
// writes their opens, then their closes, as one transaction each (OpenAll,
// CloseAll): two commits for a burst, not one per record.
//
// Thread safety: every method may be called from any thread; records are
// written in the order their Open/Close calls returned (within a batch, its
// opens before its closes, which ends every record as the calls would). Ownership: the
// target must outlive this object. The destructor (or Stop) writes what is
// queued, then joins the writer.
#ifndef IPUPOD_ACCOUNTING_BACKGROUND_LEDGER_H_
#define IPUPOD_ACCOUNTING_BACKGROUND_LEDGER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/accounting/ledger.h"

namespace ipupod::accounting {

struct BackgroundLedgerOptions {
  size_t queue_max = 65536;                 // records waiting to be written
  absl::Duration wait = absl::Seconds(10);  // for room in the queue, or for a Drain
  // A write that failed: the record's id and the error (called on the writer
  // thread); the message says whether it is held for another try or dropped.
  std::function<void(const std::string& id, const absl::Status& error)> on_error;
  size_t retry_max = 10000;                          // failed writes held for another try
  absl::Duration retry_interval = absl::Seconds(5);  // how often they are tried again
};

struct BackgroundLedgerCounts {
  uint64_t held = 0;     // failed writes held now for another try
  uint64_t retried = 0;  // held writes that a later try wrote
  uint64_t dropped = 0;  // held writes given up (retry_max, or still refused at Stop)
};

class BackgroundLedger final : public Ledger {
 public:
  BackgroundLedger(Ledger* target, BackgroundLedgerOptions options);
  ~BackgroundLedger() override;
  BackgroundLedger(const BackgroundLedger&) = delete;
  BackgroundLedger& operator=(const BackgroundLedger&) = delete;

  // Queued; OK once queued (see the file comment).
  absl::Status Open(const UsageRecord& record) override;
  absl::Status Close(absl::string_view id, int64_t end_unix_ms, double ipu_seconds,
                     absl::string_view state) override;
  // Drain, then the target's.
  absl::Status Put(const UsageRecord& record) override;
  absl::StatusOr<std::vector<UsageRecord>> Query(const LedgerQuery& query) override;
  absl::Status Scan(const LedgerQuery& query,
                    const std::function<bool(const UsageRecord&)>& visit) override;
  absl::StatusOr<int> CloseOpenRecords(int64_t end_unix_ms) override;

  // Waits until every record queued before the call is written; UNAVAILABLE
  // after options.wait (the writer is stuck on its store).
  absl::Status Drain();
  // Writes what is queued and stops the writer; later Open/Close write
  // synchronously. Idempotent.
  void Stop();
  BackgroundLedgerCounts counts() const;

 private:
  struct Op {
    bool open = false;
    bool held = false;   // failed once, held for another try
    UsageRecord record;  // a close: id, end_unix_ms, ipu_seconds, state
  };
  absl::Status Enqueue(Op op);
  // Writes `ops` (held ones first); returns those to hold for another try.
  std::vector<Op> WriteBatch(std::vector<Op> ops);
  // Holds `failed` (after what is held), dropping the oldest beyond `keep`;
  // `retried` held ones were written.
  void Hold(std::vector<Op> failed, size_t retried, size_t keep) ABSL_LOCKS_EXCLUDED(mu_);
  void WriterLoop();

  Ledger* const target_;
  const BackgroundLedgerOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // queued, written, or stopping
  std::deque<Op> queue_ ABSL_GUARDED_BY(mu_);
  std::deque<Op> held_ ABSL_GUARDED_BY(mu_);  // failed writes, oldest first
  BackgroundLedgerCounts counts_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;   // ever queued
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;  // ever written (or failed)
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread writer_;  // started last in the constructor
};

}  // namespace ipupod::accounting

#endif  // IPUPOD_ACCOUNTING_BACKGROUND_LEDGER_H_
