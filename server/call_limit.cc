#include "server/call_limit.h"

#include <string>

#include <spdlog/spdlog.h>

#include "absl/strings/str_format.h"

namespace ipupod::server {

absl::StatusOr<CallLimit::Ticket> CallLimit::Enter(absl::string_view method,
                                                   absl::string_view user) {
  const int before = in_flight_.fetch_add(1, std::memory_order_acq_rel);
  Ticket ticket(this);  // gives the slot back on every path
  if (before < max_calls_) return ticket;
  spdlog::warn("refused user={} method={}: {} execution calls already in flight (max {})",
               std::string(user), std::string(method), before, max_calls_);
  return absl::ResourceExhaustedError(absl::StrFormat(
      "ipupodd is already serving its maximum of %d execution calls at once (uploads, loads, "
      "weight transfers, runs; ipupodd --max-execution-threads %d); retry when one has "
      "finished, or ask the admin to raise the bound",
      max_calls_, max_calls_));
}

namespace {

using grpc::experimental::InterceptionHookPoints;

class ThreadpoolRefusalLogger : public grpc::experimental::Interceptor {
 public:
  explicit ThreadpoolRefusalLogger(std::string method) : method_(std::move(method)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      // A handler's own RESOURCE_EXHAUSTED is logged by its RequestLog; this
      // one reaches no handler.
      if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
          status.error_message() == "Server Threadpool Exhausted") {
        spdlog::warn(
            "refused method={}: gRPC's sync pool had no thread for it (Server Threadpool "
            "Exhausted); a burst far beyond --max-execution-threads",
            method_);
      }
    }
    methods->Proceed();
  }

 private:
  std::string method_;
};

}  // namespace

grpc::experimental::Interceptor* ThreadpoolRefusalLoggerFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  const std::string method = info->method() != nullptr ? info->method() : "";
  if (method.rfind("/ipupod.v1.ExecutionService/", 0) != 0) return nullptr;
  return new ThreadpoolRefusalLogger(method);
}

}  // namespace ipupod::server
