#include "server/status_convert.h"

#include "absl/strings/str_join.h"
#include "common/errors.h"
#include "common/format.h"

namespace ipupod::server {

ConvertedStatus ConvertStatus(const absl::Status& status) {
  ConvertedStatus out;
  if (status.ok()) return out;
  // A message goes out as a header (grpc-message, percent-encoded): one
  // that echoed a client's text whole could pass gRPC's metadata limit, and
  // the client would get RESOURCE_EXHAUSTED "metadata size exceeds limit"
  // instead. Names are capped where they are checked; this is the backstop.
  out.status = grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                            ElideMiddle(status.message(), kStatusMessageCharsMax));
  out.trailers.emplace_back(kErrorKindTrailer, ErrorKindName(GetErrorKind(status)));
  RecoveryAction action = GetRecoveryAction(status);
  if (action != RecoveryAction::kNone) {
    out.trailers.emplace_back(kRecoveryActionTrailer, RecoveryActionName(action));
  }
  std::vector<int> ipus = GetErrorIpus(status);
  if (!ipus.empty()) out.trailers.emplace_back(kIpusTrailer, absl::StrJoin(ipus, ","));
  return out;
}

grpc::Status ToGrpcStatus(grpc::ServerContextBase* context, const absl::Status& status) {
  ConvertedStatus converted = ConvertStatus(status);
  for (const auto& [key, value] : converted.trailers) context->AddTrailingMetadata(key, value);
  return converted.status;
}

}  // namespace ipupod::server
