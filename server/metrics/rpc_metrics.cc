#include "server/metrics/rpc_metrics.h"

#include <algorithm>
#include <utility>

namespace ipupod::metrics {
namespace {

constexpr std::array<absl::string_view, kRpcCodes> kCodeNames = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

// From a millisecond to an hour (an attach stream lasts as long as its session).
const prometheus::Histogram::BucketBoundaries& DurationBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 600, 3600};
  return kBuckets;
}

// "/ipupod.v1.PodService/GetPod" -> {"ipupod.v1.PodService", "GetPod"}.
std::pair<std::string, std::string> SplitPath(absl::string_view path) {
  if (!path.empty() && path[0] == '/') path.remove_prefix(1);
  const size_t slash = path.find('/');
  if (slash == absl::string_view::npos) return {std::string(path), ""};
  return {std::string(path.substr(0, slash)), std::string(path.substr(slash + 1))};
}

}  // namespace

absl::string_view RpcCodeName(int code) {
  return code >= 0 && code < kRpcCodes ? kCodeNames[static_cast<size_t>(code)] : "UNKNOWN";
}

RpcMetrics::RpcMetrics(prometheus::Registry& registry,
                       const std::vector<std::string>& known_methods)
    : calls_(prometheus::BuildCounter()
                 .Name("ipupod_rpcs_total")
                 .Help("gRPC calls ended, by method and status code")
                 .Register(registry)),
      durations_(prometheus::BuildHistogram()
                     .Name("ipupod_rpc_duration_seconds")
                     .Help("gRPC calls from their start to their status, by method")
                     .Register(registry)) {
  for (const std::string& path : known_methods) {
    if (by_path_.contains(path)) continue;
    auto [service, name] = SplitPath(path);
    by_path_.emplace(path, AddMethod(service, name));
  }
  other_ = AddMethod("other", "other");
}

RpcMetrics::~RpcMetrics() = default;

RpcMetrics::Method* RpcMetrics::AddMethod(const std::string& service, const std::string& name) {
  methods_.push_back(std::make_unique<Method>(service, name));
  return methods_.back().get();
}

RpcMetrics::Method* RpcMetrics::Find(absl::string_view full_method) const {
  const auto it = by_path_.find(full_method);
  return it == by_path_.end() ? other_ : it->second;
}

void RpcMetrics::Record(Method* method, int code, absl::Duration duration) {
  if (code < 0 || code >= kRpcCodes) code = 2;  // UNKNOWN
  std::atomic<prometheus::Counter*>& slot = method->calls_[static_cast<size_t>(code)];
  prometheus::Counter* calls = slot.load(std::memory_order_acquire);
  if (calls == nullptr) {
    calls = &calls_.Add({{"service", method->service_},
                         {"method", method->name_},
                         {"code", std::string(RpcCodeName(code))}});
    slot.store(calls, std::memory_order_release);
  }
  calls->Increment();
  prometheus::Histogram* durations = method->duration_.load(std::memory_order_acquire);
  if (durations == nullptr) {
    durations = &durations_.Add({{"service", method->service_}, {"method", method->name_}},
                                DurationBuckets());
    method->duration_.store(durations, std::memory_order_release);
  }
  durations->Observe(std::max(0.0, absl::ToDoubleSeconds(duration)));
}

}  // namespace ipupod::metrics
