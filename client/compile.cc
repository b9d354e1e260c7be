// Client::Compile: CompileService (proto/ipupod/v1/compile.proto) - the
// result, then with an output path the .ipx, checked and written in place.
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/ipx_header.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace ipupod::client {
namespace {

// The .ipx the server sent must be what its result names.
absl::Status CheckReceived(const std::string& ipx, const v1::ExecutableRef& ref) {
  const auto bad = [&](absl::string_view what) {
    return absl::InternalError(absl::StrCat("ipupodd sent an executable whose ", what,
                                            " does not match its result (", ref.sha256(),
                                            "); please report this as an ipupodd bug"));
  };
  if (ipx.size() != ref.size_bytes() || ipx.size() < kIpxHeaderBytes) return bad("size");
  IPUPOD_ASSIGN_OR_RETURN(std::string declared, IpxContentHash(ipx));
  const std::string actual = DigestHex(Sha256Of(absl::string_view(ipx).substr(kIpxHeaderBytes)));
  if (declared != ref.sha256() || actual != ref.sha256()) return bad("content hash");
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(absl::string_view path, const std::string& bytes) {
  const std::string part = absl::StrCat(path, ".part");
  {
    std::ofstream out(part, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::remove(part.c_str());
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot write '", part, "'; check the directory exists and is writable, or choose -o"));
    }
  }
  if (std::rename(part.c_str(), std::string(path).c_str()) != 0) {
    std::remove(part.c_str());
    return absl::PermissionDeniedError(absl::StrCat("cannot rename '", part, "' to '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::CompileResult> Client::Compile(v1::CompileRequest request,
                                                  absl::string_view ipx_path,
                                                  std::string* failure_report_json) {
  request.set_return_executable(!ipx_path.empty());
  grpc::ClientContext context;
  PrepareContext(context, options_.stream_timeout);
  std::unique_ptr<grpc::ClientReader<v1::CompileResponse>> stream =
      compile_->Compile(&context, request);
  v1::CompileResponse response;
  v1::CompileResult result;
  bool have_result = false;
  std::string ipx;
  absl::Status received;
  while (stream->Read(&response)) {
    if (response.has_result()) {
      result = std::move(*response.mutable_result());
      have_result = true;
    } else if (response.kind_case() == v1::CompileResponse::kFailureReportJson) {
      if (failure_report_json != nullptr) *failure_report_json = response.failure_report_json();
    } else if (!have_result ||
               ipx.size() + response.executable_data().size() > result.executable().size_bytes()) {
      received = absl::InternalError(
          "ipupodd sent more executable bytes than its result declared; please report this as "
          "an ipupodd bug");
      context.TryCancel();
    } else {
      ipx += response.executable_data();
    }
  }
  const absl::Status finished = StreamStatus(stream->Finish(), context, "Compile");
  IPUPOD_RETURN_IF_ERROR(received);  // first: it is why the call was cancelled
  IPUPOD_RETURN_IF_ERROR(finished);
  if (!have_result) {
    return absl::InternalError("ipupodd ended Compile without a result; please report this");
  }
  if (!ipx_path.empty()) {
    IPUPOD_RETURN_IF_ERROR(CheckReceived(ipx, result.executable()));
    IPUPOD_RETURN_IF_ERROR(WriteFileAtomically(ipx_path, ipx));
  }
  return result;
}

}  // namespace ipupod::client
