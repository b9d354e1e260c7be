#include "training/trainer.h"

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/shape_util.h"

namespace ipupod::training {
namespace {

constexpr absl::string_view kOptimizerPrefix = "optimizer/";

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

}  // namespace

Trainer::Trainer(TrainerOptions options, std::unique_ptr<Autodiff> autodiff,
                 std::unique_ptr<Optimizer> optimizer)
    : options_(std::move(options)),
      autodiff_(std::move(autodiff)),
      optimizer_(std::move(optimizer)),
      weights_(autodiff_->InitialWeights()) {}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(graph::Graph graph,
                                                         TrainerOptions options) {
  if (options.gradient_accumulation_steps < 1 || options.replicas < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient_accumulation_steps (", options.gradient_accumulation_steps,
                     ") and replicas (", options.replicas, ") must be at least 1"));
  }
  IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Autodiff> autodiff,
                          Autodiff::Create(std::move(graph), options.loss, options.weights));
  IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                          Optimizer::Create(options.optimizer));
  return std::unique_ptr<Trainer>(
      new Trainer(std::move(options), std::move(autodiff), std::move(optimizer)));
}

absl::StatusOr<TensorMap> Trainer::MeanGradients(
    absl::Span<const std::vector<graph::Tensor>> micro_batches, StepResult& result) const {
  std::map<std::string, std::vector<double>> sums;
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    auto run = autodiff_->Run(micro_batches[i], weights_);
    if (!run.ok()) {
      return absl::Status(run.status().code(),
                          absl::StrCat("micro-batch ", i, ": ", run.status().message()));
    }
    result.losses.push_back(run->loss);
    result.outputs.push_back(std::move(run->outputs));
    result.forward_flops += run->forward_flops;
    result.backward_flops += run->backward_flops;
    // The mean of one micro-batch is its gradient (the double round trip
    // below would give the same floats).
    if (micro_batches.size() == 1) return std::move(run->gradients);
    for (const auto& [name, g] : run->gradients) {
      std::vector<double>& sum = sums[name];
      sum.resize(static_cast<size_t>(g.num_elements()), 0.0);
      const float* p = g.data<float>();
      for (size_t k = 0; k < sum.size(); ++k) sum[k] += p[k];
    }
  }
  TensorMap mean;
  const double scale = 1.0 / static_cast<double>(micro_batches.size());
  for (const auto& [name, sum] : sums) {
    IPUPOD_ASSIGN_OR_RETURN(
        graph::Tensor t, graph::Tensor::Create(graph::DType::kFloat32, weights_.at(name).shape()));
    float* p = t.mutable_data<float>();
    for (size_t k = 0; k < sum.size(); ++k) p[k] = static_cast<float>(sum[k] * scale);
    mean.emplace(name, std::move(t));
  }
  return mean;
}

absl::StatusOr<StepResult> Trainer::Step(
    absl::Span<const std::vector<graph::Tensor>> micro_batches) {
  if (static_cast<int64_t>(micro_batches.size()) != micro_batches_per_step()) {
    return absl::InvalidArgumentError(
        absl::StrCat("one step takes gradient_accumulation_steps x replicas = ",
                     options_.gradient_accumulation_steps, " x ", options_.replicas, " = ",
                     micro_batches_per_step(), " micro-batches, got ", micro_batches.size()));
  }
  StepResult result;
  IPUPOD_ASSIGN_OR_RETURN(TensorMap gradients, MeanGradients(micro_batches, result));
  IPUPOD_RETURN_IF_ERROR(optimizer_->Step(weights_, gradients));
  result.step = optimizer_->step();
  return result;
}

absl::StatusOr<std::vector<graph::Tensor>> Trainer::Forward(
    absl::Span<const graph::Tensor> inputs) const {
  return autodiff_->Forward(inputs, weights_);
}

absl::Status Trainer::SetWeights(const TensorMap& weights) {
  for (const auto& [name, t] : weights) {
    auto it = weights_.find(name);
    if (it == weights_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "' is not a trainable weight of this model"));
    }
    if (it->second.dtype() != t.dtype() || it->second.shape() != t.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weight '", name, "' is ", DTypeName(it->second.dtype()),
          kernels::ShapeString(it->second.shape()), " but the new value is ", DTypeName(t.dtype()),
          kernels::ShapeString(t.shape()), "; pass a tensor of the weight's dtype and shape"));
    }
  }
  for (const auto& [name, t] : weights) weights_.at(name) = t;
  return absl::OkStatus();
}

TensorMap Trainer::ExportState() const {
  TensorMap out = weights_;
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
            absl::StrCat("checkpoint tensor '", name, "' is not a trainable weight"));
      }
    }
  }
  IPUPOD_RETURN_IF_ERROR(CheckOptimizerState(opt_state, weights_));
  IPUPOD_RETURN_IF_ERROR(optimizer_->ImportState(opt_state));
  weights_ = std::move(weights);
  return absl::OkStatus();
}

}  // namespace ipupod::training
