// The SVG plot: layout constants, axes with ticks and labels, one polyline
// per series and panel (plot.h).
#include "tools/replay/plot.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace ipupod::replay {
namespace {

constexpr double kWidth = 960;
constexpr double kHeight = 640;
constexpr double kLeft = 90;
constexpr double kRight = 180;  // room for the legend
constexpr double kPanelHeight = 220;
constexpr double kTop[2] = {60, 350};
constexpr const char* kColors[] = {"#d62728", "#1f77b4", "#2ca02c",
                                   "#9467bd", "#ff7f0e", "#8c564b"};

struct TimeUnit {
  double seconds;
  const char* name;
};

TimeUnit UnitFor(double span_s) {
  if (span_s <= 2 * 3600) return {60, "minutes"};
  if (span_s <= 3 * 86400) return {3600, "hours"};
  return {86400, "days"};
}

// A round tick step (1, 2 or 5 x 10^k) giving about five ticks up to `max`.
double NiceStep(double max) {
  if (!(max > 0)) return 1;
  const double raw = max / 5;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  const double norm = raw / magnitude;
  const double step = norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10;
  return step * magnitude;
}

std::string Escape(const std::string& text) {
  return absl::StrReplaceAll(text, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}});
}

std::string Number(double v) { return absl::StrFormat("%g", v); }

double PlotWidth() { return kWidth - kLeft - kRight; }

struct Panel {
  double top = 0;
  double y_max = 1;
  std::string y_label;
  double Y(double v) const { return top + kPanelHeight - v / y_max * kPanelHeight; }
};

// Frame, horizontal grid with y ticks, x ticks with labels, axis titles.
std::string Axes(const Panel& p, double span_s, const TimeUnit& unit, double y_step) {
  std::string svg = absl::StrFormat(
      "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#333\"/>\n", kLeft,
      p.top, PlotWidth(), kPanelHeight);
  for (double v = 0; v <= p.y_max * 1.0001; v += y_step) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#ddd\"/>"
                          "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%s</text>\n",
                          kLeft, p.Y(v), kLeft + PlotWidth(), p.Y(v), kLeft - 6, p.Y(v) + 4,
                          Number(v));
  }
  const double span_units = span_s / unit.seconds;
  const double x_step = NiceStep(span_units);
  for (double u = 0; u <= span_units * 1.0001; u += x_step) {
    const double x = kLeft + u / span_units * PlotWidth();
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#333\"/>"
                          "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">%s</text>\n",
                          x, p.top + kPanelHeight, x, p.top + kPanelHeight + 5, x,
                          p.top + kPanelHeight + 20, Number(u));
  }
  const double mid = p.top + kPanelHeight / 2;
  absl::StrAppendFormat(&svg,
                        "<text x=\"20\" y=\"%g\" text-anchor=\"middle\" "
                        "transform=\"rotate(-90 20 %g)\">%s</text>\n",
                        mid, mid, Escape(p.y_label));
  absl::StrAppendFormat(&svg,
                        "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">time since the first "
                        "submission (%s)</text>\n",
                        kLeft + PlotWidth() / 2, p.top + kPanelHeight + 40, unit.name);
  return svg;
}

std::string Polyline(const std::vector<PlotBucket>& buckets, const Panel& p, double span_s,
                     bool utilisation, int pod_ipus, const char* color) {
  std::string points;
  for (const PlotBucket& b : buckets) {
    const double x = kLeft + (b.start_s + b.end_s) / 2 / span_s * PlotWidth();
    const double v = utilisation ? 100.0 * b.busy_ipus / std::max(1, pod_ipus) : b.queue_length;
    absl::StrAppendFormat(&points, "%.1f,%.1f ", x, p.Y(v));
  }
  return absl::StrFormat(
      "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"%s\"/>\n", color,
      points);
}

std::string Legend(const PlotInput& input) {
  std::string svg;
  for (size_t i = 0; i < input.series.size(); ++i) {
    const double y = kTop[0] + 10 + 22 * static_cast<double>(i);
    const double x = kWidth - kRight + 20;
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"%s\" "
                          "stroke-width=\"3\"/><text x=\"%g\" y=\"%g\">%s</text>\n",
                          x, y, x + 24, y, kColors[i % std::size(kColors)], x + 30, y + 4,
                          Escape(input.series[i].name));
  }
  return svg;
}

}  // namespace

std::vector<PlotBucket> Bucketize(const std::vector<TimelinePoint>& timeline, double end_s,
                                  double span_s, int buckets) {
  std::vector<PlotBucket> out;
  if (buckets <= 0 || !(span_s > 0)) return out;
  const double width = span_s / buckets;
  for (int i = 0; i < buckets; ++i) out.push_back(PlotBucket{i * width, (i + 1) * width, 0, 0});
  for (size_t k = 0; k < timeline.size(); ++k) {
    const double from = timeline[k].t_s;
    const double to = std::min(end_s, k + 1 < timeline.size() ? timeline[k + 1].t_s : end_s);
    if (!(to > from)) continue;
    const int first = std::clamp(static_cast<int>(from / width), 0, buckets - 1);
    const int last = std::clamp(static_cast<int>(to / width), 0, buckets - 1);
    for (int i = first; i <= last; ++i) {
      const double overlap = std::min(to, out[i].end_s) - std::max(from, out[i].start_s);
      if (overlap <= 0) continue;
      out[i].queue_length += timeline[k].queue_length * overlap / width;
      out[i].busy_ipus += timeline[k].busy_ipus * overlap / width;
    }
  }
  return out;
}

std::string RenderPlotSvg(const PlotInput& input) {
  double span_s = 1;
  for (const PlotSeries& s : input.series) span_s = std::max(span_s, s.end_s);
  std::vector<std::vector<PlotBucket>> buckets;
  double queue_max = 1;
  for (const PlotSeries& s : input.series) {
    buckets.push_back(Bucketize(s.timeline, s.end_s, span_s, kPlotBuckets));
    for (const PlotBucket& b : buckets.back()) queue_max = std::max(queue_max, b.queue_length);
  }
  const double queue_step = NiceStep(queue_max);
  const Panel panels[2] = {
      {kTop[0], std::ceil(queue_max / queue_step) * queue_step, "queue length (requests)"},
      {kTop[1], 100, absl::StrFormat("utilisation (%% of %d IPUs)", input.pod_ipus)}};
  const TimeUnit unit = UnitFor(span_s);
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
      "fill=\"white\"/>\n<text x=\"%g\" y=\"30\" font-size=\"15\">%s</text>\n",
      kWidth, kHeight, kLeft, Escape(input.title));
  absl::StrAppend(&svg, Axes(panels[0], span_s, unit, queue_step),
                  Axes(panels[1], span_s, unit, 20));
  for (size_t i = 0; i < buckets.size(); ++i) {
    const char* color = kColors[i % std::size(kColors)];
    for (int p = 0; p < 2; ++p) {
      absl::StrAppend(&svg, Polyline(buckets[i], panels[p], span_s, p == 1, input.pod_ipus, color));
    }
  }
  absl::StrAppend(&svg, Legend(input), "</svg>\n");
  return svg;
}

absl::Status WritePlotSvg(const std::string& path, const PlotInput& input) {
  if (input.series.empty()) return absl::InvalidArgumentError("nothing to plot: no series");
  if (!absl::EndsWith(path, ".svg")) {
    return absl::InvalidArgumentError(
        absl::StrFormat("plot file '%s' must end in .svg (the plot is written as SVG)", path));
  }
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) {
    const int error = errno;
    return absl::Status(absl::ErrnoToStatusCode(error),
                        absl::StrFormat("cannot write plot file '%s': %s; check that its "
                                        "directory exists and is writable",
                                        path, std::strerror(error)));
  }
  file << RenderPlotSvg(input);
  file.close();
  if (!file) {
    return absl::InternalError(absl::StrFormat("error writing plot file '%s'", path));
  }
  return absl::OkStatus();
}

}  // namespace ipupod::replay
