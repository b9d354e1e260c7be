#include "client/cli/job_output.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/args.h"
#include "common/format.h"
#include "common/utf8.h"

namespace ipupod::cli {
namespace {

// Table cells longer than this are shortened; `job show` prints them whole.
constexpr size_t kNameCellMax = 24;
constexpr size_t kReasonCellMax = 32;

std::string Shorten(absl::string_view text, size_t max) {
  if (text.size() <= max) return std::string(text);
  return absl::StrCat(text.substr(0, max - 3), "...");
}

// "07:18:16" today (in `zone`), "11-25 07:18" before; "-" for never.
std::string TimeCell(int64_t unix_ms, absl::Time now, absl::TimeZone zone) {
  if (unix_ms <= 0) return "-";
  const absl::Time t = absl::FromUnixMillis(unix_ms);
  const bool today =
      absl::FormatTime("%Y-%m-%d", t, zone) == absl::FormatTime("%Y-%m-%d", now, zone);
  return absl::FormatTime(today ? "%H:%M:%S" : "%m-%d %H:%M", t, zone);
}

std::string DateText(int64_t unix_ms, absl::TimeZone zone) {
  if (unix_ms <= 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", absl::FromUnixMillis(unix_ms), zone);
}

// Running: this attempt's time so far at least; finished: the server's sum
// over every attempt.
double ElapsedSeconds(const v1::Job& job, absl::Time now) {
  double seconds = job.wall_seconds();
  if (job.state() == v1::RUNNING && job.started_unix_ms() > 0) {
    seconds =
        std::max(seconds, absl::ToDoubleSeconds(now - absl::FromUnixMillis(job.started_unix_ms())));
  } else if (seconds <= 0 && job.started_unix_ms() > 0 &&
             job.ended_unix_ms() >= job.started_unix_ms()) {
    seconds = static_cast<double>(job.ended_unix_ms() - job.started_unix_ms()) / 1000;
  }
  return seconds;
}

// The job with every string a user chose (or a server message echoing one)
// escaped for a terminal (common/utf8.h): a job name with "\n" or ESC in it
// forges no line of `job show` and moves no cursor.
v1::Job Printable(const v1::Job& raw) {
  v1::Job job = raw;
  for (std::string* field : {job.mutable_name(), job.mutable_user(), job.mutable_account(),
                             job.mutable_qos(), job.mutable_reason(), job.mutable_session(),
                             job.mutable_error_kind(), job.mutable_recovery_action()}) {
    *field = EscapeControls(*field);
  }
  if (job.has_spec()) {  // (mutable_spec would make one)
    v1::JobSpec& spec = *job.mutable_spec();
    for (std::string* field : {spec.mutable_name(), spec.mutable_partition(), spec.mutable_after(),
                               spec.mutable_account(), spec.mutable_qos()}) {
      *field = EscapeControls(*field);
    }
    for (std::string& output : *spec.mutable_outputs()) output = EscapeControls(output);
  }
  for (v1::ResultFile& file : *job.mutable_results()) {
    *file.mutable_name() = EscapeControls(file.name());
  }
  return job;
}

std::string ProgressCell(const v1::Job& job) {
  if (job.runs_total() <= 0) return "-";
  return absl::StrCat(job.runs_done(), "/", job.runs_total());
}

std::string ReasonText(const v1::Job& job) {
  std::string reason = job.reason();
  if (job.state() == v1::PENDING && job.queue_position() > 0) {
    absl::StrAppend(&reason, reason.empty() ? "" : ", ", "#", job.queue_position(), " in queue");
  }
  return reason;
}

Json BlobFileJson(const v1::BlobFile& file) {
  return {{"sha256", file.sha256()}, {"format", file.format()}};
}

Json SpecJson(const v1::JobSpec& spec) {
  Json optimizer = Json::object();
  for (const auto& [name, value] : spec.optimizer()) optimizer[name] = value;
  return {{"name", spec.name()},
          {"executable_sha256", spec.executable_sha256()},
          {"inputs", BlobFileJson(spec.inputs())},
          {"weights", BlobFileJson(spec.weights())},
          {"outputs", JsonArray(spec.outputs())},
          {"train", spec.train()},
          {"epochs", spec.epochs()},
          {"steps", spec.steps()},
          {"optimizer", std::move(optimizer)},
          {"checkpoint_every", spec.checkpoint_every()},
          {"num_ipus", spec.num_ipus()},
          {"partition", spec.partition()},
          {"auto_round", spec.auto_round()},
          {"time_limit_seconds", spec.time_limit_seconds()},
          {"after", spec.after()},
          {"account", spec.account()},
          {"qos", spec.qos()}};
}

Json ResultsJson(const v1::Job& job) {
  Json results = Json::array();
  for (const v1::ResultFile& r : job.results()) {
    results.push_back({{"name", r.name()}, {"size_bytes", r.size_bytes()}, {"sha256", r.sha256()}});
  }
  return results;
}

}  // namespace

absl::string_view JobStateText(v1::JobState state) {
  switch (state) {
    case v1::PENDING:
      return "PENDING";
    case v1::RUNNING:
      return "RUNNING";
    case v1::COMPLETED:
      return "COMPLETED";
    case v1::FAILED:
      return "FAILED";
    case v1::CANCELLED:
      return "CANCELLED";
    case v1::TIMEOUT:
      return "TIMEOUT";
    default:
      return "UNKNOWN";
  }
}

bool JobFinished(v1::JobState state) {
  return state == v1::COMPLETED || state == v1::FAILED || state == v1::CANCELLED ||
         state == v1::TIMEOUT;
}

const char kJobStatesHelp[] =
    "States: PENDING waits, and REASON says why: Resources (in the pod's queue until its\n"
    "IPUs are free; first come, first served with backfill), Dependency (its --after job has\n"
    "not completed yet), Held (`ipupod job hold`; `ipupod job release` puts it back).\n"
    "RUNNING has its IPUs. Then one of: COMPLETED (every run done; results kept until\n"
    "fetched and deleted, or the server's retention period ends), FAILED (REASON says why,\n"
    "with the device error's kind; faults are recovered and the job requeued first),\n"
    "CANCELLED (`ipupod job cancel`, an admin, or its --after job did not complete), TIMEOUT\n"
    "(its --time-limit passed; a training job keeps its last checkpoint).\n";

// ---------------------------------------------------------------- JSON

Json JobJson(const v1::Job& job) {
  return {{"id", job.id()},
          {"name", job.name()},
          {"user", job.user()},
          {"account", job.account()},
          {"qos", job.qos()},
          {"state", JobStateText(job.state())},
          {"reason", job.reason()},
          {"num_ipus", job.num_ipus()},
          {"submitted_unix_ms", job.submitted_unix_ms()},
          {"started_unix_ms", job.started_unix_ms()},
          {"ended_unix_ms", job.ended_unix_ms()},
          {"spec", job.has_spec() ? SpecJson(job.spec()) : Json(nullptr)},
          {"session", job.session()},
          {"ipus", JsonArray(job.ipus())},
          {"runs_done", job.runs_done()},
          {"runs_total", job.runs_total()},
          {"error_kind", job.error_kind()},
          {"recovery_action", job.recovery_action()},
          {"requeues", job.requeues()},
          {"recoveries", job.recoveries()},
          {"wall_seconds", job.wall_seconds()},
          {"simulated_seconds", job.simulated_seconds()},
          {"ipu_seconds", job.ipu_seconds()},
          {"results", ResultsJson(job)},
          {"results_purged", job.results_purged()},
          {"results_expire_unix_ms", job.results_expire_unix_ms()},
          {"queue_position", job.queue_position()},
          {"details_hidden", job.details_hidden()}};
}

Json JobsJson(const std::vector<v1::Job>& jobs) {
  Json list = Json::array();
  for (const v1::Job& job : jobs) list.push_back(JobJson(job));
  return {{"jobs", std::move(list)}};
}

Json JobEventJson(const v1::JobEvent& event) {
  Json doc = {{"seq", event.seq()},
              {"unix_ms", event.unix_ms()},
              {"kind", event.kind()},
              {"text", event.text()}};
  if (event.kind() == "run") {
    doc["run"] = event.run();
    doc["losses"] = JsonArray(event.losses());
  }
  if (event.kind() == "state") doc["state"] = JobStateText(event.state());
  return doc;
}

// ---------------------------------------------------------------- text

std::string JobsTable(const std::vector<v1::Job>& jobs, absl::Time now, absl::TimeZone zone,
                      absl::string_view empty_text) {
  if (jobs.empty()) return std::string(empty_text);
  Table table({{"ID"},
               {"NAME"},
               {"USER"},
               {"ACCOUNT"},
               {"QOS"},
               {"STATE"},
               {"REASON"},
               {"IPUS", Table::Align::kRight},
               {"SUBMITTED"},
               {"STARTED"},
               {"ELAPSED", Table::Align::kRight},
               {"PROGRESS", Table::Align::kRight}});
  bool hidden = false;
  for (const v1::Job& job : jobs) {
    const double elapsed = ElapsedSeconds(job, now);
    hidden |= job.details_hidden();
    const std::string name =
        job.details_hidden() ? "(hidden)" : OrDash(Shorten(job.name(), kNameCellMax));
    table.AddRow({job.id(), name, OrDash(job.user()), OrDash(job.account()), OrDash(job.qos()),
                  std::string(JobStateText(job.state())),
                  OrDash(Shorten(ReasonText(job), kReasonCellMax)), absl::StrCat(job.num_ipus()),
                  TimeCell(job.submitted_unix_ms(), now, zone),
                  TimeCell(job.started_unix_ms(), now, zone),
                  elapsed > 0 ? FormatClockDuration(elapsed) : "-", ProgressCell(job)});
  }
  if (!hidden) return table.Render();
  return absl::StrCat(table.Render(),
                      "(hidden): another user's job; only its owner and admins see its name, "
                      "reason, start and progress\n");
}

namespace {

std::string BlobText(const v1::BlobFile& file, absl::string_view none) {
  if (file.sha256().empty()) return std::string(none);
  return absl::StrCat(file.sha256(), " (", OrDash(file.format()), ")");
}

std::string TrainingText(const v1::JobSpec& spec) {
  if (!spec.train()) return "no (inference)";
  std::string text = spec.epochs() > 0 ? absl::StrCat(spec.epochs(), " epochs")
                                       : absl::StrCat(spec.steps(), " weight updates");
  std::vector<std::string> variables;
  for (const auto& [name, value] : spec.optimizer()) {
    variables.push_back(absl::StrFormat("%s=%g", name, value));
  }
  std::sort(variables.begin(), variables.end());  // the proto map has no order
  if (!variables.empty()) absl::StrAppend(&text, "; optimizer ", absl::StrJoin(variables, ","));
  absl::StrAppend(&text, "; host copy every ",
                  spec.checkpoint_every() > 0 ? absl::StrCat(spec.checkpoint_every(), " runs")
                                              : std::string("run"));
  return text;
}

std::string PlacementText(const v1::JobSpec& spec) {
  std::string text = spec.num_ipus() > 0 ? absl::StrCat(spec.num_ipus(), " IPUs")
                                         : std::string("the executable's IPU count");
  if (!spec.partition().empty()) absl::StrAppend(&text, " in partition ", spec.partition());
  if (spec.auto_round()) absl::StrAppend(&text, ", --auto-round");
  return text;
}

std::string SpecText(const v1::JobSpec& spec) {
  return absl::StrCat(
      "spec:\n  executable:  ", OrDash(spec.executable_sha256()),
      "\n  inputs:      ", BlobText(spec.inputs(), "-"),
      "\n  weights:     ", BlobText(spec.weights(), "the executable's own"),
      "\n  outputs:     ", spec.outputs().empty() ? "all" : absl::StrJoin(spec.outputs(), ", "),
      "\n  training:    ", TrainingText(spec), "\n  placement:   ", PlacementText(spec),
      "\n  time limit:  ",
      spec.time_limit_seconds() > 0 ? FormatDurationArg(spec.time_limit_seconds())
                                    : std::string("the server's default"),
      "\n  after:       ", OrDash(spec.after()), "\n");
}

std::string ResultsText(const v1::Job& job, absl::TimeZone zone) {
  if (job.results_purged()) return "results:       purged by the server's retention period\n";
  if (job.results().empty()) return "results:       none yet\n";
  Table table({{"  FILE"}, {"SIZE", Table::Align::kRight}, {"SHA256"}});
  for (const v1::ResultFile& r : job.results()) {
    table.AddRow({absl::StrCat("  ", r.name()), FormatBytesTrimmed(r.size_bytes()), r.sha256()});
  }
  std::string text = absl::StrCat("results:\n", table.Render());
  if (job.results_expire_unix_ms() > 0) {
    absl::StrAppend(&text, "  kept until ", DateText(job.results_expire_unix_ms(), zone), "\n");
  }
  return text;
}

}  // namespace

namespace {

// Another user's job: what everyone sees, and that the rest is hidden
// (never "none yet" or "-" for what the job has but the caller may not see).
std::string HiddenJobText(const v1::Job& raw, absl::TimeZone zone) {
  const v1::Job job = Printable(raw);
  std::string text = absl::StrCat(
      "job:           ", job.id(), "\nuser:          ", OrDash(job.user()),
      "\naccount:       ", OrDash(job.account()), "\nqos:           ", OrDash(job.qos()),
      "\nstate:         ", JobStateText(job.state()), "\nipus:          ", job.num_ipus(),
      "\nsubmitted:     ", DateText(job.submitted_unix_ms(), zone));
  if (job.queue_position() > 0) absl::StrAppend(&text, "\nqueue place:   #", job.queue_position());
  absl::StrAppend(&text, "\ndetails:       hidden: the job belongs to ", OrDash(job.user()),
                  "; only its owner and admins see its name, reason, times, progress, spec and "
                  "results\n");
  return text;
}

}  // namespace

std::string JobText(const v1::Job& raw, absl::Time now, absl::TimeZone zone) {
  if (raw.details_hidden()) return HiddenJobText(raw, zone);
  const v1::Job job = Printable(raw);
  const double elapsed = ElapsedSeconds(job, now);
  std::string text = absl::StrCat(
      "job:           ", job.id(), "\nname:          ", OrDash(job.name()),
      "\nuser:          ", OrDash(job.user()), "\naccount:       ", OrDash(job.account()),
      "\nqos:           ", OrDash(job.qos()), "\nstate:         ", JobStateText(job.state()),
      "\nreason:        ", OrDash(ReasonText(job)), "\nipus:          ", job.num_ipus(),
      job.ipus().empty() ? "" : absl::StrCat(" (", CompactIpus(job.ipus()), ")"),
      "\nsession:       ", OrDash(job.session()),
      "\nsubmitted:     ", DateText(job.submitted_unix_ms(), zone),
      "\nstarted:       ", DateText(job.started_unix_ms(), zone),
      "\nended:         ", DateText(job.ended_unix_ms(), zone),
      "\nelapsed:       ", elapsed > 0 ? FormatClockDuration(elapsed) : "-",
      "\nprogress:      ", ProgressCell(job), " runs\n");
  if (!job.error_kind().empty()) {
    absl::StrAppend(&text, "error kind:    ", job.error_kind(), ", recovery action ",
                    OrDash(job.recovery_action()), "\n");
  }
  absl::StrAppend(&text, "faults:        ", job.recoveries(), " recovered in place, ",
                  job.requeues(), " requeues\n",
                  absl::StrFormat("time:          wall %s, simulated %s, %.1f IPU-seconds\n",
                                  FormatClockDuration(job.wall_seconds()),
                                  FormatSiDuration(job.simulated_seconds()), job.ipu_seconds()));
  absl::StrAppend(&text, job.has_spec() ? SpecText(job.spec())
                                        : "spec:          (only its owner and admins see it)\n");
  absl::StrAppend(&text, ResultsText(job, zone));
  return text;
}

std::string JobEventText(const v1::JobEvent& event, absl::TimeZone zone) {
  std::string text = EscapeControls(event.text());
  if (text.empty()) {
    text = event.kind() == "state" ? std::string(JobStateText(event.state()))
           : event.kind() == "run" ? absl::StrCat("run ", event.run())
                                   : std::string("-");
  }
  if (!event.losses().empty()) {
    std::vector<std::string> losses;
    for (float loss : event.losses()) losses.push_back(absl::StrFormat("%.6g", loss));
    absl::StrAppend(&text, "; loss ", absl::StrJoin(losses, " "));
  }
  const std::string when =
      event.unix_ms() > 0
          ? absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(event.unix_ms()), zone)
          : std::string("-");
  return absl::StrFormat("%s  %-10s  %s\n", when, EscapeControls(event.kind()), text);
}

std::string SubmittedText(const std::vector<v1::Job>& jobs) {
  std::string text;
  for (const v1::Job& job : jobs) absl::StrAppend(&text, "submitted job ", job.id(), "\n");
  return text;
}

std::string JobEndText(const v1::Job& raw) {
  const v1::Job job = Printable(raw);
  std::string text = absl::StrCat("job ", job.id(), " ");
  if (!JobFinished(job.state())) {
    return absl::StrCat(text, "is still ", JobStateText(job.state()),
                        job.reason().empty() ? "" : absl::StrCat(" (", job.reason(), ")"), "\n");
  }
  absl::StrAppend(&text, JobStateText(job.state()));
  if (!job.reason().empty()) absl::StrAppend(&text, ": ", job.reason());
  absl::StrAppend(&text, " (",
                  job.runs_total() > 0 ? absl::StrCat(ProgressCell(job), " runs, ") : "", "wall ",
                  FormatClockDuration(job.wall_seconds()), ")\n");
  if (!job.error_kind().empty()) {
    absl::StrAppend(&text, "kind: ", job.error_kind());
    if (!job.recovery_action().empty()) {
      absl::StrAppend(&text, ", recovery action: ", job.recovery_action());
    }
    absl::StrAppend(&text, "\n");
  }
  return text;
}

}  // namespace ipupod::cli
