#include "device/customop/custom_op_library.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/sync.h"

namespace ipupod::customop {

absl::Status HostBudget::Acquire(absl::string_view library) {
  sync::MutexLock lock(&mu_);
  if (running_ >= max_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "custom op library '", library, "' cannot start: ", running_,
        " custom op host processes run already, the most this server allows (config key "
        "custom_ops.max_hosts); unload a program that uses custom ops, or try again later"));
  }
  ++running_;
  return absl::OkStatus();
}

void HostBudget::Release() {
  sync::MutexLock lock(&mu_);
  --running_;
}

int HostBudget::running() const {
  sync::MutexLock lock(&mu_);
  return running_;
}

CustomOpLibrary::CustomOpLibrary(std::string path, HostLimits limits,
                                 std::shared_ptr<HostBudget> budget,
                                 std::unique_ptr<HostProcess> process)
    : path_(std::move(path)),
      limits_(std::move(limits)),
      budget_(std::move(budget)),
      info_(process->info()),
      process_(std::move(process)) {}

CustomOpLibrary::~CustomOpLibrary() {
  {
    sync::MutexLock lock(&mu_);
    process_.reset();  // kills and reaps
  }
  budget_->Release();
}

absl::StatusOr<std::shared_ptr<CustomOpLibrary>> CustomOpLibrary::Start(
    const std::string& path, const HostLimits& limits, std::shared_ptr<HostBudget> budget) {
  IPUPOD_RETURN_IF_ERROR(budget->Acquire(path));
  absl::StatusOr<std::unique_ptr<HostProcess>> process = HostProcess::Start(path, limits);
  if (!process.ok()) {
    budget->Release();
    return process.status();
  }
  return std::shared_ptr<CustomOpLibrary>(
      new CustomOpLibrary(path, limits, std::move(budget), *std::move(process)));
}

pid_t CustomOpLibrary::pid() const {
  sync::MutexLock lock(&mu_);
  return process_ != nullptr ? process_->pid() : 0;
}

absl::StatusOr<std::unique_ptr<HostProcess>> CustomOpLibrary::TakeProcess(const CallSite& site) {
  int restart = 0;
  {
    sync::MutexLock lock(&mu_);
    if (process_ != nullptr) return std::move(process_);
    if (restarts_ >= kRestartsMax) {
      return absl::FailedPreconditionError(
          absl::StrCat(site.who, ": its library '", path_, "' failed ", restarts_ + 1,
                       " times in this program; fix the library, then load the program again"));
    }
    restart = ++restarts_;
  }
  IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<HostProcess> process, HostProcess::Start(path_, limits_));
  if (!(process->info() == info_)) {
    return absl::FailedPreconditionError(
        absl::StrCat(site.who, ": its library '", path_, "' has changed since the program was ",
                     "loaded (its op table differs at restart ", restart, "); load it again"));
  }
  return process;
}

absl::Status CustomOpLibrary::Call(absl::string_view request, uint64_t reply_bytes_max,
                                   const CallSite& site, const Decode& decode) {
  {
    sync::MutexLock lock(&mu_);
    const absl::Duration wait = limits_.call_timeout + limits_.start_timeout;
    if (!sync::AwaitWithTimeout(&mu_, absl::Condition(this, &CustomOpLibrary::Idle), wait)) {
      return absl::UnavailableError(absl::StrCat(site.who, ": its library '", path_,
                                                 "' was busy with another call for ",
                                                 absl::FormatDuration(wait), "; try again"));
    }
    busy_ = true;
  }
  absl::StatusOr<std::unique_ptr<HostProcess>> process = TakeProcess(site);
  absl::Status status = process.status();
  if (status.ok()) {
    absl::StatusOr<std::string> reply = (*process)->Call(request, reply_bytes_max, site);
    status = reply.ok() ? decode(*reply) : reply.status();
    if (absl::IsInternal(status)) (*process)->Kill();  // malformed or misbehaving: never again
  }
  sync::MutexLock lock(&mu_);
  busy_ = false;
  if (process.ok() && (*process)->alive()) process_ = *std::move(process);
  return status;
}

}  // namespace ipupod::customop
