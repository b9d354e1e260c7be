#include "server/jobs/job.h"

#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/format.h"
#include "common/json_reader.h"
#include "common/status_macros.h"

namespace ipupod::jobs {
namespace {

using json::Json;
using json::ObjectReader;

constexpr JobState kAllStates[] = {JobState::kPending, JobState::kRunning,   JobState::kCompleted,
                                   JobState::kFailed,  JobState::kCancelled, JobState::kTimeout};

bool IsDigits(absl::string_view text) {
  if (text.empty() || text.size() > 18) return false;
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return text.size() == 1 || text[0] != '0';
}

bool IsVariableName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

Json SpecJson(const JobSpec& s) {
  return {{"name", s.name},
          {"executable_sha256", s.executable_sha256},
          {"inputs", {{"sha256", s.inputs.sha256}, {"format", s.inputs.format}}},
          {"weights", {{"sha256", s.weights.sha256}, {"format", s.weights.format}}},
          {"outputs", s.outputs},
          {"train", s.train},
          {"epochs", s.epochs},
          {"steps", s.steps},
          {"optimizer", s.optimizer},
          {"checkpoint_every", s.checkpoint_every},
          {"num_ipus", s.num_ipus},
          {"partition", s.partition},
          {"auto_round", s.auto_round},
          {"time_limit_seconds", s.time_limit_seconds},
          {"after", s.after},
          {"account", s.account},
          {"qos", s.qos}};
}

absl::StatusOr<BlobFile> ReadBlobFile(ObjectReader& parent, absl::string_view key) {
  IPUPOD_ASSIGN_OR_RETURN(ObjectReader r, parent.Object(key));
  BlobFile file;
  IPUPOD_ASSIGN_OR_RETURN(file.sha256, r.String("sha256"));
  IPUPOD_ASSIGN_OR_RETURN(file.format, r.String("format"));
  IPUPOD_RETURN_IF_ERROR(r.RejectUnknownKeys());
  return file;
}

absl::StatusOr<std::map<std::string, double>> ReadNumberMap(ObjectReader& parent,
                                                            absl::string_view key) {
  IPUPOD_ASSIGN_OR_RETURN(ObjectReader r, parent.Object(key));
  IPUPOD_ASSIGN_OR_RETURN(const Json* object, parent.Get(key));
  std::map<std::string, double> out;
  for (const auto& [name, value] : object->items()) {
    IPUPOD_ASSIGN_OR_RETURN(out[name], json::ReadNumber(value, r.PathOf(name)));
  }
  return out;
}

absl::Status ReadSpecTraining(ObjectReader& r, JobSpec& s) {
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("train", [&](const Json& v, const json::JsonPath& at) {
    IPUPOD_ASSIGN_OR_RETURN(s.train, json::ReadBool(v, at));
    return absl::OkStatus();
  }));
  IPUPOD_ASSIGN_OR_RETURN(s.epochs, r.Int("epochs"));
  IPUPOD_ASSIGN_OR_RETURN(s.steps, r.Int("steps"));
  IPUPOD_ASSIGN_OR_RETURN(s.optimizer, ReadNumberMap(r, "optimizer"));
  IPUPOD_ASSIGN_OR_RETURN(s.checkpoint_every, r.Int("checkpoint_every"));
  return absl::OkStatus();
}

absl::Status OptionalString(ObjectReader& r, absl::string_view key, std::string& out) {
  return r.IfPresent(key, [&out](const Json& v, const json::JsonPath& at) -> absl::Status {
    if (!v.is_string()) return at.TypeError("a string", v);
    out = v.get<std::string>();
    return absl::OkStatus();
  });
}

absl::StatusOr<JobSpec> ReadSpec(ObjectReader& parent) {
  IPUPOD_ASSIGN_OR_RETURN(ObjectReader r, parent.Object("spec"));
  JobSpec s;
  IPUPOD_ASSIGN_OR_RETURN(s.name, r.String("name"));
  IPUPOD_ASSIGN_OR_RETURN(s.executable_sha256, r.String("executable_sha256"));
  IPUPOD_ASSIGN_OR_RETURN(s.inputs, ReadBlobFile(r, "inputs"));
  IPUPOD_ASSIGN_OR_RETURN(s.weights, ReadBlobFile(r, "weights"));
  IPUPOD_ASSIGN_OR_RETURN(s.outputs, r.StringList("outputs"));
  IPUPOD_RETURN_IF_ERROR(ReadSpecTraining(r, s));
  IPUPOD_ASSIGN_OR_RETURN(const int64_t ipus, r.Int("num_ipus"));
  s.num_ipus = static_cast<int>(ipus);
  IPUPOD_ASSIGN_OR_RETURN(s.partition, r.String("partition"));
  IPUPOD_ASSIGN_OR_RETURN(const Json* auto_round, r.Get("auto_round"));
  IPUPOD_ASSIGN_OR_RETURN(s.auto_round, json::ReadBool(*auto_round, r.PathOf("auto_round")));
  IPUPOD_ASSIGN_OR_RETURN(s.time_limit_seconds, r.Int("time_limit_seconds"));
  IPUPOD_ASSIGN_OR_RETURN(s.after, r.String("after"));
  // Absent in records written before jobs carried them: the defaults.
  IPUPOD_RETURN_IF_ERROR(OptionalString(r, "account", s.account));
  IPUPOD_RETURN_IF_ERROR(OptionalString(r, "qos", s.qos));
  IPUPOD_RETURN_IF_ERROR(r.RejectUnknownKeys());
  return s;
}

absl::StatusOr<std::vector<ResultFile>> ReadResults(ObjectReader& r) {
  IPUPOD_ASSIGN_OR_RETURN(const Json* list, r.Get("results"));
  IPUPOD_RETURN_IF_ERROR(json::ExpectArray(*list, r.PathOf("results"), 64));
  std::vector<ResultFile> out;
  for (size_t i = 0; i < list->size(); ++i) {
    IPUPOD_ASSIGN_OR_RETURN(ObjectReader f,
                            ObjectReader::Open((*list)[i], r.PathOf("results").Index(i)));
    ResultFile file;
    IPUPOD_ASSIGN_OR_RETURN(file.name, f.String("name"));
    IPUPOD_ASSIGN_OR_RETURN(const int64_t size, f.Int("size_bytes"));
    file.size_bytes = static_cast<uint64_t>(size);
    IPUPOD_ASSIGN_OR_RETURN(file.sha256, f.String("sha256"));
    IPUPOD_RETURN_IF_ERROR(f.RejectUnknownKeys());
    out.push_back(std::move(file));
  }
  return out;
}

absl::StatusOr<double> Number(ObjectReader& r, absl::string_view key) {
  IPUPOD_ASSIGN_OR_RETURN(const Json* value, r.Get(key));
  return json::ReadNumber(*value, r.PathOf(key));
}

absl::Status ReadProgress(ObjectReader& r, JobRecord& j) {
  IPUPOD_ASSIGN_OR_RETURN(j.runs_done, r.Int("runs_done"));
  IPUPOD_ASSIGN_OR_RETURN(j.runs_total, r.Int("runs_total"));
  IPUPOD_ASSIGN_OR_RETURN(j.checkpoint, r.String("checkpoint"));
  IPUPOD_ASSIGN_OR_RETURN(j.error_kind, r.String("error_kind"));
  IPUPOD_ASSIGN_OR_RETURN(j.recovery_action, r.String("recovery_action"));
  IPUPOD_ASSIGN_OR_RETURN(const int64_t requeues, r.Int("requeues"));
  IPUPOD_ASSIGN_OR_RETURN(const int64_t recoveries, r.Int("recoveries"));
  j.requeues = static_cast<int>(requeues);
  j.recoveries = static_cast<int>(recoveries);
  IPUPOD_ASSIGN_OR_RETURN(j.wall_seconds, Number(r, "wall_seconds"));
  IPUPOD_ASSIGN_OR_RETURN(j.simulated_seconds, Number(r, "simulated_seconds"));
  IPUPOD_ASSIGN_OR_RETURN(j.ipu_seconds, Number(r, "ipu_seconds"));
  IPUPOD_ASSIGN_OR_RETURN(j.results, ReadResults(r));
  IPUPOD_ASSIGN_OR_RETURN(const Json* purged, r.Get("results_purged"));
  IPUPOD_ASSIGN_OR_RETURN(j.results_purged, json::ReadBool(*purged, r.PathOf("results_purged")));
  IPUPOD_ASSIGN_OR_RETURN(j.results_expire_unix_ms, r.Int("results_expire_unix_ms"));
  return absl::OkStatus();
}

}  // namespace

absl::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kPending:
      return "PENDING";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kCompleted:
      return "COMPLETED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
    case JobState::kTimeout:
      return "TIMEOUT";
  }
  return "UNKNOWN";
}

absl::StatusOr<JobState> ParseJobState(absl::string_view text) {
  for (JobState state : kAllStates) {
    if (absl::EqualsIgnoreCase(text, JobStateName(state))) return state;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown job state '", EchoName(text),
                   "': use PENDING, RUNNING, COMPLETED, FAILED, CANCELLED or TIMEOUT"));
}

bool IsFinished(JobState state) {
  return state != JobState::kPending && state != JobState::kRunning;
}

std::string JobId(int64_t number, int index) {
  return index < 0 ? absl::StrCat(number) : absl::StrCat(number, ".", index);
}

absl::Status CheckJobId(absl::string_view text) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, '.');
  const bool ok = (parts.size() == 1 || parts.size() == 2) && IsDigits(parts[0]) &&
                  (parts.size() == 1 || (IsDigits(parts[1]) && parts[1].size() <= 3));
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("'", EchoName(text),
                   "' is not a job id: ids are numbers like 17, or 17.3 for a sweep's jobs "
                   "(`ipupod jobs` lists them)"));
}

absl::StatusOr<Sweep> ParseSweep(absl::string_view text) {
  Sweep sweep;
  if (text.empty()) return sweep;
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sweep '", EchoName(text), "': ", why,
                     "; write NAME=V1,V2,... with an optimizer variable NAME and up to ",
                     kMaxSweepValues, " numbers, e.g. \"lr=0.1,0.01,0.001\""));
  };
  const size_t eq = text.find('=');
  if (eq == absl::string_view::npos) return bad("no '='");
  sweep.variable = std::string(absl::StripAsciiWhitespace(text.substr(0, eq)));
  if (!IsVariableName(sweep.variable)) return bad("the name is not letters, digits and '_'");
  for (absl::string_view piece : absl::StrSplit(text.substr(eq + 1), ',')) {
    double value = 0;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(piece), &value) || !std::isfinite(value)) {
      return bad(absl::StrCat("'", EchoName(piece), "' is not a finite number"));
    }
    if (sweep.values.size() == kMaxSweepValues) {
      return bad(absl::StrCat("more than ", kMaxSweepValues, " values"));
    }
    sweep.values.push_back(value);
  }
  return sweep;
}

std::string ToJson(const JobRecord& j) {
  Json results = Json::array();
  for (const ResultFile& f : j.results) {
    results.push_back({{"name", f.name}, {"size_bytes", f.size_bytes}, {"sha256", f.sha256}});
  }
  const Json doc = {{"id", j.id},
                    {"user", j.user},
                    {"spec", SpecJson(j.spec)},
                    {"state", std::string(JobStateName(j.state))},
                    {"reason", j.reason},
                    {"held", j.held},
                    {"admin", j.admin},
                    {"submitted_unix_ms", j.submitted_unix_ms},
                    {"started_unix_ms", j.started_unix_ms},
                    {"first_started_unix_ms", j.first_started_unix_ms},
                    {"ended_unix_ms", j.ended_unix_ms},
                    {"runs_done", j.runs_done},
                    {"runs_total", j.runs_total},
                    {"checkpoint", j.checkpoint},
                    {"error_kind", j.error_kind},
                    {"recovery_action", j.recovery_action},
                    {"requeues", j.requeues},
                    {"recoveries", j.recoveries},
                    {"wall_seconds", j.wall_seconds},
                    {"simulated_seconds", j.simulated_seconds},
                    {"ipu_seconds", j.ipu_seconds},
                    {"results", results},
                    {"results_purged", j.results_purged},
                    {"results_expire_unix_ms", j.results_expire_unix_ms}};
  return doc.dump();
}

namespace {

// Keys added with accounting; absent in older records (false, 0).
absl::Status ReadAccountingFields(ObjectReader& r, JobRecord& j) {
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("admin", [&j](const Json& v, const json::JsonPath& at) {
    IPUPOD_ASSIGN_OR_RETURN(j.admin, json::ReadBool(v, at));
    return absl::OkStatus();
  }));
  return r.IfPresent("first_started_unix_ms", [&j](const Json& v, const json::JsonPath& at) {
    IPUPOD_ASSIGN_OR_RETURN(j.first_started_unix_ms, json::ReadInt(v, at, 0));
    return absl::OkStatus();
  });
}

}  // namespace

absl::StatusOr<JobRecord> JobRecordFromJson(absl::string_view text) {
  IPUPOD_ASSIGN_OR_RETURN(const Json doc, json::Parse(text, "job record"));
  IPUPOD_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(doc, json::JsonPath("job record")));
  JobRecord j;
  IPUPOD_ASSIGN_OR_RETURN(j.id, r.String("id"));
  IPUPOD_ASSIGN_OR_RETURN(j.user, r.String("user"));
  IPUPOD_ASSIGN_OR_RETURN(j.spec, ReadSpec(r));
  IPUPOD_ASSIGN_OR_RETURN(const std::string state, r.String("state"));
  IPUPOD_ASSIGN_OR_RETURN(j.state, ParseJobState(state));
  IPUPOD_ASSIGN_OR_RETURN(j.reason, r.String("reason"));
  IPUPOD_ASSIGN_OR_RETURN(const Json* held, r.Get("held"));
  IPUPOD_ASSIGN_OR_RETURN(j.held, json::ReadBool(*held, r.PathOf("held")));
  IPUPOD_ASSIGN_OR_RETURN(j.submitted_unix_ms, r.Int("submitted_unix_ms"));
  IPUPOD_ASSIGN_OR_RETURN(j.started_unix_ms, r.Int("started_unix_ms"));
  IPUPOD_ASSIGN_OR_RETURN(j.ended_unix_ms, r.Int("ended_unix_ms"));
  IPUPOD_RETURN_IF_ERROR(ReadAccountingFields(r, j));
  IPUPOD_RETURN_IF_ERROR(ReadProgress(r, j));
  IPUPOD_RETURN_IF_ERROR(r.RejectUnknownKeys());
  return j;
}

}  // namespace ipupod::jobs
