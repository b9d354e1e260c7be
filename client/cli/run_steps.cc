#include "client/cli/run_steps.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ipupod::cli {
namespace {

std::string ShapeText(const graph::Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string Names(const runtime::NamedTensors& tensors) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : tensors) names.push_back(name);
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

const graph::Tensor* Find(const runtime::NamedTensors& tensors, absl::string_view name) {
  for (const auto& [n, tensor] : tensors) {
    if (n == name) return &tensor;
  }
  return nullptr;
}

// Dtype and every dim but 0 must be those of one step's host shape.
absl::Status CheckInput(const compiler::Executable& e, const compiler::TensorSpec& spec,
                        const graph::Tensor& tensor, absl::string_view file) {
  graph::Shape want = compiler::HostInputShape(e, spec);
  graph::Shape got = tensor.shape();
  const bool shape_ok = !got.empty() && got.size() == want.size() &&
                        std::equal(got.begin() + 1, got.end(), want.begin() + 1);
  if (tensor.dtype() == spec.dtype && shape_ok) return absl::OkStatus();
  std::string per_sample =
      want.size() <= 1
          ? "[N]"
          : absl::StrCat("[N, ", absl::StrJoin(want.begin() + 1, want.end(), ", "), "]");
  return absl::InvalidArgumentError(absl::StrCat(
      "input '", spec.name, "' in ", file, " is ", graph::DTypeName(tensor.dtype()), ShapeText(got),
      " but the model takes ", graph::DTypeName(spec.dtype), per_sample, " (N samples, ",
      want.empty() ? 1 : want[0], " per step); save it with that shape"));
}

}  // namespace

std::string StepSizeText(const compiler::Executable& e) {
  const std::string accumulation =
      e.mode == compiler::ExecutableMode::kTraining
          ? absl::StrCat(" x gradient_accumulation_steps ", e.training.gradient_accumulation_steps)
          : "";
  return absl::StrCat("micro-batch ", e.micro_batch_size, accumulation, " x device_iterations ",
                      e.device_iterations, " x replication ", e.replication_factor);
}

absl::StatusOr<StepPlan> PlanSteps(const compiler::Executable& e, runtime::NamedTensors inputs,
                                   absl::string_view file) {
  StepPlan plan;
  plan.samples_per_step = e.micro_batch_size * e.batch_size_factor;
  for (const runtime::NamedTensor& given : inputs) {
    const std::string& name = given.first;  // (clang 14 cannot capture a structured binding)
    auto is_input = [&name](const compiler::TensorSpec& s) { return s.name == name; };
    if (std::none_of(e.inputs.begin(), e.inputs.end(), is_input)) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, " holds '", name, "', which is not an input of the model (inputs: ",
          absl::StrJoin(
              e.inputs, ", ",
              [](std::string* out, const compiler::TensorSpec& s) { out->append(s.name); }),
          "); remove it or rename it"));
    }
  }
  for (const compiler::TensorSpec& spec : e.inputs) {
    const graph::Tensor* tensor = Find(inputs, spec.name);
    if (tensor == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("input '", spec.name, "' is missing from ",
                                                     file, " (it holds: ", Names(inputs), ")"));
    }
    if (absl::Status ok = CheckInput(e, spec, *tensor, file); !ok.ok()) return ok;
    const int64_t samples = tensor->shape()[0];
    if (!plan.inputs.empty() && samples != plan.samples) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs in ", file, " disagree on the number of samples: '", plan.inputs.front().first,
          "' has ", plan.samples, ", '", spec.name, "' has ", samples, " (dim 0)"));
    }
    plan.samples = samples;
    plan.inputs.emplace_back(spec.name, *tensor);
  }
  if (plan.samples == 0 || plan.samples % plan.samples_per_step != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, " has ", plan.samples, " samples (dim 0), not a positive multiple of the ",
        plan.samples_per_step, " samples of one step (", StepSizeText(e), "); pass ",
        plan.samples_per_step, " x N samples, or recompile with other ",
        e.mode == compiler::ExecutableMode::kTraining
            ? "device_iterations, gradient_accumulation_steps or replication_factor"
            : "inference_device_iterations or inference_replication_factor"));
  }
  plan.steps = plan.samples / plan.samples_per_step;
  return plan;
}

absl::StatusOr<graph::Tensor> SliceRows(const graph::Tensor& tensor, int64_t begin, int64_t count) {
  graph::Shape shape = tensor.shape();
  const size_t row_bytes = shape[0] == 0 ? 0 : tensor.byte_size() / static_cast<size_t>(shape[0]);
  shape[0] = count;
  return graph::Tensor::FromBytes(tensor.dtype(), std::move(shape),
                                  tensor.bytes().substr(static_cast<size_t>(begin) * row_bytes,
                                                        static_cast<size_t>(count) * row_bytes));
}

absl::StatusOr<runtime::NamedTensors> StepInputs(const StepPlan& plan, int64_t step) {
  runtime::NamedTensors out;
  for (const auto& [name, tensor] : plan.inputs) {
    absl::StatusOr<graph::Tensor> slice =
        SliceRows(tensor, step * plan.samples_per_step, plan.samples_per_step);
    if (!slice.ok()) return slice.status();
    out.emplace_back(name, *std::move(slice));
  }
  return out;
}

absl::Status OutputAccumulator::Append(const runtime::NamedTensors& step_outputs) {
  if (columns_.empty()) {
    for (const auto& [name, tensor] : step_outputs) {
      graph::Shape shape = tensor.shape();
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
    graph::Shape shape = tensor.shape();
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

absl::StatusOr<runtime::NamedTensors> OutputAccumulator::Finish() const {
  runtime::NamedTensors out;
  for (const Column& c : columns_) {
    absl::StatusOr<graph::Tensor> t = graph::Tensor::FromBytes(c.dtype, c.shape, c.bytes);
    if (!t.ok()) return t.status();
    out.emplace_back(c.name, *std::move(t));
  }
  return out;
}

}  // namespace ipupod::cli
