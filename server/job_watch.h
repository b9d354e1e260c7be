// File: server/job_watch.h
//
// JobWatch: one JobService.WatchJob call (`ipupod job wait`, `job logs
// [--follow]`, Python wait_job and job_events) on gRPC's callback API, so a
// watch holds no thread and no JobService call slot while it waits: it costs
// a watcher, bounded on its own server-wide (config jobs_max_watchers) and
// per user (jobs_max_watchers_per_user). Submits, listings and `job show`
// therefore always find their slots free of waits.
//
//   Start --> authenticate, take a watcher (or RESOURCE_EXHAUSTED naming
//             the bound and its config key) --> read the job's events
//   StartWrite one event at a time; OnWriteDone --> the next one, read in
//             batches of at most kEventsPerRead from the job's log
//   no event left: not following, or the job has finished --> Finish(OK)
//                  following --> the job service's ticker (every `poll`)
//                  looks again
//   ends:  the watch lasted `max_watch` (config jobs_watch_max_seconds):
//          Finish(OK) - the clients see the job unfinished and watch again
//          from the next event, so a watch never holds its watcher for ever;
//          a write the client left untaken for `idle` (config
//          execution_stream_idle_seconds): DEADLINE_EXCEEDED naming the key;
//          the server shutting down: UNAVAILABLE; the client cancelling.
//
// Thread safety: reactions arrive on gRPC's threads, Tick on the ticker's;
// all state is under mu_, held also while reading events from the
// JobManager (lock order: watch, then JobManager; the manager never calls a
// watch). Reactor operations are issued under mu_ (gRPC runs the reactions
// of a non-inline reactor on its own threads, never inside these calls).
//
// Ownership: the watch holds itself until OnDone; the ticker holds a
// weak_ptr. The ServiceEnv, JobManager, watcher limit and ticker outlive it.
// Errors (as the call's status): the job manager's (NOT_FOUND,
// PERMISSION_DENIED, INVALID_ARGUMENT), RESOURCE_EXHAUSTED (no watcher
// free), DEADLINE_EXCEEDED (the client read nothing for `idle`),
// UNAVAILABLE (shutdown), CANCELLED.
#ifndef IPUPOD_SERVER_JOB_WATCH_H_
#define IPUPOD_SERVER_JOB_WATCH_H_

#include <deque>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/server_context.h>
#include <grpcpp/support/server_callback.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ipupod/v1/jobs.pb.h"
#include "scheduler/scheduler.h"
#include "server/batch/job_manager.h"
#include "server/call_limit.h"
#include "server/request_log.h"
#include "server/service_env.h"
#include "server/stream_ticker.h"

namespace ipupod::server {

using JobEventWriteReactor = grpc::ServerWriteReactor<v1::JobEvent>;

// What a watch needs beyond the ServiceEnv; all outlive every watch.
struct JobWatchEnv {
  batch::JobManager* manager = nullptr;
  CallLimit* watchers = nullptr;                 // jobs_max_watchers, jobs_max_watchers_per_user
  StreamTicker* ticker = nullptr;                // visits each watch every `poll`
  absl::Duration max_watch = absl::Minutes(10);  // jobs_watch_max_seconds
  absl::Duration idle = absl::Seconds(30);       // execution_stream_idle_seconds
};

class JobWatch final : public JobEventWriteReactor,
                       public Tickable,
                       public std::enable_shared_from_this<JobWatch> {
 public:
  // Events read from the job's log at a time.
  static constexpr size_t kEventsPerRead = 256;

  // Authenticates, takes a watcher and starts sending; errors finish the
  // call at once. Returns the reactor gRPC drives from here on.
  static JobEventWriteReactor* Start(grpc::CallbackServerContext* context,
                                     const v1::WatchJobRequest& request, const ServiceEnv& env,
                                     const JobWatchEnv& watch_env);

  JobWatch(const JobWatch&) = delete;
  JobWatch& operator=(const JobWatch&) = delete;
  ~JobWatch() override = default;

  // Tickable (the job service's ticker thread).
  void Tick(absl::Time now) override;

  // grpc::ServerWriteReactor (gRPC threads).
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  JobWatch(grpc::CallbackServerContext* context, const v1::WatchJobRequest& request,
           const ServiceEnv& env, const JobWatchEnv& watch_env);
  void Begin() ABSL_LOCKS_EXCLUDED(mu_);

  // Reads the next events into queue_; ends the watch when none will come.
  void ReadLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records why the watch ends (the first reason wins); Pump finishes it.
  void EndLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the next write (reading events when none is queued), or Finish
  // once the queue is empty and an end is set.
  void PumpLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  grpc::CallbackServerContext* const context_;
  const ServiceEnv& env_;
  const JobWatchEnv watch_env_;
  const v1::WatchJobRequest request_;

  absl::Mutex mu_;
  std::optional<scheduler::Caller> caller_ ABSL_GUARDED_BY(mu_);
  std::optional<CallLimit::Ticket> watcher_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;  // the next event to read
  std::deque<v1::JobEvent> queue_ ABSL_GUARDED_BY(mu_);
  v1::JobEvent writing_ ABSL_GUARDED_BY(mu_);  // gRPC reads it until OnWriteDone
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time write_started_ ABSL_GUARDED_BY(mu_);
  absl::Time started_ ABSL_GUARDED_BY(mu_);
  absl::Time last_read_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> end_status_ ABSL_GUARDED_BY(mu_);
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  bool idle_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  RequestLog log_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<JobWatch> self_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_JOB_WATCH_H_
