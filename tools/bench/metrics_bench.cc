// What a Prometheus scrape and a status page's data cost on a full POD64,
// with an empty queue and with 10,000 waiters, beside the scheduler's own
// copies measured in the same run: GetPod (what a scrape reads) and
// ListQueue (what it must not read). A scrape that read the queue would
// grow like ListQueue; one that reads its length stays near GetPod.
//
//   build/tools/bench/metrics_bench [--waiters N] [--rounds N]
//
// Figures go to docs/benchmarks.md and docs/operations.md.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "device/pod_config.h"
#include "device/runtime/compute_gate.h"
#include "device/runtime/executable_cache.h"
#include "scheduler/scheduler.h"
#include "server/execution/execution_counters.h"
#include "server/metrics/pod_metrics.h"

namespace ipupod::bench {
namespace {

// Ignores everything: the scheduler's callbacks of one attach request.
class QuietObserver : public scheduler::AttachObserver {
 public:
  void OnQueued(const scheduler::QueuePositionView&) override {}
  void OnGranted(const scheduler::SessionView&) override {}
  void OnEnded(const absl::Status&) override {}
  bool WantsPositions() const override { return false; }
};

struct Pod {
  std::unique_ptr<metrics::PodMetrics> metrics;
  std::unique_ptr<scheduler::Scheduler> scheduler;
  std::unique_ptr<runtime::ComputeGate> gate;
  runtime::ExecutableCache cache{64 << 20};
  execution::ExecutionCounters counters;
};

bool StartPod(Pod& pod, int waiters) {
  metrics::PodMetricsOptions options;
  options.version = "bench";
  options.pod = "POD64";
  pod.metrics = std::make_unique<metrics::PodMetrics>(options);
  scheduler::SchedulerOptions so;
  so.pod = *device::PodFromSize(64);
  so.max_waiters = waiters + 1;
  so.events = pod.metrics.get();
  auto created = scheduler::Scheduler::Create(std::move(so), nullptr);
  if (!created.ok()) {
    std::fprintf(stderr, "scheduler: %s\n", created.status().ToString().c_str());
    return false;
  }
  pod.scheduler = *std::move(created);
  pod.gate = std::make_unique<runtime::ComputeGate>(1, 4, nullptr);
  pod.metrics->SetSources(
      {pod.scheduler.get(), nullptr, &pod.cache, &pod.counters, pod.gate.get()});
  return true;
}

bool Attach(Pod& pod, const std::string& user, int ipus, bool wait) {
  scheduler::AttachRequest request;
  request.num_ipus = ipus;
  request.wait = wait;
  return pod.scheduler->Attach({user, false}, request, std::make_shared<QuietObserver>()).ok();
}

// The median of `rounds` runs of `work`.
absl::Duration Median(int rounds, const std::function<void()>& work) {
  std::vector<absl::Duration> took;
  for (int i = 0; i < rounds; ++i) {
    const absl::Time start = absl::Now();
    work();
    took.push_back(absl::Now() - start);
  }
  std::sort(took.begin(), took.end());
  return took[took.size() / 2];
}

void Row(const char* what, absl::Duration empty, absl::Duration full) {
  std::printf("%-34s %12.1f us %14.1f us\n", what, absl::ToDoubleMicroseconds(empty),
              absl::ToDoubleMicroseconds(full));
}

int Main(int argc, char** argv) {
  int waiters = 10000;
  int rounds = 51;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--waiters") == 0) waiters = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
  }
  if (waiters < 1 || rounds < 1) {
    std::fprintf(stderr, "usage: metrics_bench [--waiters N>=1] [--rounds N>=1]\n");
    return 2;
  }
  Pod pod;
  if (!StartPod(pod, waiters) || !Attach(pod, "holder", 64, false)) return 1;
  size_t bytes = 0;
  const auto scrape = [&] { bytes = pod.metrics->Scrape().size(); };
  const auto get_pod = [&] { pod.scheduler->GetPod(); };
  const auto list_queue = [&] { pod.scheduler->ListQueue(); };
  const absl::Duration scrape_empty = Median(rounds, scrape);
  const size_t bytes_empty = bytes;
  const absl::Duration pod_empty = Median(rounds, get_pod);
  const absl::Duration queue_empty = Median(rounds, list_queue);
  for (int i = 0; i < waiters; ++i) {
    if (!Attach(pod, "user" + std::to_string(i % 100), 1 << (i % 4), true)) return 1;
  }
  const absl::Duration scrape_full = Median(rounds, scrape);
  const absl::Duration pod_full = Median(rounds, get_pod);
  const absl::Duration queue_full = Median(rounds, list_queue);
  std::printf("POD64, all 64 IPUs held; median of %d; queue empty vs %d waiters\n", rounds,
              waiters);
  std::printf("%-34s %15s %17s\n", "", "empty queue", "with waiters");
  Row("metrics Scrape() (collect+text)", scrape_empty, scrape_full);
  Row("reference: Scheduler::GetPod()", pod_empty, pod_full);
  Row("reference: Scheduler::ListQueue()", queue_empty, queue_full);
  std::printf("exposition size: %zu bytes empty, %zu bytes with waiters\n", bytes_empty, bytes);
  pod.scheduler->Shutdown();
  return 0;
}

}  // namespace
}  // namespace ipupod::bench

int main(int argc, char** argv) { return ipupod::bench::Main(argc, argv); }
