// File: tools/replay/trace.h
//
// A cluster trace as ipupod-replay reads it: one job per CSV row with its
// submission time, duration, GPU count and virtual cluster (the tenant), in
// the layout of the Philly trace (../shared/data/philly/philly.csv):
//
//   timestamp,duration,num_gpus,gpu_time,cluster
//   2017-10-09 07:01:55,66.0,1,66.0,11cb48
//
// Columns are found by their header names (order free, extra columns such as
// gpu_time ignored). Timestamps are UTC, "YYYY-MM-DD HH:MM:SS"; durations are
// seconds (a finite number >= 0); num_gpus a whole number >= 0; a cluster is
// 1-64 characters of [A-Za-z0-9._-] starting with a letter or digit, because
// the replay uses it as the user and account name. Blank lines are skipped;
// CRLF line ends are accepted.
//
// Errors: ReadTrace: NOT_FOUND (no such file), INVALID_ARGUMENT (not a
// regular file; a bad header; bad rows: each named by line number, field and
// value, the first kMaxReportedRowErrors of them and how many more),
// RESOURCE_EXHAUSTED (a file over kTraceBytesMax or rows over kTraceRowsMax),
// INTERNAL (a read error). ParseTraceDate: INVALID_ARGUMENT naming the flag,
// the value and the accepted forms. Nothing is returned for a trace with any
// bad row: a replay of part of a trace would look like a replay of all of it.
//
// Thread safety: pure functions.
#ifndef IPUPOD_REPLAY_TRACE_H_
#define IPUPOD_REPLAY_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ipupod::replay {

inline constexpr int64_t kTraceBytesMax = int64_t{1} << 30;  // 1 GiB
inline constexpr int64_t kTraceRowsMax = 10'000'000;
inline constexpr int kMaxReportedRowErrors = 5;

struct TraceJob {
  int64_t line = 0;  // line number in the file (the header is line 1): names the job
  absl::Time submit;
  double duration_seconds = 0;
  int64_t gpus = 0;
  std::string cluster;
};

// Parses CSV text; `source` names it in messages (usually the path). Jobs
// come back in file order.
absl::StatusOr<std::vector<TraceJob>> ParseTrace(absl::string_view text, absl::string_view source);

// Reads and parses the file at `path`.
absl::StatusOr<std::vector<TraceJob>> ReadTrace(const std::string& path);

// A date for --from / --to: "YYYY-MM-DD", "YYYY-MM-DD HH:MM:SS" or
// "YYYY-MM-DDTHH:MM:SS", UTC. `flag` names the option in the message.
absl::StatusOr<absl::Time> ParseTraceDate(absl::string_view value, absl::string_view flag);

// "2017-10-09 07:01:55" (UTC), the trace's own form.
std::string FormatTraceTime(absl::Time t);

}  // namespace ipupod::replay

#endif  // IPUPOD_REPLAY_TRACE_H_
