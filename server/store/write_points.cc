#include "server/store/write_points.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include <signal.h>
#include <unistd.h>

namespace ipupod::store {
namespace {

struct ActionName {
  FaultAction action;
  absl::string_view name;
};
constexpr ActionName kActions[] = {{FaultAction::kCrashBeforeCommit, "crash-before"},
                                   {FaultAction::kCrashAfterCommit, "crash-after"},
                                   {FaultAction::kFail, "fail"}};

std::string PointNames() {
  std::vector<std::string> names;
  for (WritePoint p : kAllWritePoints) names.emplace_back(WritePointName(p));
  return absl::StrJoin(names, ", ");
}

absl::Status BadSpec(absl::string_view spec, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      kWriteFaultEnv, "=\"", spec, "\": ", why,
      "; write POINT:N:ACTION (a test-only setting: unset it to run normally) with POINT one of ",
      PointNames(), ", N >= 1, ACTION one of crash-before, crash-after, fail"));
}

}  // namespace

absl::string_view WritePointName(WritePoint point) {
  switch (point) {
    case WritePoint::kInitialise:
      return "initialise";
    case WritePoint::kBootCount:
      return "boot_count";
    case WritePoint::kMarker:
      return "marker";
    case WritePoint::kPutPartition:
      return "put_partition";
    case WritePoint::kDeletePartition:
      return "delete_partition";
    case WritePoint::kPutFailure:
      return "put_failure";
    case WritePoint::kDeleteFailure:
      return "delete_failure";
    case WritePoint::kCleanStop:
      return "clean_stop";
    case WritePoint::kJobNumber:
      return "job_number";
    case WritePoint::kPutJobs:
      return "put_jobs";
    case WritePoint::kDeleteJob:
      return "delete_job";
    case WritePoint::kLedgerOpen:
      return "ledger_open";
    case WritePoint::kLedgerClose:
      return "ledger_close";
    case WritePoint::kLedgerPut:
      return "ledger_put";
    case WritePoint::kLedgerCloseOpen:
      return "ledger_close_open";
    case WritePoint::kHeartbeat:
      return "heartbeat";
    case WritePoint::kLedgerPurge:
      return "ledger_purge";
    case WritePoint::kAuditAppend:
      return "audit_append";
    case WritePoint::kAuditPurge:
      return "audit_purge";
  }
  return "unknown";
}

absl::StatusOr<WriteFault> ParseWriteFault(absl::string_view spec) {
  std::vector<absl::string_view> parts = absl::StrSplit(spec, ':');
  if (parts.size() != 3) return BadSpec(spec, "expected three fields");
  WriteFault fault;
  bool point_found = false;
  for (WritePoint p : kAllWritePoints) {
    if (WritePointName(p) == parts[0]) {
      fault.point = p;
      point_found = true;
    }
  }
  if (!point_found) return BadSpec(spec, absl::StrCat("unknown write point '", parts[0], "'"));
  if (!absl::SimpleAtoi(parts[1], &fault.nth) || fault.nth < 1) {
    return BadSpec(spec, absl::StrCat("N '", parts[1], "' is not a count >= 1"));
  }
  for (const ActionName& a : kActions) {
    if (a.name == parts[2]) {
      fault.action = a.action;
      return fault;
    }
  }
  return BadSpec(spec, absl::StrCat("unknown action '", parts[2], "'"));
}

absl::StatusOr<std::optional<WriteFault>> WriteFaultFromEnvironment() {
  const char* spec = std::getenv(kWriteFaultEnv);
  if (spec == nullptr || *spec == '\0') return std::optional<WriteFault>();
  absl::StatusOr<WriteFault> fault = ParseWriteFault(spec);
  if (!fault.ok()) return fault.status();
  return std::optional<WriteFault>(*fault);
}

absl::Status WriteFaultInjector::Fire(WritePoint point) {
  if (fault_->point != point || ++seen_ != fault_->nth) return absl::OkStatus();
  switch (fault_->action) {
    case FaultAction::kCrashBeforeCommit:
      CrashNow(point);
    case FaultAction::kCrashAfterCommit:
      armed_ = true;
      return absl::OkStatus();
    case FaultAction::kFail:
      break;
  }
  return absl::UnavailableError(absl::StrCat("state store: injected failure at write point ",
                                             WritePointName(point), " #", fault_->nth, " (",
                                             kWriteFaultEnv, " is set: a test-only setting)"));
}

void WriteFaultInjector::CrashNow(WritePoint point) {
  // What kill -9 does, from inside: no destructor, no flush, no close.
  static constexpr char kNote[] = "ipupodd: injected crash at a store write point\n";
  (void)point;
  (void)!::write(STDERR_FILENO, kNote, sizeof kNote - 1);
  ::kill(::getpid(), SIGKILL);
  ::_exit(137);  // not reached: SIGKILL cannot be caught
}

}  // namespace ipupod::store
