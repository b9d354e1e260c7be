// File: tools/replay/plot.h
//
// The replay's plot, an SVG written by hand (no plotting dependency): two
// panels sharing the time axis, the queue length (requests waiting) above
// and the pod's utilisation (IPUs in granted sessions / pod IPUs, in %)
// below, one line per policy with a legend. Each line is the time-weighted
// mean of its step function over kPlotBuckets equal slices of the longest
// makespan, so a replay of months draws the same few hundred points as one
// of an hour. The time axis counts from the first submission in minutes,
// hours or days, whichever suits the span.
//
// Errors: WritePlotSvg returns INVALID_ARGUMENT for no series or a path that
// does not end in .svg (the only format written), and the file's error
// (NOT_FOUND for a missing directory, PERMISSION_DENIED, INTERNAL) naming
// the path.
//
// Thread safety: pure functions, apart from the file WritePlotSvg writes.
#ifndef IPUPOD_REPLAY_PLOT_H_
#define IPUPOD_REPLAY_PLOT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/replay/metrics.h"

namespace ipupod::replay {

inline constexpr int kPlotBuckets = 480;

struct PlotSeries {
  std::string name;  // the policy
  std::vector<TimelinePoint> timeline;
  double end_s = 0;  // when the last job ended (the line drops to 0 there)
};

struct PlotInput {
  std::string title;
  int pod_ipus = 0;
  std::vector<PlotSeries> series;
};

// One bucket of a series: time-weighted means over [start_s, end_s).
struct PlotBucket {
  double start_s = 0;
  double end_s = 0;
  double queue_length = 0;
  double busy_ipus = 0;
};

// `buckets` equal slices of [0, span_s) of the step function `timeline`
// (each point holds until the next, nothing after `end_s`).
std::vector<PlotBucket> Bucketize(const std::vector<TimelinePoint>& timeline, double end_s,
                                  double span_s, int buckets);

std::string RenderPlotSvg(const PlotInput& input);
absl::Status WritePlotSvg(const std::string& path, const PlotInput& input);

}  // namespace ipupod::replay

#endif  // IPUPOD_REPLAY_PLOT_H_
