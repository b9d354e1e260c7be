#include "server/batch/job_manager.h"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/errors.h"
#include "common/status_macros.h"
#include "common/sync.h"

namespace ipupod::batch {

using jobs::JobRecord;
using jobs::JobState;
using scheduler::Caller;

class JobManager::Observer : public scheduler::AttachObserver {
 public:
  Observer(JobManager* manager, std::string id) : manager_(manager), id_(std::move(id)) {}
  void OnQueued(const scheduler::QueuePositionView&) override {}
  void OnGranted(const scheduler::SessionView& session) override {
    Notice n;
    n.kind = Notice::kGranted;
    n.id = id_;
    n.session = session;
    manager_->Notify(std::move(n));
  }
  void OnEnded(const absl::Status& why) override {
    Notice n;
    n.kind = Notice::kEnded;
    n.id = id_;
    n.why = why;
    manager_->Notify(std::move(n));
  }
  void OnPreempted(const scheduler::PreemptionView& notice) override {
    Notice n;
    n.kind = Notice::kPreempted;
    n.id = id_;
    n.why = absl::AbortedError(notice.message);
    manager_->Notify(std::move(n));
  }

 private:
  JobManager* const manager_;
  const std::string id_;
};

namespace {

int64_t UnixMs(absl::Time t) { return absl::ToUnixMillis(t); }

// A device fault, or the session taken away under the attempt: worth
// another attempt on other IPUs.
bool IsRequeueable(const absl::Status& status) {
  const ErrorKind kind = GetErrorKind(status);
  return kind == ErrorKind::kRecoverable || kind == ErrorKind::kUnrecoverable ||
         absl::IsNotFound(status) || absl::IsAborted(status) || absl::IsUnavailable(status);
}

// The durable progress of a job that stopped part-way (a restart, a
// requeue): a training job's is its checkpoint's runs, recorded with it; an
// inference job's is the step outputs on disk, from which its next attempt
// goes on (server/batch/job_runner.h), so runs_done never goes back to 0 for runs
// that are kept.
int64_t ProgressKept(const std::filesystem::path& jobs_dir, const JobRecord& r) {
  if (r.spec.train) return r.runs_done;
  absl::StatusOr<JobFiles> files = JobFiles::Open(jobs_dir, r.id);
  return files.ok() ? std::min(files->CountSteps(), r.runs_total) : r.runs_done;
}

}  // namespace

JobManager::JobManager(JobManagerOptions options, JobResources resources)
    : options_(std::move(options)), r_(resources) {}

absl::Time JobManager::Now() const { return options_.clock ? options_.clock() : absl::Now(); }

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Start(JobManagerOptions options,
                                                              JobResources resources) {
  std::unique_ptr<JobManager> manager(new JobManager(std::move(options), resources));
  IPUPOD_RETURN_IF_ERROR(manager->Recover());
  manager->RecheckUsage();
  manager->dispatcher_ = std::thread([m = manager.get()] { m->DispatchLoop(); });
  return manager;
}

JobManager::~JobManager() { Shutdown(); }

absl::Status JobManager::Recover() {
  IPUPOD_ASSIGN_OR_RETURN(std::vector<JobRecord> records, r_.store->LoadJobs());
  sync::MutexLock lock(&mu_);
  for (JobRecord& record : records) {
    Entry& e = AddLocked(std::move(record));
    if (jobs::IsFinished(e.record.state)) continue;
    const jobs::JobSpec& s = e.record.spec;
    std::vector<std::string> blobs = {s.executable_sha256, s.inputs.sha256};
    if (!s.weights.sha256.empty()) blobs.push_back(s.weights.sha256);
    if (absl::Status held = r_.blobs->Rereference(e.record.id, e.record.user, blobs); !held.ok()) {
      EndLocked(e, JobState::kFailed,
                absl::StrCat("its files are gone from the blob store: ", held.message()));
      continue;
    }
    if (e.record.state == JobState::kRunning) {
      // A server that cannot record this cannot run jobs: refuse to start.
      const int64_t kept = ProgressKept(options_.jobs_dir, e.record);
      IPUPOD_RETURN_IF_ERROR(UpdateLocked(e, [kept](JobRecord& r) {
        r.state = JobState::kPending;
        r.reason = "requeued: the server restarted while it ran";
        r.runs_done = kept;
      }));
      LogState(e, "the server restarted; back in the queue, resuming where it was");
    }
  }
  spdlog::info("jobs: {} loaded", order_.size());
  return absl::OkStatus();
}

JobManager::Entry& JobManager::AddLocked(JobRecord record) {
  auto entry = std::make_unique<Entry>();
  entry->log = std::make_unique<JobLog>(options_.jobs_dir / record.id / "events.jsonl");
  entry->record = std::move(record);
  Entry& e = *entry;
  order_.push_back(e.record.id);
  jobs_[e.record.id] = std::move(entry);
  return e;
}

void JobManager::Shutdown() {
  if (stopping_.exchange(true)) return;
  Kick();  // wakes the dispatcher
  if (dispatcher_.joinable()) dispatcher_.join();
  std::vector<std::thread> workers;
  {
    sync::MutexLock lock(&mu_);
    for (auto& [id, entry] : jobs_) {
      if (entry->worker.joinable()) workers.push_back(std::move(entry->worker));
    }
  }
  for (std::thread& worker : workers) worker.join();
  sync::MutexLock lock(&mu_);
  for (auto& [id, entry] : jobs_) ReleaseTicketLocked(*entry);
}

void JobManager::Notify(Notice notice) {
  sync::MutexLock lock(&notices_mu_);
  notices_.push_back(std::move(notice));
  notices_cv_.Signal();
}

void JobManager::Kick() {
  sync::MutexLock lock(&notices_mu_);
  kicked_ = true;
  notices_cv_.Signal();
}

void JobManager::DispatchLoop() {
  while (!stopping_) {
    std::deque<Notice> notices;
    {
      sync::MutexLock lock(&notices_mu_);
      if (notices_.empty() && !kicked_) {
        sync::WaitWithTimeout(&notices_cv_, &notices_mu_, options_.tick);
      }
      notices.swap(notices_);
      kicked_ = false;
    }
    sync::MutexLock lock(&mu_);
    // Once stopping, nothing more is recorded: attempts stopped by the
    // shutdown stay RUNNING, and the next start resumes them.
    if (stopping_) return;
    for (Notice& notice : notices) HandleNotice(notice);
    Reconcile();
  }
}

void JobManager::HandleNotice(Notice& n) {
  auto it = jobs_.find(n.id);
  if (it == jobs_.end()) return;
  Entry& e = *it->second;
  switch (n.kind) {
    case Notice::kGranted:
      if (e.record.state != JobState::kPending || e.record.held || e.ticket.empty()) {
        ReleaseTicketLocked(e);  // cancelled or held since it queued
        return;
      }
      StartAttemptLocked(e, n.session);
      return;
    case Notice::kEnded:
      // The scheduler ended the request (its partition went, or shutdown);
      // a running attempt finds out from its next operation.
      if (e.record.state == JobState::kPending) e.ticket.clear();
      return;
    case Notice::kFinished:
      if (e.worker.joinable()) e.worker.join();
      FinishAttemptLocked(e, std::move(n.result));
      return;
    case Notice::kPreempted:
      // The attempt stops at its next step; FinishAttemptLocked requeues it
      // to resume from its last checkpoint.
      if (e.record.state != JobState::kRunning || e.stop) return;
      e.preempted = true;
      e.stop_reason = std::string(n.why.message());
      e.stop = true;
      LogLocked(e, MakeEvent("preempted", e.stop_reason));
      return;
  }
}

void JobManager::Reconcile() {
  bool queue_full = false;
  for (const std::string& id : order_) {
    Entry& e = *jobs_.at(id);
    if (e.record.state != JobState::kPending || !e.ticket.empty() || e.record.held) continue;
    const std::string& after = e.record.spec.after;
    if (!after.empty()) {
      auto dep = jobs_.find(after);
      const JobState dep_state =
          dep == jobs_.end() ? JobState::kCancelled : dep->second->record.state;
      if (dep_state != JobState::kCompleted) {
        if (jobs::IsFinished(dep_state)) {
          EndLocked(
              e, JobState::kCancelled,
              absl::StrCat("its dependency, job ", after, ", ended ",
                           dep == jobs_.end() ? "and was deleted" : jobs::JobStateName(dep_state),
                           " instead of COMPLETED"));
        }
        continue;
      }
    }
    if (!queue_full && !AttachLocked(e)) queue_full = true;
  }
  PurgeExpiredLocked();
  r_.blobs->Sweep();  // blobs no job holds and no recent upload keeps
}

bool JobManager::AttachLocked(Entry& e) {
  const jobs::JobSpec& spec = e.record.spec;
  scheduler::AttachRequest request;
  request.num_ipus = spec.num_ipus;
  request.partition = spec.partition;
  request.wait = true;
  request.auto_round = spec.auto_round;
  request.client = absl::StrCat("job ", e.record.id);
  // Charged, ordered and limited as a session of its account and QoS; it
  // keeps its age across requeues and restarts; backfill counts on what is
  // left of its time limit.
  request.account = spec.account;
  request.qos = spec.qos;
  request.job = e.record.id;
  request.submitted = absl::FromUnixMillis(e.record.submitted_unix_ms);
  if (spec.time_limit_seconds > 0) {
    request.time_limit = std::max(absl::Seconds(1), absl::Seconds(spec.time_limit_seconds) -
                                                        absl::Seconds(e.record.wall_seconds));
  }
  absl::StatusOr<std::string> ticket =
      r_.scheduler->Attach(Caller{e.record.user, e.record.admin}, request,
                           std::make_shared<Observer>(this, e.record.id));
  if (ticket.ok()) {
    e.ticket = *std::move(ticket);
    if (e.record.reason != jobs::kReasonResources && e.record.reason.rfind("requeued", 0) != 0) {
      (void)UpdateLocked(e, [](JobRecord& r) { r.reason = std::string(jobs::kReasonResources); });
    }
    return true;
  }
  if (absl::IsResourceExhausted(ticket.status())) return false;  // the queue is full: later
  EndLocked(e, JobState::kFailed,
            absl::StrCat("the pod cannot take it: ", ticket.status().message()));
  e.record.error_kind = "application";
  return true;
}

void JobManager::StartAttemptLocked(Entry& e, const scheduler::SessionView& session) {
  const absl::Time now = Now();
  absl::Status written = UpdateLocked(e, [&](JobRecord& r) {
    r.state = JobState::kRunning;
    r.reason.clear();
    r.started_unix_ms = UnixMs(now);
    if (r.first_started_unix_ms == 0) r.first_started_unix_ms = r.started_unix_ms;
    // A record from before jobs carried them: what the scheduler resolved.
    if (r.spec.account.empty()) r.spec.account = session.account;
    if (r.spec.qos.empty()) r.spec.qos = session.qos;
  });
  if (!written.ok()) {
    spdlog::error("job {}: cannot record its start ({}); it stays pending", e.record.id,
                  std::string(written.message()));
    ReleaseTicketLocked(e);
    return;
  }
  e.session = session.id;
  e.ipus = session.ipus;
  e.granted_ipus = static_cast<int>(session.ipus.size());
  e.attempt_start = now;
  e.attempt_wall_before = e.record.wall_seconds;
  e.live_runs = e.record.runs_done;  // ProgressKept: what the attempt goes on from
  e.stop = false;
  LogState(e, absl::StrCat("running on session ", session.id, " (IPUs ", session.ipus.size(), ")"));
  JobAttempt attempt;
  attempt.record = e.record;
  attempt.session = session.id;
  attempt.session_ipus = static_cast<int>(session.ipus.size());
  attempt.executable = r_.blobs->PathOf(e.record.spec.executable_sha256);
  attempt.inputs = r_.blobs->PathOf(e.record.spec.inputs.sha256);
  if (!e.record.spec.weights.sha256.empty()) {
    attempt.weights = r_.blobs->PathOf(e.record.spec.weights.sha256);
  }
  attempt.max_recoveries = options_.max_recoveries;
  attempt.in_process = options_.in_process;
  e.worker =
      std::thread([this, attempt = std::move(attempt), callbacks = CallbacksFor(&e)]() mutable {
        RunAttempt(std::move(attempt), callbacks);
      });
}

void JobManager::RunAttempt(JobAttempt attempt, const JobRunCallbacks& callbacks) {
  absl::StatusOr<JobAttemptResult> result = absl::UnknownError("");
  absl::StatusOr<JobFiles> files = JobFiles::Open(options_.jobs_dir, attempt.record.id);
  if (!files.ok()) {
    result = files.status();
  } else {
    result = RunJob(*r_.execution, attempt, *files, callbacks);
  }
  Notice n;
  n.kind = Notice::kFinished;
  n.id = attempt.record.id;
  n.result = std::move(result);
  Notify(std::move(n));
}

JobRunCallbacks JobManager::CallbacksFor(Entry* entry) {
  const int64_t limit_s = entry->record.spec.time_limit_seconds;
  const absl::Time deadline =
      entry->attempt_start + absl::Seconds(limit_s) - absl::Seconds(entry->attempt_wall_before);
  return {.on_run =
              [this, entry](int64_t runs_done, const driver::StepStats& stats, double) {
                sync::MutexLock lock(&mu_);
                entry->live_runs = runs_done;
                entry->record.simulated_seconds += stats.simulated_seconds;
                JobEvent event = MakeEvent(
                    "run", absl::StrCat("run ", runs_done, " of ", entry->record.runs_total));
                event.run = runs_done;
                event.losses = stats.losses;
                LogLocked(*entry, std::move(event));
                // The model's poptorch.ipu_print_tensor lines, in the job's log.
                for (const std::string& line : stats.log) {
                  JobEvent print = MakeEvent("print", line);
                  print.run = runs_done;
                  LogLocked(*entry, std::move(print));
                }
              },
          .on_checkpoint = [this, entry](int64_t runs_done,
                                         const std::string& checkpoint) -> absl::Status {
            sync::MutexLock lock(&mu_);
            const std::string previous = entry->record.checkpoint;
            IPUPOD_RETURN_IF_ERROR(UpdateLocked(*entry, [&](JobRecord& r) {
              r.runs_done = runs_done;
              r.checkpoint = checkpoint;
            }));
            absl::StatusOr<JobFiles> files = JobFiles::Open(options_.jobs_dir, entry->record.id);
            if (files.ok()) files->RemoveCheckpointsBut(checkpoint);
            LogLocked(*entry,
                      MakeEvent("checkpoint", absl::StrCat("checkpoint after run ", runs_done)));
            return absl::OkStatus();
          },
          .on_steps_written = nullptr,
          .on_recovery =
              [this, entry](const std::string& text) {
                sync::MutexLock lock(&mu_);
                LogLocked(*entry, MakeEvent("recovery", text));
              },
          .stop =
              [this, entry, deadline, limit_s] {
                if (stopping_ || entry->stop) return true;
                if (limit_s <= 0 || Now() < deadline) return false;
                sync::MutexLock lock(&mu_);
                if (!entry->stop) {
                  entry->stop_state = JobState::kTimeout;
                  entry->stop_reason = absl::StrCat("its time limit of ", limit_s, " s passed");
                  entry->stop = true;
                }
                return true;
              }};
}

void JobManager::FinishAttemptLocked(Entry& e, absl::StatusOr<JobAttemptResult> result) {
  ReleaseTicketLocked(e);
  if (stopping_) return;  // stopped by the shutdown: resumed at the next start
  const double wall = absl::ToDoubleSeconds(Now() - e.attempt_start);
  const double ipu_seconds = wall * static_cast<double>(e.ipus.size());
  e.session.clear();
  e.ipus.clear();
  const auto account = [&](JobRecord& r) {
    r.wall_seconds = e.attempt_wall_before + wall;
    r.ipu_seconds += ipu_seconds;
  };
  if (result.ok()) {
    (void)UpdateLocked(e, [&](JobRecord& r) {
      account(r);
      r.recoveries += result->recoveries;
      r.runs_done = r.runs_total;
      r.results = result->results;
      r.results_expire_unix_ms = UnixMs(Now() + options_.retention);
    });
    EndLocked(e, JobState::kCompleted, "");
    return;
  }
  const absl::Status& error = result.status();
  if (e.preempted && RequeuePreemptedLocked(e, account)) return;
  if (e.stop) {
    std::vector<jobs::ResultFile> kept;
    if (!e.record.checkpoint.empty()) {
      absl::StatusOr<JobFiles> files = JobFiles::Open(options_.jobs_dir, e.record.id);
      absl::StatusOr<jobs::ResultFile> checkpoint =
          files.ok() ? files->KeepCheckpoint(e.record.checkpoint) : files.status();
      if (checkpoint.ok()) kept.push_back(*std::move(checkpoint));
    }
    (void)UpdateLocked(e, [&](jobs::JobRecord& r) {
      account(r);
      r.results = kept;
    });
    EndLocked(e, e.stop_state, e.stop_reason);
    return;
  }
  if (IsRequeueable(error) && e.record.requeues < options_.max_requeues) {
    const int64_t kept = ProgressKept(options_.jobs_dir, e.record);
    const absl::Status written = UpdateLocked(e, [&](JobRecord& r) {
      account(r);
      r.runs_done = kept;
      r.state = JobState::kPending;
      r.requeues += 1;
      r.reason = absl::StrCat("requeued after: ", error.message());
    });
    if (written.ok()) {
      LogLocked(e, MakeEvent("requeue", e.record.reason));
      return;
    }
  }
  (void)UpdateLocked(e, [&](JobRecord& r) {
    account(r);
    const ErrorKind kind = GetErrorKind(error);
    r.error_kind = std::string(ErrorKindName(kind));
    r.recovery_action = std::string(RecoveryActionName(GetRecoveryAction(error)));
  });
  EndLocked(e, JobState::kFailed, std::string(error.message()));
}

bool JobManager::RequeuePreemptedLocked(Entry& e, const std::function<void(JobRecord&)>& account) {
  e.preempted = false;
  e.stop = false;
  const int64_t kept = ProgressKept(options_.jobs_dir, e.record);
  const absl::Status written = UpdateLocked(e, [&](JobRecord& r) {
    account(r);
    r.runs_done = kept;
    r.state = JobState::kPending;
    r.reason =
        absl::StrCat("Preempted; resumes from ", r.checkpoint.empty() ? "the start" : r.checkpoint);
  });
  if (!written.ok()) return false;
  LogLocked(e, MakeEvent("requeue", e.record.reason));
  return true;
}

absl::Status JobManager::UpdateLocked(Entry& e, const std::function<void(JobRecord&)>& change) {
  JobRecord updated = e.record;
  change(updated);
  IPUPOD_RETURN_IF_ERROR(r_.store->PutJobs({updated}));
  e.record = std::move(updated);
  return absl::OkStatus();
}

// A job reaches a final state. A training job that stops early keeps its
// last checkpoint among its results.
void JobManager::EndLocked(Entry& e, JobState state, std::string reason) {
  const int64_t now = UnixMs(Now());
  const absl::Status written = UpdateLocked(e, [&](JobRecord& r) {
    r.state = state;
    r.reason = reason;
    r.ended_unix_ms = now;
    if (r.results_expire_unix_ms == 0) {
      r.results_expire_unix_ms = now + absl::ToInt64Milliseconds(options_.retention);
    }
  });
  if (!written.ok()) {
    // The record stays as it was: the next start goes on from there.
    spdlog::error("job {}: cannot record that it ended {} ({})", e.record.id,
                  std::string(jobs::JobStateName(state)), std::string(written.message()));
    return;
  }
  PutUsageLocked(e);  // after the end is durable: Start puts it again if this is lost
  r_.blobs->Release(e.record.id);
  e.live_runs = state == JobState::kCompleted ? e.record.runs_total : e.live_runs;
  LogState(e, reason.empty() ? std::string(jobs::JobStateName(state))
                             : absl::StrCat(jobs::JobStateName(state), ": ", reason));
  Kick();  // dependents may move
}

void JobManager::LogLocked(Entry& e, JobEvent event) {
  event.unix_ms = UnixMs(Now());
  e.log->Append(std::move(event));
}

void JobManager::LogState(Entry& e, absl::string_view text) {
  JobEvent event = MakeEvent("state", std::string(text));
  event.state = std::string(jobs::JobStateName(e.record.state));
  LogLocked(e, std::move(event));
}

void JobManager::ReleaseTicketLocked(Entry& e) {
  if (e.ticket.empty()) return;
  r_.scheduler->Release(e.ticket);
  e.ticket.clear();
}

void JobManager::PurgeExpiredLocked() {
  const int64_t now = UnixMs(Now());
  for (const std::string& id : order_) {
    Entry& e = *jobs_.at(id);
    if (!jobs::IsFinished(e.record.state) || e.record.results_purged ||
        e.record.results_expire_unix_ms == 0 || now < e.record.results_expire_unix_ms) {
      continue;
    }
    absl::StatusOr<JobFiles> files = JobFiles::Open(options_.jobs_dir, id);
    const std::vector<jobs::ResultFile> results = e.record.results;
    const absl::Status written = UpdateLocked(e, [](JobRecord& r) {
      r.results_purged = true;
      r.results.clear();
    });
    if (!written.ok() || !files.ok()) continue;
    files->RemoveResults(results);
    files->RemoveCheckpointsBut("");
    LogLocked(e, MakeEvent("note", "its results were purged: the retention period ended"));
  }
}

}  // namespace ipupod::batch
