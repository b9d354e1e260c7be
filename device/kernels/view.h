// File: device/kernels/view.h
//
// Non-owning views that every kernel in ipupod_kernels takes: a pointer to
// contiguous row-major elements plus the shape they have. Kernels never own
// or allocate their operands; the caller (graph::Interpreter, tests) keeps
// the storage alive and sized for the shape.
//
// Thread safety: plain values. Concurrent kernels may read the same View;
// writers need exclusive MutableViews.
#ifndef IPUPOD_KERNELS_VIEW_H_
#define IPUPOD_KERNELS_VIEW_H_

#include <cstdint>

#include "absl/types/span.h"

namespace ipupod::kernels {

// A shape: dims outermost first. Rank 0 (empty) is a scalar with one element.
using Dims = absl::Span<const int64_t>;

// REQUIRES: `data` points to NumElements(shape) elements (may be null when
// that count is 0).
template <typename T>
struct View {
  const T* data;
  Dims shape;
};

template <typename T>
struct MutableView {
  T* data;
  Dims shape;
};

}  // namespace ipupod::kernels

#endif  // IPUPOD_KERNELS_VIEW_H_
