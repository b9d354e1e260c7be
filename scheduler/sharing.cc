// The sharing policy at work inside the Scheduler: usage charged as sessions
// run, each waiter's multifactor priority and the walk's order, limits, the
// shares view, policy reloads and the usage ledger's records.
#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/sync.h"
#include "scheduler/scheduler_impl.h"
#include "scheduler/sharing/priority.h"
#include "spdlog/spdlog.h"

namespace ipupod::scheduler {
namespace {

constexpr double kSecondsPerHour = 3600;

std::string UserScope(absl::string_view user) { return absl::StrCat("user:", user); }
std::string AccountScope(absl::string_view account) { return absl::StrCat("account:", account); }
std::string QosScope(absl::string_view qos) { return absl::StrCat("qos:", qos); }
std::string QosUserScope(absl::string_view qos, absl::string_view user) {
  return absl::StrCat("qos-user:", qos, "/", user);
}

// One set of limits and the scope it applies to, named for reasons
// ("Qos" + "MaxIpus" + "PerUser").
struct LimitScope {
  std::string key;
  const sharing::Limits* limits;
  std::string prefix;
  std::string suffix;
  std::string what;  // "alice", "account a", "QoS normal", "alice in QoS normal"
};

std::vector<LimitScope> ScopesOf(const sharing::SharingPolicy& p, absl::string_view user,
                                 absl::string_view account, absl::string_view qos) {
  std::vector<LimitScope> scopes;
  scopes.push_back({UserScope(user), &p.user_limits, "User", "", std::string(user)});
  if (const sharing::Account* a = sharing::FindAccount(p, account)) {
    scopes.push_back(
        {AccountScope(account), &a->limits, "Account", "", absl::StrCat("account ", account)});
  }
  if (const sharing::Qos* q = sharing::FindQos(p, qos)) {
    scopes.push_back({QosScope(qos), &q->limits, "Qos", "", absl::StrCat("QoS ", qos)});
    scopes.push_back({QosUserScope(qos, user), &q->per_user, "Qos", "PerUser",
                      absl::StrCat(user, " in QoS ", qos)});
  }
  return scopes;
}

bool HasIpuHourLimits(const sharing::SharingPolicy& p) {
  if (p.user_limits.max_ipu_hours > 0) return true;
  for (const sharing::Account& a : p.accounts) {
    if (a.limits.max_ipu_hours > 0) return true;
  }
  for (const sharing::Qos& q : p.qos) {
    if (q.limits.max_ipu_hours > 0 || q.per_user.max_ipu_hours > 0) return true;
  }
  return false;
}

int Get(const absl::flat_hash_map<std::string, int>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? 0 : it->second;
}

}  // namespace

// ---------------------------------------------------------------- usage

std::vector<std::string> SchedulerImpl::UsageKeys(const std::string& user,
                                                  const std::string& account,
                                                  const std::string& qos) {
  return {UserScope(user), AccountScope(account), QosScope(qos), QosUserScope(qos, user)};
}

void SchedulerImpl::ChargeLocked(const std::string& user, const std::string& account,
                                 const std::string& qos, double ipu_seconds, absl::Time at) {
  ChargeLocked(account, UsageKeys(user, account, qos), ipu_seconds, at);
}

void SchedulerImpl::ChargeLocked(const std::string& account, const std::vector<std::string>& keys,
                                 double ipu_seconds, absl::Time at) {
  if (ipu_seconds <= 0) return;
  decayed_usage_.Add(account, ipu_seconds, at);
  for (const std::string& key : keys) window_usage_.Add(key, ipu_seconds, at);
}

void SchedulerImpl::ChargeUsageLocked(absl::Time now) {
  sessions_.ForEach([&](Session& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (now <= s.charged_until) return;
    ChargeLocked(s.account, s.usage_keys,
                 s.block.size * absl::ToDoubleSeconds(now - s.charged_until), now);
    s.charged_until = now;
  });
}

void SchedulerImpl::LoadUsage(const std::vector<accounting::UsageRecord>& records) {
  std::vector<const accounting::UsageRecord*> ended;
  for (const accounting::UsageRecord& r : records) {
    if (r.kind == accounting::RecordKind::kSession && r.end_unix_ms > 0) ended.push_back(&r);
  }
  std::sort(ended.begin(), ended.end(),
            [](const auto* a, const auto* b) { return a->end_unix_ms < b->end_unix_ms; });
  sync::MutexLock lock(&mu_);
  for (const accounting::UsageRecord* r : ended) {
    ChargeLocked(r->user, r->account, r->qos, r->ipu_seconds, absl::FromUnixMillis(r->end_unix_ms));
  }
  spdlog::info("scheduler: usage of {} ended sessions loaded from the ledger", ended.size());
}

// ---------------------------------------------------------------- priority

double SchedulerImpl::TotalSharesLocked() const {
  const sharing::SharingPolicy& p = *policy_;
  if (!p.accounts.empty()) {
    double total = 0;
    for (const sharing::Account& a : p.accounts) total += a.shares;
    return total;
  }
  // One share per user with a request, a session or usage not yet decayed.
  std::set<std::string> users;
  for (const std::string& account : queue_.Accounts()) users.insert(account);
  for (const auto& [id, s] : sessions_.all()) users.insert(s.account);
  for (const std::string& key : decayed_usage_.Keys()) users.insert(key);
  return std::max<double>(1, users.size());
}

void SchedulerImpl::BeginPassLocked(absl::Time now) {
  ChargeUsageLocked(now);
  ++pass_.generation;
  pass_.at = now;
  pass_.accounts.clear();
  if (policy_->order != sharing::QueueOrder::kMultifactor) return;
  pass_.total_usage = decayed_usage_.Total(now);
  pass_.total_shares = TotalSharesLocked();
  pass_.max_qos = 0;
  for (const sharing::Qos& q : policy_->qos) pass_.max_qos = std::max(pass_.max_qos, q.priority);
  // Usage as of now, for every account that waits (the account of a request
  // still to come is read at its Attach, at this same time).
  for (const std::string& account : queue_.Accounts()) AccountFactorsLocked(account);
}

const AccountFactors& SchedulerImpl::AccountFactorsLocked(const std::string& account) const {
  auto [it, inserted] = pass_.accounts.try_emplace(account);
  if (inserted) {
    AccountFactors& a = it->second;
    const double usage = decayed_usage_.Value(account, pass_.at);
    a.usage_fraction = pass_.total_usage > 0 ? usage / pass_.total_usage : 0;
    a.shares_fraction = sharing::SharesOf(*policy_, account) / pass_.total_shares;
    a.fair_share = sharing::FairShareFactor(a.usage_fraction, a.shares_fraction);
  }
  return it->second;
}

void SchedulerImpl::UpdatePrioritiesLocked(absl::Time now) {
  BeginPassLocked(now);
  queue_.Settle(walk_priority_);
}

sharing::Factors SchedulerImpl::FactorsLocked(const Waiter& w) const {
  if (policy_->order != sharing::QueueOrder::kMultifactor) return sharing::Factors();
  // Every input is fixed within a pass: computed once per waiter and pass
  // (a walk, a listing and the position count each ask again).
  if (w.priority_pass != pass_.generation) {
    w.factors = ComputeFactorsLocked(w);
    w.priority = sharing::Priority(policy_->weights, w.factors);
    w.priority_pass = pass_.generation;
  }
  return w.factors;
}

sharing::Factors SchedulerImpl::ComputeFactorsLocked(const Waiter& w) const {
  const sharing::SharingPolicy& p = *policy_;
  const AccountFactors& account = AccountFactorsLocked(w.account);
  sharing::PriorityInputs in;
  in.waited = pass_.at - w.enqueued;
  in.usage_fraction = account.usage_fraction;
  in.shares_fraction = account.shares_fraction;
  in.ipus = w.num_ipus;
  in.pod_ipus = pod_size();
  const sharing::Qos* q = sharing::FindQos(p, w.qos);
  in.qos_priority = q == nullptr ? 0 : q->priority;
  in.max_qos_priority = pass_.max_qos;
  return sharing::ComputeFactors(p.weights, in, account.fair_share);
}

double SchedulerImpl::PriorityLocked(const Waiter& w) const {
  if (policy_->order != sharing::QueueOrder::kMultifactor) return 0;
  FactorsLocked(w);
  return w.priority;
}

bool SchedulerImpl::SettledLocked(const Waiter& w) const {
  if (policy_->order != sharing::QueueOrder::kMultifactor) return true;
  const sharing::PriorityWeights& weights = policy_->weights;
  // Age is the only factor that moves with time; without it, or at its cap,
  // the priority stays as it is.
  return weights.age == 0 || sharing::AgeFactor(weights, pass_.at - w.enqueued) >= 1.0 ||
         weights.age_max <= absl::ZeroDuration();
}

void SchedulerImpl::Reprioritize() {
  const NotifyEndedOnExit notify(this);
  MutationLock lock(this);
  if (shutdown_) return;
  // Only time changes an order by priority or an IPU-hour limit; in arrival
  // order without such limits the walks at events have decided everything.
  if (policy_->order == sharing::QueueOrder::kMultifactor || HasIpuHourLimits(*policy_)) {
    RunQueueLocked();
  }
  // Positions further back are told here, when they changed (coalesced).
  NotifyPositionsLocked(nullptr, true);
  const absl::Time now = Now();
  decayed_usage_.Prune(now);
  window_usage_.Prune(now);
}

void SchedulerImpl::ArmPriorityTimerLocked() {
  if (options_.priority_interval <= absl::ZeroDuration() || shutdown_) return;
  absl::StatusOr<uint64_t> id = timer_.Schedule(options_.priority_interval, [this] {
    Reprioritize();
    sync::MutexLock lock(&mu_);
    ArmPriorityTimerLocked();
  });
  if (!id.ok()) spdlog::warn("scheduler: periodic priority pass: {}", id.status().ToString());
}

// ---------------------------------------------------------------- limits

Holdings SchedulerImpl::HoldingsLocked() const {
  Holdings h;
  for (const auto& [id, s] : sessions_.all()) {
    Waiter as_waiter;
    as_waiter.user = s.user;
    as_waiter.account = s.account;
    as_waiter.qos = s.qos;
    as_waiter.job = s.job;
    as_waiter.num_ipus = s.block.size;
    AddHolding(h, as_waiter);
  }
  return h;
}

void SchedulerImpl::AddHolding(Holdings& h, const Waiter& w) {
  for (const std::string& key :
       {UserScope(w.user), AccountScope(w.account), QosScope(w.qos), QosUserScope(w.qos, w.user)}) {
    h.ipus[key] += w.num_ipus;
    if (!w.job.empty()) h.jobs[key] += 1;
  }
}

std::string SchedulerImpl::HeldByLocked(const Waiter& w, const Holdings& h, absl::Time now) const {
  for (const LimitScope& scope : ScopesOf(*policy_, w.user, w.account, w.qos)) {
    const sharing::Limits& l = *scope.limits;
    if (l.max_ipus > 0 && Get(h.ipus, scope.key) + w.num_ipus > l.max_ipus) {
      return absl::StrCat(scope.prefix, "MaxIpus", scope.suffix);
    }
    if (!w.job.empty() && l.max_jobs_running > 0 && Get(h.jobs, scope.key) >= l.max_jobs_running) {
      return absl::StrCat(scope.prefix, "MaxJobsRunning", scope.suffix);
    }
    if (l.max_ipu_hours > 0 &&
        window_usage_.Value(scope.key, now) >= l.max_ipu_hours * kSecondsPerHour) {
      return absl::StrCat(scope.prefix, "MaxIpuHours", scope.suffix);
    }
  }
  return "";
}

absl::Status SchedulerImpl::HeldErrorLocked(const Waiter& w, absl::string_view limit) const {
  const Holdings h = HoldingsLocked();
  for (const LimitScope& scope : ScopesOf(*policy_, w.user, w.account, w.qos)) {
    const sharing::Limits& l = *scope.limits;
    const auto named = [&](absl::string_view what) {
      return limit == absl::StrCat(scope.prefix, what, scope.suffix);
    };
    std::string detail;
    if (named("MaxIpus")) {
      detail = absl::StrFormat("%s holds %d IPUs, the limit is %d", scope.what,
                               Get(h.ipus, scope.key), l.max_ipus);
    } else if (named("MaxJobsRunning")) {
      detail = absl::StrFormat("%s runs %d jobs, the limit is %d", scope.what,
                               Get(h.jobs, scope.key), l.max_jobs_running);
    } else if (named("MaxIpuHours")) {
      detail = absl::StrFormat("%s used %.2f IPU-hours in the last %s, the limit is %g", scope.what,
                               window_usage_.Value(scope.key, Now()) / kSecondsPerHour,
                               absl::FormatDuration(policy_->usage_window), l.max_ipu_hours);
    } else {
      continue;
    }
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: %s; use --wait to queue until it allows %d more IPUs", limit, detail, w.num_ipus));
  }
  return absl::ResourceExhaustedError(absl::StrCat(limit, ": a limit holds this request"));
}

absl::Status SchedulerImpl::AssociateLocked(const Caller& caller, const AttachRequest& request,
                                            int size, Waiter& w) const {
  const sharing::SharingPolicy& p = *policy_;
  IPUPOD_ASSIGN_OR_RETURN(
      const sharing::Association assoc,
      sharing::Resolve(p, caller.user, caller.admin, request.account, request.qos));
  w.account = assoc.account;
  w.qos = assoc.qos;
  w.job = request.job;
  w.time_limit = request.time_limit;
  const sharing::Qos* q = sharing::FindQos(p, assoc.qos);
  if (request.time_limit < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("time_limit must not be negative (0 = none)");
  }
  if (q->max_wall > absl::ZeroDuration() && request.time_limit > q->max_wall) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "time limit %s is over QoS %s's maximum wall time of %s; ask for at most that",
        absl::FormatDuration(request.time_limit), q->name, absl::FormatDuration(q->max_wall)));
  }
  for (const LimitScope& scope : ScopesOf(p, caller.user, w.account, w.qos)) {
    const int max = scope.limits->max_ipus;
    if (max > 0 && size > max) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%sMaxIpus%s: %s may hold at most %d IPUs at once and this request asks for %d, so it "
          "could never start; ask for at most %d, or ask an admin",
          scope.prefix, scope.suffix, scope.what, max, size, max));
    }
  }
  return absl::OkStatus();
}

absl::Time SchedulerImpl::ExpectedEndLocked(const Waiter& w, absl::Time granted) const {
  if (w.time_limit > absl::ZeroDuration()) return granted + w.time_limit;
  const sharing::Qos* q = sharing::FindQos(*policy_, w.qos);
  if (q != nullptr && q->max_wall > absl::ZeroDuration()) return granted + q->max_wall;
  if (w.job.empty() && policy_->interactive_wall > absl::ZeroDuration()) {
    return granted + policy_->interactive_wall;
  }
  return absl::InfiniteFuture();
}

// ---------------------------------------------------------------- views

std::vector<ShareView> SchedulerImpl::GetShares() const {
  sync::MutexLock lock(&mu_);
  const sharing::SharingPolicy& p = *policy_;
  const absl::Time now = Now();
  const double total_usage = decayed_usage_.Total(now);
  const double total_shares = TotalSharesLocked();
  std::map<std::string, ShareView> views;
  for (const sharing::Account& a : p.accounts) views[a.name].users = a.users;
  if (p.accounts.empty()) {
    for (const std::string& account : queue_.Accounts()) views[account].users = {account};
    for (const auto& [id, s] : sessions_.all()) views[s.account].users = {s.account};
    for (const std::string& key : decayed_usage_.Keys()) views[key].users = {key};
  }
  const Holdings h = HoldingsLocked();
  std::vector<ShareView> out;
  for (auto& [name, v] : views) {
    v.account = name;
    v.shares = sharing::SharesOf(p, name);
    v.shares_fraction = v.shares / total_shares;
    v.usage_ipu_seconds = decayed_usage_.Value(name, now);
    v.usage_fraction = total_usage > 0 ? v.usage_ipu_seconds / total_usage : 0;
    v.fair_share_factor = sharing::FairShareFactor(v.usage_fraction, v.shares_fraction);
    v.ipus_held = Get(h.ipus, AccountScope(name));
    v.window_ipu_hours = window_usage_.Value(AccountScope(name), now) / kSecondsPerHour;
    out.push_back(std::move(v));
  }
  return out;
}

std::shared_ptr<const sharing::SharingPolicy> SchedulerImpl::policy() const {
  sync::MutexLock lock(&mu_);
  return policy_;
}

absl::Status SchedulerImpl::SetPolicy(std::shared_ptr<const sharing::SharingPolicy> policy) {
  if (policy == nullptr) return absl::InvalidArgumentError("no policy given");
  IPUPOD_RETURN_IF_ERROR(sharing::ValidateSharingPolicy(*policy));
  const NotifyEndedOnExit notify(this);
  MutationLock lock(this);
  IPUPOD_RETURN_IF_ERROR(CheckRunningLocked());
  ChargeUsageLocked(Now());
  if (policy->usage_window != policy_->usage_window) {
    spdlog::warn("scheduler: usage_window changes take effect at the next start");
  }
  decayed_usage_.set_half_life(policy->usage_half_life);
  policy_ = std::move(policy);
  // Waiters' holds and their places in the order follow the new rules.
  BeginPassLocked(Now());
  queue_.Rebuild(walk_priority_, [this](const Waiter& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return HoldOfLocked(w);
  });
  spdlog::info("scheduler: sharing policy replaced ({} accounts, {} QoS, order {})",
               policy_->accounts.size(), policy_->qos.size(),
               std::string(sharing::QueueOrderName(policy_->order)));
  RunQueueLocked();
  return absl::OkStatus();
}

// ---------------------------------------------------------------- ledger

void SchedulerImpl::QueueLedgerOpenLocked(const Session& s) {
  if (options_.ledger == nullptr) return;
  LedgerOp op;
  op.open = true;
  accounting::UsageRecord& r = op.record;
  r.id = s.id;
  r.user = s.user;
  r.account = s.account;
  r.qos = s.qos;
  r.job = s.job;
  r.partition = s.partition;
  r.ipus = s.block.size;
  r.submit_unix_ms = absl::ToUnixMillis(s.submitted);
  r.start_unix_ms = absl::ToUnixMillis(s.granted);
  r.state = std::string(accounting::kStateRunning);
  ledger_ops_.push_back(std::move(op));
  ++ledger_queued_;
}

double IpuSecondsOf(const Session& s, absl::Time end) {
  return s.block.size * std::max(0.0, absl::ToDoubleSeconds(end - s.granted));
}

void SchedulerImpl::QueueLedgerCloseLocked(const Session& s, absl::Time end,
                                           absl::string_view state) {
  if (options_.ledger == nullptr) return;
  LedgerOp op;
  op.record.id = s.id;
  op.record.end_unix_ms = absl::ToUnixMillis(end);
  op.record.ipu_seconds = IpuSecondsOf(s, end);
  op.record.state = std::string(state);
  ledger_ops_.push_back(std::move(op));
  ++ledger_queued_;
}

void SchedulerImpl::FlushLedger(bool wait) {
  if (options_.ledger == nullptr) return;
  uint64_t mine = 0;
  {
    sync::MutexLock lock(&mu_);
    mine = ledger_queued_;
    if (ledger_ops_.empty()) return;
    if (!wait && ledger_ops_.size() <= kLedgerBacklogMax && ArmLedgerWriteLocked()) return;
  }
  sync::MutexLock lock(&ledger_mu_);
  while (ledger_written_ < mine) {
    if (!ledger_writing_) {
      WriteLedgerLocked();
    } else {
      sync::WaitWithTimeout(&ledger_cv_, &ledger_mu_, absl::Seconds(1));
    }
  }
}

bool SchedulerImpl::ArmLedgerWriteLocked() {
  if (ledger_write_armed_) return true;
  absl::StatusOr<uint64_t> armed = timer_.Schedule(absl::ZeroDuration(), [this] {
    {
      sync::MutexLock lock(&mu_);
      ledger_write_armed_ = false;
    }
    FlushLedger(true);
  });
  ledger_write_armed_ = armed.ok();
  return ledger_write_armed_;
}

void SchedulerImpl::WriteLedgerLocked() {
  ledger_writing_ = true;
  for (;;) {
    // Taken and found empty under ledger_mu_, so an operation queued before
    // a caller saw this writer at work is never left behind.
    std::vector<LedgerOp> ops;
    uint64_t upto = 0;
    {
      sync::MutexLock lock(&mu_);
      ops.swap(ledger_ops_);
      upto = ledger_queued_;
    }
    if (ops.empty()) break;
    sync::Released(&ledger_mu_);
    ledger_mu_.Unlock();  // callers queue, wait or leave while it writes
    WriteLedgerOps(ops);
    ledger_mu_.Lock();
    sync::Acquired(&ledger_mu_);
    ledger_written_ = upto;
    ledger_cv_.SignalAll();
  }
  ledger_writing_ = false;
  ledger_cv_.SignalAll();
}

void SchedulerImpl::WriteLedgerOps(const std::vector<LedgerOp>& ops) {
  // Opens first: a close in the same batch is of a session opened in it or
  // before it.
  std::vector<const LedgerOp*> opens, closes;
  std::vector<accounting::UsageRecord> records;
  std::vector<accounting::RecordEnd> ends;
  for (const LedgerOp& op : ops) {
    if (op.open) {
      opens.push_back(&op);
      records.push_back(op.record);
    } else {
      closes.push_back(&op);
      ends.push_back({op.record.id, op.record.end_unix_ms, op.record.ipu_seconds, op.record.state});
    }
  }
  const auto log = [](const std::vector<const LedgerOp*>& done,
                      const std::vector<absl::Status>& written) {
    for (size_t i = 0; i < done.size() && i < written.size(); ++i) {
      if (written[i].ok()) continue;
      spdlog::error("scheduler: usage record of {} not written: {}", done[i]->record.id,
                    written[i].ToString());
    }
  };
  if (!records.empty()) log(opens, options_.ledger->OpenAll(records));
  if (!ends.empty()) log(closes, options_.ledger->CloseAll(ends));
}

}  // namespace ipupod::scheduler
