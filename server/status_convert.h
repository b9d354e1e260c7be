// File: server/status_convert.h
//
// absl::Status -> grpc::Status at the server's edge (the only place that
// converts; client/ converts back). The code and message carry over as they
// are (absl and gRPC share code numbers), the message shortened in the
// middle past kStatusMessageCharsMax so it always fits gRPC's metadata limit. The common/errors.h
// payloads become trailing metadata, as the ipupod.v1 proto header describes:
//   ipupod-error-kind:       recoverable | unrecoverable | application
//                            (every non-OK status; unclassified = application)
//   ipupod-recovery-action:  IPU_RESET | LINK_RESET | PARTITION_RESET | FULL_RESET
//                            (only when the status names one)
//   ipupod-ipus:             comma-separated IPU ids (only when there are some)
//
// Thread safety: pure functions; ToGrpcStatus touches only `context`, which
// must belong to the calling RPC and not yet be finished.
#ifndef IPUPOD_SERVER_STATUS_CONVERT_H_
#define IPUPOD_SERVER_STATUS_CONVERT_H_

#include <string>
#include <utility>
#include <vector>

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ipupod::server {

inline constexpr absl::string_view kErrorKindTrailer = "ipupod-error-kind";
inline constexpr absl::string_view kRecoveryActionTrailer = "ipupod-recovery-action";
inline constexpr absl::string_view kIpusTrailer = "ipupod-ipus";
inline constexpr size_t kStatusMessageCharsMax = 2048;

struct ConvertedStatus {
  grpc::Status status;
  std::vector<std::pair<std::string, std::string>> trailers;
};

// Pure conversion, for tests and for ToGrpcStatus.
ConvertedStatus ConvertStatus(const absl::Status& status);

// Converts and adds the trailers to `context`.
grpc::Status ToGrpcStatus(grpc::ServerContextBase* context, const absl::Status& status);

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_STATUS_CONVERT_H_
