#include "tools/replay/report.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/format.h"

namespace ipupod::replay {
namespace {

std::string Duration(double seconds) { return FormatClockDuration(seconds); }

std::string PolicyRow(const Metrics& m) {
  return absl::StrFormat("%-12s %7d %7d %9s %9s %9s %9s %9s %10s %6.1f%% %10s %6.3f\n", m.policy,
                         m.jobs, m.dropped, Duration(m.avg_jct_s), Duration(m.avg_queue_s),
                         Duration(m.p50_queue_s), Duration(m.p95_queue_s), Duration(m.p99_queue_s),
                         Duration(m.makespan_s), 100 * m.utilisation,
                         Duration(m.fragmentation_delay_s), m.jain);
}

// account -> policy index -> its figures.
std::map<std::string, std::map<size_t, AccountMetrics>> ByAccount(
    const std::vector<Metrics>& metrics) {
  std::map<std::string, std::map<size_t, AccountMetrics>> by;
  for (size_t i = 0; i < metrics.size(); ++i) {
    for (const AccountMetrics& a : metrics[i].accounts) by[a.account][i] = a;
  }
  return by;
}

std::string AccountTable(const std::vector<Metrics>& metrics) {
  std::string out = absl::StrFormat("\n%-12s %7s %9s", "account", "jobs", "IPU-h");
  for (const Metrics& m : metrics) absl::StrAppendFormat(&out, " %22s", m.policy);
  absl::StrAppend(&out, "\n");
  for (const auto& [account, per_policy] : ByAccount(metrics)) {
    const AccountMetrics& first = per_policy.begin()->second;
    absl::StrAppendFormat(&out, "%-12s %7d %9.0f", account, first.jobs, first.ipu_hours);
    for (size_t i = 0; i < metrics.size(); ++i) {
      auto it = per_policy.find(i);
      if (it == per_policy.end()) {
        absl::StrAppendFormat(&out, " %22s", "-");
        continue;
      }
      absl::StrAppendFormat(
          &out, " %22s",
          absl::StrFormat("%.2f (wait %s)", it->second.slowdown, Duration(it->second.avg_queue_s)));
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace

nlohmann::ordered_json MetricsJson(const Metrics& m) {
  nlohmann::ordered_json j;
  j["policy"] = m.policy;
  j["jobs"] = m.jobs;
  j["dropped"] = m.dropped;
  j["avg_jct_s"] = m.avg_jct_s;
  j["avg_queue_s"] = m.avg_queue_s;
  j["p50_queue_s"] = m.p50_queue_s;
  j["p95_queue_s"] = m.p95_queue_s;
  j["p99_queue_s"] = m.p99_queue_s;
  j["makespan_s"] = m.makespan_s;
  j["utilisation"] = m.utilisation;
  j["fragmentation_delay_s"] = m.fragmentation_delay_s;
  j["jain"] = m.jain;
  j["max_queue_length"] = m.max_queue_length;
  j["accounts"] = nlohmann::ordered_json::array();
  for (const AccountMetrics& a : m.accounts) {
    nlohmann::ordered_json account;
    account["account"] = a.account;
    account["jobs"] = a.jobs;
    account["avg_queue_s"] = a.avg_queue_s;
    account["slowdown"] = a.slowdown;
    account["ipu_hours"] = a.ipu_hours;
    j["accounts"].push_back(std::move(account));
  }
  return j;
}

std::string FormatTable(const std::vector<Metrics>& metrics) {
  std::string out =
      absl::StrFormat("%-12s %7s %7s %9s %9s %9s %9s %9s %10s %7s %10s %6s\n", "policy", "jobs",
                      "dropped", "avg JCT", "avg wait", "p50 wait", "p95 wait", "p99 wait",
                      "makespan", "util", "frag wait", "Jain");
  for (const Metrics& m : metrics) absl::StrAppend(&out, PolicyRow(m));
  absl::StrAppend(&out, AccountTable(metrics));
  absl::StrAppend(&out,
                  "\nper account: mean bounded slowdown (wait + run) / max(run, 10 s), and mean "
                  "wait; Jain's index is over the accounts' slowdowns\n");
  return out;
}

}  // namespace ipupod::replay
