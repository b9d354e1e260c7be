// File: device/kernels/ctc.h
//
// Connectionist temporal classification (CTC) prefix beam search: the
// decoder behind poptorch.ctc_beam_search_decoder (PopART's
// CtcBeamSearchDecoder, device/graph/ops_poptorch.cc).
//
// Input: log probabilities of one sequence, `length` steps of `num_classes`
// values each (step t's values at log_probs[t * step_stride ...]), taken as
// given (not normalised). A prefix is a label sequence without blanks; each
// beam keeps two log probabilities: of the alignments so far that end in a
// blank and of those that end in its last label. A step extends every beam:
// the blank keeps the prefix (ending in blank); a label c extends it to
// prefix + c, except that c after an alignment ending in c (no blank between)
// collapses into the same prefix; probabilities of the same prefix add
// (log-sum-exp, in double). After each step the `beam_width` most probable
// prefixes (by the sum of their two probabilities) are kept. The result is
// the `top_paths` most probable prefixes at the end, most probable first,
// with their log probabilities; fewer when fewer prefixes exist (length 0
// has only the empty prefix, with log probability 0).
//
// Deterministic: ties in probability are broken by the labels, the
// lexicographically smaller prefix first (a shorter prefix before any
// longer one it starts).
//
// Thread safety: pure function.
// Errors: INVALID_ARGUMENT for a blank outside [0, num_classes), a
// beam_width or top_paths below 1, top_paths above beam_width, or a negative
// length (nothing is computed then).
#ifndef IPUPOD_KERNELS_CTC_H_
#define IPUPOD_KERNELS_CTC_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace ipupod::kernels {

struct CtcBeamSearchOptions {
  int64_t blank = 0;
  int64_t beam_width = 100;
  int64_t top_paths = 1;
};

struct CtcPath {
  std::vector<int64_t> labels;
  double log_prob = 0;
  bool operator==(const CtcPath& other) const = default;
};

// Checks the options for `num_classes` classes.
absl::Status CheckCtcBeamSearchOptions(const CtcBeamSearchOptions& options, int64_t num_classes);

absl::StatusOr<std::vector<CtcPath>> CtcBeamSearch(const float* log_probs, int64_t length,
                                                   int64_t num_classes, int64_t step_stride,
                                                   const CtcBeamSearchOptions& options);

}  // namespace ipupod::kernels

#endif  // IPUPOD_KERNELS_CTC_H_
