#include "server/execution/execution_counters.h"

namespace ipupod::execution {

int64_t TensorBytes(const tensor::NamedTensors& tensors) {
  int64_t bytes = 0;
  for (const auto& [name, tensor] : tensors) bytes += static_cast<int64_t>(tensor.byte_size());
  return bytes;
}

int64_t TensorBytes(const std::vector<tensor::TensorRef>& tensors) {
  int64_t bytes = 0;
  for (const auto& [name, tensor] : tensors) bytes += static_cast<int64_t>(tensor->byte_size());
  return bytes;
}

}  // namespace ipupod::execution
