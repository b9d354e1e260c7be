#include "tools/replay/selection.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/format.h"
#include "common/text_match.h"

namespace ipupod::replay {
namespace {

bool IsPowerOfTwo(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

absl::Status CheckClusters(const std::vector<TraceJob>& trace,
                           const std::vector<std::string>& wanted) {
  std::set<std::string> present;
  for (const TraceJob& job : trace) present.insert(job.cluster);
  const std::vector<std::string> names(present.begin(), present.end());
  for (const std::string& c : wanted) {
    if (present.count(c) > 0) continue;
    const std::string hint = DidYouMean(CloseMatches(c, names));
    return absl::InvalidArgumentError(absl::StrFormat(
        "the trace has no cluster \"%s\"%s; its clusters are: %s", EchoName(c),
        hint.empty() ? "" : absl::StrCat(" (", hint, ")"), absl::StrJoin(names, ", ")));
  }
  return absl::OkStatus();
}

std::string DescribeWindow(const SelectionOptions& options) {
  std::string clusters = options.clusters.empty()
                             ? std::string("every cluster")
                             : absl::StrCat("clusters ", absl::StrJoin(options.clusters, ","));
  return absl::StrFormat("%s, from %s to %s", clusters,
                         options.from ? FormatTraceTime(*options.from) : "the start",
                         options.to ? FormatTraceTime(*options.to) : "the end");
}

absl::Status EmptyError(const Selection& s, const SelectionOptions& options) {
  if (s.in_window == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("no job of the trace is in the selection (%s); widen --from/--to or "
                        "choose other --clusters",
                        DescribeWindow(options)));
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "all %d jobs of the selection (%s) were dropped: %d need more than the pod's %d IPUs, %d "
      "ask for a number of IPUs that is not a power of two; use a larger --pod",
      s.in_window, DescribeWindow(options), s.dropped.too_large, options.pod_ipus,
      s.dropped.not_power_of_two));
}

}  // namespace

absl::StatusOr<Selection> Select(const std::vector<TraceJob>& trace,
                                 const SelectionOptions& options) {
  if (options.from && options.to && *options.from >= *options.to) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--from %s is not before --to %s; the window is [from, to)",
                        FormatTraceTime(*options.from), FormatTraceTime(*options.to)));
  }
  if (absl::Status s = CheckClusters(trace, options.clusters); !s.ok()) return s;
  const std::set<std::string> wanted(options.clusters.begin(), options.clusters.end());
  Selection selection;
  std::set<std::string> kept_clusters;
  for (const TraceJob& job : trace) {
    if (!wanted.empty() && wanted.count(job.cluster) == 0) continue;
    if (options.from && job.submit < *options.from) continue;
    if (options.to && job.submit >= *options.to) continue;
    ++selection.in_window;
    if (!IsPowerOfTwo(job.gpus)) {
      ++selection.dropped.not_power_of_two;
    } else if (job.gpus > options.pod_ipus) {
      ++selection.dropped.too_large;
    } else {
      selection.jobs.push_back(job);
      kept_clusters.insert(job.cluster);
    }
  }
  if (selection.jobs.empty()) return EmptyError(selection, options);
  std::stable_sort(selection.jobs.begin(), selection.jobs.end(),
                   [](const TraceJob& a, const TraceJob& b) { return a.submit < b.submit; });
  selection.clusters.assign(kept_clusters.begin(), kept_clusters.end());
  return selection;
}

}  // namespace ipupod::replay
