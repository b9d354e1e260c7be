#include "common/tensor/shape.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/tensor/shape_bounds.h"

namespace ipupod::tensor {

std::string ShapeString(absl::Span<const int64_t> shape) {
  constexpr size_t kShown = 8;
  if (shape.size() > static_cast<size_t>(kRankMax)) {
    return absl::StrCat("[", absl::StrJoin(shape.subspan(0, kShown), ", "), ", ... (rank ",
                        shape.size(), ")]");
  }
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<int64_t> NumElements(absl::Span<const int64_t> shape) {
  if (shape.size() > static_cast<size_t>(kRankMax)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", ShapeString(shape), " has more than ", kRankMax,
                     " dims, the most a tensor may have; reshape to fewer dims"));
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeString(shape), " has a negative dimension"));
    }
    if (d > kElementsMax) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeString(shape), " has a dimension over 2^40"));
    }
    // Dividing first keeps the check itself from overflowing.
    if (d != 0 && n > kElementsMax / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeString(shape), " has more than 2^40 elements"));
    }
    n *= d;
  }
  return n;
}

}  // namespace ipupod::tensor
