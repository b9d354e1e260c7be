#include "server/call_limit.h"

#include <string>

#include <spdlog/spdlog.h>

#include "absl/strings/str_format.h"
#include "common/sync.h"

namespace ipupod::server {

absl::StatusOr<CallLimit::Ticket> CallLimit::Enter(absl::string_view method,
                                                   absl::string_view user) {
  int before = 0;
  int mine = 0;
  {
    sync::MutexLock lock(&mu_);
    before = in_flight_;
    auto it = per_user_.find(user);
    mine = it == per_user_.end() ? 0 : it->second;
    if (before < max_calls_ && mine < max_calls_per_user_) {
      ++in_flight_;
      ++per_user_[user];
      return Ticket(this, std::string(user));
    }
  }
  const CallLimitWording& w = wording_;
  if (before >= max_calls_) {
    spdlog::warn("refused user={} method={}: {} {} already in flight (max {})", std::string(user),
                 std::string(method), before, w.calls, max_calls_);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "ipupodd is already serving its maximum of %d %s at once (%s%s %d); retry when one has "
        "finished, or ask the admin to raise the bound",
        max_calls_, w.calls, w.examples, w.bound, max_calls_));
  }
  spdlog::warn("refused user={} method={}: the user has {} {} in flight (max {})",
               std::string(user), std::string(method), mine, w.calls, max_calls_per_user_);
  return absl::ResourceExhaustedError(absl::StrFormat(
      "user %s already has %d %s in flight, the most one user may have (%s %d); retry when one "
      "of yours has finished or been cancelled (%s)",
      user, mine, w.calls, w.per_user_bound, max_calls_per_user_, w.per_user_hint));
}

int CallLimit::in_flight() const {
  sync::MutexLock lock(&mu_);
  return in_flight_;
}

int CallLimit::in_flight(absl::string_view user) const {
  sync::MutexLock lock(&mu_);
  auto it = per_user_.find(user);
  return it == per_user_.end() ? 0 : it->second;
}

void CallLimit::Leave(const std::string& user) {
  sync::MutexLock lock(&mu_);
  --in_flight_;
  auto it = per_user_.find(user);
  if (--it->second == 0) per_user_.erase(it);
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
