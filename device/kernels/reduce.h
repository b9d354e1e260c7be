// File: device/kernels/reduce.h
//
// Sum and mean over a set of axes (ONNX ReduceSum / ReduceMean). The output
// holds one element per kept index, in row-major order; whether the reduced
// axes are kept as size-1 dims is only a question of the output shape, which
// the caller chooses (both forms are accepted).
//
// Accumulation is in double, so results are at least as accurate as torch's
// float reductions.
//
// Thread safety: pure functions; single-threaded.
// Errors: INVALID_ARGUMENT for an axis out of range, a repeated axis, or an
// output whose element count is not the kept-index count.
#ifndef IPUPOD_KERNELS_REDUCE_H_
#define IPUPOD_KERNELS_REDUCE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "device/kernels/view.h"

namespace ipupod::kernels {

enum class ReduceOp { kSum, kMean, kMax };

// Normalises (negative axes) and sorts `axes`; an empty list means every axis.
absl::StatusOr<std::vector<int64_t>> NormalizeReduceAxes(absl::Span<const int64_t> axes,
                                                         int64_t rank);

// Output shape of a reduction over normalised `axes`.
std::vector<int64_t> ReducedShape(Dims in, absl::Span<const int64_t> axes, bool keepdims);

// Reduces `in` over `axes` (any order, negatives allowed, empty = all).
// kMax over an empty axis gives -inf; kMean over an empty axis gives NaN.
absl::Status Reduce(ReduceOp op, View<float> in, absl::Span<const int64_t> axes,
                    MutableView<float> out);

}  // namespace ipupod::kernels

#endif  // IPUPOD_KERNELS_REDUCE_H_
