// File: tools/replay/report.h
//
// How ipupod-replay shows its results: a text table (one row per policy,
// then the per-account slowdowns with one column per policy) and JSON, one
// object per policy with the keys in this order:
//
//   {"policy", "jobs", "dropped", "avg_jct_s", "avg_queue_s", "p50_queue_s",
//    "p95_queue_s", "p99_queue_s", "makespan_s", "utilisation",
//    "fragmentation_delay_s", "jain"}
//
// followed by "max_queue_length" and
// "accounts": [{"account", "jobs", "avg_queue_s", "slowdown", "ipu_hours"}].
// The JSON holds only what the replay decided, never wall times, so two runs
// of one replay print identical documents.
//
// Thread safety: pure functions.
// Errors: none.
#ifndef IPUPOD_REPLAY_REPORT_H_
#define IPUPOD_REPLAY_REPORT_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/replay/metrics.h"

namespace ipupod::replay {

nlohmann::ordered_json MetricsJson(const Metrics& metrics);

// The policies' rows and the per-account table.
std::string FormatTable(const std::vector<Metrics>& metrics);

}  // namespace ipupod::replay

#endif  // IPUPOD_REPLAY_REPORT_H_
