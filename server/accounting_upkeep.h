// File: server/accounting_upkeep.h
//
// AccountingUpkeep: what keeps the usage ledger (scheduler/accounting/ledger.h, kept
// in the state store) true across restarts and bounded in size.
//
// Start, before the Scheduler is created (it rebuilds fair-share usage from
// the ledger):
//   1. every record still open (a session the previous server never saw
//      end: it was killed, or crashed) is ended SERVER_RESTART at the last
//      moment that server was known alive, its last heartbeat (a session
//      opened after it ends at its own start, counting nothing);
//   2. records that ended more than `retention` ago are purged (bounded);
//   3. a heartbeat is written.
// Then a thread writes a heartbeat every `heartbeat` and purges once a day
// (sooner while a purge pass stopped at its bound). Stop() writes a last
// heartbeat (the clean stop) and joins the thread.
//
// The same thread keeps the audit log (scheduler/audit/audit_log.h) within its
// retention and its cap: at Start and after every heartbeat it deletes,
// oldest first and in bounded batches, the records older than
// `audit_retention` and those beyond the newest `audit_max_records`
// (plain users' refusals first: server/store/sqlite_audit.h). Every
// heartbeat rather than daily, because refused requests in a loop can add
// records quickly: the table holds at most the cap plus what one interval
// appends.
//
// Errors: Start returns the store's error when the open records cannot be
// ended (the server does not start: its usage would be wrong); a failed
// heartbeat or purge is logged and retried at the next tick.
//
// Thread safety: Stop() is safe from any thread and idempotent; the store
// must outlive the upkeep.
#ifndef IPUPOD_SERVER_ACCOUNTING_UPKEEP_H_
#define IPUPOD_SERVER_ACCOUNTING_UPKEEP_H_

#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/store/sqlite_state_store.h"

namespace ipupod::server {

struct AccountingUpkeepOptions {
  absl::Duration heartbeat = absl::Seconds(60);            // > 0
  absl::Duration retention = absl::Hours(24 * 365);        // zero = keep records forever
  std::function<absl::Time()> clock;                       // empty: absl::Now
  absl::Duration audit_retention = absl::Hours(24 * 365);  // zero = keep audit records forever
  int64_t audit_max_records = 1'000'000;                   // 0 = no cap
};

class AccountingUpkeep {
 public:
  // Purge passes delete at most kPurgeBatches x kPurgeBatch records, each
  // batch one transaction, so neither a start nor a tick stalls on a
  // backlog.
  static constexpr int kPurgeBatch = 5000;
  static constexpr int kPurgeBatches = 10;

  static absl::StatusOr<std::unique_ptr<AccountingUpkeep>> Start(store::SqliteStateStore* store,
                                                                 AccountingUpkeepOptions options);
  ~AccountingUpkeep();  // Stop()
  AccountingUpkeep(const AccountingUpkeep&) = delete;
  AccountingUpkeep& operator=(const AccountingUpkeep&) = delete;

  void Stop();

 private:
  AccountingUpkeep(store::SqliteStateStore* store, AccountingUpkeepOptions options);
  absl::Time Now() const;
  absl::Status EndOpenRecords();
  // One bounded purge pass; true when it left records for the next one.
  bool Purge();
  // One bounded pass over the audit log (retention and cap).
  void PurgeAudit();
  void Heartbeat();
  void Run(absl::Time next_purge);

  store::SqliteStateStore* const store_;
  const AccountingUpkeepOptions options_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_ACCOUNTING_UPKEEP_H_
