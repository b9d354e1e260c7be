// JobManager::Submit and its checks: everything that can be checked when a
// job is submitted is, so a job that can never run is refused at once
// rather than after hours in the queue.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/format.h"
#include "common/status_macros.h"
#include "common/sync.h"
#include "device/compiler/checks.h"
#include "device/compiler/executable.h"
#include "device/compiler/training_spec.h"
#include "device/runtime/run_steps.h"
#include "scheduler/sharing/policy.h"
#include "scheduler/validation.h"
#include "server/batch/job_manager.h"
#include "server/batch/job_runner.h"

namespace ipupod::batch {
namespace {

using jobs::JobRecord;
using jobs::JobSpec;
using scheduler::Caller;

constexpr size_t kMaxJobName = 64;
constexpr size_t kMaxOutputNames = 256;

absl::Status CheckSha(absl::string_view what, absl::string_view sha) {
  const bool ok = sha.size() == 64 && sha.find_first_not_of("0123456789abcdef") == sha.npos;
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " '", EchoName(sha),
                   "' is not a blob hash: 64 lower-case hex digits, the SHA-256 of the file "
                   "uploaded with PutBlob (ipupod submit does this for you)"));
}

absl::Status CheckFormat(absl::string_view what, const jobs::BlobFile& file) {
  if (file.sha256.empty() || file.format == "npz" || file.format == "safetensors" ||
      file.format == "onnx") {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(what, " format '", EchoName(file.format),
                                                 "' is unknown: use npz, safetensors or onnx"));
}

absl::Status CheckTraining(const JobSpec& s) {
  if (!s.train) {
    if (s.epochs != 0 || s.steps != 0 || !s.optimizer.empty() || s.checkpoint_every != 0) {
      return absl::InvalidArgumentError(
          "epochs, steps, optimizer variables (--lr) and checkpoint_every are for training: set "
          "train (--train)");
    }
    return absl::OkStatus();
  }
  if ((s.epochs > 0) == (s.steps > 0) || s.epochs < 0 || s.steps < 0) {
    return absl::InvalidArgumentError(
        "a training job needs how long to train: epochs E (passes over the inputs) or steps K "
        "(weight updates), exactly one, positive");
  }
  if (s.checkpoint_every < 0) {
    return absl::InvalidArgumentError("checkpoint_every must be 0 (every run) or positive");
  }
  // As --sweep's values (jobs::ParseSweep): a NaN or infinite learning rate
  // would train to garbage and "complete".
  for (const auto& [name, value] : s.optimizer) {
    if (std::isfinite(value)) continue;
    return absl::InvalidArgumentError(absl::StrCat("optimizer variable ", EchoName(name), " is ",
                                                   value, ", not a finite number; give one"));
  }
  return absl::OkStatus();
}

absl::Status CheckSpecShape(const JobSpec& s) {
  if (s.name.size() > kMaxJobName) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job name '", EchoName(s.name), "' is longer than ", kMaxJobName, " characters"));
  }
  IPUPOD_RETURN_IF_ERROR(CheckSha("executable", s.executable_sha256));
  IPUPOD_RETURN_IF_ERROR(CheckSha("inputs", s.inputs.sha256));
  if (!s.weights.sha256.empty()) IPUPOD_RETURN_IF_ERROR(CheckSha("weights", s.weights.sha256));
  IPUPOD_RETURN_IF_ERROR(CheckFormat("inputs", s.inputs));
  IPUPOD_RETURN_IF_ERROR(CheckFormat("weights", s.weights));
  if (s.outputs.size() > kMaxOutputNames) {
    return absl::InvalidArgumentError(absl::StrCat("more than ", kMaxOutputNames, " output names"));
  }
  if (s.num_ipus < 0 || s.num_ipus > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_ipus ", s.num_ipus, " is out of range: 0 (the executable's count) to the pod size"));
  }
  const int64_t max_limit_s = absl::ToInt64Seconds(jobs::kMaxTimeLimit);
  if (s.time_limit_seconds < 0 || s.time_limit_seconds > max_limit_s) {
    return absl::InvalidArgumentError(absl::StrCat("time limit ", s.time_limit_seconds,
                                                   " s is out of range: at most ", max_limit_s,
                                                   " s (30 days); 0 takes the server's default"));
  }
  if (!s.after.empty()) IPUPOD_RETURN_IF_ERROR(jobs::CheckJobId(s.after));
  return CheckTraining(s);
}

// One set of sharing limits a job falls under, named as the scheduler's
// reasons are ("Qos" + "MaxJobsPending" + "PerUser"), and which jobs count
// in it.
struct LimitScope {
  const sharing::Limits* limits;
  std::string prefix;
  std::string suffix;
  std::string what;  // "user alice", "account vision", "QoS normal", "alice in QoS normal"
  std::function<bool(const JobRecord&)> counts;
};

std::vector<LimitScope> ScopesOf(const sharing::SharingPolicy& p, const std::string& user,
                                 const JobSpec& s) {
  std::vector<LimitScope> scopes;
  scopes.push_back({&p.user_limits, "User", "", absl::StrCat("user ", user),
                    [user](const JobRecord& r) { return r.user == user; }});
  if (const sharing::Account* a = sharing::FindAccount(p, s.account)) {
    scopes.push_back({&a->limits, "Account", "", absl::StrCat("account ", s.account),
                      [a = s.account](const JobRecord& r) { return r.spec.account == a; }});
  }
  if (const sharing::Qos* q = sharing::FindQos(p, s.qos)) {
    scopes.push_back({&q->limits, "Qos", "", absl::StrCat("QoS ", s.qos),
                      [q = s.qos](const JobRecord& r) { return r.spec.qos == q; }});
    scopes.push_back(
        {&q->per_user, "Qos", "PerUser", absl::StrCat(user, " in QoS ", s.qos),
         [q = s.qos, user](const JobRecord& r) { return r.spec.qos == q && r.user == user; }});
  }
  return scopes;
}

// The IPUs a job of `s` is granted (its count, rounded up with auto_round).
int GrantedIpus(const JobSpec& s) {
  int granted = 1;
  while (granted < s.num_ipus) granted *= 2;
  return s.auto_round ? granted : s.num_ipus;
}

// A job over a max_ipus limit could never start: refused now, as an attach
// is.
absl::Status CheckCouldStart(const sharing::SharingPolicy& p, const std::string& user,
                             const JobSpec& s) {
  const int ipus = GrantedIpus(s);
  for (const LimitScope& scope : ScopesOf(p, user, s)) {
    const int max = scope.limits->max_ipus;
    if (max <= 0 || ipus <= max) continue;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%sMaxIpus%s: %s may hold at most %d IPUs at once and this job needs %d, so it could "
        "never start; ask for at most %d (--ipus), or ask an admin",
        scope.prefix, scope.suffix, scope.what, max, ipus, max));
  }
  return absl::OkStatus();
}

absl::Status CheckOptimizer(const JobSpec& s, const compiler::Executable& e,
                            absl::string_view sweep_variable) {
  std::vector<std::string> names;
  for (const auto& [name, value] : s.optimizer) names.push_back(name);
  if (!sweep_variable.empty()) names.emplace_back(sweep_variable);
  const std::map<std::string, double> variables = compiler::OptimizerVariables(e.training);
  for (const std::string& name : names) {
    if (variables.count(name) > 0) continue;
    std::vector<std::string> known;
    for (const auto& [k, v] : variables) known.push_back(k);
    return absl::InvalidArgumentError(absl::StrCat(
        "'", EchoName(name), "' is not a variable of this executable's ", e.training.optimizer,
        " optimizer (variables: ", known.empty() ? "none" : absl::StrJoin(known, ", "),
        "); give the attribute at compile time to make it one"));
  }
  return absl::OkStatus();
}

absl::Status CheckOutputs(const JobSpec& s, const compiler::Executable& e) {
  for (const std::string& name : s.outputs) {
    const auto is = [&name](const compiler::TensorSpec& o) { return o.name == name; };
    if (std::any_of(e.outputs.begin(), e.outputs.end(), is)) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "'", EchoName(name), "' is not an output of the executable (outputs: ",
        absl::StrJoin(e.outputs, ", ",
                      [](std::string* out, const compiler::TensorSpec& o) { out->append(o.name); }),
        ")"));
  }
  return absl::OkStatus();
}

// The executable against the job and the pod: mode, IPU count, names.
absl::Status CheckExecutable(JobSpec& s, const compiler::Executable& e,
                             const scheduler::PodView& pod, absl::string_view sweep_variable) {
  const bool training = e.mode == compiler::ExecutableMode::kTraining;
  if (s.train != training) {
    return absl::InvalidArgumentError(
        training ? "the executable is for training: submit it with --train and --epochs or --steps"
                 : "the executable was compiled for inference; compile it with `ipupod compile "
                   "--train` to train");
  }
  if (s.num_ipus == 0) s.num_ipus = static_cast<int>(e.ipus.reserved);
  int pool = pod.num_ipus;
  std::string pool_name = absl::StrCat("the pod (", pod.name, ")");
  if (!s.partition.empty()) {
    const auto is = [&s](const scheduler::PartitionView& p) { return p.name == s.partition; };
    auto it = std::find_if(pod.partitions.begin(), pod.partitions.end(), is);
    if (it == pod.partitions.end()) {
      return absl::NotFoundError(absl::StrCat("partition '", EchoName(s.partition),
                                              "' does not exist (ipupod partition list)"));
    }
    pool = it->block.size;
    pool_name = absl::StrCat("partition ", s.partition);
  }
  IPUPOD_ASSIGN_OR_RETURN(const int granted,
                          scheduler::CheckAttachSize(s.num_ipus, pool, pool_name, s.auto_round));
  IPUPOD_RETURN_IF_ERROR(compiler::CheckSessionIpus(e.ipus, granted, "of the job"));
  IPUPOD_RETURN_IF_ERROR(CheckOutputs(s, e));
  if (training) IPUPOD_RETURN_IF_ERROR(CheckOptimizer(s, e, sweep_variable));
  return absl::OkStatus();
}

}  // namespace

absl::Status JobManager::CheckDependency(const Caller& caller, absl::string_view after) const {
  if (after.empty()) return absl::OkStatus();
  sync::MutexLock lock(&mu_);
  auto it = jobs_.find(after);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("the dependency, job ", after,
                                            ", does not exist (ipupod jobs --all lists jobs)"));
  }
  const JobRecord& dep = it->second->record;
  if (!caller.admin && dep.user != caller.user) {
    return absl::PermissionDeniedError(absl::StrCat("job ", after, " belongs to ", dep.user,
                                                    ": a job can wait only for its "
                                                    "owner's jobs"));
  }
  if (jobs::IsFinished(dep.state) && dep.state != jobs::JobState::kCompleted) {
    return absl::FailedPreconditionError(absl::StrCat("the dependency, job ", after, ", ended ",
                                                      jobs::JobStateName(dep.state),
                                                      ", so this job could never start"));
  }
  return absl::OkStatus();
}

absl::Status JobManager::Associate(const Caller& caller, JobSpec& spec) const {
  const std::shared_ptr<const sharing::SharingPolicy> policy = r_.scheduler->policy();
  IPUPOD_ASSIGN_OR_RETURN(
      const sharing::Association association,
      sharing::Resolve(*policy, caller.user, caller.admin, spec.account, spec.qos));
  spec.account = association.account;
  spec.qos = association.qos;
  const sharing::Qos* q = sharing::FindQos(*policy, spec.qos);
  const int64_t max_wall_s = q == nullptr ? 0 : absl::ToInt64Seconds(q->max_wall);
  if (max_wall_s <= 0) return absl::OkStatus();
  if (spec.time_limit_seconds == 0) {  // the server's default, within the QoS's
    spec.time_limit_seconds =
        std::min(max_wall_s, absl::ToInt64Seconds(options_.default_time_limit));
  } else if (spec.time_limit_seconds > max_wall_s) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "time limit %s is over QoS %s's maximum wall time of %s; ask for at most that",
        absl::FormatDuration(absl::Seconds(spec.time_limit_seconds)), q->name,
        absl::FormatDuration(q->max_wall)));
  }
  return absl::OkStatus();
}

absl::Status JobManager::CheckPendingLimits(const Caller& caller, const JobSpec& spec,
                                            size_t adding) const {
  const std::shared_ptr<const sharing::SharingPolicy> policy = r_.scheduler->policy();
  for (const LimitScope& scope : ScopesOf(*policy, caller.user, spec)) {
    const int max = scope.limits->max_jobs_pending;
    if (max <= 0) continue;
    size_t pending = 0;
    for (const auto& [id, entry] : jobs_) {
      if (entry->record.state == jobs::JobState::kPending && scope.counts(entry->record)) ++pending;
    }
    if (pending + adding <= static_cast<size_t>(max)) continue;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%sMaxJobsPending%s: %s has %d pending jobs, the limit is %d, and this submit adds %d; "
        "wait for some to start, or cancel some (ipupod jobs)",
        scope.prefix, scope.suffix, scope.what, pending, max, adding));
  }
  return absl::OkStatus();
}

absl::Status JobManager::CheckActiveLimits(const Caller& caller, size_t adding) const {
  size_t active = 0;
  for (const auto& [id, entry] : jobs_) {
    if (entry->record.user == caller.user && !jobs::IsFinished(entry->record.state)) ++active;
  }
  if (jobs_.size() + adding > static_cast<size_t>(options_.max_jobs)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the server keeps at most ", options_.max_jobs, " jobs and holds ", jobs_.size(),
        ": delete finished jobs (ipupod job delete) or ask an admin to raise jobs_max_records"));
  }
  if (active + adding > static_cast<size_t>(options_.max_active_jobs_per_user)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "user ", caller.user, " has ", active, " pending or running jobs, and at most ",
        options_.max_active_jobs_per_user, " are allowed; this submit adds ", adding,
        ": wait for some to finish or cancel some (an admin sets the limit: "
        "jobs_max_active_per_user)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JobRecord>> JobManager::PlanSubmit(const Caller& caller,
                                                              const JobSpec& given,
                                                              absl::string_view sweep_text) {
  IPUPOD_RETURN_IF_ERROR(CheckSpecShape(given));
  IPUPOD_ASSIGN_OR_RETURN(const jobs::Sweep sweep, jobs::ParseSweep(sweep_text));
  if (!sweep.variable.empty() && !given.train) {
    return absl::InvalidArgumentError("--sweep varies an optimizer variable: it needs --train");
  }
  JobSpec spec = given;
  IPUPOD_RETURN_IF_ERROR(Associate(caller, spec));
  if (spec.time_limit_seconds == 0) {
    spec.time_limit_seconds = absl::ToInt64Seconds(options_.default_time_limit);
  }
  IPUPOD_RETURN_IF_ERROR(CheckDependency(caller, spec.after));
  for (const std::string* sha :
       {&spec.executable_sha256, &spec.inputs.sha256, &spec.weights.sha256}) {
    // Only the caller's own blobs (server/jobs/blob_store.h, Ownership): another
    // user's hash reads as one nobody stored.
    if (sha->empty() || r_.blobs->Stat(caller.user, *sha).has_value()) continue;
    return absl::NotFoundError(absl::StrCat("blob ", *sha,
                                            " is not on the server: upload it first (PutBlob; "
                                            "ipupod submit uploads for you)"));
  }
  IPUPOD_ASSIGN_OR_RETURN(const std::string ipx,
                          jobs::ReadBlobFile(r_.blobs->PathOf(spec.executable_sha256)));
  absl::StatusOr<compiler::Executable> e = compiler::ReadExecutable(ipx);
  if (!e.ok()) return driver::WithContext(e.status(), "the executable");
  IPUPOD_RETURN_IF_ERROR(CheckExecutable(spec, *e, r_.scheduler->GetPod(), sweep.variable));
  IPUPOD_RETURN_IF_ERROR(CheckCouldStart(*r_.scheduler->policy(), caller.user, spec));
  IPUPOD_ASSIGN_OR_RETURN(
      tensor::NamedTensors inputs,
      ReadTensorBlob(r_.blobs->PathOf(spec.inputs.sha256), spec.inputs.format, "inputs"));
  IPUPOD_ASSIGN_OR_RETURN(const driver::StepPlan plan,
                          runtime::PlanSteps(*e, std::move(inputs), "the inputs"));
  if (!spec.weights.sha256.empty()) {
    IPUPOD_RETURN_IF_ERROR(
        ReadTensorBlob(r_.blobs->PathOf(spec.weights.sha256), spec.weights.format, "weights")
            .status());
  }
  IPUPOD_ASSIGN_OR_RETURN(const int64_t runs, RunsOf(spec, *e, plan.steps));
  if (spec.name.empty()) spec.name = spec.train ? "train" : "infer";

  std::vector<JobRecord> records(sweep.values.empty() ? 1 : sweep.values.size());
  for (size_t i = 0; i < records.size(); ++i) {
    JobRecord& r = records[i];
    r.user = caller.user;
    r.admin = caller.admin;
    r.spec = spec;
    if (!sweep.values.empty()) r.spec.optimizer[sweep.variable] = sweep.values[i];
    r.runs_total = runs;
    r.reason = std::string(r.spec.after.empty() ? jobs::kReasonResources : jobs::kReasonDependency);
  }
  return records;
}

absl::StatusOr<std::vector<JobView>> JobManager::Submit(const Caller& caller, const JobSpec& spec,
                                                        absl::string_view sweep) {
  if (stopping_) return absl::UnavailableError("the server is shutting down; submit again later");
  IPUPOD_ASSIGN_OR_RETURN(std::vector<JobRecord> records, PlanSubmit(caller, spec, sweep));
  sync::MutexLock lock(&mu_);
  IPUPOD_RETURN_IF_ERROR(CheckActiveLimits(caller, records.size()));
  IPUPOD_RETURN_IF_ERROR(CheckPendingLimits(caller, records.front().spec, records.size()));
  IPUPOD_ASSIGN_OR_RETURN(const int64_t number, r_.store->NextJobNumber());
  const int64_t now = absl::ToUnixMillis(Now());
  std::vector<std::string> blobs = {spec.executable_sha256, spec.inputs.sha256};
  if (!spec.weights.sha256.empty()) blobs.push_back(spec.weights.sha256);
  for (size_t i = 0; i < records.size(); ++i) {
    records[i].id = jobs::JobId(number, records.size() > 1 ? static_cast<int>(i) : -1);
    records[i].submitted_unix_ms = now;
    absl::Status held = r_.blobs->Reference(records[i].id, caller.user, blobs);
    if (!held.ok()) {
      for (size_t j = 0; j < i; ++j) r_.blobs->Release(records[j].id);
      return held;
    }
  }
  if (absl::Status written = r_.store->PutJobs(records); !written.ok()) {
    for (const JobRecord& r : records) r_.blobs->Release(r.id);
    return written;
  }
  std::vector<JobView> views;
  for (JobRecord& record : records) {
    Entry& e = AddLocked(std::move(record));
    (void)JobFiles::Open(options_.jobs_dir, e.record.id);
    LogState(e, absl::StrCat("submitted by ", caller.user));
    views.push_back(ViewLocked(caller, e, {}));
  }
  Kick();
  return views;
}

}  // namespace ipupod::batch
