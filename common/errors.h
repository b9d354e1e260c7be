// File: common/errors.h
//
// The error model of the real IPU stack (PopTorch features chapter, section
// 4.3) expressed on absl::Status. A device error is an absl::Status with two
// payloads: its kind (recoverable / unrecoverable / application) and, for a
// recoverable error, the recovery action. The IPUs concerned ride along as a
// third payload. server/ copies the payloads into trailing metadata and
// client/ copies them back, so every layer reads errors with the same calls.
//
// Thread safety: all functions are pure.
#ifndef IPUPOD_COMMON_ERRORS_H_
#define IPUPOD_COMMON_ERRORS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ipupod {

enum class ErrorKind {
  kNone,           // not a classified error (or OK)
  kApplication,    // misuse of the API or a bad program: fix the request
  kRecoverable,    // transient device fault: perform the recovery action
  kUnrecoverable,  // the hardware must leave service
};

// Ordered by scope: a reset at a level clears every action at or below it.
enum class RecoveryAction {
  kNone = 0,
  kIpuReset = 1,
  kLinkReset = 2,
  kPartitionReset = 3,
  kFullReset = 4,
};

// Wire names: "recoverable", "unrecoverable", "application" and
// "IPU_RESET", "LINK_RESET", "PARTITION_RESET", "FULL_RESET".
absl::string_view ErrorKindName(ErrorKind kind);
absl::string_view RecoveryActionName(RecoveryAction action);
std::optional<ErrorKind> ParseErrorKind(absl::string_view name);
std::optional<RecoveryAction> ParseRecoveryAction(absl::string_view name);

// Payload type URLs used on absl::Status.
inline constexpr absl::string_view kErrorKindPayload = "ipupod.v1/error-kind";
inline constexpr absl::string_view kRecoveryActionPayload = "ipupod.v1/recovery-action";
inline constexpr absl::string_view kIpusPayload = "ipupod.v1/ipus";

// A recoverable device fault. Code ABORTED: the operation was aborted and the
// client must run `action` before retrying at a higher level (reload).
absl::Status RecoverableError(RecoveryAction action, const std::vector<int>& ipus,
                              absl::string_view message);

// An unrecoverable device fault. Code DATA_LOSS: device state is lost and the
// IPU is out of service until repaired.
absl::Status UnrecoverableError(const std::vector<int>& ipus, absl::string_view message);

// Marks `status` (which must not be OK) as an application error.
absl::Status AsApplicationError(absl::Status status);

// Reads the payloads. An unclassified non-OK status reads as kApplication.
ErrorKind GetErrorKind(const absl::Status& status);
RecoveryAction GetRecoveryAction(const absl::Status& status);
std::vector<int> GetErrorIpus(const absl::Status& status);

// Attaches kind/action/ipus payloads parsed from their wire text forms
// (used by client/ when rebuilding a status from trailing metadata).
void SetErrorPayloads(absl::Status& status, absl::string_view kind, absl::string_view action,
                      absl::string_view ipus_csv);

}  // namespace ipupod

#endif  // IPUPOD_COMMON_ERRORS_H_
