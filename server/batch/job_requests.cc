// JobManager's requests on existing jobs: list, show, cancel, hold,
// release, delete, events and results, each behind the visibility rule of
// server/batch/job_manager.h.
#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/format.h"
#include "common/status_macros.h"
#include "common/sync.h"
#include "server/batch/job_manager.h"

namespace ipupod::batch {

using jobs::JobRecord;
using jobs::JobState;
using scheduler::Caller;

JobManager::Positions JobManager::QueuePositions() const {
  Positions positions;
  for (scheduler::QueuePlaceView& q : r_.scheduler->QueuePlaces()) {
    positions[q.ticket] = {q.position, std::move(q.reason)};
  }
  return positions;
}

JobView JobManager::ViewLocked(const Caller& caller, const Entry& e,
                               const Positions& positions) const {
  JobView view;
  view.details = caller.admin || caller.user == e.record.user;
  auto it = e.ticket.empty() ? positions.end() : positions.find(e.ticket);
  if (it != positions.end()) view.queue_position = it->second.position;
  if (!view.details) {
    // The queue line only (server/jobs/job.h): id, user, state, IPUs.
    view.record.id = e.record.id;
    view.record.user = e.record.user;
    view.record.state = e.record.state;
    view.record.spec.num_ipus = e.record.spec.num_ipus;
    view.record.spec.account = e.record.spec.account;
    view.record.spec.qos = e.record.spec.qos;
    view.record.submitted_unix_ms = e.record.submitted_unix_ms;
    return view;
  }
  view.record = e.record;
  // A limit holding it in the queue says more than "Resources".
  if (it != positions.end() && absl::StrContains(it->second.reason, "Max")) {
    view.record.reason = it->second.reason;
  }
  view.session = e.session;
  view.ipus = e.ipus;
  view.live_runs = std::max(e.live_runs, e.record.runs_done);
  if (e.record.state == JobState::kRunning) {
    view.record.wall_seconds =
        e.attempt_wall_before + absl::ToDoubleSeconds(Now() - e.attempt_start);
  }
  return view;
}

absl::StatusOr<JobManager::Entry*> JobManager::FindLocked(const Caller& caller,
                                                          absl::string_view id,
                                                          bool for_details) const {
  IPUPOD_RETURN_IF_ERROR(jobs::CheckJobId(id));
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("job ", id, " does not exist (ipupod jobs --all lists jobs)"));
  }
  Entry* e = it->second.get();
  if (for_details && !caller.admin && caller.user != e->record.user) {
    return absl::PermissionDeniedError(
        absl::StrCat("job ", id, " belongs to ", e->record.user,
                     ": only its owner or an admin may see its details or change it"));
  }
  return e;
}

std::vector<JobView> JobManager::List(const Caller& caller, const JobFilter& filter,
                                      int* total) const {
  const Positions positions = QueuePositions();
  sync::MutexLock lock(&mu_);
  std::vector<JobView> out;
  int matched = 0;
  for (const std::string& id : order_) {
    const Entry& e = *jobs_.at(id);
    if (!filter.user.empty() && e.record.user != filter.user) continue;
    if (!filter.states.empty()) {
      if (std::find(filter.states.begin(), filter.states.end(), e.record.state) ==
          filter.states.end()) {
        continue;
      }
    } else if (!filter.all && jobs::IsFinished(e.record.state)) {
      continue;
    }
    ++matched;
    if (filter.limit == 0 || out.size() < filter.limit) {
      out.push_back(ViewLocked(caller, e, positions));
    }
  }
  if (total != nullptr) *total = matched;
  return out;
}

std::array<int64_t, jobs::kJobStateCount> JobManager::CountByState() const {
  std::array<int64_t, jobs::kJobStateCount> counts{};
  sync::MutexLock lock(&mu_);
  for (const auto& [id, entry] : jobs_) ++counts[static_cast<size_t>(entry->record.state)];
  return counts;
}

absl::StatusOr<JobView> JobManager::Get(const Caller& caller, absl::string_view id) const {
  // Its own place only (not the whole queue's), asked of the scheduler
  // without mu_ held, as QueuePositions is.
  std::string ticket;
  {
    sync::MutexLock lock(&mu_);
    IPUPOD_ASSIGN_OR_RETURN(const Entry* e, FindLocked(caller, id, /*for_details=*/false));
    ticket = e->ticket;
  }
  Positions positions;
  if (!ticket.empty()) {
    if (std::optional<scheduler::QueuePlaceView> place = r_.scheduler->QueuePlaceOf(ticket)) {
      positions[ticket] = {place->position, std::move(place->reason)};
    }
  }
  sync::MutexLock lock(&mu_);
  IPUPOD_ASSIGN_OR_RETURN(const Entry* e, FindLocked(caller, id, /*for_details=*/false));
  return ViewLocked(caller, *e, positions);
}

absl::StatusOr<JobView> JobManager::Cancel(const Caller& caller, absl::string_view id) {
  sync::MutexLock lock(&mu_);
  IPUPOD_ASSIGN_OR_RETURN(Entry * e, FindLocked(caller, id, /*for_details=*/true));
  const std::string reason = absl::StrCat("cancelled by ", caller.user);
  if (jobs::IsFinished(e->record.state)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", id, " already ended ", jobs::JobStateName(e->record.state), "; nothing to cancel"));
  }
  if (e->record.state == JobState::kRunning) {
    // The attempt stops after its current step; its end is recorded then.
    e->stop_state = JobState::kCancelled;
    e->stop_reason = reason;
    e->stop = true;
    LogLocked(*e, MakeEvent("note", absl::StrCat(reason, "; stopping after this step")));
    return ViewLocked(caller, *e, {});
  }
  ReleaseTicketLocked(*e);
  EndLocked(*e, JobState::kCancelled, reason);
  if (e->record.state != JobState::kCancelled) {
    return absl::UnavailableError("the cancel could not be recorded; try again");
  }
  return ViewLocked(caller, *e, {});
}

absl::StatusOr<JobView> JobManager::Hold(const Caller& caller, absl::string_view id) {
  sync::MutexLock lock(&mu_);
  IPUPOD_ASSIGN_OR_RETURN(Entry * e, FindLocked(caller, id, /*for_details=*/true));
  if (e->record.state != JobState::kPending) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is ", jobs::JobStateName(e->record.state),
                     ": only a pending job can be held (cancel a running one)"));
  }
  if (!e->record.held) {
    IPUPOD_RETURN_IF_ERROR(UpdateLocked(*e, [](JobRecord& r) {
      r.held = true;
      r.reason = std::string(jobs::kReasonHeld);
    }));
    ReleaseTicketLocked(*e);
    LogLocked(*e, MakeEvent("note", absl::StrCat("held by ", caller.user)));
  }
  return ViewLocked(caller, *e, {});
}

absl::StatusOr<JobView> JobManager::Release(const Caller& caller, absl::string_view id) {
  sync::MutexLock lock(&mu_);
  IPUPOD_ASSIGN_OR_RETURN(Entry * e, FindLocked(caller, id, /*for_details=*/true));
  if (!e->record.held) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " is not held"));
  }
  IPUPOD_RETURN_IF_ERROR(UpdateLocked(*e, [](JobRecord& r) {
    r.held = false;
    r.reason = std::string(r.spec.after.empty() ? jobs::kReasonResources : jobs::kReasonDependency);
  }));
  LogLocked(*e, MakeEvent("note", absl::StrCat("released by ", caller.user)));
  Kick();
  return ViewLocked(caller, *e, {});
}

absl::StatusOr<uint64_t> JobManager::Delete(const Caller& caller, absl::string_view id) {
  sync::MutexLock lock(&mu_);
  IPUPOD_ASSIGN_OR_RETURN(Entry * e, FindLocked(caller, id, /*for_details=*/true));
  if (!jobs::IsFinished(e->record.state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is ", jobs::JobStateName(e->record.state),
                     ": cancel it first (ipupod job cancel ", id, ")"));
  }
  IPUPOD_RETURN_IF_ERROR(r_.store->DeleteJob(id));
  uint64_t freed = 0;
  if (absl::StatusOr<JobFiles> files = JobFiles::Open(options_.jobs_dir, id); files.ok()) {
    freed = files->RemoveAll();
  }
  r_.blobs->Release(e->record.id);
  order_.erase(std::find(order_.begin(), order_.end(), e->record.id));
  jobs_.erase(e->record.id);
  r_.blobs->Sweep();
  return freed;
}

absl::StatusOr<std::vector<JobEvent>> JobManager::Events(const Caller& caller, absl::string_view id,
                                                         uint64_t from, size_t max,
                                                         bool* finished) const {
  // The log has its own mutex (a leaf); the reader lock keeps the entry.
  sync::MutexLock lock(&mu_);
  IPUPOD_ASSIGN_OR_RETURN(const Entry* e, FindLocked(caller, id, /*for_details=*/true));
  *finished = jobs::IsFinished(e->record.state);
  return e->log->Read(from, max);
}

absl::StatusOr<std::pair<std::filesystem::path, jobs::ResultFile>> JobManager::Result(
    const Caller& caller, absl::string_view id, absl::string_view name) const {
  sync::MutexLock lock(&mu_);
  IPUPOD_ASSIGN_OR_RETURN(const Entry* e, FindLocked(caller, id, /*for_details=*/true));
  if (e->record.results_purged) {
    return absl::NotFoundError(
        absl::StrCat("the results of job ", id, " were purged when the retention period ended"));
  }
  for (const jobs::ResultFile& file : e->record.results) {
    if (file.name == name)
      return std::make_pair(options_.jobs_dir / e->record.id / file.name, file);
  }
  if (!jobs::IsFinished(e->record.state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is ", jobs::JobStateName(e->record.state),
                     ": its results come when it has finished (ipupod job wait ", id, ")"));
  }
  return absl::NotFoundError(absl::StrCat("job ", id, " has no result '", EchoName(name),
                                          "' (ipupod job show ", id, " lists its results)"));
}

}  // namespace ipupod::batch
