#include "device/graph/op_common.h"

#include <cstring>

namespace ipupod::graph {

int64_t NoFlops(const OpContext&, absl::Span<const TensorType>) { return 0; }

absl::StatusOr<std::vector<TensorType>> InferIdentity(const OpContext& c) {
  return std::vector<TensorType>{c.type(0)};
}

absl::Status RunCopy(const OpContext& c, absl::Span<Tensor> out) {
  const Tensor& in = *c.values[0];
  if (in.byte_size() > 0) std::memcpy(out[0].mutable_raw_data(), in.raw_data(), in.byte_size());
  return absl::OkStatus();
}

}  // namespace ipupod::graph
