#include "server/metrics/pod_collector.h"

#include <array>
#include <string>
#include <utility>

#include "device/ipu.h"
#include "server/jobs/job.h"
#include "server/metrics/families.h"

namespace ipupod::metrics {
namespace {

using prometheus::MetricFamily;
using prometheus::MetricType;

constexpr std::array<device::IpuState, 6> kIpuStates = {
    device::IpuState::kIdle,  device::IpuState::kAttached,  device::IpuState::kBusy,
    device::IpuState::kError, device::IpuState::kResetting, device::IpuState::kFailed};

MetricFamily Gauge(std::string name, std::string help, double value) {
  MetricFamily family = NewFamily(std::move(name), std::move(help), MetricType::Gauge);
  AddValue(family, value);
  return family;
}

MetricFamily Counter(std::string name, std::string help, double value) {
  MetricFamily family = NewFamily(std::move(name), std::move(help), MetricType::Counter);
  AddValue(family, value);
  return family;
}

double Load(const std::atomic<int64_t>& counter) {
  return static_cast<double>(counter.load(std::memory_order_relaxed));
}

void CollectIpus(const scheduler::PodView& pod, std::vector<MetricFamily>& out) {
  std::array<int, kIpuStates.size()> by_state{};
  int allocated = 0, partitioned = 0;
  double memory = 0;
  for (const scheduler::IpuView& ipu : pod.ipus) {
    ++by_state[static_cast<size_t>(ipu.state)];
    allocated += !ipu.session.empty();
    partitioned += !ipu.partition.empty();
    memory += static_cast<double>(ipu.memory_used_bytes);
  }
  out.push_back(Gauge("ipupod_pod_ipus", "IPUs in the pod", pod.num_ipus));
  MetricFamily states =
      NewFamily("ipupod_ipus", "IPUs in each state (ipupod info's STATE)", MetricType::Gauge);
  for (device::IpuState state : kIpuStates) {
    AddValue(states, by_state[static_cast<size_t>(state)],
             {{"state", std::string(device::IpuStateName(state))}});
  }
  out.push_back(std::move(states));
  out.push_back(Gauge("ipupod_ipus_allocated", "IPUs held by sessions", allocated));
  out.push_back(Gauge("ipupod_ipus_partitioned", "IPUs in partitions", partitioned));
  out.push_back(Gauge("ipupod_ipus_free",
                      "IPUs in no partition that a request could be granted now", pod.free_ipus));
  out.push_back(Gauge("ipupod_ipu_memory_used_bytes",
                      "Device memory charged by loaded programs, all IPUs together", memory));
}

}  // namespace

std::vector<MetricFamily> PodCollector::Collect() const {
  std::vector<MetricFamily> out;
  if (sources_.scheduler != nullptr) CollectPod(out);
  if (sources_.jobs != nullptr) CollectJobs(out);
  if (sources_.cache != nullptr) CollectCache(out);
  if (sources_.execution != nullptr || sources_.compute != nullptr) CollectExecution(out);
  if (sources_.ledger != nullptr) CollectLedger(out);
  return out;
}

void PodCollector::CollectPod(std::vector<MetricFamily>& out) const {
  const scheduler::PodView pod = sources_.scheduler->GetPod();
  const absl::Time now = clock_();
  CollectIpus(pod, out);
  out.push_back(
      Gauge("ipupod_partitions", "Partitions", static_cast<double>(pod.partitions.size())));
  int jobs = 0;
  for (const scheduler::SessionView& s : pod.sessions) jobs += !s.job.empty();
  MetricFamily sessions =
      NewFamily("ipupod_sessions", "Sessions holding IPUs, by kind", MetricType::Gauge);
  AddValue(sessions, static_cast<double>(pod.sessions.size()) - jobs, {{"kind", "interactive"}});
  AddValue(sessions, jobs, {{"kind", "job"}});
  out.push_back(std::move(sessions));
  out.push_back(Gauge("ipupod_queue_length", "Requests waiting in the queue (interactive and jobs)",
                      pod.waiting));
  if (ipu_seconds_ == nullptr) return;
  MetricFamily used =
      NewFamily("ipupod_ipu_seconds_total",
                "IPU-seconds used by user and account: ended sessions, and running ones until now",
                MetricType::Counter);
  for (IpuSeconds::Sample& sample : ipu_seconds_->Values(pod.sessions, now)) {
    // Labels in name order, as prometheus-cpp's own families have them.
    AddValue(used, sample.ipu_seconds,
             {{"account", std::move(sample.account)}, {"user", std::move(sample.user)}});
  }
  out.push_back(std::move(used));
}

void PodCollector::CollectJobs(std::vector<MetricFamily>& out) const {
  const std::array<int64_t, jobs::kJobStateCount> counts = sources_.jobs->CountByState();
  MetricFamily family =
      NewFamily("ipupod_jobs", "Batch jobs kept, by state (ipupod jobs --all)", MetricType::Gauge);
  for (int i = 0; i < jobs::kJobStateCount; ++i) {
    const auto state = static_cast<jobs::JobState>(i);
    AddValue(family, static_cast<double>(counts[static_cast<size_t>(i)]),
             {{"state", LabelValue(jobs::JobStateName(state))}});
  }
  out.push_back(std::move(family));
}

void PodCollector::CollectCache(std::vector<MetricFamily>& out) const {
  const runtime::ExecutableCache::Stats stats = sources_.cache->stats();
  out.push_back(Counter("ipupod_executable_cache_hits_total",
                        "Loads and uploads that found their executable in the cache",
                        static_cast<double>(stats.hits)));
  out.push_back(Counter("ipupod_executable_cache_misses_total",
                        "Loads that did not find their executable, and uploads that stored one",
                        static_cast<double>(stats.misses)));
  out.push_back(Counter("ipupod_executable_cache_evictions_total",
                        "Executables evicted to make room (least recently used first)",
                        static_cast<double>(stats.evictions)));
  out.push_back(Gauge("ipupod_executable_cache_entries", "Executables in the cache",
                      static_cast<double>(stats.entries)));
  out.push_back(Gauge("ipupod_executable_cache_bytes",
                      "Bytes the cached executables hold, as parsed",
                      static_cast<double>(stats.used_bytes)));
  out.push_back(Gauge("ipupod_executable_cache_in_flight_bytes",
                      "Bytes of uploads in progress, charged against the same bound",
                      static_cast<double>(stats.in_flight_bytes)));
  out.push_back(Gauge("ipupod_executable_cache_limit_bytes",
                      "The cache's bound (executable_cache_mb)",
                      static_cast<double>(stats.max_bytes)));
}

void PodCollector::CollectExecution(std::vector<MetricFamily>& out) const {
  if (const execution::ExecutionCounters* c = sources_.execution) {
    using execution::ExecutionCounters;
    out.push_back(Counter("ipupod_loads_total", "Executables loaded on sessions", Load(c->loads)));
    out.push_back(Counter("ipupod_runs_total", "Steps run (one Run call each)", Load(c->runs)));
    out.push_back(Counter("ipupod_weight_bytes_written_total",
                          "Weight bytes written to sessions (weights, checkpoints restored)",
                          Load(c->weight_bytes_written)));
    out.push_back(Counter("ipupod_weight_bytes_read_total",
                          "Weight bytes read from sessions (weights, checkpoints)",
                          Load(c->weight_bytes_read)));
    out.push_back(
        Counter("ipupod_run_input_bytes_total", "Input bytes of the runs", Load(c->input_bytes)));
    out.push_back(Counter("ipupod_run_output_bytes_total", "Output bytes of the runs",
                          Load(c->output_bytes)));
    out.push_back(Counter("ipupod_run_device_seconds_total",
                          "Simulated IPU time of the runs (the device time they report)",
                          ExecutionCounters::Seconds(c->device_nanos)));
    out.push_back(Counter("ipupod_run_wall_seconds_total",
                          "Host time the runs computed (the wall time they report)",
                          ExecutionCounters::Seconds(c->wall_nanos)));
  }
  if (const runtime::ComputeGate* gate = sources_.compute) {
    out.push_back(Gauge("ipupod_compute_running", "Runs computing now", gate->running()));
    out.push_back(
        Gauge("ipupod_compute_waiting", "Runs waiting for their turn to compute", gate->waiting()));
  }
}

void PodCollector::CollectLedger(std::vector<MetricFamily>& out) const {
  const accounting::BackgroundLedgerCounts c = sources_.ledger->counts();
  out.push_back(Gauge("ipupod_usage_writes_held",
                      "Usage record writes the store refused (disk full, failing), held in memory "
                      "to be written again",
                      static_cast<double>(c.held)));
  out.push_back(Counter("ipupod_usage_writes_dropped_total",
                        "Held usage record writes given up: over the bound, or still refused at a "
                        "stop",
                        static_cast<double>(c.dropped)));
}

}  // namespace ipupod::metrics
