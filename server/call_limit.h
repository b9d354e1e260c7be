// File: server/call_limit.h
//
// CallLimit: admits at most `max_calls` ExecutionService calls at once
// (ipupodd --max-execution-threads), and at most `max_calls_per_user` of
// them from one user (--max-execution-threads-per-user), and refuses the
// rest at once with RESOURCE_EXHAUSTED, logged as a warning. The per-user
// share keeps one user's stalled or slow streams from taking every call:
// the others are still served.
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
// Thread safety: every method is safe to call concurrently (one mutex, a
// leaf). Memory: one map entry per user with a call in flight, so at most
// max_calls entries.
// Errors: Enter - RESOURCE_EXHAUSTED naming the bound reached (server-wide
// or per user) and its flag.
#ifndef IPUPOD_SERVER_CALL_LIMIT_H_
#define IPUPOD_SERVER_CALL_LIMIT_H_

#include <memory>
#include <string>

#include <grpcpp/support/server_interceptor.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace ipupod::server {

// How a refusal names the calls and the bounds ("compiles", "config
// compile_max_concurrent"); the defaults are ExecutionService's.
struct CallLimitWording {
  std::string calls = "execution calls";
  std::string examples = "uploads, loads, weight transfers, runs; ";
  std::string bound = "ipupodd --max-execution-threads";
  std::string per_user_bound = "ipupodd --max-execution-threads-per-user";
  // How a call of the user's ends by itself, named in the per-user refusal.
  std::string per_user_hint = "a silent stream ends after --execution-stream-idle-seconds";
};

class CallLimit {
 public:
  // One admitted call; leaving scope ends it.
  class Ticket {
   public:
    Ticket(CallLimit* limit, std::string user) : limit_(limit), user_(std::move(user)) {}
    Ticket(Ticket&& other) noexcept : limit_(other.limit_), user_(std::move(other.user_)) {
      other.limit_ = nullptr;
    }
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() {
      if (limit_ != nullptr) limit_->Leave(user_);
    }

   private:
    CallLimit* limit_;
    std::string user_;
  };

  // REQUIRES: 1 <= max_calls_per_user <= max_calls.
  CallLimit(int max_calls, int max_calls_per_user, CallLimitWording wording = {})
      : max_calls_(max_calls),
        max_calls_per_user_(max_calls_per_user),
        wording_(std::move(wording)) {}
  CallLimit(const CallLimit&) = delete;
  CallLimit& operator=(const CallLimit&) = delete;

  // Admits `method` of `user` (both named in the refusal's log line) or
  // refuses it.
  absl::StatusOr<Ticket> Enter(absl::string_view method, absl::string_view user);
  int in_flight() const;
  int in_flight(absl::string_view user) const;
  int max_calls() const { return max_calls_; }
  int max_calls_per_user() const { return max_calls_per_user_; }

 private:
  void Leave(const std::string& user);

  const int max_calls_;
  const int max_calls_per_user_;
  const CallLimitWording wording_;
  mutable absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, int> per_user_ ABSL_GUARDED_BY(mu_);  // > 0 only
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
