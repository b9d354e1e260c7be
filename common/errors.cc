#include "common/errors.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace ipupod {
namespace {

void SetIpus(absl::Status& status, const std::vector<int>& ipus) {
  if (!ipus.empty()) status.SetPayload(kIpusPayload, absl::Cord(absl::StrJoin(ipus, ",")));
}

}  // namespace

absl::string_view ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kNone:
      return "";
    case ErrorKind::kApplication:
      return "application";
    case ErrorKind::kRecoverable:
      return "recoverable";
    case ErrorKind::kUnrecoverable:
      return "unrecoverable";
  }
  return "";
}

absl::string_view RecoveryActionName(RecoveryAction action) {
  switch (action) {
    case RecoveryAction::kNone:
      return "";
    case RecoveryAction::kIpuReset:
      return "IPU_RESET";
    case RecoveryAction::kLinkReset:
      return "LINK_RESET";
    case RecoveryAction::kPartitionReset:
      return "PARTITION_RESET";
    case RecoveryAction::kFullReset:
      return "FULL_RESET";
  }
  return "";
}

std::optional<ErrorKind> ParseErrorKind(absl::string_view name) {
  for (ErrorKind k :
       {ErrorKind::kApplication, ErrorKind::kRecoverable, ErrorKind::kUnrecoverable}) {
    if (ErrorKindName(k) == name) return k;
  }
  return std::nullopt;
}

std::optional<RecoveryAction> ParseRecoveryAction(absl::string_view name) {
  for (RecoveryAction a : {RecoveryAction::kIpuReset, RecoveryAction::kLinkReset,
                           RecoveryAction::kPartitionReset, RecoveryAction::kFullReset}) {
    if (RecoveryActionName(a) == name) return a;
  }
  return std::nullopt;
}

absl::Status RecoverableError(RecoveryAction action, const std::vector<int>& ipus,
                              absl::string_view message) {
  absl::Status status(absl::StatusCode::kAborted, message);
  status.SetPayload(kErrorKindPayload, absl::Cord(ErrorKindName(ErrorKind::kRecoverable)));
  status.SetPayload(kRecoveryActionPayload, absl::Cord(RecoveryActionName(action)));
  SetIpus(status, ipus);
  return status;
}

absl::Status UnrecoverableError(const std::vector<int>& ipus, absl::string_view message) {
  absl::Status status(absl::StatusCode::kDataLoss, message);
  status.SetPayload(kErrorKindPayload, absl::Cord(ErrorKindName(ErrorKind::kUnrecoverable)));
  SetIpus(status, ipus);
  return status;
}

absl::Status AsApplicationError(absl::Status status) {
  if (!status.ok()) {
    status.SetPayload(kErrorKindPayload, absl::Cord(ErrorKindName(ErrorKind::kApplication)));
  }
  return status;
}

ErrorKind GetErrorKind(const absl::Status& status) {
  if (status.ok()) return ErrorKind::kNone;
  auto payload = status.GetPayload(kErrorKindPayload);
  if (!payload) return ErrorKind::kApplication;
  return ParseErrorKind(std::string(*payload)).value_or(ErrorKind::kApplication);
}

RecoveryAction GetRecoveryAction(const absl::Status& status) {
  auto payload = status.GetPayload(kRecoveryActionPayload);
  if (!payload) return RecoveryAction::kNone;
  return ParseRecoveryAction(std::string(*payload)).value_or(RecoveryAction::kNone);
}

std::vector<int> GetErrorIpus(const absl::Status& status) {
  std::vector<int> ipus;
  auto payload = status.GetPayload(kIpusPayload);
  if (!payload) return ipus;
  for (absl::string_view part : absl::StrSplit(std::string(*payload), ',', absl::SkipEmpty())) {
    int id = 0;
    if (absl::SimpleAtoi(part, &id)) ipus.push_back(id);
  }
  return ipus;
}

void SetErrorPayloads(absl::Status& status, absl::string_view kind, absl::string_view action,
                      absl::string_view ipus_csv) {
  if (status.ok()) return;
  if (ParseErrorKind(kind)) status.SetPayload(kErrorKindPayload, absl::Cord(kind));
  if (ParseRecoveryAction(action)) status.SetPayload(kRecoveryActionPayload, absl::Cord(action));
  if (!ipus_csv.empty()) status.SetPayload(kIpusPayload, absl::Cord(ipus_csv));
}

}  // namespace ipupod
