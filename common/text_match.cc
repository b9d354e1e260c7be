#include "common/text_match.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ipupod {

int EditDistance(absl::string_view a, absl::string_view b) {
  // One row of the dynamic-programming table: row[j] = distance(a[0, i), b[0, j)).
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> CloseMatches(absl::string_view name,
                                      absl::Span<const std::string> candidates,
                                      const CloseMatchOptions& options) {
  const int limit =
      std::max<int>(2, static_cast<int>(name.size()) / std::max(1, options.length_divisor));
  std::vector<std::pair<int, size_t>> scored;  // (distance, index): a stable order
  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::string& candidate = candidates[i];
    const int distance = EditDistance(name, candidate);
    const bool contains =
        options.substrings && name.size() >= 4 &&
        (absl::StrContains(candidate, name) || absl::StrContains(name, candidate));
    if (distance <= limit || contains) scored.emplace_back(distance, i);
  }
  std::sort(scored.begin(), scored.end());
  if (options.nearest_only && !scored.empty()) {
    const int nearest = scored.front().first;
    std::erase_if(scored, [nearest](const auto& s) { return s.first != nearest; });
    if (scored.size() > options.max_count) scored.clear();
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && i < options.max_count; ++i) {
    out.push_back(candidates[scored[i].second]);
  }
  return out;
}

std::string DidYouMean(absl::Span<const std::string> matches) {
  if (matches.empty()) return "";
  return absl::StrCat("did you mean '", absl::StrJoin(matches, "', '"), "'?");
}

}  // namespace ipupod
