// The event loop of a replay: submissions from the selection, ends from a
// heap, and the real Scheduler in between (driver.h).
#include "tools/replay/driver.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <queue>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/sync.h"
#include "scheduler/scheduler.h"
#include "tools/replay/virtual_clock.h"

namespace ipupod::replay {
namespace {

// What the observers saw since the driver last looked. Observers run under
// the scheduler's mutex on the driver's thread; the leaf mutex keeps that
// true whatever thread the scheduler might call them on.
class GrantLog {
 public:
  void Granted(size_t job, double fragmentation_delay_s) {
    sync::MutexLock lock(&mu_);
    granted_.push_back(Grant{job, fragmentation_delay_s});
  }
  void Ended(size_t job, const absl::Status& why) {
    sync::MutexLock lock(&mu_);
    if (ended_.ok()) {
      ended_ = absl::InternalError(
          absl::StrCat("job ", job, " ended without its release: ", why.ToString()));
    }
  }
  struct Grant {
    size_t job = 0;
    double fragmentation_delay_s = 0;
  };
  std::vector<Grant> TakeGranted() {
    sync::MutexLock lock(&mu_);
    std::vector<Grant> out;
    out.swap(granted_);
    return out;
  }
  absl::Status ended() const {
    sync::MutexLock lock(&mu_);
    return ended_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<Grant> granted_ ABSL_GUARDED_BY(mu_);  // at most one entry per job
  absl::Status ended_ ABSL_GUARDED_BY(mu_);
};

class JobObserver final : public scheduler::AttachObserver {
 public:
  JobObserver(GrantLog* log, size_t job) : log_(log), job_(job) {}
  void OnQueued(const scheduler::QueuePositionView&) override {}
  void OnGranted(const scheduler::SessionView& session) override {
    log_->Granted(job_, session.fragmentation_delay_seconds);
  }
  void OnEnded(const absl::Status& why) override { log_->Ended(job_, why); }
  // A replay has no one to tell positions to: the scheduler need not work them out.
  bool WantsPositions() const override { return false; }

 private:
  GrantLog* const log_;
  const size_t job_;
};

struct EndEvent {
  absl::Time at;
  uint64_t sequence = 0;  // start order: the tie rule among ends at one instant
  size_t job = 0;
  bool operator>(const EndEvent& o) const { return at != o.at ? at > o.at : sequence > o.sequence; }
};

absl::Status CheckOptions(const Selection& selection, const ReplayOptions& options) {
  if (!std::isfinite(options.estimate_factor) || options.estimate_factor < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "estimate factor %g must be a number >= 0 (1 = perfect estimates, 0 = no time limits)",
        options.estimate_factor));
  }
  if (options.max_backfill_waiters < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max backfill waiters %d must be >= 0 (0 = no bound)", options.max_backfill_waiters));
  }
  if (!options.configure_accounts && !options.shares.empty()) {
    return absl::InvalidArgumentError(
        "shares need accounts: with no accounts configured every cluster has one share");
  }
  for (const auto& [account, shares] : options.shares) {
    if (!std::binary_search(selection.clusters.begin(), selection.clusters.end(), account)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("shares name %s, which has no job in the selection; its clusters are: %s",
                          account, absl::StrJoin(selection.clusters, ", ")));
    }
    if (!(shares > 0)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("shares of %s must be greater than 0 (got %g)", account, shares));
    }
  }
  return absl::OkStatus();
}

class Driver {
 public:
  Driver(const Selection& selection, const ReplayOptions& options)
      : selection_(selection),
        options_(options),
        clock_(selection.jobs.front().submit),
        tickets_(selection.jobs.size()) {}
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  absl::Status Start(const sharing::SharingPolicy& policy);
  absl::StatusOr<PolicyRun> Run();

 private:
  absl::Time origin() const { return selection_.jobs.front().submit; }
  double Seconds(absl::Time t) const { return absl::ToDoubleSeconds(t - origin()); }
  std::optional<absl::Time> NextEventTime() const;
  absl::Status RunInstant(absl::Time t);
  absl::Status Submit(size_t job);
  void CollectGrants(absl::Time t);
  static void Timed(absl::Time called, SchedulerCalls& calls) {
    calls.wall_s += absl::ToDoubleSeconds(absl::Now() - called);
    ++calls.calls;
  }

  const Selection& selection_;
  const ReplayOptions& options_;
  VirtualClock clock_;
  GrantLog log_;
  std::unique_ptr<scheduler::Scheduler> scheduler_;
  std::vector<std::string> tickets_;
  std::priority_queue<EndEvent, std::vector<EndEvent>, std::greater<>> ends_;
  std::optional<absl::Time> last_instant_;
  size_t next_submit_ = 0;
  uint64_t started_ = 0;
  int waiting_ = 0;
  int busy_ipus_ = 0;
  PolicyRun run_;
};

absl::Status Driver::Start(const sharing::SharingPolicy& policy) {
  scheduler::SchedulerOptions so;
  so.pod = options_.pod;
  so.max_waiters = std::max<int>(1, static_cast<int>(selection_.jobs.size()));
  so.clock = clock_.AsFunction();
  so.policy = std::make_shared<const sharing::SharingPolicy>(policy);
  so.priority_interval = absl::ZeroDuration();  // RunInstant drives the passes
  so.max_backfill_waiters = options_.max_backfill_waiters;
  IPUPOD_ASSIGN_OR_RETURN(scheduler_, scheduler::Scheduler::Create(std::move(so), nullptr));
  run_.policy = std::string(sharing::QueueOrderName(options_.order));
  run_.pod_ipus = options_.pod.num_ipus;
  run_.dropped = selection_.dropped.total();
  run_.jobs.resize(selection_.jobs.size());
  for (size_t i = 0; i < selection_.jobs.size(); ++i) {
    const TraceJob& job = selection_.jobs[i];
    run_.jobs[i] =
        JobRecord{job.line, job.cluster, static_cast<int>(job.gpus), Seconds(job.submit), 0, 0, 0};
  }
  return absl::OkStatus();
}

std::optional<absl::Time> Driver::NextEventTime() const {
  std::optional<absl::Time> next;
  if (next_submit_ < selection_.jobs.size()) next = selection_.jobs[next_submit_].submit;
  if (!ends_.empty() && (!next || ends_.top().at < *next)) next = ends_.top().at;
  // While anyone waits, a pass at least every priority_interval, as the live
  // server's timer makes one: priorities age and usage decays between events.
  if (waiting_ > 0 && last_instant_ && options_.priority_interval > absl::ZeroDuration()) {
    const absl::Time tick = *last_instant_ + options_.priority_interval;
    if (!next || tick < *next) next = tick;
  }
  return next;
}

absl::StatusOr<PolicyRun> Driver::Run() {
  while (std::optional<absl::Time> t = NextEventTime()) {
    IPUPOD_RETURN_IF_ERROR(RunInstant(*t));
  }
  scheduler_->Shutdown();
  if (waiting_ != 0) {
    return absl::InternalError(
        absl::StrFormat("%d jobs were never granted after every job had ended", waiting_));
  }
  return std::move(run_);
}

absl::Status Driver::RunInstant(absl::Time t) {
  clock_.Set(t);
  while (!ends_.empty() && ends_.top().at == t) {
    const size_t job = ends_.top().job;
    ends_.pop();
    busy_ipus_ -= run_.jobs[job].ipus;
    const absl::Time called = absl::Now();
    scheduler_->Release(tickets_[job]);
    Timed(called, run_.release);
    CollectGrants(t);
  }
  while (next_submit_ < selection_.jobs.size() && selection_.jobs[next_submit_].submit == t) {
    IPUPOD_RETURN_IF_ERROR(Submit(next_submit_++));
    CollectGrants(t);
  }
  // The pass the live server's timer would make: usage charged to now,
  // priorities recomputed, the queue walked.
  const absl::Time called = absl::Now();
  scheduler_->Reprioritize();
  Timed(called, run_.pass);
  CollectGrants(t);
  last_instant_ = t;
  IPUPOD_RETURN_IF_ERROR(log_.ended());
  run_.timeline.push_back(TimelinePoint{Seconds(t), waiting_, busy_ipus_});
  return absl::OkStatus();
}

absl::Status Driver::Submit(size_t job) {
  const TraceJob& j = selection_.jobs[job];
  scheduler::AttachRequest request;
  request.num_ipus = j.gpus;
  request.wait = true;
  request.client = absl::StrCat("trace job ", j.line);
  // A trace entry is a batch job: its time limit is an estimate the walk
  // plans with, and the trace says when it ends (the scheduler ends only
  // interactive sessions at their time limit).
  request.job = absl::StrCat("trace-", j.line);
  if (options_.configure_accounts) request.account = j.cluster;
  if (options_.estimate_factor > 0) {
    request.time_limit =
        std::max(absl::Seconds(1), absl::Seconds(j.duration_seconds * options_.estimate_factor));
  }
  ++waiting_;
  const absl::Time called = absl::Now();
  absl::StatusOr<std::string> ticket = scheduler_->Attach(
      scheduler::Caller{j.cluster, false}, request, std::make_shared<JobObserver>(&log_, job));
  Timed(called, run_.attach);
  if (!ticket.ok()) {
    return absl::Status(ticket.status().code(),
                        absl::StrFormat("trace line %d (cluster %s, %d IPUs): %s", j.line,
                                        j.cluster, j.gpus, ticket.status().message()));
  }
  tickets_[job] = *std::move(ticket);
  return absl::OkStatus();
}

void Driver::CollectGrants(absl::Time t) {
  for (const GrantLog::Grant& grant : log_.TakeGranted()) {
    const size_t job = grant.job;
    JobRecord& record = run_.jobs[job];
    record.start_s = Seconds(t);
    record.fragmentation_delay_s = grant.fragmentation_delay_s;
    const absl::Duration run = absl::Seconds(selection_.jobs[job].duration_seconds);
    record.end_s = Seconds(t + run);
    --waiting_;
    busy_ipus_ += record.ipus;
    ends_.push(EndEvent{t + run, started_++, job});
  }
}

}  // namespace

absl::StatusOr<sharing::SharingPolicy> ReplayPolicy(const Selection& selection,
                                                    const ReplayOptions& options) {
  IPUPOD_RETURN_IF_ERROR(CheckOptions(selection, options));
  sharing::SharingPolicy policy = options.policy;
  policy.order = options.order;
  policy.accounts.clear();
  policy.default_account.clear();
  if (options.configure_accounts) {
    for (const std::string& cluster : selection.clusters) {
      auto it = options.shares.find(cluster);
      sharing::Account account;
      account.name = cluster;
      account.shares = it == options.shares.end() ? 1.0 : it->second;
      account.users = {cluster};
      policy.accounts.push_back(std::move(account));
    }
  }
  IPUPOD_RETURN_IF_ERROR(sharing::ValidateSharingPolicy(policy));
  return policy;
}

absl::StatusOr<PolicyRun> Replay(const Selection& selection, const ReplayOptions& options) {
  if (selection.jobs.empty()) {
    return absl::InvalidArgumentError("the selection holds no job to replay");
  }
  IPUPOD_ASSIGN_OR_RETURN(const sharing::SharingPolicy policy, ReplayPolicy(selection, options));
  Driver driver(selection, options);
  IPUPOD_RETURN_IF_ERROR(driver.Start(policy));
  return driver.Run();
}

}  // namespace ipupod::replay
