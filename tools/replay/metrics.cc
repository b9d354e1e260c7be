#include "tools/replay/metrics.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace ipupod::replay {
namespace {

struct AccountSums {
  int64_t jobs = 0;
  double queue_s = 0;
  double slowdown = 0;
  double ipu_seconds = 0;
};

std::vector<AccountMetrics> PerAccount(const std::vector<JobRecord>& jobs) {
  std::map<std::string, AccountSums> sums;
  for (const JobRecord& j : jobs) {
    AccountSums& s = sums[j.account];
    ++s.jobs;
    s.queue_s += j.queue_s();
    s.slowdown += BoundedSlowdown(j);
    s.ipu_seconds += j.ipus * j.run_s();
  }
  std::vector<AccountMetrics> out;
  for (const auto& [account, s] : sums) {
    const double n = static_cast<double>(s.jobs);
    out.push_back(
        AccountMetrics{account, s.jobs, s.queue_s / n, s.slowdown / n, s.ipu_seconds / 3600.0});
  }
  return out;
}

}  // namespace

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double n = static_cast<double>(values.size());
  const double rank = std::ceil(std::clamp(p, 0.0, 100.0) / 100.0 * n);
  const size_t index = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return values[std::min(index, values.size() - 1)];
}

double JainIndex(const std::vector<double>& values) {
  double sum = 0;
  double squares = 0;
  for (double x : values) {
    sum += x;
    squares += x * x;
  }
  if (values.empty() || squares == 0) return 1;
  return sum * sum / (static_cast<double>(values.size()) * squares);
}

double BoundedSlowdown(const JobRecord& job) {
  const double span = job.end_s - job.submit_s;
  return std::max(1.0, span / std::max(job.run_s(), kSlowdownFloorSeconds));
}

Metrics ComputeMetrics(const PolicyRun& run) {
  Metrics m;
  m.policy = run.policy;
  m.jobs = static_cast<int64_t>(run.jobs.size());
  m.dropped = run.dropped;
  for (const TimelinePoint& p : run.timeline)
    m.max_queue_length = std::max(m.max_queue_length, p.queue_length);
  if (run.jobs.empty()) return m;
  std::vector<double> queue;
  queue.reserve(run.jobs.size());
  double first_submit = run.jobs.front().submit_s;
  double last_end = run.jobs.front().end_s;
  double jct = 0, ipu_seconds = 0, fragmentation = 0;
  for (const JobRecord& j : run.jobs) {
    queue.push_back(j.queue_s());
    jct += j.end_s - j.submit_s;
    ipu_seconds += j.ipus * j.run_s();
    fragmentation += j.fragmentation_delay_s;
    first_submit = std::min(first_submit, j.submit_s);
    last_end = std::max(last_end, j.end_s);
  }
  const double n = static_cast<double>(run.jobs.size());
  m.avg_jct_s = jct / n;
  double queue_sum = 0;
  for (double q : queue) queue_sum += q;
  m.avg_queue_s = queue_sum / n;
  m.p50_queue_s = Percentile(queue, 50);
  m.p95_queue_s = Percentile(queue, 95);
  m.p99_queue_s = Percentile(queue, 99);
  m.makespan_s = last_end - first_submit;
  m.utilisation =
      m.makespan_s > 0 && run.pod_ipus > 0 ? ipu_seconds / (run.pod_ipus * m.makespan_s) : 0;
  m.fragmentation_delay_s = fragmentation / n;
  m.accounts = PerAccount(run.jobs);
  std::vector<double> slowdowns;
  for (const AccountMetrics& a : m.accounts) slowdowns.push_back(a.slowdown);
  m.jain = JainIndex(slowdowns);
  return m;
}

}  // namespace ipupod::replay
