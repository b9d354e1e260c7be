// File: common/text_match.h
//
// Close-match suggestions for names a user mistyped ("did you mean ...?"):
// the one edit distance of the project, and the choice of which candidates
// count as close. Used for IPUConfig keys, server config keys and tensor
// names.
//
// Thread safety: pure functions.
// Errors: none.
#ifndef IPUPOD_COMMON_TEXT_MATCH_H_
#define IPUPOD_COMMON_TEXT_MATCH_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ipupod {

// Levenshtein distance: insertions, deletions and substitutions cost 1.
int EditDistance(absl::string_view a, absl::string_view b);

struct CloseMatchOptions {
  // A candidate is close within max(2, name.size() / length_divisor) edits.
  int length_divisor = 3;
  // Also close: a candidate containing the name or contained in it (names
  // of 4 or more characters), e.g. "matmul_proportion" for "matmul".
  bool substrings = true;
  // Only the candidates at the smallest distance; none at all when more
  // than max_count tie (the hint would not help).
  bool nearest_only = false;
  size_t max_count = 3;
};

// The close candidates, nearest first (ties in the candidates' order), at
// most max_count.
std::vector<std::string> CloseMatches(absl::string_view name,
                                      absl::Span<const std::string> candidates,
                                      const CloseMatchOptions& options = {});

// "did you mean 'a', 'b'?"; "" when `matches` is empty.
std::string DidYouMean(absl::Span<const std::string> matches);

}  // namespace ipupod

#endif  // IPUPOD_COMMON_TEXT_MATCH_H_
