// JobManager and the usage ledger: an ended job's record (kind job), put
// after its end is durable, and put again at Start when the ledger lacks it.
#include <algorithm>
#include <limits>
#include <set>
#include <string>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/sync.h"
#include "server/batch/job_manager.h"

namespace ipupod::batch {
namespace {

accounting::UsageRecord UsageOf(const jobs::JobRecord& r, int granted_ipus) {
  accounting::UsageRecord u;
  u.id = r.id;
  u.kind = accounting::RecordKind::kJob;
  u.user = r.user;
  u.account = r.spec.account;
  u.qos = r.spec.qos;
  u.partition = r.spec.partition;
  u.ipus = granted_ipus > 0 ? granted_ipus : r.spec.num_ipus;
  u.submit_unix_ms = r.submitted_unix_ms;
  u.start_unix_ms = r.first_started_unix_ms > 0 ? r.first_started_unix_ms : r.started_unix_ms;
  u.end_unix_ms = std::max(r.ended_unix_ms, u.start_unix_ms);
  u.ipu_seconds = std::max(0.0, r.ipu_seconds);
  u.state = std::string(jobs::JobStateName(r.state));
  return u;
}

}  // namespace

void JobManager::PutUsageLocked(const Entry& e) {
  if (r_.ledger == nullptr || !jobs::IsFinished(e.record.state)) return;
  const absl::Status written = r_.ledger->Put(UsageOf(e.record, e.granted_ipus));
  if (!written.ok()) {
    spdlog::error("job {}: usage record not written ({}); the next start writes it", e.record.id,
                  std::string(written.message()));
  }
}

void JobManager::RecheckUsage() {
  if (r_.ledger == nullptr) return;
  const int64_t kept_since = options_.ledger_retention == absl::ZeroDuration()
                                 ? 0
                                 : absl::ToUnixMillis(Now() - options_.ledger_retention);
  sync::MutexLock lock(&mu_);
  std::set<std::string> missing;
  int64_t oldest_end = std::numeric_limits<int64_t>::max();
  for (const auto& [id, entry] : jobs_) {
    const jobs::JobRecord& r = entry->record;
    if (!jobs::IsFinished(r.state) || r.ended_unix_ms <= kept_since) continue;
    missing.insert(id);
    oldest_end = std::min(oldest_end, r.ended_unix_ms);
  }
  if (missing.empty()) return;
  accounting::LedgerQuery query;
  query.since_unix_ms = oldest_end;
  query.kind = accounting::RecordKind::kJob;
  query.limit = accounting::kMaxLedgerQueryLimit;
  const absl::Status scanned = r_.ledger->Scan(query, [&](const accounting::UsageRecord& u) {
    missing.erase(u.id);
    return !missing.empty();
  });
  if (!scanned.ok()) {
    spdlog::error("jobs: cannot read the usage ledger ({}); ended jobs' records not checked",
                  std::string(scanned.message()));
    return;
  }
  for (const std::string& id : missing) PutUsageLocked(*jobs_.at(id));
  if (!missing.empty()) {
    spdlog::warn(
        "jobs: {} ended jobs had no usage record (the server stopped between the two "
        "writes); written now",
        missing.size());
  }
}

}  // namespace ipupod::batch
