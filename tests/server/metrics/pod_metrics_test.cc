// The metrics after driving a real Scheduler: every family's value, the
// label bounds, scrapes racing events, and a POD64 with 10,000 waiters.
#include "server/metrics/pod_metrics.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/pod_config.h"
#include "device/runtime/compute_gate.h"
#include "device/runtime/executable_cache.h"
#include "scheduler/accounting/background_ledger.h"
#include "scheduler/scheduler.h"
#include "server/execution/execution_counters.h"
#include "tests/scheduler/test_util.h"
#include "tests/support/eventually.h"
#include "tests/support/exposition.h"

namespace ipupod::metrics {
namespace {

using test_support::SampleValue;
using ::testing::HasSubstr;
using ::testing::Not;

// Ignores everything: the scheduler's callbacks of one attach request.
class QuietObserver : public scheduler::AttachObserver {
 public:
  void OnQueued(const scheduler::QueuePositionView&) override {}
  void OnGranted(const scheduler::SessionView&) override {}
  void OnEnded(const absl::Status&) override {}
  bool WantsPositions() const override { return false; }
};

class PodMetricsTest : public ::testing::Test {
 protected:
  void Start(int pod_ipus, int max_waiters = 4096) {
    PodMetricsOptions options;
    options.version = "9.9.9";
    options.pod = device::PodFromSize(pod_ipus)->name;
    options.clock = [this] { return clock_.Now(); };
    metrics_ = std::make_unique<PodMetrics>(options);
    scheduler::SchedulerOptions so;
    so.pod = *device::PodFromSize(pod_ipus);
    so.ipu_reset_time = so.partition_reset_time = so.pod_reset_time = absl::Milliseconds(1);
    so.max_waiters = max_waiters;
    so.events = metrics_.get();
    so.clock = [this] { return clock_.Now(); };
    auto created = scheduler::Scheduler::Create(std::move(so), nullptr);
    ASSERT_TRUE(created.ok()) << created.status();
    scheduler_ = *std::move(created);
    gate_ = std::make_unique<runtime::ComputeGate>(
        1, 4, [this](absl::Duration waited) { metrics_->ObserveComputeWait(waited); });
    metrics_->SetSources({scheduler_.get(), nullptr, &cache_, &counters_, gate_.get()});
  }
  void TearDown() override { scheduler_.reset(); }  // it tells metrics_ of the sessions it ends

  std::string Attach(const std::string& user, int ipus, bool wait = false) {
    scheduler::AttachRequest request;
    request.num_ipus = ipus;
    request.wait = wait;
    auto ticket = scheduler_->Attach({user, false}, request, std::make_shared<QuietObserver>());
    EXPECT_TRUE(ticket.ok()) << ticket.status();
    return ticket.ok() ? *ticket : "";
  }
  double Value(const std::string& series) {
    const std::string text = metrics_->Scrape();
    const std::optional<double> value = SampleValue(text, series);
    EXPECT_TRUE(value.has_value()) << series << " is not in\n" << text;
    return value.value_or(-1);
  }

  scheduler::testing::FakeClock clock_;
  runtime::ExecutableCache cache_{1 << 20};
  execution::ExecutionCounters counters_;
  std::unique_ptr<PodMetrics> metrics_;  // outlives the scheduler and the gate
  std::unique_ptr<runtime::ComputeGate> gate_;
  std::unique_ptr<scheduler::Scheduler> scheduler_;
  const scheduler::Caller admin_{"root", true};
};

TEST_F(PodMetricsTest, PodStateAsTheSchedulerHasIt) {
  Start(16);
  Attach("alice", 8);
  ASSERT_TRUE(scheduler_->CreatePartition({"carol", false}, "exp", 4).ok());
  Attach("bob", 8, /*wait=*/true);  // the other 8 hold the partition: bob waits
  ASSERT_TRUE(scheduler_->InjectFault(admin_, 12, scheduler::FaultKind::kIpuReset).ok());
  clock_.Advance(absl::Seconds(10));

  EXPECT_EQ(Value("ipupod_pod_ipus"), 16);
  EXPECT_EQ(Value(R"(ipupod_ipus{state="attached"})"), 8);
  EXPECT_EQ(Value(R"(ipupod_ipus{state="error"})"), 1);
  EXPECT_EQ(Value(R"(ipupod_ipus{state="idle"})"), 7);
  EXPECT_EQ(Value(R"(ipupod_ipus{state="failed"})"), 0);
  EXPECT_EQ(Value("ipupod_ipus_allocated"), 8);
  EXPECT_EQ(Value("ipupod_partitions"), 1);
  EXPECT_EQ(Value("ipupod_ipus_partitioned"), 4);
  EXPECT_EQ(Value(R"(ipupod_sessions{kind="interactive"})"), 1);
  EXPECT_EQ(Value(R"(ipupod_sessions{kind="job"})"), 0);
  EXPECT_EQ(Value("ipupod_queue_length"), 1);
  EXPECT_EQ(Value(R"(ipupod_grants_total{kind="interactive"})"), 1);
  EXPECT_EQ(Value(R"(ipupod_faults_total{kind="ipu-reset",origin="injected"})"), 1);
  EXPECT_EQ(Value(R"(ipupod_faults_total{kind="ipu-reset",origin="random"})"), 0);
  EXPECT_EQ(Value(R"(ipupod_ipu_seconds_total{account="alice",user="alice"})"), 80);
  EXPECT_EQ(Value(R"(ipupod_build_info{pod="POD16",version="9.9.9"})"), 1);
  EXPECT_GT(Value("process_start_time_seconds"), 1.7e9);
  scheduler_->ResetIpu(admin_, 12, nullptr);
  EXPECT_EQ(Value(R"(ipupod_resets_total{kind="ipu-reset",trigger="requested"})"), 1);
  EXPECT_EQ(Value(R"(ipupod_ipus{state="resetting"})"), 1);
}

TEST_F(PodMetricsTest, GrantsWaitsEndsAndResetsAreCounted) {
  Start(16);
  const std::string alice = Attach("alice", 4);
  Attach("bob", 16, /*wait=*/true);
  clock_.Advance(absl::Seconds(8));
  scheduler_->Release(alice);  // bob is granted after 8 s

  EXPECT_EQ(Value(R"(ipupod_grants_total{kind="interactive"})"), 2);
  EXPECT_EQ(Value("ipupod_queue_wait_seconds_count"), 2);
  EXPECT_EQ(Value(R"(ipupod_queue_wait_seconds_bucket{le="5"})"), 1);
  EXPECT_EQ(Value(R"(ipupod_queue_wait_seconds_bucket{le="10"})"), 2);
  EXPECT_EQ(Value("ipupod_queue_wait_seconds_sum"), 8);
  EXPECT_EQ(Value(R"(ipupod_sessions_ended_total{state="released"})"), 1);
  EXPECT_EQ(Value(R"(ipupod_ipu_seconds_total{account="alice",user="alice"})"), 32);
  EXPECT_EQ(Value("ipupod_queue_length"), 0);

  ASSERT_TRUE(scheduler_->InjectFault(admin_, 1, scheduler::FaultKind::kLinkReset).ok());
  const std::string bob = scheduler_->GetPod().sessions.at(0).id;
  ASSERT_TRUE(scheduler_->Detach(admin_, bob).ok());  // its errored IPUs reset by themselves
  EXPECT_EQ(Value(R"(ipupod_faults_total{kind="link-reset",origin="injected"})"), 1);
  EXPECT_EQ(Value(R"(ipupod_sessions_ended_total{state="detached"})"), 1);
  EXPECT_EQ(Value(R"(ipupod_resets_total{kind="partition-reset",trigger="automatic"})"), 1);
  EXPECT_EQ(Value(R"(ipupod_resets_total{kind="ipu-reset",trigger="requested"})"), 0);
}

TEST_F(PodMetricsTest, CacheExecutionAndComputeCountersAreRead) {
  Start(4);
  execution::ExecutionCounters::Add(counters_.runs, 3);
  execution::ExecutionCounters::Add(counters_.weight_bytes_written, 4096);
  execution::ExecutionCounters::Add(counters_.input_bytes, 100);
  execution::ExecutionCounters::AddSeconds(counters_.device_nanos, 1.5);
  EXPECT_FALSE(cache_.Get("0123", "alice").ok());  // a miss
  auto slot = gate_->Acquire(absl::Seconds(10), nullptr);
  ASSERT_TRUE(slot.ok());
  EXPECT_EQ(Value("ipupod_runs_total"), 3);
  EXPECT_EQ(Value("ipupod_weight_bytes_written_total"), 4096);
  EXPECT_EQ(Value("ipupod_run_input_bytes_total"), 100);
  EXPECT_EQ(Value("ipupod_run_device_seconds_total"), 1.5);
  EXPECT_EQ(Value("ipupod_executable_cache_misses_total"), 1);
  EXPECT_EQ(Value("ipupod_executable_cache_hits_total"), 0);
  EXPECT_EQ(Value("ipupod_executable_cache_limit_bytes"), 1 << 20);
  EXPECT_EQ(Value("ipupod_compute_running"), 1);
  EXPECT_EQ(Value("ipupod_compute_wait_seconds_count"), 1);
}

// A ledger whose store is full: every write RESOURCE_EXHAUSTED.
class FullLedger final : public accounting::Ledger {
 public:
  absl::Status Open(const accounting::UsageRecord&) override { return Full(); }
  absl::Status Close(absl::string_view, int64_t, double, absl::string_view) override {
    return Full();
  }
  absl::Status Put(const accounting::UsageRecord&) override { return Full(); }
  absl::StatusOr<std::vector<accounting::UsageRecord>> Query(
      const accounting::LedgerQuery&) override {
    return std::vector<accounting::UsageRecord>{};
  }
  absl::StatusOr<int> CloseOpenRecords(int64_t) override { return 0; }

 private:
  static absl::Status Full() { return absl::ResourceExhaustedError("database or disk is full"); }
};

// Issue 29: usage writes a full store refuses are held (a gauge) and, over
// the bound, dropped (a counter), not lost without a trace.
TEST_F(PodMetricsTest, UsageWritesHeldAndDroppedAreCounted) {
  Start(4);
  FullLedger full;
  accounting::BackgroundLedgerOptions options;
  options.retry_max = 2;
  accounting::BackgroundLedger ledger(&full, options);
  metrics_->SetSources({scheduler_.get(), nullptr, &cache_, &counters_, gate_.get(), &ledger});
  for (const char* id : {"s1", "s2", "s3"}) {
    accounting::UsageRecord record;
    record.id = id;
    ASSERT_TRUE(ledger.Open(record).ok());
    ASSERT_TRUE(ledger.Drain().ok());
  }
  EXPECT_TRUE(test_support::Eventually([&] { return ledger.counts().dropped == 1; }));
  EXPECT_EQ(Value("ipupod_usage_writes_held"), 2);
  EXPECT_EQ(Value("ipupod_usage_writes_dropped_total"), 1);
  metrics_->SetSources({scheduler_.get(), nullptr, &cache_, &counters_, gate_.get()});
}

TEST_F(PodMetricsTest, NoSessionTicketOrJobIdIsALabel) {
  Start(16);
  for (int i = 0; i < 50; ++i) scheduler_->Release(Attach("alice", 1));
  const std::string text = metrics_->Scrape();
  EXPECT_THAT(text, Not(HasSubstr("s1-")));
  EXPECT_THAT(text, Not(HasSubstr("t1-")));
  EXPECT_EQ(SampleValue(text, R"(ipupod_sessions_ended_total{state="released"})"), 50);
}

TEST_F(PodMetricsTest, ScrapesRaceEventsSafely) {
  Start(16);
  std::atomic<bool> done{false};
  std::thread scraper([&] {
    while (!done.load()) EXPECT_THAT(metrics_->Scrape(), HasSubstr("ipupod_pod_ipus 16"));
  });
  std::vector<std::thread> users;
  for (int u = 0; u < 4; ++u) {
    users.emplace_back([&, u] {
      for (int i = 0; i < 100; ++i) scheduler_->Release(Attach("user" + std::to_string(u), 2));
    });
  }
  for (std::thread& t : users) t.join();
  done.store(true);
  scraper.join();
  EXPECT_EQ(Value(R"(ipupod_grants_total{kind="interactive"})"), 400);
}

// A scrape reads the queue's length, never the queue: with 10,000 waiters on
// a full POD64 it shows their count. (What it costs is tools/bench/metrics_bench's
// to measure, beside the scheduler's own copies.)
TEST_F(PodMetricsTest, AScrapeOfAPod64WithTenThousandWaitersCountsThem) {
  Start(64, 20000);
  Attach("holder", 64);
  for (int i = 0; i < 10000; ++i) Attach("user" + std::to_string(i % 100), 1 << (i % 4), true);
  EXPECT_EQ(Value("ipupod_queue_length"), 10000);
  EXPECT_EQ(Value("ipupod_ipus_allocated"), 64);
}

}  // namespace
}  // namespace ipupod::metrics
