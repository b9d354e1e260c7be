// File: common/tensor/shape_bounds.h
//
// The bounds every tensor shape meets, enforced by tensor::NumElements
// (common/tensor/shape.h), which every value the server computes with passes: shape
// inference checks each node's outputs and the graph's inputs with it, and
// Tensor::Create allocates through it. Bounding the rank and each dim bounds
// the per-node cost of every shape loop in shape inference, the compiler and
// the kernels: a few bytes of ONNX reshaping to rank 300,000 once made one
// node's inference take tens of seconds (issue 29).
//   - rank at most kRankMax (numpy's NPY_MAXDIMS since numpy 2.0; real
//     models stay under 8 and PyTorch's own limit is 25 on CUDA);
//   - every dim at most kElementsMax, even beside a zero dim (no element
//     count bounds such a shape, but loops over its dims would run);
//   - at most kElementsMax elements (common/tensor/shape.h).
// A shape over kRankMax prints (ShapeString) as its first dims and its rank,
// "[1, 1, ... (rank 300000)]", so no message grows with a hostile shape.
//
// Thread safety: constants only.
#ifndef IPUPOD_TENSOR_SHAPE_BOUNDS_H_
#define IPUPOD_TENSOR_SHAPE_BOUNDS_H_

#include <cstdint>

namespace ipupod::tensor {

inline constexpr int64_t kRankMax = 64;

}  // namespace ipupod::tensor

#endif  // IPUPOD_TENSOR_SHAPE_BOUNDS_H_
