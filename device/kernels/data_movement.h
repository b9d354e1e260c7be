// File: device/kernels/data_movement.h
//
// Type-agnostic copies: Transpose, Slice, Concat, Expand (broadcast copy) and
// Gather. They move elements of `elem_size` bytes (1, 2, 4 or 8) and never
// look at the values, so one kernel serves float, int64, int32 and bool.
//
// Shapes are given explicitly; each kernel validates them and returns
// INVALID_ARGUMENT (writing nothing) when they are inconsistent, or when a
// Gather index is out of range.
//
// Thread safety: pure functions over caller-owned memory; single-threaded.
#ifndef IPUPOD_KERNELS_DATA_MOVEMENT_H_
#define IPUPOD_KERNELS_DATA_MOVEMENT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "device/kernels/view.h"

namespace ipupod::kernels {

// Output shape of a transpose: out[i] = in[perm[i]]. INVALID_ARGUMENT unless
// perm is a permutation of [0, rank).
absl::StatusOr<std::vector<int64_t>> TransposedShape(Dims in, absl::Span<const int64_t> perm);

// out = in.permute(perm), row-major. `out` holds NumElements(in) elements.
absl::Status Transpose(const void* in, Dims in_shape, absl::Span<const int64_t> perm,
                       size_t elem_size, void* out);

// Copies `in` broadcast (numpy, unidirectional) to `out_shape`.
absl::Status Expand(const void* in, Dims in_shape, Dims out_shape, size_t elem_size, void* out);

// One axis of a strided slice: elements start, start+step, ... (count of
// them); step may be negative but not zero. Fully resolved, in range.
struct SliceAxis {
  int64_t start = 0;
  int64_t step = 1;
  int64_t count = 0;
};

// Resolves ONNX Slice parameters (clamping, negative indices, negative
// steps) for one axis of length `dim`. INVALID_ARGUMENT if step is 0.
absl::StatusOr<SliceAxis> ResolveSliceAxis(int64_t start, int64_t end, int64_t step, int64_t dim);

// out = in[axes...]: `axes` has one entry per input dim; the output shape is
// the per-axis counts.
absl::Status Slice(const void* in, Dims in_shape, absl::Span<const SliceAxis> axes,
                   size_t elem_size, void* out);

// Copies `in` into `out` (of `out_shape`, the same rank) at offset
// `pad_begin` on every axis, leaving the rest of `out` as it is (the caller
// filled it: ONNX Pad's constant). INVALID_ARGUMENT unless in fits there.
absl::Status CopyIntoRegion(const void* in, Dims in_shape, absl::Span<const int64_t> pad_begin,
                            Dims out_shape, size_t elem_size, void* out);

// Concatenates `inputs` (with shapes `shapes`) along `axis`, which must
// already be normalised. All other dims must agree.
absl::Status Concat(absl::Span<const void* const> inputs, absl::Span<const Dims> shapes,
                    int64_t axis, size_t elem_size, void* out);

// out = data.take(indices, axis): out shape is data[:axis] + indices.shape +
// data[axis+1:]. Indices may be negative (counted from the end); any index
// outside [-dim, dim) is INVALID_ARGUMENT.
template <typename Index>
absl::Status Gather(const void* data, Dims data_shape, int64_t axis, View<Index> indices,
                    size_t elem_size, void* out);

// out = data with out[indices[i]] = updates[i] (ONNX ScatterND, no reduction):
// indices [..., k] with k <= rank(data), each tuple naming a slice of
// data_shape[k:]; updates are indices.shape[:-1] + data_shape[k:]. Negative
// indices count from the end; any other index outside its dim is
// INVALID_ARGUMENT (nothing written). Later tuples win over earlier ones.
absl::Status ScatterND(const void* data, Dims data_shape, View<int64_t> indices,
                       const void* updates, size_t elem_size, void* out);

}  // namespace ipupod::kernels

#endif  // IPUPOD_KERNELS_DATA_MOVEMENT_H_
