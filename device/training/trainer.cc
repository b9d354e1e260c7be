#include "device/training/trainer.h"

#include <algorithm>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/graph/run_context.h"
#include "device/kernels/interrupt.h"
#include "device/kernels/shape_util.h"

namespace ipupod::training {
namespace {

constexpr absl::string_view kOptimizerPrefix = "optimizer/";
constexpr absl::string_view kReplicaPrefix = "replica/";

// Every "<weight>/<slot>" tensor must be shaped like its weight ("step" and
// "<weight>/step" are scalars).
absl::Status CheckOptimizerState(const TensorMap& state, const TensorMap& weights) {
  for (const auto& [name, t] : state) {
    if (name == "step" || absl::EndsWith(name, "/step")) continue;
    const size_t slash = name.rfind('/');
    auto w = slash == std::string::npos ? weights.end() : weights.find(name.substr(0, slash));
    if (w == weights.end() || w->second.shape() != t.shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint tensor 'optimizer/", name, "' ", kernels::ShapeString(t.shape()),
                       " does not belong to a trainable weight of that shape"));
    }
  }
  return absl::OkStatus();
}

// A param group names weights the trainer trains (a frozen or unknown name
// would silently keep the optimizer-wide values for nothing).
absl::Status CheckGroupWeights(const OptimizerSpec& spec, const std::vector<std::string>& trained) {
  for (size_t i = 0; i < spec.groups().size(); ++i) {
    for (const std::string& w : spec.groups()[i].weights) {
      if (std::find(trained.begin(), trained.end(), w) == trained.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "param group ", i, " names '", w, "', which is not a trainable weight of the model"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

Trainer::Trainer(TrainerOptions options, std::unique_ptr<Autodiff> autodiff,
                 std::unique_ptr<Optimizer> optimizer)
    : options_(std::move(options)),
      autodiff_(std::move(autodiff)),
      optimizer_(std::move(optimizer)),
      weights_(autodiff_->InitialWeights()),
      buffers_(autodiff_->InitialBuffers()) {
  if (options_.replica_buffers && options_.replicas > 1)
    replica_buffers_.assign(static_cast<size_t>(options_.replicas - 1), buffers_);
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(graph::Graph graph,
                                                         TrainerOptions options) {
  if (options.gradient_accumulation_steps < 1 || options.replicas < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient_accumulation_steps (", options.gradient_accumulation_steps,
                     ") and replicas (", options.replicas, ") must be at least 1"));
  }
  IPUPOD_ASSIGN_OR_RETURN(
      std::unique_ptr<Autodiff> autodiff,
      Autodiff::Create(std::move(graph), options.loss, options.weights, options.buffers));
  IPUPOD_RETURN_IF_ERROR(CheckGroupWeights(options.optimizer, autodiff->weights()));
  IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                          Optimizer::Create(options.optimizer));
  if (options.auto_loss_scaling) optimizer->EnableAutomaticLossScaling();
  return std::unique_ptr<Trainer>(
      new Trainer(std::move(options), std::move(autodiff), std::move(optimizer)));
}

absl::StatusOr<TensorMap> Trainer::MeanGradients(
    absl::Span<const std::vector<tensor::Tensor>> micro_batches,
    std::vector<TensorMap>& all_buffers, StepResult& result) const {
  std::map<std::string, std::vector<double>> sums;
  result.losses.resize(micro_batches.size());
  result.outputs.resize(micro_batches.size());
  const size_t accumulation = static_cast<size_t>(options_.gradient_accumulation_steps);
  for (size_t n = 0; n < micro_batches.size(); ++n) {
    // Data order: micro-batch m of every replica, then m + 1.
    const size_t i = (n % static_cast<size_t>(options_.replicas)) * accumulation +
                     n / static_cast<size_t>(options_.replicas);
    // Replica i / accumulation's micro-batch i % accumulation of update step().
    const graph::RunContext context = graph::MicroBatchRunContext(
        static_cast<uint64_t>(optimizer_->step()), i / accumulation, i % accumulation, true);
    graph::ScopedRunContext scope(&context);
    TensorMap& buffers = all_buffers[all_buffers.size() == 1 ? 0 : i / accumulation];
    auto run = autodiff_->Run(micro_batches[i], weights_, buffers, optimizer_->loss_scale());
    if (!run.ok()) {
      return absl::Status(run.status().code(),
                          absl::StrCat("micro-batch ", i, ": ", run.status().message()));
    }
    result.losses[i] = run->loss;
    result.outputs[i] = std::move(run->outputs);
    buffers = std::move(run->buffers);
    result.forward_flops += run->forward_flops;
    result.backward_flops += run->backward_flops;
    // The mean of one micro-batch is its gradient (the double round trip
    // below would give the same floats).
    if (micro_batches.size() == 1) return std::move(run->gradients);
    // accum_type 16: the running sum is float16 (seed 003, 4.5.3).
    const bool half_sum = optimizer_->spec().attributes().contains("accum_type") &&
                          optimizer_->spec().value("accum_type") == 16;
    for (const auto& [name, g] : run->gradients) {
      std::vector<double>& sum = sums[name];
      sum.resize(static_cast<size_t>(g.num_elements()), 0.0);
      const float* p = g.data<float>();
      for (size_t k = 0; k < sum.size(); ++k) {
        sum[k] += p[k];
        if (half_sum) sum[k] = tensor::ToFloat32(tensor::ToFloat16(static_cast<float>(sum[k])));
      }
    }
  }
  TensorMap mean;
  const double scale = 1.0 / static_cast<double>(micro_batches.size());
  for (const auto& [name, sum] : sums) {
    IPUPOD_ASSIGN_OR_RETURN(tensor::Tensor t, tensor::Tensor::Create(tensor::DType::kFloat32,
                                                                     weights_.at(name).shape()));
    float* p = t.mutable_data<float>();
    for (size_t k = 0; k < sum.size(); ++k) p[k] = static_cast<float>(sum[k] * scale);
    mean.emplace(name, std::move(t));
  }
  return mean;
}

absl::StatusOr<StepResult> Trainer::Step(
    absl::Span<const std::vector<tensor::Tensor>> micro_batches) {
  if (static_cast<int64_t>(micro_batches.size()) != micro_batches_per_step()) {
    return absl::InvalidArgumentError(
        absl::StrCat("one step takes gradient_accumulation_steps x replicas = ",
                     options_.gradient_accumulation_steps, " x ", options_.replicas, " = ",
                     micro_batches_per_step(), " micro-batches, got ", micro_batches.size()));
  }
  // The fused step updates float32 weights in place, unscaled.
  const bool all_float32 = std::all_of(weights_.begin(), weights_.end(), [](const auto& w) {
    return w.second.dtype() == tensor::DType::kFloat32;
  });
  if (const std::optional<double> lr = optimizer_->PlainSgdLearningRate();
      lr.has_value() && micro_batches.size() == 1 && all_float32) {
    return FusedSgdStep(micro_batches[0], *lr);
  }
  StepResult result;
  result.loss_scale = optimizer_->loss_scale();
  std::vector<TensorMap> buffers{buffers_};
  buffers.insert(buffers.end(), replica_buffers_.begin(), replica_buffers_.end());
  IPUPOD_ASSIGN_OR_RETURN(TensorMap gradients, MeanGradients(micro_batches, buffers, result));
  // Gradients of passes stopped inside their kernels are garbage, and the
  // update itself is not interrupted (device/kernels/interrupt.h): all or nothing.
  IPUPOD_RETURN_IF_ERROR(kernels::CheckInterrupt());
  kernels::ScopedInterrupt uninterrupted(nullptr);
  IPUPOD_RETURN_IF_ERROR(optimizer_->Step(weights_, gradients));
  result.skipped = optimizer_->last_step_skipped();
  if (!result.skipped) {  // a skipped step changes nothing
    buffers_ = std::move(buffers[0]);
    for (size_t r = 1; r < buffers.size(); ++r) replica_buffers_[r - 1] = std::move(buffers[r]);
  }
  result.step = optimizer_->step();
  return result;
}

absl::StatusOr<StepResult> Trainer::FusedSgdStep(const std::vector<tensor::Tensor>& inputs,
                                                 double lr) {
  const graph::RunContext context =
      graph::MicroBatchRunContext(static_cast<uint64_t>(optimizer_->step()), 0, 0, true);
  graph::ScopedRunContext scope(&context);
  auto run = autodiff_->RunSgdStep(inputs, weights_, buffers_, lr);
  if (!run.ok()) {
    return absl::Status(run.status().code(),
                        absl::StrCat("micro-batch 0: ", run.status().message()));
  }
  optimizer_->CountAppliedStep();
  buffers_ = std::move(run->buffers);
  StepResult result;
  result.losses = {run->loss};
  result.outputs.push_back(std::move(run->outputs));
  result.forward_flops = run->forward_flops;
  result.backward_flops = run->backward_flops;
  result.step = optimizer_->step();
  return result;
}

absl::StatusOr<std::vector<tensor::Tensor>> Trainer::Forward(
    absl::Span<const tensor::Tensor> inputs) const {
  return autodiff_->Forward(inputs, weights_, buffers_);
}

const tensor::Tensor* Trainer::FindState(const std::string& name) const {
  auto w = weights_.find(name);
  if (w != weights_.end()) return &w->second;
  auto b = buffers_.find(name);
  return b != buffers_.end() ? &b->second : nullptr;
}

absl::Status Trainer::SetWeights(const TensorMap& weights) {
  for (const auto& [name, t] : weights) {
    const tensor::Tensor* current = FindState(name);
    if (current == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "' is not a trainable weight or buffer of this model"));
    }
    if (current->dtype() != t.dtype() || current->shape() != t.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weight '", name, "' is ", DTypeName(current->dtype()),
          kernels::ShapeString(current->shape()), " but the new value is ", DTypeName(t.dtype()),
          kernels::ShapeString(t.shape()), "; pass a tensor of the weight's dtype and shape"));
    }
  }
  for (const auto& [name, t] : weights) {
    if (weights_.contains(name)) {
      weights_.at(name) = t;
      continue;
    }
    buffers_.at(name) = t;
    for (TensorMap& copy : replica_buffers_) copy.at(name) = t;
  }
  return absl::OkStatus();
}

TensorMap Trainer::ExportState() const {
  TensorMap out = weights_;
  for (const auto& [name, t] : buffers_) out.emplace(name, t);
  for (size_t r = 0; r < replica_buffers_.size(); ++r) {
    for (const auto& [name, t] : replica_buffers_[r])
      out.emplace(absl::StrCat(kReplicaPrefix, r + 1, "/", name), t);
  }
  for (auto& [name, t] : optimizer_->ExportState()) {
    out.emplace(absl::StrCat(kOptimizerPrefix, name), std::move(t));
  }
  return out;
}

absl::Status Trainer::ImportState(const TensorMap& state) {
  TensorMap weights;
  TensorMap opt_state;
  for (const auto& [name, t] : state) {
    if (absl::StartsWith(name, kOptimizerPrefix)) {
      opt_state.emplace(name.substr(kOptimizerPrefix.size()), t);
    } else {
      weights.emplace(name, t);
    }
  }
  IPUPOD_ASSIGN_OR_RETURN(TensorMap buffers, TakeBuffers(weights));
  IPUPOD_ASSIGN_OR_RETURN(std::vector<TensorMap> replica_buffers,
                          TakeReplicaBuffers(weights, buffers));
  for (const auto& [name, t] : weights_) {
    auto it = weights.find(name);
    if (it == weights.end() || it->second.dtype() != t.dtype() || it->second.shape() != t.shape()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint lacks weight '", name, "' as ",
                                                     DTypeName(t.dtype()),
                                                     kernels::ShapeString(t.shape())));
    }
  }
  if (weights.size() != weights_.size()) {
    for (const auto& [name, t] : weights) {
      if (!weights_.contains(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint tensor '", name, "' is not a trainable weight or buffer"));
      }
    }
  }
  IPUPOD_RETURN_IF_ERROR(CheckOptimizerState(opt_state, weights_));
  IPUPOD_RETURN_IF_ERROR(optimizer_->ImportState(opt_state));
  weights_ = std::move(weights);
  buffers_ = std::move(buffers);
  replica_buffers_ = std::move(replica_buffers);
  return absl::OkStatus();
}

absl::StatusOr<TensorMap> Trainer::TakeBuffers(TensorMap& state) const {
  TensorMap buffers;
  for (const auto& [name, t] : buffers_) {
    auto it = state.find(name);
    if (it == state.end() || it->second.dtype() != t.dtype() || it->second.shape() != t.shape()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint lacks buffer '", name, "' as ",
                                                     DTypeName(t.dtype()),
                                                     kernels::ShapeString(t.shape())));
    }
    buffers.insert(state.extract(it));
  }
  return buffers;
}

absl::StatusOr<std::vector<TensorMap>> Trainer::TakeReplicaBuffers(
    TensorMap& state, const TensorMap& replica0) const {
  std::vector<TensorMap> copies(replica_buffers_.size(), replica0);
  for (size_t r = 0; r < copies.size(); ++r) {
    for (auto& [name, t] : copies[r]) {
      auto it = state.find(absl::StrCat(kReplicaPrefix, r + 1, "/", name));
      if (it == state.end()) continue;
      if (it->second.dtype() != t.dtype() || it->second.shape() != t.shape()) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint tensor '", it->first, "' is ", DTypeName(it->second.dtype()),
                         kernels::ShapeString(it->second.shape()), " but the buffer is ",
                         DTypeName(t.dtype()), kernels::ShapeString(t.shape())));
      }
      t = std::move(state.extract(it).mapped());
    }
  }
  for (const auto& [name, t] : state) {
    if (absl::StartsWith(name, kReplicaPrefix)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint tensor '", name, "' is a replica's own buffer, which this executable ",
          copies.empty() ? "does not keep (compiled with broadcast_buffers=true or one replica)"
                         : "does not have"));
    }
  }
  return copies;
}

}  // namespace ipupod::training
