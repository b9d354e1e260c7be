#include "device/runtime/run_steps.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace ipupod::runtime {
namespace {

std::string ShapeText(const graph::Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string Names(const tensor::NamedTensors& tensors) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : tensors) names.push_back(name);
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

tensor::Tensor* Find(tensor::NamedTensors& tensors, absl::string_view name) {
  for (auto& [n, tensor] : tensors) {
    if (n == name) return &tensor;
  }
  return nullptr;
}

// Dtype and every dim but 0 must be those of one step's host shape.
absl::Status CheckInput(const compiler::Executable& e, const compiler::TensorSpec& spec,
                        const tensor::Tensor& tensor, absl::string_view file) {
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
      "input '", spec.name, "' in ", file, " is ", tensor::DTypeName(tensor.dtype()),
      ShapeText(got), " but the model takes ", tensor::DTypeName(spec.dtype), per_sample,
      " (N samples, ", want.empty() ? 1 : want[0], " per step); save it with that shape"));
}

std::string StepSizeText(const compiler::Executable& e, int64_t micro_batch_rows) {
  const std::string accumulation =
      e.mode == compiler::ExecutableMode::kTraining
          ? absl::StrCat(" x gradient_accumulation_steps ", e.training.gradient_accumulation_steps)
          : "";
  return absl::StrCat("micro-batch ", micro_batch_rows, accumulation, " x device_iterations ",
                      e.device_iterations, " x replication ", e.replication_factor);
}

// An input's rows must make whole steps of its own rows per step.
absl::Status CheckRows(const compiler::Executable& e, const compiler::TensorSpec& spec,
                       int64_t rows, int64_t per_step, absl::string_view file) {
  if (rows != 0 && rows % per_step == 0) return absl::OkStatus();
  const std::string what =
      per_step == e.micro_batch_size * e.batch_size_factor
          ? absl::StrCat(file, " has ", rows, " samples (dim 0), not a positive multiple of the ",
                         per_step, " samples of one step")
          : absl::StrCat("input '", spec.name, "' in ", file, " has ", rows,
                         " rows (dim 0), not a positive multiple of the ", per_step,
                         " rows one step takes of it");
  return absl::InvalidArgumentError(
      absl::StrCat(what, " (", StepSizeText(e, per_step / e.batch_size_factor), "); pass ",
                   per_step, " x N, or recompile with other ",
                   e.mode == compiler::ExecutableMode::kTraining
                       ? "device_iterations, gradient_accumulation_steps or replication_factor"
                       : "inference_device_iterations or inference_replication_factor"));
}

}  // namespace

std::string StepSizeText(const compiler::Executable& e) {
  return StepSizeText(e, e.micro_batch_size);
}

absl::StatusOr<StepPlan> PlanSteps(const compiler::Executable& e, tensor::NamedTensors inputs,
                                   absl::string_view file) {
  StepPlan plan;
  plan.samples_per_step = e.micro_batch_size * e.batch_size_factor;
  if (e.inputs.empty()) {
    // Steps are cut from the samples of --inputs; with no input there are
    // none (PopTorch would call such a model with no arguments).
    return absl::InvalidArgumentError(
        "the model takes no inputs, and ipupod runs steps of samples read from --inputs, so it "
        "cannot run a model without inputs (such as PopTorch's CounterModel, whose forward only "
        "updates a buffer); give the model an input, e.g. a batch dimension its buffer update "
        "ignores (docs/differences.md, Buffers)");
  }
  for (const tensor::NamedTensor& given : inputs) {
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
    tensor::Tensor* tensor = Find(inputs, spec.name);
    if (tensor == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("input '", spec.name, "' is missing from ",
                                                     file, " (it holds: ", Names(inputs), ")"));
    }
    if (absl::Status ok = CheckInput(e, spec, *tensor, file); !ok.ok()) return ok;
    const int64_t rows = tensor->shape()[0];
    const int64_t per_step = compiler::HostInputShape(e, spec)[0];
    IPUPOD_RETURN_IF_ERROR(CheckRows(e, spec, rows, per_step, file));
    if (!plan.inputs.empty() && rows / per_step != plan.steps) {
      const std::string& first = plan.inputs.front().first;
      return absl::InvalidArgumentError(
          absl::StrCat("inputs in ", file, " disagree on the number of steps: '", first, "' has ",
                       plan.inputs.front().second.shape()[0], " rows (dim 0), ",
                       plan.rows_per_step.front(), " per step, '", spec.name, "' has ", rows, ", ",
                       per_step, " per step; give every input the same number of steps"));
    }
    plan.steps = rows / per_step;
    plan.rows_per_step.push_back(per_step);
    // Moved, not copied: a data set can be gigabytes (`inputs` is ours), and
    // each fresh copy pays a page fault per 4 KiB on top of the bytes.
    plan.inputs.emplace_back(spec.name, std::move(*tensor));
  }
  plan.samples = plan.steps * plan.samples_per_step;
  return plan;
}

}  // namespace ipupod::runtime
