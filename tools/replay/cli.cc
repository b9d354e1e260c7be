// ipupod-replay's flags, their checks, and the run: read, select, replay
// each policy, report (cli.h).
#include "tools/replay/cli.h"

#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "device/pod_config.h"
#include "scheduler/scheduler.h"
#include "spdlog/spdlog.h"
#include "tools/replay/driver.h"
#include "tools/replay/plot.h"
#include "tools/replay/report.h"
#include "tools/replay/selection.h"
#include "tools/replay/trace.h"

namespace ipupod::replay {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

constexpr const char* kDescription =
    "ipupod-replay: replay a cluster trace through ipupod's real scheduler on a virtual clock.\n"
    "\n"
    "Each job of the selection (its clusters, submitted in [--from, --to)) becomes an attach\n"
    "request of its GPU count in IPUs, made at its submission time by a user named after its\n"
    "cluster and charged to an account of that name, with a time limit of its duration x\n"
    "--estimate-factor; it is released when its duration has passed since its start. Jobs\n"
    "needing more IPUs than the pod or a count that is not a power of two are dropped and\n"
    "counted. Each --policy replays the same requests; the table (or --json) reports per\n"
    "policy: mean job completion time (JCT), mean and p50/p95/p99 wait in the queue, makespan,\n"
    "utilisation (IPU-seconds used / pod IPUs x makespan), the fragmentation-induced wait,\n"
    "each account's mean bounded slowdown and Jain's fairness index over accounts.\n";

constexpr const char* kFooter =
    "Policies: fifo (arrival order, the head blocks the rest), backfill (arrival order; later\n"
    "jobs use IPUs only where they delay no one ahead), multifactor (the fair-share default:\n"
    "priority by age, the account's usage against its share, size and QoS; with backfill).\n"
    "\n"
    "Examples (the first three are the selections of docs/scheduling.md, \"Replaying the\n"
    "Philly trace\"):\n"
    "  # one tenant over two months on a POD32, every policy\n"
    "  ipupod-replay --trace philly.csv --clusters 103959 --from 2017-10-01 --to 2017-12-01 \\\n"
    "      --pod 32\n"
    "  # a contended tenant: JSON, and a plot of queue length and utilisation\n"
    "  ipupod-replay --trace philly.csv --clusters 0e4a51 --from 2017-10-01 --to 2017-12-01 \\\n"
    "      --json --plot contended.svg\n"
    "  # three tenants merged on a POD32, the first with twice the share of the others\n"
    "  ipupod-replay --trace philly.csv --clusters 103959,ed69ec,e13805 --shares 103959=2 \\\n"
    "      --from 2017-10-01 --to 2017-12-01 --pod 32\n"
    "  # users who ask for twice the time they use, fair share only\n"
    "  ipupod-replay --trace philly.csv --clusters 103959 --pod 32 --estimate-factor 2 \\\n"
    "      --policy multifactor\n"
    "\n"
    "Speed: the time goes into the scheduler's walks over the queue; each stops where no\n"
    "one further back could start, or --max-backfill-waiters past the first waiter that\n"
    "cannot start. The whole Philly trace on a POD64 (82,230 jobs, up to 80,000 waiting)\n"
    "replays in well under two minutes per policy (docs/scheduling.md, \"Speed\").\n"
    "\n"
    "Exit codes: 0 done, 1 the replay failed (bad trace, unwritable plot), 2 usage.";

struct Flags {
  std::string trace;
  std::vector<std::string> clusters;
  std::string from;
  std::string to;
  std::string pod = "64";
  std::string policy = "all";
  std::vector<std::string> shares;
  double estimate_factor = 1;
  double priority_interval_s = 60;
  int max_backfill_waiters = scheduler::SchedulerOptions().max_backfill_waiters;
  bool json = false;
  std::string plot;
};

struct Plan {
  SelectionOptions selection;
  ReplayOptions replay;
  std::vector<sharing::QueueOrder> orders;
};

void AddFlags(CLI::App& app, Flags& f) {
  app.add_option("--trace", f.trace, "The trace, a CSV file (timestamp,duration,num_gpus,cluster)")
      ->required()
      ->type_name("FILE");
  app.add_option("--clusters", f.clusters, "Virtual clusters (tenants) to replay (default: all)")
      ->delimiter(',')
      ->type_name("VC,...");
  app.add_option("--from", f.from, "First submission time replayed, UTC (default: the trace's)")
      ->type_name("DATE");
  app.add_option("--to", f.to, "Replay jobs submitted before this, UTC (default: all)")
      ->type_name("DATE");
  app.add_option("--pod", f.pod, "Pod size: 1..256, a power of two, or POD4/POD16/POD64 (64)")
      ->type_name("N");
  app.add_option("--policy", f.policy, "fifo, backfill, multifactor, or all of them (all)")
      ->type_name("NAME");
  app.add_option("--shares", f.shares, "Shares of accounts (clusters); others have 1")
      ->delimiter(',')
      ->type_name("VC=N,...");
  app.add_option("--estimate-factor", f.estimate_factor,
                 "Time limit = duration x this (1: perfect estimates; 0: none given)")
      ->type_name("F");
  app.add_option("--priority-interval", f.priority_interval_s,
                 "Virtual seconds between the scheduler's passes while jobs wait (60; 0: at "
                 "events only)")
      ->type_name("SECONDS");
  app.add_option("--max-backfill-waiters", f.max_backfill_waiters,
                 "Waiters a walk of the queue considers past the first that cannot start, as "
                 "ipupodd's max_backfill_waiters (1000; 0: no bound)")
      ->type_name("N");
  app.add_flag("--json", f.json, "Print a JSON array, one object per policy, instead of tables");
  app.add_option("--plot", f.plot, "Write queue length and utilisation over time to this SVG")
      ->type_name("FILE.svg");
}

absl::StatusOr<device::PodConfig> ParsePod(const std::string& value) {
  int64_t n = 0;
  if (absl::SimpleAtoi(value, &n)) return device::PodFromSize(n);
  return device::PodFromName(value);
}

absl::StatusOr<std::vector<sharing::QueueOrder>> ParsePolicies(const std::string& value) {
  if (value == "all") {
    return std::vector<sharing::QueueOrder>{sharing::QueueOrder::kFifo,
                                            sharing::QueueOrder::kBackfill,
                                            sharing::QueueOrder::kMultifactor};
  }
  absl::StatusOr<sharing::QueueOrder> order = sharing::ParseQueueOrder(value);
  if (!order.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--policy \"%s\" is not a policy; use fifo, backfill, multifactor or all", value));
  }
  return std::vector<sharing::QueueOrder>{*order};
}

absl::StatusOr<std::map<std::string, double>> ParseShares(const std::vector<std::string>& items) {
  std::map<std::string, double> shares;
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    double value = 0;
    if (eq == std::string::npos || eq == 0 || !absl::SimpleAtod(item.substr(eq + 1), &value) ||
        !(value > 0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--shares \"%s\" is not VC=N with N > 0; e.g. --shares 103959=2,0e4a51=1", item));
    }
    if (!shares.emplace(item.substr(0, eq), value).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--shares names %s twice; give each cluster once", item.substr(0, eq)));
    }
  }
  return shares;
}

absl::StatusOr<Plan> MakePlan(const Flags& f) {
  Plan plan;
  IPUPOD_ASSIGN_OR_RETURN(plan.replay.pod, ParsePod(f.pod));
  IPUPOD_ASSIGN_OR_RETURN(plan.orders, ParsePolicies(f.policy));
  IPUPOD_ASSIGN_OR_RETURN(plan.replay.shares, ParseShares(f.shares));
  plan.replay.estimate_factor = f.estimate_factor;
  if (!(f.priority_interval_s >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--priority-interval %g must be >= 0 seconds (0: passes only at events)",
                        f.priority_interval_s));
  }
  plan.replay.priority_interval = absl::Seconds(f.priority_interval_s);
  if (f.max_backfill_waiters < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--max-backfill-waiters %d must be >= 0 (0: no bound)", f.max_backfill_waiters));
  }
  plan.replay.max_backfill_waiters = f.max_backfill_waiters;
  plan.selection.clusters = f.clusters;
  plan.selection.pod_ipus = plan.replay.pod.num_ipus;
  if (!f.from.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(plan.selection.from, ParseTraceDate(f.from, "--from"));
  }
  if (!f.to.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(plan.selection.to, ParseTraceDate(f.to, "--to"));
  }
  if (!f.plot.empty() && !absl::EndsWith(f.plot, ".svg")) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--plot %s: the plot is written as SVG; name a .svg file", f.plot));
  }
  return plan;
}

std::string Summary(const Flags& f, const Selection& s, const device::PodConfig& pod) {
  return absl::StrFormat(
      "%s: %d jobs of %s submitted %s to %s, on %s; %d dropped (%d over %d IPUs, %d not a power "
      "of two)\n",
      f.trace, s.jobs.size(), absl::StrJoin(s.clusters, ","),
      FormatTraceTime(s.jobs.front().submit), FormatTraceTime(s.jobs.back().submit), pod.name,
      s.dropped.total(), s.dropped.too_large, pod.num_ipus, s.dropped.not_power_of_two);
}

std::string CallTime(absl::string_view name, const SchedulerCalls& c) {
  return absl::StrFormat("%d %s %.2f s (%.0f us each)", c.calls, name, c.wall_s,
                         c.calls > 0 ? 1e6 * c.wall_s / c.calls : 0.0);
}

int MaxQueue(const PolicyRun& run) {
  int longest = 0;
  for (const TimelinePoint& p : run.timeline) longest = std::max(longest, p.queue_length);
  return longest;
}

struct Outcome {
  std::vector<Metrics> metrics;
  std::vector<PlotSeries> series;
};

absl::StatusOr<Outcome> ReplayAll(const Selection& selection, const Plan& plan, std::ostream& err) {
  Outcome outcome;
  for (sharing::QueueOrder order : plan.orders) {
    ReplayOptions options = plan.replay;
    options.order = order;
    const absl::Time started = absl::Now();
    IPUPOD_ASSIGN_OR_RETURN(PolicyRun run, Replay(selection, options));
    err << absl::StrFormat(
        "ipupod-replay: %s: %d jobs replayed in %.2f s; in the scheduler: %s, %s, %s; at most %d "
        "waiting\n",
        run.policy, run.jobs.size(), absl::ToDoubleSeconds(absl::Now() - started),
        CallTime("Attach", run.attach), CallTime("Release", run.release),
        CallTime("Reprioritize", run.pass), MaxQueue(run));
    outcome.metrics.push_back(ComputeMetrics(run));
    double end_s = 0;
    for (const JobRecord& j : run.jobs) end_s = std::max(end_s, j.end_s);
    outcome.series.push_back(PlotSeries{run.policy, std::move(run.timeline), end_s});
  }
  return outcome;
}

int Failed(std::ostream& err, const absl::Status& status, int code) {
  err << "ipupod-replay: " << (code == kExitUsage ? "usage: " : "error: ") << status.message()
      << "\n";
  return code;
}

int Execute(const Flags& f, const Plan& plan, std::ostream& out, std::ostream& err) {
  absl::StatusOr<std::vector<TraceJob>> trace = ReadTrace(f.trace);
  if (!trace.ok()) return Failed(err, trace.status(), kExitFailed);
  absl::StatusOr<Selection> selection = Select(*trace, plan.selection);
  if (!selection.ok()) return Failed(err, selection.status(), kExitUsage);
  if (absl::Status s = ReplayPolicy(*selection, plan.replay).status(); !s.ok()) {
    return Failed(err, s, kExitUsage);
  }
  absl::StatusOr<Outcome> outcome = ReplayAll(*selection, plan, err);
  if (!outcome.ok()) return Failed(err, outcome.status(), kExitFailed);
  if (f.json) {
    nlohmann::ordered_json doc = nlohmann::ordered_json::array();
    for (const Metrics& m : outcome->metrics) doc.push_back(MetricsJson(m));
    out << doc.dump(2) << "\n";
  } else {
    out << Summary(f, *selection, plan.replay.pod) << "\n" << FormatTable(outcome->metrics);
  }
  if (!f.plot.empty()) {
    PlotInput plot{absl::StrFormat("%s on %s, %d jobs", absl::StrJoin(selection->clusters, ","),
                                   plan.replay.pod.name, selection->jobs.size()),
                   plan.replay.pod.num_ipus, std::move(outcome->series)};
    if (absl::Status s = WritePlotSvg(f.plot, plot); !s.ok()) return Failed(err, s, kExitFailed);
  }
  return 0;
}

}  // namespace

int RunReplayCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app(kDescription, "ipupod-replay");
  app.footer(kFooter);
  Flags flags;
  AddFlags(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      return app.exit(e, out, err);
    }
    err << "ipupod-replay: usage: " << e.what() << "; see ipupod-replay --help\n";
    return kExitUsage;
  }
  absl::StatusOr<Plan> plan = MakePlan(flags);
  if (!plan.ok()) return Failed(err, plan.status(), kExitUsage);
  // The scheduler logs its start and, at debug level, every grant: keep
  // stdout for the report.
  spdlog::set_level(spdlog::level::warn);
  return Execute(flags, *plan, out, err);
}

}  // namespace ipupod::replay
