#include "server/batch/job_files.h"

#include <fstream>
#include <iterator>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/driver/steps.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "common/sync.h"

namespace ipupod::batch {
namespace {

namespace fs = std::filesystem;

constexpr absl::string_view kCheckpointPrefix = "checkpoint-";

uint64_t TreeBytes(const fs::path& dir) {
  std::error_code ec;
  uint64_t bytes = 0;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) bytes += it->file_size(ec);
  }
  return bytes;
}

absl::StatusOr<tensor::NamedTensors> ReadNpz(const fs::path& path) {
  absl::StatusOr<tensor::NamedTensors> tensors = tensor::ReadTensorFile(path.string());
  if (tensors.ok()) return tensors;
  return absl::DataLossError(absl::StrCat("the job's file ", path.string(),
                                          " is unreadable: ", tensors.status().message()));
}

nlohmann::json EventJson(const JobEvent& e) {
  nlohmann::json j = {{"seq", e.seq}, {"unix_ms", e.unix_ms}, {"kind", e.kind}, {"text", e.text}};
  if (e.run > 0) j["run"] = e.run;
  if (!e.losses.empty()) j["losses"] = e.losses;
  if (!e.state.empty()) j["state"] = e.state;
  return j;
}

// Events are written by this server; a line that does not parse (a torn
// last line after a crash) is skipped.
bool ParseEvent(const std::string& line, JobEvent& e) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("seq") || !j["seq"].is_number_unsigned()) return false;
  e.seq = j["seq"].get<uint64_t>();
  e.unix_ms = j.value("unix_ms", int64_t{0});
  e.kind = j.value("kind", std::string());
  e.text = j.value("text", std::string());
  e.run = j.value("run", int64_t{0});
  e.state = j.value("state", std::string());
  if (j.contains("losses") && j["losses"].is_array()) {
    for (const nlohmann::json& loss : j["losses"]) {
      if (loss.is_number()) e.losses.push_back(loss.get<float>());
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<JobFiles> JobFiles::Open(const fs::path& jobs_dir, absl::string_view id) {
  fs::path dir = jobs_dir / std::string(id);
  std::error_code ec;
  fs::create_directories(dir / "steps", ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the job directory ", dir.string(), ": ", ec.message()));
  }
  return JobFiles(std::move(dir));
}

absl::StatusOr<std::string> JobFiles::WriteCheckpoint(int64_t runs,
                                                      const tensor::NamedTensors& state) {
  const std::string name = absl::StrCat(kCheckpointPrefix, runs, ".npz");
  IPUPOD_RETURN_IF_ERROR(tensor::WriteTensorFile((dir_ / name).string(), state));
  return name;
}

absl::StatusOr<tensor::NamedTensors> JobFiles::ReadCheckpoint(absl::string_view name) const {
  return ReadNpz(dir_ / std::string(name));
}

absl::StatusOr<jobs::ResultFile> JobFiles::KeepCheckpoint(absl::string_view name) {
  std::ifstream in(dir_ / std::string(name), std::ios::binary);
  if (!in) return absl::DataLossError(absl::StrCat("the job's checkpoint ", name, " is gone"));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  IPUPOD_ASSIGN_OR_RETURN(jobs::ResultFile file, WriteResult("checkpoint.npz", bytes));
  RemoveCheckpointsBut("");
  return file;
}

void JobFiles::RemoveCheckpointsBut(absl::string_view keep) const {
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir_, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (absl::StartsWith(name, kCheckpointPrefix) && name != keep) fs::remove(it->path(), ec);
  }
}

fs::path JobFiles::StepPath(int64_t step) const {
  return dir_ / "steps" / absl::StrFormat("%09d.npz", step);
}

absl::Status JobFiles::WriteStepOutputs(int64_t step, const tensor::NamedTensors& outputs) {
  return tensor::WriteTensorFile(StepPath(step).string(), outputs);
}

int64_t JobFiles::CountSteps() const {
  std::error_code ec;
  int64_t steps = 0;
  while (fs::exists(StepPath(steps), ec)) ++steps;
  return steps;
}

absl::StatusOr<jobs::ResultFile> JobFiles::AssembleOutputs(int64_t steps,
                                                           const std::vector<std::string>& names) {
  driver::OutputAccumulator all;
  for (int64_t step = 0; step < steps; ++step) {
    IPUPOD_ASSIGN_OR_RETURN(tensor::NamedTensors outputs, ReadNpz(StepPath(step)));
    if (!names.empty()) {
      tensor::NamedTensors kept;
      for (auto& [name, tensor] : outputs) {
        for (const std::string& want : names) {
          if (want == name) kept.emplace_back(name, std::move(tensor));
        }
      }
      outputs = std::move(kept);
    }
    IPUPOD_RETURN_IF_ERROR(all.Append(outputs));
  }
  IPUPOD_ASSIGN_OR_RETURN(const tensor::NamedTensors joined, all.Finish());
  IPUPOD_ASSIGN_OR_RETURN(jobs::ResultFile file,
                          WriteResult("outputs.npz", tensor::SerializeNpz(joined)));
  std::error_code ec;
  fs::remove_all(dir_ / "steps", ec);
  return file;
}

absl::StatusOr<jobs::ResultFile> JobFiles::WriteResult(absl::string_view name,
                                                       absl::string_view bytes) {
  IPUPOD_RETURN_IF_ERROR(tensor::WriteFileAtomically(ResultPath(name).string(), bytes));
  return jobs::ResultFile{std::string(name), bytes.size(), DigestHex(Sha256Of(bytes))};
}

fs::path JobFiles::ResultPath(absl::string_view name) const { return dir_ / std::string(name); }

uint64_t JobFiles::RemoveResults(const std::vector<jobs::ResultFile>& results) const {
  uint64_t freed = 0;
  std::error_code ec;
  for (const jobs::ResultFile& file : results) {
    if (fs::remove(ResultPath(file.name), ec)) freed += file.size_bytes;
  }
  return freed;
}

uint64_t JobFiles::RemoveAll() const {
  const uint64_t bytes = TreeBytes(dir_);
  std::error_code ec;
  fs::remove_all(dir_, ec);
  return bytes;
}

// ---------------------------------------------------------------- JobLog

JobEvent MakeEvent(absl::string_view kind, std::string text) {
  JobEvent event;
  event.kind = std::string(kind);
  event.text = std::move(text);
  return event;
}

JobLog::JobLog(fs::path path) : path_(std::move(path)) {}

void JobLog::LoadLocked() const {
  if (loaded_) return;
  loaded_ = true;
  std::ifstream in(path_, std::ios::binary);
  std::string line;
  uint64_t offset = 0;
  while (std::getline(in, line)) {
    JobEvent event;
    if (ParseEvent(line, event) && event.seq == offsets_.size()) offsets_.push_back(offset);
    offset += line.size() + 1;
  }
}

void JobLog::Append(JobEvent event) {
  sync::MutexLock lock(&mu_);
  LoadLocked();
  if (offsets_.size() >= kMaxEventsPerJob &&
      (event.kind != "state" || offsets_.size() >= kMaxEventsPerJob + kMaxStateEventsPastTheCap)) {
    return;
  }
  event.seq = offsets_.size();
  const std::string line = EventJson(event).dump() + "\n";
  std::error_code ec;
  const uint64_t offset = fs::exists(path_, ec) ? fs::file_size(path_, ec) : 0;
  std::ofstream out(path_, std::ios::binary | std::ios::app);
  out << line;
  out.flush();
  if (out) offsets_.push_back(offset);
}

std::vector<JobEvent> JobLog::Read(uint64_t from, size_t max) const {
  sync::MutexLock lock(&mu_);
  LoadLocked();
  std::vector<JobEvent> out;
  if (from >= offsets_.size()) return out;
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offsets_[from]));
  std::string line;
  while (out.size() < max && std::getline(in, line)) {
    JobEvent event;
    if (ParseEvent(line, event)) out.push_back(std::move(event));
  }
  return out;
}

uint64_t JobLog::size() const {
  sync::MutexLock lock(&mu_);
  LoadLocked();
  return offsets_.size();
}

}  // namespace ipupod::batch
