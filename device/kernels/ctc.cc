#include "device/kernels/ctc.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ipupod::kernels {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double LogAdd(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  const double hi = std::max(a, b);
  return hi + std::log1p(std::exp(std::min(a, b) - hi));
}

// Log probabilities of a prefix's alignments ending in a blank and in its
// last label.
struct Beam {
  double blank = kNegInf;
  double label = kNegInf;
  double total() const { return LogAdd(blank, label); }
};

using Beams = std::map<std::vector<int64_t>, Beam>;

// One step: every beam extended by every class (see the header).
Beams Extend(const Beams& beams, const float* step, int64_t num_classes, int64_t blank) {
  Beams next;
  for (const auto& [prefix, beam] : beams) {
    const double total = beam.total();
    Beam& same = next[prefix];
    same.blank = LogAdd(same.blank, total + step[blank]);
    for (int64_t c = 0; c < num_classes; ++c) {
      if (c == blank) continue;
      const double p = step[c];
      std::vector<int64_t> longer = prefix;
      longer.push_back(c);
      Beam& extended = next[longer];
      if (!prefix.empty() && prefix.back() == c) {
        same.label = LogAdd(same.label, beam.label + p);  // c c collapses
        extended.label = LogAdd(extended.label, beam.blank + p);
      } else {
        extended.label = LogAdd(extended.label, total + p);
      }
    }
  }
  return next;
}

// The `keep` most probable beams, ties to the smaller prefix.
std::vector<std::pair<std::vector<int64_t>, Beam>> Best(const Beams& beams, int64_t keep) {
  std::vector<std::pair<std::vector<int64_t>, Beam>> all(beams.begin(), beams.end());
  const auto better = [](const auto& a, const auto& b) {
    const double ta = a.second.total(), tb = b.second.total();
    if (ta != tb) return ta > tb;
    return a.first < b.first;
  };
  const size_t n = std::min(all.size(), static_cast<size_t>(keep));
  std::partial_sort(all.begin(), all.begin() + static_cast<ptrdiff_t>(n), all.end(), better);
  all.resize(n);
  return all;
}

}  // namespace

absl::Status CheckCtcBeamSearchOptions(const CtcBeamSearchOptions& o, int64_t num_classes) {
  if (o.blank < 0 || o.blank >= num_classes) {
    return absl::InvalidArgumentError(absl::StrCat("blank class ", o.blank, " is not one of the ",
                                                   num_classes, " classes [0, ", num_classes, ")"));
  }
  if (o.beam_width < 1 || o.top_paths < 1 || o.top_paths > o.beam_width) {
    return absl::InvalidArgumentError(
        absl::StrCat("beam_width (", o.beam_width, ") and top_paths (", o.top_paths,
                     ") must be at least 1, with top_paths <= beam_width"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CtcPath>> CtcBeamSearch(const float* log_probs, int64_t length,
                                                   int64_t num_classes, int64_t step_stride,
                                                   const CtcBeamSearchOptions& options) {
  if (absl::Status s = CheckCtcBeamSearchOptions(options, num_classes); !s.ok()) return s;
  if (length < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sequence length ", length, " is negative"));
  }
  Beams beams;
  beams[{}].blank = 0;  // the empty prefix, certainly
  for (int64_t t = 0; t < length; ++t) {
    Beams next = Extend(beams, log_probs + t * step_stride, num_classes, options.blank);
    beams.clear();
    for (auto& [prefix, beam] : Best(next, options.beam_width)) beams.emplace(prefix, beam);
  }
  std::vector<CtcPath> out;
  for (auto& [prefix, beam] : Best(beams, options.top_paths)) {
    out.push_back({prefix, beam.total()});
  }
  return out;
}

}  // namespace ipupod::kernels
