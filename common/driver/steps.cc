#include "common/driver/steps.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ipupod::driver {

absl::StatusOr<tensor::Tensor> SliceRows(const tensor::Tensor& tensor, int64_t begin,
                                         int64_t count) {
  tensor::Shape shape = tensor.shape();
  const size_t row_bytes = shape[0] == 0 ? 0 : tensor.byte_size() / static_cast<size_t>(shape[0]);
  shape[0] = count;
  return tensor::Tensor::FromBytes(tensor.dtype(), std::move(shape),
                                   tensor.bytes().substr(static_cast<size_t>(begin) * row_bytes,
                                                         static_cast<size_t>(count) * row_bytes));
}

int64_t RowsPerStep(const StepPlan& plan, size_t input) {
  return input < plan.rows_per_step.size() ? plan.rows_per_step[input] : plan.samples_per_step;
}

absl::StatusOr<tensor::NamedTensors> StepInputs(const StepPlan& plan, int64_t step) {
  tensor::NamedTensors out;
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    const auto& [name, tensor] = plan.inputs[i];
    const int64_t rows = RowsPerStep(plan, i);
    absl::StatusOr<tensor::Tensor> slice = SliceRows(tensor, step * rows, rows);
    if (!slice.ok()) return slice.status();
    out.emplace_back(name, *std::move(slice));
  }
  return out;
}

absl::Status OutputAccumulator::Append(const tensor::NamedTensors& step_outputs) {
  if (columns_.empty()) {
    for (const auto& [name, tensor] : step_outputs) {
      tensor::Shape shape = tensor.shape();
      if (shape.empty()) shape.push_back(1);  // a scalar per step becomes one row
      columns_.push_back({name, tensor.dtype(), std::move(shape), std::string(tensor.bytes())});
    }
    return absl::OkStatus();
  }
  if (step_outputs.size() != columns_.size()) {
    return absl::InternalError(absl::StrCat("ipupodd returned ", step_outputs.size(),
                                            " outputs after ", columns_.size(), " before"));
  }
  for (size_t i = 0; i < columns_.size(); ++i) {
    const auto& [name, tensor] = step_outputs[i];
    Column& c = columns_[i];
    tensor::Shape shape = tensor.shape();
    if (shape.empty()) shape.push_back(1);
    if (name != c.name || tensor.dtype() != c.dtype || shape.size() != c.shape.size() ||
        !std::equal(shape.begin() + 1, shape.end(), c.shape.begin() + 1)) {
      return absl::InternalError(absl::StrCat("ipupodd changed output '", name, "' between steps"));
    }
    c.shape[0] += shape[0];
    c.bytes.append(tensor.bytes().data(), tensor.bytes().size());
  }
  return absl::OkStatus();
}

absl::StatusOr<tensor::NamedTensors> OutputAccumulator::Finish() const {
  tensor::NamedTensors out;
  for (const Column& c : columns_) {
    absl::StatusOr<tensor::Tensor> t = tensor::Tensor::FromBytes(c.dtype, c.shape, c.bytes);
    if (!t.ok()) return t.status();
    out.emplace_back(c.name, *std::move(t));
  }
  return out;
}

}  // namespace ipupod::driver
