// File: tools/replay/metrics.h
//
// What a replay measured: each job's submission, start and end on the
// virtual clock, the queue length and IPUs in use over time, and the figures
// computed from them (the JSON keys):
//
//   avg_jct_s        mean of end - submit (job completion time)
//   avg/p50/p95/p99_queue_s   mean and nearest-rank percentiles of start - submit
//   makespan_s       last end - first submission
//   utilisation      allocated IPU-seconds / (pod IPUs x makespan)
//   fragmentation_delay_s     mean over jobs of the time each waited only for
//                    want of an aligned block (enough IPUs free, none aligned),
//                    as the scheduler reported it at the grant
//                    (SessionView::fragmentation_delay_seconds)
//   per account      jobs, mean queueing delay, mean bounded slowdown
//                    (end - submit) / max(duration, kSlowdownFloorSeconds),
//                    floored at 1, and IPU-hours
//   jain             Jain's fairness index over the accounts' mean bounded
//                    slowdowns: (sum x)^2 / (n sum x^2); 1 when every account
//                    is slowed down alike, towards 1/n when one suffers alone
//
// Times are seconds from the replay's origin (the first submission).
//
// Thread safety: pure functions over values.
// Errors: none; empty inputs give zeros (Jain's index of nothing is 1).
#ifndef IPUPOD_REPLAY_METRICS_H_
#define IPUPOD_REPLAY_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ipupod::replay {

// Jobs shorter than this count as this long in slowdowns, so a 2-second job
// that waited a minute does not dominate an account's figure.
inline constexpr double kSlowdownFloorSeconds = 10;

struct JobRecord {
  int64_t line = 0;  // the trace line of the job
  std::string account;
  int ipus = 0;
  double submit_s = 0;
  double start_s = 0;
  double end_s = 0;
  double fragmentation_delay_s = 0;
  double queue_s() const { return start_s - submit_s; }
  double run_s() const { return end_s - start_s; }
};

// The state after every batch of events at one virtual instant: a step
// function, each point holding until the next.
struct TimelinePoint {
  double t_s = 0;
  int queue_length = 0;  // requests waiting
  int busy_ipus = 0;     // IPUs in granted sessions
};

// How many calls of one kind, and the wall time spent inside them.
struct SchedulerCalls {
  int64_t calls = 0;
  double wall_s = 0;
};

// One replay of one policy.
struct PolicyRun {
  std::string policy;
  int pod_ipus = 0;
  int64_t dropped = 0;
  std::vector<JobRecord> jobs;          // in submission order
  std::vector<TimelinePoint> timeline;  // in time order
  // Where a replay's time goes: wall time inside the Scheduler's calls, by
  // call (never in the JSON, which holds only decisions).
  SchedulerCalls attach, release, pass;
};

struct AccountMetrics {
  std::string account;
  int64_t jobs = 0;
  double avg_queue_s = 0;
  double slowdown = 0;  // mean bounded slowdown
  double ipu_hours = 0;
};

struct Metrics {
  std::string policy;
  int64_t jobs = 0;
  int64_t dropped = 0;
  double avg_jct_s = 0;
  double avg_queue_s = 0;
  double p50_queue_s = 0;
  double p95_queue_s = 0;
  double p99_queue_s = 0;
  double makespan_s = 0;
  double utilisation = 0;
  double fragmentation_delay_s = 0;
  double jain = 1;
  int max_queue_length = 0;
  std::vector<AccountMetrics> accounts;  // sorted by name
};

Metrics ComputeMetrics(const PolicyRun& run);

// Nearest-rank percentile (p in [0, 100]) of `values`: the smallest value
// with at least p% of the values at or below it; 0 for no values.
double Percentile(std::vector<double> values, double p);

// Jain's fairness index (sum x)^2 / (n sum x^2); 1 for no values or all zero.
double JainIndex(const std::vector<double>& values);

// The bounded slowdown of one job (see the file comment).
double BoundedSlowdown(const JobRecord& job);

}  // namespace ipupod::replay

#endif  // IPUPOD_REPLAY_METRICS_H_
