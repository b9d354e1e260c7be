// File: server/metrics/pod_metrics.h
//
// PodMetrics: ipupodd's Prometheus metrics (docs/operations.md lists every
// family). Two kinds:
//   * events, counted as they happen: grants and their wait, sessions
//     ended, faults (injected, random), resets, repairs - as the scheduler's
//     PodEventObserver (scheduler/pod_events.h) -, RPCs (rpcs(), from the
//     interceptor in server/) and compute-gate waits (ObserveComputeWait);
//   * state, read at scrape time from the pod's owners (PodCollector,
//     server/metrics/pod_collector.h).
// Scrape() serializes both with prometheus-cpp's TextSerializer (the text
// exposition format 0.0.4, kContentType), for GET /metrics.
//
//   auto metrics = std::make_unique<PodMetrics>(options);
//   scheduler_options.events = metrics.get();        // before Scheduler::Create
//   ... create the scheduler, the job manager ...
//   metrics->SetSources({scheduler, jobs, cache, &execution->counters(), gate});
//   std::string text = metrics->Scrape();
//
// Labels are bounded: no session, ticket or job id is a label; user and
// account only on ipupod_ipu_seconds_total, capped in open mode
// (server/metrics/ipu_seconds.h); RPC methods from a fixed list
// (server/metrics/rpc_metrics.h). Usage is private by default
// (docs/accounting.md, "Who sees what"): ScrapeFor(user) keeps of the
// series labelled by user only the viewer's own.
//
// Thread safety: every method may be called concurrently; the observer
// methods run with the scheduler's mutex held and only bump counters and
// histograms (leaf locks). SetSources must be called before the first
// Scrape that should see them (earlier scrapes see none), and the sources
// must outlive this object.
#ifndef IPUPOD_METRICS_POD_METRICS_H_
#define IPUPOD_METRICS_POD_METRICS_H_

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/pod_events.h"
#include "server/metrics/ipu_seconds.h"
#include "server/metrics/pod_collector.h"
#include "server/metrics/rpc_metrics.h"
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace ipupod::metrics {

inline constexpr absl::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";
// The cap on (user, account) series in open mode (server/metrics/ipu_seconds.h).
inline constexpr size_t kOpenModeUserLabelsMax = 1000;

struct PodMetricsOptions {
  std::string version;  // ipupod_build_info{version}
  std::string pod;      // ipupod_build_info{pod}: "POD16"
  // The gRPC methods named in ipupod_rpcs_total (others: "other").
  std::vector<std::string> rpc_methods;
  // Distinct (user, account) series of ipupod_ipu_seconds_total; 0 = no cap.
  size_t user_labels_max = kOpenModeUserLabelsMax;
  std::function<absl::Time()> clock;    // the scheduler's; empty = absl::Now
  absl::Time start_time = absl::Now();  // process_start_time_seconds
};

class PodMetrics final : public scheduler::PodEventObserver {
 public:
  explicit PodMetrics(PodMetricsOptions options);
  ~PodMetrics() override;
  PodMetrics(const PodMetrics&) = delete;
  PodMetrics& operator=(const PodMetrics&) = delete;

  void SetSources(PodSources sources);

  // scheduler::PodEventObserver
  void OnGranted(const scheduler::GrantEvent& event) override;
  void OnSessionEnded(const scheduler::SessionEndEvent& event) override;
  void OnFault(const scheduler::FaultEvent& event) override;
  void OnResetStarted(const scheduler::ResetEvent& event) override;
  void OnRepaired(const scheduler::RepairEvent& event) override;

  // A run waited this long for its turn to compute (device/runtime/compute_gate.h).
  void ObserveComputeWait(absl::Duration waited);
  RpcMetrics& rpcs() { return *rpcs_; }

  // Every family, in Prometheus' text format.
  std::string Scrape() const;
  // The same for a viewer who may see only their own usage
  // (accounting_public false, not an admin): every per-user series
  // (a "user" label: ipupod_ipu_seconds_total) of another user is left out.
  std::string ScrapeFor(absl::string_view user) const;

 private:
  std::vector<prometheus::MetricFamily> Families() const;

  const PodMetricsOptions options_;
  const std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& grants_;
  prometheus::Histogram& queue_wait_;
  prometheus::Family<prometheus::Counter>& sessions_ended_;
  prometheus::Family<prometheus::Counter>& faults_;
  prometheus::Family<prometheus::Counter>& resets_;
  prometheus::Counter& repairs_;
  prometheus::Histogram& compute_wait_;
  std::unique_ptr<RpcMetrics> rpcs_;
  IpuSeconds ipu_seconds_;
  // Replaced whole by SetSources; a scrape keeps the one it started with.
  mutable absl::Mutex collector_mu_;
  std::shared_ptr<const PodCollector> collector_ ABSL_GUARDED_BY(collector_mu_);
};

}  // namespace ipupod::metrics

#endif  // IPUPOD_METRICS_POD_METRICS_H_
