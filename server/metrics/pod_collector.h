// File: server/metrics/pod_collector.h
//
// PodCollector: the metric families read at scrape time from what the pod's
// owners already keep - the scheduler's PodView (IPUs by state, partitions,
// sessions, the queue's length: GetPod copies at most 256 IPUs and the
// sessions and partitions, never the queue), the job manager's counts per
// state, the executable cache's stats, the execution counters, the compute
// gate's line - and the continuous IPU-seconds (server/metrics/ipu_seconds.h).
// Each source may be absent (null): its families are then left out.
//
// Thread safety: Collect may run concurrently (two scrapes); the sources
// are read through their own thread-safe views. The sources must outlive
// the collector.
#ifndef IPUPOD_METRICS_POD_COLLECTOR_H_
#define IPUPOD_METRICS_POD_COLLECTOR_H_

#include <functional>
#include <vector>

#include "absl/time/time.h"
#include "device/runtime/compute_gate.h"
#include "device/runtime/executable_cache.h"
#include "scheduler/accounting/background_ledger.h"
#include "scheduler/scheduler.h"
#include "server/batch/job_manager.h"
#include "server/execution/execution_counters.h"
#include "server/metrics/ipu_seconds.h"
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace ipupod::metrics {

struct PodSources {
  const scheduler::Scheduler* scheduler = nullptr;
  const batch::JobManager* jobs = nullptr;
  const runtime::ExecutableCache* cache = nullptr;
  const execution::ExecutionCounters* execution = nullptr;
  const runtime::ComputeGate* compute = nullptr;
  // Usage record writes held or dropped (a full or failing store).
  const accounting::BackgroundLedger* ledger = nullptr;
};

class PodCollector final : public prometheus::Collectable {
 public:
  // `ipu_seconds` must outlive the collector; `clock` is the scheduler's.
  PodCollector(PodSources sources, IpuSeconds* ipu_seconds, std::function<absl::Time()> clock)
      : sources_(sources), ipu_seconds_(ipu_seconds), clock_(std::move(clock)) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  void CollectPod(std::vector<prometheus::MetricFamily>& out) const;
  void CollectJobs(std::vector<prometheus::MetricFamily>& out) const;
  void CollectCache(std::vector<prometheus::MetricFamily>& out) const;
  void CollectExecution(std::vector<prometheus::MetricFamily>& out) const;
  void CollectLedger(std::vector<prometheus::MetricFamily>& out) const;

  const PodSources sources_;
  IpuSeconds* const ipu_seconds_;
  const std::function<absl::Time()> clock_;
};

}  // namespace ipupod::metrics

#endif  // IPUPOD_METRICS_POD_COLLECTOR_H_
