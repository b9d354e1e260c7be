#include "server/metrics/pod_metrics.h"

#include <algorithm>
#include <utility>

#include "common/sync.h"
#include "server/metrics/families.h"
#include <prometheus/gauge.h>
#include <prometheus/text_serializer.h>

namespace ipupod::metrics {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

// A wait in the queue: none (an immediate grant) to a day.
const prometheus::Histogram::BucketBoundaries& QueueWaitBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 7200, 21600, 86400};
  return kBuckets;
}

// A wait for compute: none to the gate's 10-minute limit.
const prometheus::Histogram::BucketBoundaries& ComputeWaitBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600};
  return kBuckets;
}

std::function<absl::Time()> Clock(const PodMetricsOptions& options) {
  return options.clock ? options.clock : std::function<absl::Time()>(&absl::Now);
}

void AddBuildInfo(prometheus::Registry& registry, const PodMetricsOptions& options) {
  BuildGauge()
      .Name("ipupod_build_info")
      .Help("Always 1: the server's version and the pod it simulates")
      .Register(registry)
      .Add({{"version", options.version}, {"pod", options.pod}})
      .Set(1);
  BuildGauge()
      .Name("process_start_time_seconds")
      .Help("When ipupodd started, in seconds since the Unix epoch")
      .Register(registry)
      .Add({})
      .Set(absl::ToDoubleSeconds(options.start_time - absl::UnixEpoch()));
}

}  // namespace

PodMetrics::PodMetrics(PodMetricsOptions options)
    : options_(std::move(options)),
      registry_(std::make_shared<prometheus::Registry>()),
      grants_(BuildCounter()
                  .Name("ipupod_grants_total")
                  .Help("Requests granted their IPUs, interactive or a batch job's")
                  .Register(*registry_)),
      queue_wait_(BuildHistogram()
                      .Name("ipupod_queue_wait_seconds")
                      .Help("How long each granted request waited (0 when granted at once)")
                      .Register(*registry_)
                      .Add({}, QueueWaitBuckets())),
      sessions_ended_(BuildCounter()
                          .Name("ipupod_sessions_ended_total")
                          .Help("Sessions ended, by how (their usage record's state)")
                          .Register(*registry_)),
      faults_(BuildCounter()
                  .Name("ipupod_faults_total")
                  .Help("Device faults, by kind and origin (injected by an admin, or random)")
                  .Register(*registry_)),
      resets_(BuildCounter()
                  .Name("ipupod_resets_total")
                  .Help("Resets started, by kind and trigger (requested, or automatic after a "
                        "session ended on errored IPUs)")
                  .Register(*registry_)),
      repairs_(BuildCounter()
                   .Name("ipupod_repairs_total")
                   .Help("Failed IPUs repaired by an admin")
                   .Register(*registry_)
                   .Add({})),
      compute_wait_(BuildHistogram()
                        .Name("ipupod_compute_wait_seconds")
                        .Help("How long each run waited for its turn to compute")
                        .Register(*registry_)
                        .Add({}, ComputeWaitBuckets())),
      rpcs_(std::make_unique<RpcMetrics>(*registry_, options_.rpc_methods)),
      ipu_seconds_(options_.user_labels_max) {
  AddBuildInfo(*registry_, options_);
  // Every series that alerts look at exists from the start, at zero; Add
  // returns the existing series for labels added before.
  for (const char* kind : {"interactive", "job"}) grants_.Add({{"kind", kind}});
  for (const char* state : {"released", "detached", "preempted", "timeout", "shutdown"}) {
    sessions_ended_.Add({{"state", state}});
  }
  for (const char* kind :
       {"ipu-reset", "link-reset", "partition-reset", "full-reset", "unrecoverable"}) {
    for (const char* origin : {"injected", "random"})
      faults_.Add({{"kind", kind}, {"origin", origin}});
  }
  for (const char* kind : {"ipu-reset", "partition-reset", "full-reset"}) {
    for (const char* trigger : {"requested", "automatic"}) {
      resets_.Add({{"kind", kind}, {"trigger", trigger}});
    }
  }
  sync::MutexLock lock(&collector_mu_);
  collector_ = std::make_shared<const PodCollector>(PodSources{}, &ipu_seconds_, Clock(options_));
}

PodMetrics::~PodMetrics() = default;

void PodMetrics::SetSources(PodSources sources) {
  auto collector = std::make_shared<const PodCollector>(sources, &ipu_seconds_, Clock(options_));
  sync::MutexLock lock(&collector_mu_);
  collector_ = std::move(collector);
}

void PodMetrics::OnGranted(const scheduler::GrantEvent& event) {
  grants_.Add({{"kind", event.job.empty() ? "interactive" : "job"}}).Increment();
  queue_wait_.Observe(std::max(0.0, event.waited_seconds));
}

void PodMetrics::OnSessionEnded(const scheduler::SessionEndEvent& event) {
  sessions_ended_.Add({{"state", LabelValue(event.end_state)}}).Increment();
  ipu_seconds_.OnSessionEnded(event.user, event.account, event.ipu_seconds);
}

void PodMetrics::OnFault(const scheduler::FaultEvent& event) {
  faults_
      .Add({{"kind", std::string(scheduler::FaultKindName(event.kind))},
            {"origin", event.random ? "random" : "injected"}})
      .Increment();
}

void PodMetrics::OnResetStarted(const scheduler::ResetEvent& event) {
  resets_
      .Add({{"kind", LabelValue(RecoveryActionName(event.level))},
            {"trigger", event.automatic ? "automatic" : "requested"}})
      .Increment();
}

void PodMetrics::OnRepaired(const scheduler::RepairEvent&) { repairs_.Increment(); }

void PodMetrics::ObserveComputeWait(absl::Duration waited) {
  compute_wait_.Observe(std::max(0.0, absl::ToDoubleSeconds(waited)));
}

std::string PodMetrics::Scrape() const {
  return prometheus::TextSerializer().Serialize(Families());
}

std::string PodMetrics::ScrapeFor(absl::string_view user) const {
  std::vector<prometheus::MetricFamily> families = Families();
  for (prometheus::MetricFamily& family : families) {
    // Every series that names a user names its user: others' are dropped.
    std::erase_if(family.metric, [user](const prometheus::ClientMetric& metric) {
      return std::any_of(metric.label.begin(), metric.label.end(),
                         [user](const prometheus::ClientMetric::Label& label) {
                           return label.name == "user" && label.value != user;
                         });
    });
  }
  return prometheus::TextSerializer().Serialize(families);
}

std::vector<prometheus::MetricFamily> PodMetrics::Families() const {
  std::shared_ptr<const PodCollector> collector;
  {
    sync::MutexLock lock(&collector_mu_);
    collector = collector_;
  }
  std::vector<prometheus::MetricFamily> families = collector->Collect();
  std::vector<prometheus::MetricFamily> events = registry_->Collect();
  families.insert(families.end(), std::make_move_iterator(events.begin()),
                  std::make_move_iterator(events.end()));
  return families;
}

}  // namespace ipupod::metrics
