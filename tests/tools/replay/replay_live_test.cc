// The live check of issue 13: a short slice of the Philly trace, time
// compressed (arrivals 0.5-1.5 s apart, holds of 0.6-3 s), submitted as real
// `attach --wait` sessions through the client library to a real ipupodd (in
// this process, tests/support/test_server.h), gives the same start order as
// the replay of the same slice through the scheduler code (jobs that start
// at the same instant of the replay may start in any order among
// themselves).
//
// The replay is set up as the server is: no sharing config (each user, here
// a cluster, is its own account), the multifactor default, no time limits
// (an interactive attach gives none). A slice is used only if its order
// survives the timing a busy machine adds: the replay gives the same order
// when submissions and durations move by up to kJitterSeconds (kVariants
// patterns), and when the scheduler makes a pass every second (ipupodd's
// own periodic pass may fall anywhere).
#include <algorithm>
#include <cmath>
#include <map>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "spdlog/spdlog.h"
#include "tests/support/test_server.h"
#include "tools/replay/driver.h"
#include "tools/replay/selection.h"
#include "tools/replay/trace.h"

namespace ipupod::replay {
namespace {

constexpr int kPodIpus = 4;
constexpr size_t kJobs = 12;
constexpr double kJitterSeconds = 0.15;
constexpr int kVariants = 24;

std::string Fixture() {
  const char* src = std::getenv("IPUPOD_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/tests/tools/replay/data/philly_slice.csv";
}

absl::Time Origin() { return absl::FromUnixSeconds(1508198400); }  // 2017-10-17 00:00 UTC

// kJobs consecutive jobs from `first`, their gaps and durations squeezed
// onto a log scale.
Selection Compress(const Selection& all, size_t first) {
  double log_min = 1e300, log_max = -1e300;
  for (size_t i = first; i < first + kJobs; ++i) {
    const double l = std::log1p(all.jobs[i].duration_seconds);
    log_min = std::min(log_min, l);
    log_max = std::max(log_max, l);
  }
  Selection s;
  double at = 0;
  for (size_t i = first; i < first + kJobs; ++i) {
    TraceJob job = all.jobs[i];
    if (i > first) {
      const double gap = absl::ToDoubleSeconds(job.submit - all.jobs[i - 1].submit);
      at += 0.5 + 1.0 * std::min(1.0, std::log1p(gap) / std::log1p(3600.0));
    }
    const double span = log_max > log_min ? log_max - log_min : 1;
    job.duration_seconds = 0.6 + 2.4 * (std::log1p(job.duration_seconds) - log_min) / span;
    job.submit = Origin() + absl::Seconds(at);
    s.jobs.push_back(job);
  }
  for (const TraceJob& j : s.jobs) s.clusters.push_back(j.cluster);
  std::sort(s.clusters.begin(), s.clusters.end());
  s.clusters.erase(std::unique(s.clusters.begin(), s.clusters.end()), s.clusters.end());
  return s;
}

ReplayOptions AsTheServer() {
  ReplayOptions options;
  options.pod = device::PodConfig{"POD4", kPodIpus, &device::kGc200};
  options.order = sharing::QueueOrder::kMultifactor;
  options.configure_accounts = false;
  options.estimate_factor = 0;
  options.priority_interval = absl::Seconds(30);  // ipupodd's default
  return options;
}

// Job indices in start order, each with its start (ties share one).
std::vector<std::pair<double, size_t>> StartOrder(const PolicyRun& run) {
  std::vector<std::pair<double, size_t>> order;
  for (size_t i = 0; i < run.jobs.size(); ++i) order.emplace_back(run.jobs[i].start_s, i);
  std::sort(order.begin(), order.end());
  return order;
}

// Groups of jobs starting at one instant, in order.
std::vector<std::vector<size_t>> Groups(const PolicyRun& run) {
  std::vector<std::vector<size_t>> groups;
  double last = -1;
  for (const auto& [start, job] : StartOrder(run)) {
    if (groups.empty() || start != last) groups.emplace_back();
    std::vector<size_t>& g = groups.back();
    g.insert(std::lower_bound(g.begin(), g.end(), job), job);
    last = start;
  }
  return groups;
}

// -1, 0 or +1, fixed for each (job, variant, what).
double Shift(size_t job, int variant, int what) {
  const uint64_t h = (job + 1) * 2654435761u + static_cast<uint64_t>(variant) * 40503u +
                     static_cast<uint64_t>(what) * 97u;
  return static_cast<double>((h >> 7) % 3) - 1;
}

// The same start order when each submission and duration moves by up to
// the jitter (kVariants fixed patterns), and with a pass every second.
bool Robust(const Selection& slice, const PolicyRun& run) {
  const auto expected = Groups(run);
  for (int variant = 0; variant < kVariants; ++variant) {
    Selection moved = slice;
    ReplayOptions options = AsTheServer();
    for (size_t i = 0; i < moved.jobs.size(); ++i) {
      moved.jobs[i].submit += absl::Seconds(kJitterSeconds * Shift(i, variant, 0));
      moved.jobs[i].duration_seconds += kJitterSeconds * Shift(i, variant, 1);
    }
    if (variant % 4 == 3) options.priority_interval = absl::Seconds(1);
    std::stable_sort(moved.jobs.begin(), moved.jobs.end(),
                     [](const TraceJob& a, const TraceJob& b) { return a.submit < b.submit; });
    absl::StatusOr<PolicyRun> other = Replay(moved, options);
    if (!other.ok()) return false;
    std::vector<std::vector<size_t>> groups = Groups(*other);
    for (auto& g : groups) {  // back to `slice`'s indices: lines are unique
      for (size_t& job : g) {
        job = static_cast<size_t>(
            std::find_if(slice.jobs.begin(), slice.jobs.end(),
                         [&](const TraceJob& t) { return t.line == other->jobs[job].line; }) -
            slice.jobs.begin());
      }
      std::sort(g.begin(), g.end());
    }
    if (groups != expected) return false;
  }
  return true;
}

// Jobs that start before one submitted earlier: the order is not simply
// arrival order (a smaller job fits beside a reservation, or an account
// below its share goes first).
int Overtakes(const PolicyRun& run) {
  int n = 0;
  for (size_t i = 0; i < run.jobs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) n += run.jobs[i].start_s < run.jobs[j].start_s ? 1 : 0;
  }
  return n;
}

int Waited(const PolicyRun& run) {
  return static_cast<int>(std::count_if(run.jobs.begin(), run.jobs.end(),
                                        [](const JobRecord& j) { return j.queue_s() > 0.5; }));
}

// The first slice of the fixture fit for a live check, and its replay.
std::optional<std::pair<Selection, PolicyRun>> ChooseSlice() {
  absl::StatusOr<std::vector<TraceJob>> trace = ReadTrace(Fixture());
  EXPECT_TRUE(trace.ok()) << trace.status();
  if (!trace.ok()) return std::nullopt;
  SelectionOptions options;
  options.pod_ipus = kPodIpus;
  absl::StatusOr<Selection> all = Select(*trace, options);
  EXPECT_TRUE(all.ok()) << all.status();
  if (!all.ok()) return std::nullopt;
  for (size_t first = 0; first + kJobs <= all->jobs.size(); ++first) {
    Selection slice = Compress(*all, first);
    absl::StatusOr<PolicyRun> run = Replay(slice, AsTheServer());
    if (!run.ok() || Waited(*run) < 3 || Overtakes(*run) < 1 || !Robust(slice, *run)) continue;
    return std::make_pair(std::move(slice), *std::move(run));
  }
  return std::nullopt;
}

// One job as a client would run it: attach --wait at its time, hold its
// IPUs for its duration from the server's grant, release. Returns the
// number of its session (s<boot>-<n>): the order the server granted in.
absl::StatusOr<int64_t> RunJob(client::Client& c, const TraceJob& job, absl::Time t0) {
  absl::SleepFor(t0 + (job.submit - Origin()) - absl::Now());
  client::v1::AttachRequest request;
  request.set_num_ipus(static_cast<uint32_t>(job.gpus));
  request.set_wait(true);
  request.set_wait_timeout_seconds(120);
  request.set_client(absl::StrCat("trace job ", job.line));
  std::unique_ptr<client::AttachCall> call = c.StartAttach(request);
  absl::StatusOr<client::v1::SessionInfo> session = call->WaitForGrant({});
  if (!session.ok()) return session.status();
  absl::SleepFor(absl::FromUnixMillis(session->attached_unix_ms()) +
                 absl::Seconds(job.duration_seconds) - absl::Now());
  if (absl::Status released = call->Release(); !released.ok()) return released;
  std::vector<std::string> parts = absl::StrSplit(session->session(), '-');
  int64_t number = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &number)) {
    return absl::InternalError(absl::StrCat("unexpected session id ", session->session()));
  }
  return number;
}

TEST(ReplayLiveTest, ARealServerStartsACompressedSliceInTheReplaysOrder) {
  spdlog::set_level(spdlog::level::warn);  // the replays' schedulers log their starts
  std::optional<std::pair<Selection, PolicyRun>> chosen = ChooseSlice();
  ASSERT_TRUE(chosen.has_value()) << "no slice of the fixture is fit for a live check";
  const Selection& slice = chosen->first;
  const PolicyRun& replayed = chosen->second;

  absl::StatusOr<std::unique_ptr<test_support::TestServer>> server =
      test_support::TestServer::Start([](server::ServerConfig& config) {
        config.pod = device::PodConfig{"POD4", kPodIpus, &device::kGc200};
      });
  ASSERT_TRUE(server.ok()) << server.status();
  std::map<std::string, std::unique_ptr<client::Client>> clients;
  for (const std::string& user : slice.clusters) {
    client::ClientOptions options;
    options.server = (*server)->address();
    options.user = user;
    absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Connect(options);
    ASSERT_TRUE(c.ok()) << c.status();
    clients[user] = *std::move(c);
  }
  std::vector<absl::StatusOr<int64_t>> sessions(slice.jobs.size(), absl::UnknownError("not run"));
  const absl::Time t0 = absl::Now() + absl::Milliseconds(500);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < slice.jobs.size(); ++i) {
    threads.emplace_back(
        [&, i] { sessions[i] = RunJob(*clients[slice.jobs[i].cluster], slice.jobs[i], t0); });
  }
  for (std::thread& t : threads) t.join();  // each job is bounded by its wait timeout

  std::vector<std::pair<int64_t, size_t>> live;
  for (size_t i = 0; i < sessions.size(); ++i) {
    ASSERT_TRUE(sessions[i].ok()) << "job " << slice.jobs[i].line << ": " << sessions[i].status();
    live.emplace_back(*sessions[i], i);
  }
  std::sort(live.begin(), live.end());
  std::string order;
  for (const auto& [number, job] : live) {
    absl::StrAppend(&order, " line ", slice.jobs[job].line, " (replay start ",
                    replayed.jobs[job].start_s, " s)");
  }
  for (size_t k = 1; k < live.size(); ++k) {
    EXPECT_LE(replayed.jobs[live[k - 1].second].start_s, replayed.jobs[live[k].second].start_s)
        << "the server started jobs in another order than the replay:" << order;
  }
}

}  // namespace
}  // namespace ipupod::replay
