// File: server/metrics/rpc_metrics.h
//
// RpcMetrics: per-method RPC counts by status code and latency histograms,
//   ipupod_rpcs_total{service, method, code}          counter
//   ipupod_rpc_duration_seconds{service, method}      histogram
// for the gRPC methods it is given ("/ipupod.v1.PodService/GetPod", health,
// reflection); any other path a client asks for (unknown methods are named by
// the client, so unbounded) counts as service="other", method="other". Codes
// are gRPC's 17 names (OK, INVALID_ARGUMENT, ...). A duration is from the
// call's start to its status: for a server stream such as Attach, the
// session's whole life.
//
// The interceptor in server/ finds a method once per call (Find) and records
// its end (Record). A method's series appear with its first call, a code's
// with its first use: a server's idle methods cost no series.
//
// Thread safety: every method may be called concurrently.
#ifndef IPUPOD_METRICS_RPC_METRICS_H_
#define IPUPOD_METRICS_RPC_METRICS_H_

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace ipupod::metrics {

// gRPC's status codes 0..16.
inline constexpr int kRpcCodes = 17;
// "OK", "CANCELLED", ... ("UNKNOWN" for a code out of range).
absl::string_view RpcCodeName(int code);

class RpcMetrics {
 public:
  class Method;

  RpcMetrics(prometheus::Registry& registry, const std::vector<std::string>& known_methods);
  ~RpcMetrics();
  RpcMetrics(const RpcMetrics&) = delete;
  RpcMetrics& operator=(const RpcMetrics&) = delete;

  // The method's series (the "other" ones for a path not known); never null.
  Method* Find(absl::string_view full_method) const;
  void Record(Method* method, int code, absl::Duration duration);

 private:
  Method* AddMethod(const std::string& service, const std::string& name);

  prometheus::Family<prometheus::Counter>& calls_;
  prometheus::Family<prometheus::Histogram>& durations_;
  std::vector<std::unique_ptr<Method>> methods_;
  absl::flat_hash_map<std::string, Method*> by_path_;
  Method* other_ = nullptr;
};

class RpcMetrics::Method {
 public:
  Method(std::string service, std::string name)
      : service_(std::move(service)), name_(std::move(name)) {}

 private:
  friend class RpcMetrics;
  const std::string service_;
  const std::string name_;
  // The histogram and each code's counter, added to their families on first
  // use (a family's Add returns the series already added, so a race adds
  // one).
  std::atomic<prometheus::Histogram*> duration_{nullptr};
  std::array<std::atomic<prometheus::Counter*>, kRpcCodes> calls_{};
};

}  // namespace ipupod::metrics

#endif  // IPUPOD_METRICS_RPC_METRICS_H_
