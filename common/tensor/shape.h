// File: common/tensor/shape.h
//
// Shape arithmetic the tensor value type needs, shared with device/kernels/ and
// device/graph/ shape inference: the element count with overflow checks and the
// printed form of a shape.
//
// Thread safety: pure functions.
// Errors: INVALID_ARGUMENT naming the offending shape.
#ifndef IPUPOD_TENSOR_SHAPE_H_
#define IPUPOD_TENSOR_SHAPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ipupod::tensor {

using Shape = std::vector<int64_t>;

// Largest element count any one tensor may have (2^40): keeps every product
// of dims far from int64 overflow while allowing any realistic model.
inline constexpr int64_t kElementsMax = int64_t{1} << 40;

// "[2, 3, 4]" (or "[]" for a scalar).
std::string ShapeString(absl::Span<const int64_t> shape);

// Product of the dims. INVALID_ARGUMENT if a dim is negative or the product
// exceeds kElementsMax.
absl::StatusOr<int64_t> NumElements(absl::Span<const int64_t> shape);

}  // namespace ipupod::tensor

#endif  // IPUPOD_TENSOR_SHAPE_H_
