#include "server/job_watch.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/sync.h"
#include "server/auth.h"
#include "server/proto_convert_jobs.h"
#include "server/status_convert.h"

namespace ipupod::server {

JobWatch::JobWatch(grpc::CallbackServerContext* context, const v1::WatchJobRequest& request,
                   const ServiceEnv& env, const JobWatchEnv& watch_env)
    : context_(context),
      env_(env),
      watch_env_(watch_env),
      request_(request),
      next_(request.from_event()),
      log_("WatchJob") {}

JobEventWriteReactor* JobWatch::Start(grpc::CallbackServerContext* context,
                                      const v1::WatchJobRequest& request, const ServiceEnv& env,
                                      const JobWatchEnv& watch_env) {
  std::shared_ptr<JobWatch> watch(new JobWatch(context, request, env, watch_env));
  {
    sync::MutexLock lock(&watch->mu_);
    watch->self_ = watch;  // dropped in OnDone
  }
  watch->Begin();
  return watch.get();
}

void JobWatch::Begin() {
  absl::StatusOr<scheduler::Caller> caller = Authenticate(env_.auth, context_->client_metadata());
  const absl::Time now = absl::Now();
  bool ticked = false;
  {
    sync::MutexLock lock(&mu_);
    started_ = write_started_ = last_read_ = now;
    if (!caller.ok()) {
      EndLocked(caller.status());
    } else {
      log_.set_user(caller->user);
      caller_ = *caller;
      absl::StatusOr<CallLimit::Ticket> watcher =
          watch_env_.watchers->Enter("WatchJob", caller->user);
      if (!watcher.ok()) {
        EndLocked(watcher.status());
      } else {
        watcher_.emplace(*std::move(watcher));
        ticked = true;
      }
    }
    PumpLocked(now);
  }
  // The ticker reads a follower's next events and ends a watch whose client
  // takes nothing; the watch may already have ended (Tick then does nothing).
  if (ticked) watch_env_.ticker->Add(shared_from_this());
}

void JobWatch::ReadLocked(absl::Time now) {
  last_read_ = now;
  bool finished = false;
  absl::StatusOr<std::vector<batch::JobEvent>> events =
      watch_env_.manager->Events(*caller_, request_.id(), next_, kEventsPerRead, &finished);
  if (!events.ok()) return EndLocked(events.status());
  for (const batch::JobEvent& event : *events) {
    v1::JobEvent out;
    ToProto(event, &out);
    queue_.push_back(std::move(out));
    next_ = event.seq + 1;
  }
  if (!events->empty()) return;
  if (!request_.follow() || finished) return EndLocked(absl::OkStatus());
  if (env_.ShuttingDown()) {
    return EndLocked(absl::UnavailableError(
        "ipupodd is shutting down: stopped following the job; retry when the server is back"));
  }
  if (now - started_ >= watch_env_.max_watch) {
    // Not an error: the clients see the job unfinished and watch again from
    // the next event, taking a watcher again (jobs_watch_max_seconds).
    return EndLocked(absl::OkStatus());
  }
}

void JobWatch::EndLocked(const absl::Status& status) {
  if (!end_status_) end_status_ = status;
}

void JobWatch::PumpLocked(absl::Time now) {
  if (finish_called_ || write_in_flight_) return;
  if (queue_.empty() && !end_status_ && caller_.has_value()) ReadLocked(now);
  if (!queue_.empty()) {  // events read before an end still go first
    writing_ = std::move(queue_.front());
    queue_.pop_front();
    write_in_flight_ = true;
    write_started_ = now;
    StartWrite(&writing_);
    return;
  }
  if (!end_status_) return;  // following: the ticker reads again
  finish_called_ = true;
  // The watcher is free before the client has the status, so its next
  // watch never finds this one still counted.
  watcher_.reset();
  log_.Done(*end_status_);
  Finish(ToGrpcStatus(context_, *end_status_));
}

void JobWatch::Tick(absl::Time now) {
  sync::MutexLock lock(&mu_);
  if (finish_called_) return;
  if (write_in_flight_) {
    if (!idle_cancelled_ && now - write_started_ > watch_env_.idle) {
      idle_cancelled_ = true;
      queue_.clear();
      EndLocked(absl::DeadlineExceededError(absl::StrCat(
          "WatchJob ended: the client took no event for ", absl::FormatDuration(watch_env_.idle),
          " (ipupodd config execution_stream_idle_seconds); watch again from event ", next_)));
      context_->TryCancel();  // fails the stuck write; OnWriteDone then finishes
    }
    return;
  }
  PumpLocked(now);
}

void JobWatch::OnWriteDone(bool ok) {
  sync::MutexLock lock(&mu_);
  write_in_flight_ = false;
  if (!ok) {
    queue_.clear();  // the stream is broken: nothing more will arrive
    EndLocked(absl::CancelledError("the client went away"));
  }
  PumpLocked(absl::Now());
}

void JobWatch::OnCancel() {
  sync::MutexLock lock(&mu_);
  queue_.clear();
  EndLocked(absl::CancelledError("the watch was cancelled by the client"));
  PumpLocked(absl::Now());
}

void JobWatch::OnDone() {
  watch_env_.ticker->Remove(this);
  std::shared_ptr<JobWatch> keep;  // may be the last reference: destroyed at return
  sync::MutexLock lock(&mu_);
  watcher_.reset();
  keep = std::move(self_);
}

}  // namespace ipupod::server
