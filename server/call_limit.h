// File: server/call_limit.h
//
// CallLimit: admits at most `max_calls` ExecutionService calls at once
// (ipupodd --max-execution-threads) and refuses the rest at once with
// RESOURCE_EXHAUSTED, logged as a warning.
//
// This, not gRPC's thread quota, is the bound a client meets. gRPC's sync
// server counts its pollers and threads that are still winding down after a
// call against its ResourceQuota, so a quota of N threads can refuse a lone
// client ("Server Threadpool Exhausted", logged nowhere) when the thread of
// its previous call has not exited yet. An admission counter is exact: a
// call leaves it before its status is sent, so a client that makes one call
// after another is never refused. PodServer sets the quota above the limit
// (server/server.cc), so gRPC refuses only a burst far beyond it, and
// ThreadpoolRefusalLogger logs those refusals too.
//
// Thread safety: every method is safe to call concurrently (one atomic).
// Errors: Enter - RESOURCE_EXHAUSTED naming the bound and the flag.
#ifndef IPUPOD_SERVER_CALL_LIMIT_H_
#define IPUPOD_SERVER_CALL_LIMIT_H_

#include <atomic>
#include <memory>

#include <grpcpp/support/server_interceptor.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ipupod::server {

class CallLimit {
 public:
  // One admitted call; leaving scope ends it.
  class Ticket {
   public:
    explicit Ticket(CallLimit* limit) : limit_(limit) {}
    Ticket(Ticket&& other) noexcept : limit_(other.limit_) { other.limit_ = nullptr; }
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() {
      if (limit_ != nullptr) limit_->in_flight_.fetch_sub(1, std::memory_order_acq_rel);
    }

   private:
    CallLimit* limit_;
  };

  // REQUIRES: max_calls >= 1.
  explicit CallLimit(int max_calls) : max_calls_(max_calls) {}
  CallLimit(const CallLimit&) = delete;
  CallLimit& operator=(const CallLimit&) = delete;

  // Admits `method` (named in the refusal's log line) or refuses it.
  absl::StatusOr<Ticket> Enter(absl::string_view method, absl::string_view user);
  int in_flight() const { return in_flight_.load(std::memory_order_acquire); }
  int max_calls() const { return max_calls_; }

 private:
  const int max_calls_;
  std::atomic<int> in_flight_{0};
};

// Logs each call gRPC itself refuses for want of a sync-pool thread (its
// status is RESOURCE_EXHAUSTED "Server Threadpool Exhausted", sent before
// any handler runs). Register with ServerBuilder::experimental().
class ThreadpoolRefusalLoggerFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_CALL_LIMIT_H_
