// File: device/kernels/shape_util.h
//
// Shape arithmetic shared by the kernels and by device/graph/ shape inference:
// element counts with overflow checks, numpy broadcasting, axis
// normalisation and row-major strides.
//
// Thread safety: all functions are pure.
// Errors: INVALID_ARGUMENT, naming the offending shape or axis.
#ifndef IPUPOD_KERNELS_SHAPE_UTIL_H_
#define IPUPOD_KERNELS_SHAPE_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor/shape.h"
#include "device/kernels/view.h"

namespace ipupod::kernels {

// kElementsMax, ShapeString and NumElements (checked element count) live
// with the tensor value type.
using tensor::kElementsMax;
using tensor::NumElements;
using tensor::ShapeString;

// Product of the dims. REQUIRES: the shape already passed NumElements().
int64_t NumElementsUnchecked(Dims shape);

// Numpy (multidirectional) broadcast of two shapes.
absl::StatusOr<std::vector<int64_t>> BroadcastShapes(Dims a, Dims b);

// True if `from` broadcasts to exactly `to` (unidirectional broadcasting).
bool BroadcastsTo(Dims from, Dims to);

// Maps axis in [-rank, rank-1] to [0, rank-1].
absl::StatusOr<int64_t> NormalizeAxis(int64_t axis, int64_t rank);

// Row-major strides in elements: strides[i] = prod(shape[i+1:]).
std::vector<int64_t> RowMajorStrides(Dims shape);

// OK if `got` equals `want`; otherwise INVALID_ARGUMENT "<what>: shape [..]
// does not match expected [..]".
absl::Status CheckShape(const char* what, Dims got, Dims want);

}  // namespace ipupod::kernels

#endif  // IPUPOD_KERNELS_SHAPE_UTIL_H_
