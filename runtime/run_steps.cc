#include "runtime/run_steps.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

}  // namespace

std::string StepSizeText(const compiler::Executable& e) {
  const std::string accumulation =
      e.mode == compiler::ExecutableMode::kTraining
          ? absl::StrCat(" x gradient_accumulation_steps ", e.training.gradient_accumulation_steps)
          : "";
  return absl::StrCat("micro-batch ", e.micro_batch_size, accumulation, " x device_iterations ",
                      e.device_iterations, " x replication ", e.replication_factor);
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
    const int64_t samples = tensor->shape()[0];
    if (!plan.inputs.empty() && samples != plan.samples) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs in ", file, " disagree on the number of samples: '", plan.inputs.front().first,
          "' has ", plan.samples, ", '", spec.name, "' has ", samples, " (dim 0)"));
    }
    plan.samples = samples;
    // Moved, not copied: a data set can be gigabytes (`inputs` is ours), and
    // each fresh copy pays a page fault per 4 KiB on top of the bytes.
    plan.inputs.emplace_back(spec.name, std::move(*tensor));
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

}  // namespace ipupod::runtime
