#include "server/proto_convert_jobs.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace ipupod::server {

jobs::JobSpec FromProto(const v1::JobSpec& s) {
  jobs::JobSpec out;
  out.name = s.name();
  out.executable_sha256 = s.executable_sha256();
  out.inputs = {s.inputs().sha256(), s.inputs().format()};
  out.weights = {s.weights().sha256(), s.weights().format()};
  out.outputs.assign(s.outputs().begin(), s.outputs().end());
  out.train = s.train();
  out.epochs = s.epochs();
  out.steps = s.steps();
  out.optimizer.insert(s.optimizer().begin(), s.optimizer().end());
  out.checkpoint_every = s.checkpoint_every();
  // Out of int range is out of the manager's range too (it checks).
  out.num_ipus = s.num_ipus() > 1u << 20 ? -1 : static_cast<int>(s.num_ipus());
  out.partition = s.partition();
  out.auto_round = s.auto_round();
  out.time_limit_seconds = s.time_limit_seconds() > (uint64_t{1} << 40)
                               ? -1
                               : static_cast<int64_t>(s.time_limit_seconds());
  out.after = s.after();
  out.account = s.account();
  out.qos = s.qos();
  return out;
}

absl::StatusOr<jobs::JobState> FromProto(v1::JobState state) {
  switch (state) {
    case v1::PENDING:
      return jobs::JobState::kPending;
    case v1::RUNNING:
      return jobs::JobState::kRunning;
    case v1::COMPLETED:
      return jobs::JobState::kCompleted;
    case v1::FAILED:
      return jobs::JobState::kFailed;
    case v1::CANCELLED:
      return jobs::JobState::kCancelled;
    case v1::TIMEOUT:
      return jobs::JobState::kTimeout;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "job state ", static_cast<int>(state),
          " is not one: use PENDING, RUNNING, COMPLETED, FAILED, CANCELLED or TIMEOUT"));
  }
}

absl::StatusOr<batch::JobFilter> FromProto(const v1::ListJobsRequest& request) {
  batch::JobFilter filter;
  filter.all = request.all();
  filter.user = request.user();
  filter.limit = request.limit();
  for (int state : request.states()) {
    absl::StatusOr<jobs::JobState> s = FromProto(static_cast<v1::JobState>(state));
    if (!s.ok()) return s.status();
    filter.states.push_back(*s);
  }
  return filter;
}

v1::JobState ToProto(jobs::JobState state) {
  switch (state) {
    case jobs::JobState::kPending:
      return v1::PENDING;
    case jobs::JobState::kRunning:
      return v1::RUNNING;
    case jobs::JobState::kCompleted:
      return v1::COMPLETED;
    case jobs::JobState::kFailed:
      return v1::FAILED;
    case jobs::JobState::kCancelled:
      return v1::CANCELLED;
    case jobs::JobState::kTimeout:
      return v1::TIMEOUT;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

void ToProto(const jobs::JobSpec& s, v1::JobSpec* out) {
  out->set_name(s.name);
  out->set_executable_sha256(s.executable_sha256);
  out->mutable_inputs()->set_sha256(s.inputs.sha256);
  out->mutable_inputs()->set_format(s.inputs.format);
  out->mutable_weights()->set_sha256(s.weights.sha256);
  out->mutable_weights()->set_format(s.weights.format);
  for (const std::string& name : s.outputs) out->add_outputs(name);
  out->set_train(s.train);
  out->set_epochs(s.epochs);
  out->set_steps(s.steps);
  out->mutable_optimizer()->insert(s.optimizer.begin(), s.optimizer.end());
  out->set_checkpoint_every(s.checkpoint_every);
  out->set_num_ipus(static_cast<uint32_t>(s.num_ipus));
  out->set_partition(s.partition);
  out->set_auto_round(s.auto_round);
  out->set_time_limit_seconds(static_cast<uint64_t>(s.time_limit_seconds));
  out->set_after(s.after);
  out->set_account(s.account);
  out->set_qos(s.qos);
}

void ToProto(const batch::JobView& view, v1::Job* out) {
  const jobs::JobRecord& r = view.record;
  out->set_id(r.id);
  out->set_user(r.user);
  out->set_state(ToProto(r.state));
  out->set_num_ipus(static_cast<uint32_t>(r.spec.num_ipus));
  out->set_submitted_unix_ms(r.submitted_unix_ms);
  out->set_queue_position(static_cast<uint32_t>(view.queue_position));
  out->set_account(r.spec.account);
  out->set_qos(r.spec.qos);
  if (!view.details) {  // the queue line only, saying that the rest is hidden
    out->set_details_hidden(true);
    return;
  }
  out->set_name(r.spec.name);
  out->set_reason(r.reason);
  out->set_started_unix_ms(r.started_unix_ms);
  out->set_ended_unix_ms(r.ended_unix_ms);
  ToProto(r.spec, out->mutable_spec());
  out->set_session(view.session);
  for (int ipu : view.ipus) out->add_ipus(static_cast<uint32_t>(ipu));
  out->set_runs_done(view.live_runs);
  out->set_runs_total(r.runs_total);
  out->set_error_kind(r.error_kind);
  out->set_recovery_action(r.recovery_action);
  out->set_requeues(static_cast<uint32_t>(r.requeues));
  out->set_recoveries(static_cast<uint32_t>(r.recoveries));
  out->set_wall_seconds(r.wall_seconds);
  out->set_simulated_seconds(r.simulated_seconds);
  out->set_ipu_seconds(r.ipu_seconds);
  for (const jobs::ResultFile& f : r.results) {
    v1::ResultFile* file = out->add_results();
    file->set_name(f.name);
    file->set_size_bytes(f.size_bytes);
    file->set_sha256(f.sha256);
  }
  out->set_results_purged(r.results_purged);
  out->set_results_expire_unix_ms(r.results_expire_unix_ms);
}

void ToProto(const batch::JobEvent& e, v1::JobEvent* out) {
  out->set_seq(e.seq);
  out->set_unix_ms(e.unix_ms);
  out->set_kind(e.kind);
  out->set_text(e.text);
  out->set_run(e.run);
  for (float loss : e.losses) out->add_losses(loss);
  if (!e.state.empty()) {
    absl::StatusOr<jobs::JobState> state = jobs::ParseJobState(e.state);
    if (state.ok()) out->set_state(ToProto(*state));
  }
}

}  // namespace ipupod::server
