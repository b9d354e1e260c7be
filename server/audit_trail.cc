#include "server/audit_trail.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/sync.h"

namespace ipupod::server {

AuditTrail::AuditTrail(audit::AuditLog* log, std::function<absl::Time()> clock,
                       absl::Duration refusal_window)
    : log_(log), clock_(std::move(clock)), refusal_window_(refusal_window) {}

bool IsRefusal(const audit::AuditRecord& record) {
  return !record.admin && record.code != "OK" && record.user != audit::kServerUser &&
         record.user != audit::kSighupUser;
}

absl::Status AuditTrail::Record(audit::AuditRecord record) {
  const absl::Time now = clock_ ? clock_() : absl::Now();
  record.time_unix_ms = absl::ToUnixMillis(now);
  std::vector<audit::AuditRecord> due;
  const bool counted = IsRefusal(record) && CountRefusal(record, now, due);
  if (due.empty() && !counted) {
    sync::MutexLock lock(&mu_);
    TakeEndedLocked(now, /*all=*/false, due);
  }
  for (audit::AuditRecord& summary : due) (void)Append(std::move(summary));
  if (counted) return absl::OkStatus();
  return Append(std::move(record));
}

bool AuditTrail::CountRefusal(const audit::AuditRecord& record, absl::Time now,
                              std::vector<audit::AuditRecord>& due) {
  const std::string key = absl::StrCat(record.user, "\n", record.action, "\n", record.code);
  sync::MutexLock lock(&mu_);
  TakeEndedLocked(now, /*all=*/false, due);
  auto it = windows_.find(key);
  if (it != windows_.end()) {
    ++it->second.count;
    it->second.last = record;
    summarised_.fetch_add(1);
    return true;
  }
  if (windows_.size() >= kRefusalWindowsMax) {
    // Bounded: the oldest window ends early.
    auto oldest = windows_.begin();
    for (auto w = windows_.begin(); w != windows_.end(); ++w) {
      if (w->second.start < oldest->second.start) oldest = w;
    }
    if (oldest->second.count > 0) due.push_back(Summary(oldest->second));
    windows_.erase(oldest);
  }
  windows_[key] = Window{now, 0, record};  // this first refusal is written
  return false;
}

void AuditTrail::TakeEndedLocked(absl::Time now, bool all, std::vector<audit::AuditRecord>& due) {
  for (auto it = windows_.begin(); it != windows_.end();) {
    if (!all && it->second.start + refusal_window_ > now) {
      ++it;
      continue;
    }
    if (it->second.count > 0) due.push_back(Summary(it->second));
    windows_.erase(it++);
  }
}

audit::AuditRecord AuditTrail::Summary(const Window& window) {
  audit::AuditRecord summary = window.last;
  summary.details =
      absl::StrCat("refused=", window.count, " first_unix_ms=", absl::ToUnixMillis(window.start),
                   " last_unix_ms=", window.last.time_unix_ms, " last: ", window.last.details);
  summary.message = absl::StrCat(
      window.count, " more refusals of ", window.last.action, " by ", window.last.user,
      " within the audit_refusal_window_seconds after the first (recorded); counted, not "
      "recorded one by one. The last: ",
      window.last.message);
  return summary;
}

void AuditTrail::FlushRefusals() {
  std::vector<audit::AuditRecord> due;
  {
    sync::MutexLock lock(&mu_);
    TakeEndedLocked(clock_ ? clock_() : absl::Now(), /*all=*/false, due);
  }
  for (audit::AuditRecord& summary : due) (void)Append(std::move(summary));
}

void AuditTrail::Stop() {
  std::vector<audit::AuditRecord> due;
  {
    sync::MutexLock lock(&mu_);
    TakeEndedLocked(absl::InfiniteFuture(), /*all=*/true, due);
  }
  for (audit::AuditRecord& summary : due) (void)Append(std::move(summary));
}

absl::Status AuditTrail::Append(audit::AuditRecord record) {
  record = audit::Bounded(std::move(record));
  absl::StatusOr<int64_t> seq = log_->Append(record);
  if (seq.ok()) {
    written_.fetch_add(1);
    return absl::OkStatus();
  }
  failed_.fetch_add(1);
  // The log keeps what the table could not.
  spdlog::error(
      "audit: the record of {} by {}{} from {} could not be written ({}): target '{}', details "
      "'{}', result {}{}{}",
      record.action, record.user, record.admin ? " (admin)" : "",
      record.peer.empty() ? "the server" : record.peer, std::string(seq.status().message()),
      record.target, record.details, record.code, record.message.empty() ? "" : ": ",
      record.message);
  return seq.status();
}

namespace {

audit::AuditRecord CallerRecord(const grpc::ServerContextBase& context,
                                const scheduler::Caller& caller, absl::string_view action,
                                absl::string_view target, absl::string_view details) {
  audit::AuditRecord record;
  record.user = caller.user;
  record.admin = caller.admin;
  record.peer = context.peer();
  record.action = std::string(action);
  record.target = std::string(target);
  record.details = std::string(details);
  return record;
}

}  // namespace

void AuditAction(const ServiceEnv& env, const grpc::ServerContextBase& context,
                 const scheduler::Caller& caller, absl::string_view action,
                 absl::string_view target, absl::string_view details, const absl::Status& status) {
  if (env.audit == nullptr) return;
  audit::AuditRecord record = CallerRecord(context, caller, action, target, details);
  audit::SetResult(record, status);
  (void)env.audit->Record(std::move(record));
}

scheduler::ResetDone AuditedReset(const ServiceEnv& env, const grpc::ServerContextBase& context,
                                  const scheduler::Caller& caller, absl::string_view action,
                                  std::string target, scheduler::ResetDone done) {
  if (env.audit == nullptr) return done;
  // Everything the record needs is copied now: the reset may complete on
  // the scheduler's timer thread.
  auto record = std::make_shared<audit::AuditRecord>(
      CallerRecord(context, caller, action, std::move(target), ""));
  AuditTrail* trail = env.audit;
  return [trail, record, done = std::move(done)](absl::StatusOr<scheduler::ResetResult> result) {
    if (result.ok()) {
      record->details =
          absl::StrCat("ipus=", IpuList(result->reset_ipus),
                       " sessions=", SessionList(result->affected_sessions),
                       " simulated_seconds=", absl::SixDigits(result->simulated_seconds));
    }
    audit::SetResult(*record, result.status());
    (void)trail->Record(std::move(*record));
    done(std::move(result));
  };
}

std::string IpuTarget(int64_t ipu) { return absl::StrCat("ipu ", ipu); }

std::string NamedTarget(absl::string_view kind, absl::string_view name) {
  return absl::StrCat(kind, " ", name);
}

std::string IpuList(std::vector<int> ipus) {
  std::sort(ipus.begin(), ipus.end());
  ipus.erase(std::unique(ipus.begin(), ipus.end()), ipus.end());
  std::vector<std::string> runs;
  for (size_t i = 0; i < ipus.size();) {
    size_t j = i;
    while (j + 1 < ipus.size() && ipus[j + 1] == ipus[j] + 1) ++j;
    runs.push_back(j == i ? absl::StrCat(ipus[i]) : absl::StrCat(ipus[i], "-", ipus[j]));
    i = j + 1;
  }
  return runs.empty() ? "-" : absl::StrJoin(runs, ",");
}

std::string SessionList(const std::vector<std::string>& sessions) {
  return sessions.empty() ? "-" : absl::StrJoin(sessions, ",");
}

}  // namespace ipupod::server
