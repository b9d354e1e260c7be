#ifndef IPUPOD_DEVICE_GRAPH_OP_COMMON_H_
#define IPUPOD_DEVICE_GRAPH_OP_COMMON_H_

// Pieces of op definitions that several op families share (ops_*.cc): the
// cost of an op that computes nothing, and the shape rule and kernel of an op
// whose output is its first input unchanged.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "device/graph/ops.h"

namespace ipupod::graph {

// Zero flops, for ops that only move or relabel bytes.
int64_t NoFlops(const OpContext& c, absl::Span<const TensorType> outputs);

// Output 0 has input 0's dtype and shape.
absl::StatusOr<std::vector<TensorType>> InferIdentity(const OpContext& c);

// Output 0 takes input 0's bytes unchanged (identity and reshape-like ops);
// out[0] must have been allocated with input 0's byte size.
absl::Status RunCopy(const OpContext& c, absl::Span<Tensor> out);

}  // namespace ipupod::graph

#endif  // IPUPOD_DEVICE_GRAPH_OP_COMMON_H_
