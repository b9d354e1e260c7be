#include "device/runtime/step_layout.h"

#include <utility>

#include "common/status_macros.h"

namespace ipupod::runtime {

using compiler::Executable;

int64_t AccumulationSteps(const Executable& e) {
  return e.mode == compiler::ExecutableMode::kTraining ? e.training.gradient_accumulation_steps : 1;
}

namespace {

// Adds b into a element-wise (bool: or; float16: the sum rounded to float16).
void Accumulate(tensor::Tensor& a, const tensor::Tensor& b) {
  for (int64_t k = 0; k < a.num_elements(); ++k) {
    switch (a.dtype()) {
      case tensor::DType::kFloat32:
        a.mutable_data<float>()[k] += b.data<float>()[k];
        break;
      case tensor::DType::kInt64:
        a.mutable_data<int64_t>()[k] += b.data<int64_t>()[k];
        break;
      case tensor::DType::kInt32:
        a.mutable_data<int32_t>()[k] += b.data<int32_t>()[k];
        break;
      case tensor::DType::kBool:
        a.mutable_data<bool>()[k] = a.data<bool>()[k] || b.data<bool>()[k];
        break;
      case tensor::DType::kFloat16:
        a.mutable_data<tensor::Float16>()[k] =
            tensor::ToFloat16(tensor::ToFloat32(a.data<tensor::Float16>()[k]) +
                              tensor::ToFloat32(b.data<tensor::Float16>()[k]));
        break;
    }
  }
}

}  // namespace

// Micro-batch j's slice of every input.
absl::StatusOr<std::vector<tensor::Tensor>> SliceInputs(
    const Executable& e, const std::vector<const tensor::Tensor*>& inputs, int64_t j) {
  std::vector<tensor::Tensor> out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const size_t n = inputs[i]->byte_size() / static_cast<size_t>(e.batch_size_factor);
    IPUPOD_ASSIGN_OR_RETURN(tensor::Tensor t,
                            tensor::Tensor::FromBytes(e.inputs[i].dtype, e.inputs[i].shape,
                                                      inputs[i]->bytes().substr(j * n, n)));
    out.push_back(std::move(t));
  }
  return out;
}

// Micro-batches whose outputs the host receives, in host order (all of
// them for sum, which reduces them per replica).
std::vector<int64_t> ReturnedMicroBatches(const Executable& e) {
  const int64_t r = e.replication_factor, m = e.device_iterations, a = AccumulationSteps(e);
  if (e.output_mode.kind == compiler::OutputMode::Kind::kAll ||
      e.output_mode.kind == compiler::OutputMode::Kind::kSum) {
    std::vector<int64_t> every(static_cast<size_t>(e.batch_size_factor));
    for (size_t j = 0; j < every.size(); ++j) every[j] = static_cast<int64_t>(j);
    return every;
  }
  int64_t first = 0, period = 1;
  switch (e.output_mode.kind) {
    case compiler::OutputMode::Kind::kAll:
    case compiler::OutputMode::Kind::kSum:
      break;
    case compiler::OutputMode::Kind::kFinal:
      first = m - 1;
      break;
    case compiler::OutputMode::Kind::kEveryN:
      first = e.output_mode.every_n - 1;
      period = e.output_mode.every_n;
      break;
  }
  std::vector<int64_t> out;
  for (int64_t i = first; i < m; i += period) {
    for (int64_t k = 0; k < r; ++k) out.push_back(((i + 1) * a - 1) * r + k);
  }
  return out;
}

// results[k][o]: output o of the k-th returned micro-batch. Sum mode folds
// device iterations per replica first (in iteration order).
std::vector<std::vector<tensor::Tensor>> ReduceForOutputMode(
    const Executable& e, std::vector<std::vector<tensor::Tensor>> results) {
  if (e.output_mode.kind != compiler::OutputMode::Kind::kSum) return results;
  const size_t r = static_cast<size_t>(e.replication_factor);
  for (size_t k = r; k < results.size(); ++k) {
    for (size_t o = 0; o < results[k].size(); ++o) Accumulate(results[k % r][o], results[k][o]);
  }
  results.resize(r);
  return results;
}

absl::StatusOr<tensor::NamedTensors> Concatenate(
    const Executable& e, const std::vector<std::vector<tensor::Tensor>>& results) {
  tensor::NamedTensors out;
  for (size_t o = 0; o < e.outputs.size(); ++o) {
    std::string bytes;
    for (const auto& micro_batch : results)
      bytes.append(micro_batch[o].bytes().data(), micro_batch[o].bytes().size());
    IPUPOD_ASSIGN_OR_RETURN(
        tensor::Tensor t,
        tensor::Tensor::FromBytes(e.outputs[o].dtype, compiler::HostOutputShape(e, e.outputs[o]),
                                  bytes));
    out.emplace_back(e.outputs[o].name, std::move(t));
  }
  return out;
}

}  // namespace ipupod::runtime
