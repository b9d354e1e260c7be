#include "server/request_parse_errors.h"

#include <atomic>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"

namespace ipupod::server {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::ServerRpcInfo;

class RequestParseErrors : public grpc::experimental::Interceptor {
 public:
  explicit RequestParseErrors(std::string method) : method_(std::move(method)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      unparsable_.store(true);
    }
    if (unparsable_.load() &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) &&
        IsParseFailureStatus(methods->GetSendStatus())) {
      spdlog::warn("rpc method={} code=INVALID_ARGUMENT: the request did not parse", method_);
      methods->ModifySendStatus(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("the request to ", method_,
                       " is not a valid protobuf message of its request type; send the message "
                       "proto/ipupod/v1 defines for it (a client built from those files does)")));
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  // Hooks of one call may run on different gRPC threads.
  std::atomic<bool> unparsable_{false};
};

}  // namespace

bool IsParseFailureStatus(const grpc::Status& outgoing) {
  return outgoing.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED;
}

grpc::experimental::Interceptor* RequestParseErrorsFactory::CreateServerInterceptor(
    ServerRpcInfo* info) {
  const std::string method = info->method() != nullptr ? info->method() : "";
  if (method.rfind("/ipupod.v1.", 0) != 0) return nullptr;
  if (info->type() != ServerRpcInfo::Type::UNARY &&
      info->type() != ServerRpcInfo::Type::SERVER_STREAMING) {
    return nullptr;
  }
  return new RequestParseErrors(method);
}

}  // namespace ipupod::server
