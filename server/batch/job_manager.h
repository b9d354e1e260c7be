// File: server/batch/job_manager.h
//
// JobManager: the server's batch jobs - submit, queue, run, recover,
// resume after a restart, keep results until fetched or purged.
//
// Queue. A job waits in the pod's one queue: the manager attaches for it
// through Scheduler::Attach (wait = true, the caller being the job's user),
// exactly as `ipupod attach --wait` does, so jobs and interactive attaches
// are ordered by one policy (docs/scheduling.md). A job enters the queue
// when it is PENDING, not held and its dependency (--after) has COMPLETED;
// a dependency that ends otherwise cancels it, saying so.
//
// Run. On a grant the job becomes RUNNING (durably) and a thread of its own
// runs the attempt (server/batch/job_runner.h); there is at most one such thread per
// granted session, so at most one per IPU. When the attempt ends the
// session is released and the job becomes:
//   COMPLETED  results kept until options.retention passes (then purged,
//              the record saying so);
//   CANCELLED  cancelled by its owner or an admin (a training job keeps its
//              last checkpoint as checkpoint.npz);
//   TIMEOUT    its time limit passed (the same);
//   PENDING    again, after a device fault the attempt could not recover
//              (exhausted recoveries, an unrecoverable fault, its session
//              ended under it), at most options.max_requeues times; the
//              failed IPU is out of service, so the next grant is elsewhere;
//              or after a preemption (a scavenger job whose IPUs a request of
//              a higher class needs: it stops at its next step, and resumes
//              from its last checkpoint; not counted as a requeue);
//   FAILED     otherwise, with the reason and the error's kind and action.
//
// Durability. Every transition is written to the JobStore before it is
// acknowledged or acted on. At Start, RUNNING jobs (the server stopped or
// died under them) go back to PENDING keeping their submit time and order;
// a training job resumes from the checkpoint its record names, an inference
// job after the step outputs already written.
//
// Sharing and accounting. A job carries an account and a QoS, resolved at
// submit by the attach's rules (sharing::Resolve) and passed with its
// attach, with its job id and what is left of its time limit, so the
// queue's priority, limits (max_jobs_running included), backfill and
// preemption treat it as they treat an interactive session. Submit refuses
// what the policy would never start (a max_ipus below the job's IPUs, a time
// limit over the QoS's maximum wall time) and a submit over a
// max_jobs_pending limit (RESOURCE_EXHAUSTED naming it: UserMaxJobsPending,
// AccountMaxJobsPending, QosMaxJobsPending, QosMaxJobsPendingPerUser). When
// a job ends (any end state) its usage record (kind job: submit, first
// start, end, IPU-seconds over its attempts, the state's name) is put in
// the ledger after the end is durable; Start puts it again for ended jobs
// whose record is missing (a kill -9 between the two writes, or a failed
// put). A failed put is logged; it never changes the job.
//
// Visibility. Only the owner or an admin sees a job's details (spec,
// reason, progress, events, results) and may cancel, hold, release, delete
// or fetch it; others see its queue line (id, user, state, IPUs).
//
// Thread safety: every public method may be called concurrently. Lock
// order: JobManager::mu_, then the Scheduler's mutex, then notices_mu_ (a
// leaf: scheduler observers only append a notice under it).
// Errors: INVALID_ARGUMENT (bad input, saying what and how to fix it),
// NOT_FOUND (unknown job, or a blob not uploaded), PERMISSION_DENIED
// (another user's job), FAILED_PRECONDITION (the job's state does not allow
// it), RESOURCE_EXHAUSTED (a bound, naming it), the store's errors.
#ifndef IPUPOD_BATCH_JOB_MANAGER_H_
#define IPUPOD_BATCH_JOB_MANAGER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/accounting/ledger.h"
#include "scheduler/scheduler.h"
#include "server/batch/in_process_executable.h"
#include "server/batch/job_files.h"
#include "server/batch/job_runner.h"
#include "server/execution/session_execution.h"
#include "server/jobs/blob_store.h"
#include "server/jobs/job.h"
#include "server/jobs/job_store.h"

namespace ipupod::batch {

struct JobManagerOptions {
  std::filesystem::path jobs_dir;       // <state_dir>/jobs: one directory per job
  int max_jobs = 20000;                 // records kept, every state
  int max_active_jobs_per_user = 2000;  // PENDING and RUNNING
  absl::Duration default_time_limit = absl::Hours(24);
  absl::Duration retention = absl::Hours(24 * 7);
  int max_requeues = 3;
  int max_recoveries = driver::kMaxRecoveriesDefault;
  InProcessOptions in_process;
  // How often the manager looks again at jobs waiting on something the
  // scheduler does not report (a full queue, retention).
  absl::Duration tick = absl::Milliseconds(500);
  std::function<absl::Time()> clock;  // empty: absl::Now
  // How long the ledger keeps records (zero: forever): Start checks the
  // usage records of jobs that ended within it.
  absl::Duration ledger_retention = absl::ZeroDuration();
};

struct JobResources {
  scheduler::Scheduler* scheduler = nullptr;
  execution::SessionExecution* execution = nullptr;
  jobs::JobStore* store = nullptr;
  jobs::BlobStore* blobs = nullptr;
  accounting::Ledger* ledger = nullptr;  // ended jobs' usage records; null = none kept
};

// A job as one caller may see it.
struct JobView {
  jobs::JobRecord record;  // details cleared unless `details`
  bool details = false;
  std::string session;  // RUNNING
  std::vector<int> ipus;
  int64_t live_runs = 0;   // runs done so far, this attempt included
  int queue_position = 0;  // 1-based while in the pod's queue
};

struct JobFilter {
  bool all = false;  // finished jobs too
  std::string user;  // "" = everyone's
  std::vector<jobs::JobState> states;
  size_t limit = 0;  // the first this many matching jobs, by id; 0 = all
};

class JobManager {
 public:
  // Loads every job, sends RUNNING ones back to PENDING, re-references
  // their blobs and starts queueing. REQUIRES: every resource set and
  // outliving the manager.
  static absl::StatusOr<std::unique_ptr<JobManager>> Start(JobManagerOptions options,
                                                           JobResources resources);
  ~JobManager();
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Stops queueing, asks running attempts to stop and waits for them (each
  // within one step). Their records stay RUNNING, so the next Start resumes
  // them. Idempotent.
  void Shutdown();

  // One job, or one per value of `sweep` ("lr=0.1,0.01"); checks
  // everything that can be checked now (server/jobs/job.h, the blobs, the
  // executable against the pod, the inputs against the executable).
  absl::StatusOr<std::vector<JobView>> Submit(const scheduler::Caller& caller,
                                              const jobs::JobSpec& spec, absl::string_view sweep);
  // The jobs `filter` matches, in id order, at most filter.limit of them;
  // `total` (if not null) gets how many match.
  std::vector<JobView> List(const scheduler::Caller& caller, const JobFilter& filter,
                            int* total = nullptr) const;
  absl::StatusOr<JobView> Get(const scheduler::Caller& caller, absl::string_view id) const;
  absl::StatusOr<JobView> Cancel(const scheduler::Caller& caller, absl::string_view id);
  absl::StatusOr<JobView> Hold(const scheduler::Caller& caller, absl::string_view id);
  absl::StatusOr<JobView> Release(const scheduler::Caller& caller, absl::string_view id);
  // A finished job's record and files; returns the bytes freed.
  absl::StatusOr<uint64_t> Delete(const scheduler::Caller& caller, absl::string_view id);

  // How many jobs are in each state (indexed by jobs::JobState), kept
  // records of every user; for the metrics. Counts, copies nothing.
  std::array<int64_t, jobs::kJobStateCount> CountByState() const;

  // Events seq >= from (at most `max`); *finished when no more will come.
  absl::StatusOr<std::vector<JobEvent>> Events(const scheduler::Caller& caller,
                                               absl::string_view id, uint64_t from, size_t max,
                                               bool* finished) const;
  // Where result `name` of job `id` is, with its size and hash.
  absl::StatusOr<std::pair<std::filesystem::path, jobs::ResultFile>> Result(
      const scheduler::Caller& caller, absl::string_view id, absl::string_view name) const;

 private:
  // What the manager keeps of one job in memory.
  struct Entry {
    jobs::JobRecord record;
    std::unique_ptr<JobLog> log;
    std::string ticket;  // the scheduler request while queued or running
    std::string session;
    std::vector<int> ipus;
    int granted_ipus = 0;  // the last grant's IPUs (its usage record's)
    int64_t live_runs = 0;
    absl::Time attempt_start;
    double attempt_wall_before = 0;  // record.wall_seconds when the attempt began
    // Why a running attempt is asked to stop (kCancelled or kTimeout).
    std::atomic<bool> stop{false};
    bool preempted = false;  // the stop is a preemption: back to PENDING
    jobs::JobState stop_state = jobs::JobState::kCancelled;
    std::string stop_reason;
    std::thread worker;
  };

  // Handed from scheduler observers and workers to the dispatcher. At most a
  // few per job are ever outstanding (one grant or end per ticket, one
  // finish per attempt), so the deque is bounded by the job count.
  struct Notice {
    enum Kind { kGranted, kEnded, kFinished, kPreempted } kind = kGranted;
    std::string id;
    std::string ticket;
    scheduler::SessionView session;
    absl::Status why;
    absl::StatusOr<JobAttemptResult> result = absl::UnknownError("");
  };
  class Observer;

  JobManager(JobManagerOptions options, JobResources resources);
  absl::Status Recover();
  // Puts the usage records of ended jobs the ledger lacks (Start).
  void RecheckUsage();
  // Keeps `record` as a new entry at the end of the submission order.
  Entry& AddLocked(jobs::JobRecord record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time Now() const;

  // Observers and workers hand over here; the dispatcher thread acts.
  void Notify(Notice notice);
  // Wakes the dispatcher to look at every job again.
  void Kick();
  void DispatchLoop();
  void HandleNotice(Notice& notice) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Reconcile() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a pending job; false when the pod's queue is full (try later).
  bool AttachLocked(Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A preempted attempt ended: back to PENDING, to resume from its last
  // checkpoint (not counted as a requeue). False if the store refused.
  bool RequeuePreemptedLocked(Entry& entry, const std::function<void(jobs::JobRecord&)>& account)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartAttemptLocked(Entry& entry, const scheduler::SessionView& session)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunAttempt(JobAttempt attempt, const JobRunCallbacks& callbacks);
  void FinishAttemptLocked(Entry& entry, absl::StatusOr<JobAttemptResult> result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  JobRunCallbacks CallbacksFor(Entry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PurgeExpiredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Writes `entry`'s record with `change` applied, then applies it in
  // memory; a failed write changes nothing.
  absl::Status UpdateLocked(Entry& entry, const std::function<void(jobs::JobRecord&)>& change)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndLocked(Entry& entry, jobs::JobState state, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's usage record (kind job) into the ledger; failures are logged.
  void PutUsageLocked(const Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LogLocked(Entry& entry, JobEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LogState(Entry& entry, absl::string_view text) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseTicketLocked(Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::StatusOr<Entry*> FindLocked(const scheduler::Caller& caller, absl::string_view id,
                                    bool for_details) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Where each queued ticket is in the pod's queue, and why it waits.
  struct QueuePlace {
    int position = 0;
    std::string reason;
  };
  using Positions = absl::flat_hash_map<std::string, QueuePlace>;
  JobView ViewLocked(const scheduler::Caller& caller, const Entry& entry,
                     const Positions& positions) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  Positions QueuePositions() const;

  // Submit's checks (server/batch/job_submit.cc).
  absl::StatusOr<std::vector<jobs::JobRecord>> PlanSubmit(const scheduler::Caller& caller,
                                                          const jobs::JobSpec& spec,
                                                          absl::string_view sweep);
  absl::Status CheckDependency(const scheduler::Caller& caller, absl::string_view after) const;
  absl::Status CheckActiveLimits(const scheduler::Caller& caller, size_t adding) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The account and QoS of `spec` resolved for `caller`, and its time limit
  // against the QoS's maximum wall time (the default limit capped by it).
  absl::Status Associate(const scheduler::Caller& caller, jobs::JobSpec& spec) const;
  // The policy's max_jobs_pending of every scope the job is in, with
  // `adding` more jobs.
  absl::Status CheckPendingLimits(const scheduler::Caller& caller, const jobs::JobSpec& spec,
                                  size_t adding) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const JobManagerOptions options_;
  const JobResources r_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Entry>> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);  // submission order
  std::atomic<bool> stopping_{false};

  absl::Mutex notices_mu_ ABSL_ACQUIRED_AFTER(mu_);
  absl::CondVar notices_cv_;
  std::deque<Notice> notices_ ABSL_GUARDED_BY(notices_mu_);
  bool kicked_ ABSL_GUARDED_BY(notices_mu_) = false;

  std::thread dispatcher_;
};

}  // namespace ipupod::batch

#endif  // IPUPOD_BATCH_JOB_MANAGER_H_
