// File: device/training/optimizer.h
//
// training::Optimizer: PyTorch's update rules (torch 1.13, single-tensor
// path, fp32 state) with PopTorch's names, for SGD, Adam, AdamW, RMSprop and
// LAMB, plus the variable/constant split of PopTorch attributes (seed 003,
// 4.5.4).
//
// Attributes and defaults (PopTorch / torch.optim):
//   sgd      lr 0.01, momentum 0, dampening 0, weight_decay 0, nesterov 0
//   adam     lr 1e-3, beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 0, amsgrad 0
//   adamw    as adam, weight_decay 1e-2 (decoupled: w *= 1 - lr*wd first)
//   rmsprop  lr 0.01, alpha 0.99, eps 1e-8, weight_decay 0, momentum 0, centered 0
//   lamb     lr 1e-3, beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 1e-2,
//            bias_correction 1, max_weight_norm inf (= no clipping)
// LAMB follows PopTorch (poptorch.optim.LAMB over PopART's Lamb): Adam
// moments with optional bias correction, u = m^/(sqrt(v^)+eps) + wd*w,
// trust ratio r1/r2 with r1 = min(||w||, max_weight_norm), r2 = ||u||, and
// ratio 1 when r1 or r2 is 0; w -= lr * ratio * u. PopTorch's default
// max_weight_norm is None (no clipping), which inf stands for here;
// torch-optimizer's Lamb clamps ||w|| at 10, which max_weight_norm=10 gives.
//
// float16 state (seed 003, 4.5.2-4.5.3): adam, adamw, rmsprop and lamb take
// accum_type (gradients summed over micro-batches), first_order_momentum_
// accum_type (exp_avg; rmsprop's momentum_buffer and grad_avg) and
// second_order_momentum_accum_type (exp_avg_sq, max_exp_avg_sq, square_avg),
// each 32 (default) or 16 bits, constants; a 16-bit slot is rounded to
// float16 after every update. SGD's momentum_buffer has the weight's type
// and is kept multiplied by velocity_scaling (default 1): the update divides
// it out, so only rounding of the scaled value depends on it.
//
// Every optimizer also takes loss_scaling (default 1, in (0, 65504]): the
// gradients it is given were computed with the loss multiplied by it, and it
// divides them by it before the update (seed 003, 4.5.1). float16 weights
// are updated in float32, with float32 state, and rounded back to float16.
//
// Variables and constants: attributes passed explicitly to
// OptimizerSpec::Create are variables (changeable between runs with
// SetVariable), the rest constants; lr is always a variable (PopTorch's
// exception). MarkAsConstant / MarkAsVariable override this before the
// Optimizer is created, as markAsConstant()/markAsVariable() do before
// compiling. The flags nesterov, amsgrad, centered and bias_correction
// change the state layout and are always constants.
//
// Param groups (torch's optimizer.param_groups): each a list of weights
// with attribute values of their own. A weight of group i is updated with
// the optimizer-wide attributes overridden by group i's; a weight in no
// group with the optimizer-wide ones. A group's attributes are variables
// named "group/<i>/<attr>" (i from 0, in the order given) for SetVariable;
// what a group does not set follows the optimizer-wide value, also after a
// SetVariable of it. Attributes that must be equal across groups (PopTorch,
// seed 003, 4.5: its float16 extras except velocity_scaling; here also the
// flags, which fix the state layout): loss_scaling, the accum types,
// nesterov, amsgrad, centered, bias_correction - a group may repeat the
// optimizer's value (ignored) but not give another one. A weight is in at
// most one group; a group may be empty (keeping torch's group indices).
//
// State (torch's names), created at a weight's first update:
//   sgd: <w>/momentum_buffer (momentum != 0); adam/adamw: <w>/exp_avg,
//   <w>/exp_avg_sq, <w>/max_exp_avg_sq (amsgrad), <w>/step; rmsprop:
//   <w>/square_avg, <w>/momentum_buffer (momentum > 0), <w>/grad_avg
//   (centered), <w>/step; lamb: <w>/exp_avg, <w>/exp_avg_sq, <w>/step.
// Plus "step": the number of Step() calls (int64 scalar). <w>/step is a
// float32 scalar like torch's state['step'].
//
// Thread safety: not thread-safe; one owner (the Trainer) serialises calls.
// Errors: INVALID_ARGUMENT for an unknown optimizer or attribute (or group
// index), a value out of range (with the range), a group attribute that
// must be equal across groups and is not, a weight in two groups, a
// gradient or state tensor whose name, dtype or shape does not match its
// weight; FAILED_PRECONDITION for SetVariable on a constant (or on a group
// attribute the group does not set). A failed call changes nothing.
#ifndef IPUPOD_TRAINING_OPTIMIZER_H_
#define IPUPOD_TRAINING_OPTIMIZER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor/tensor.h"
#include "device/training/autodiff.h"

namespace ipupod::training {

enum class OptimizerKind { kSgd, kAdam, kAdamW, kRmsprop, kLamb };

// "sgd", "adam", "adamw", "rmsprop", "lamb" (PopTorch's names, lower case).
absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name);
absl::string_view OptimizerKindName(OptimizerKind kind);

struct OptimizerAttribute {
  double value = 0.0;
  bool is_variable = false;
};

// A param group as given to OptimizerSpec::Create: its weights and the
// attributes given explicitly for them (variables).
struct ParamGroupOptions {
  std::vector<std::string> weights;
  std::map<std::string, double> attributes;
};

// A param group as the spec holds it: the attributes it sets itself.
struct ParamGroup {
  std::vector<std::string> weights;
  std::map<std::string, OptimizerAttribute> attributes;
};

// "group/<i>/<attr>": how group i's attribute is named to SetVariable,
// MarkAsConstant/MarkAsVariable and in QualifiedAttributes.
std::string GroupAttributeName(size_t group, absl::string_view attr);

class OptimizerSpec {
 public:
  // SGD with lr 0.01: the default when no optimizer is given.
  OptimizerSpec();

  // `explicit_attrs` become variables (flags excepted), the rest take their
  // defaults as constants; each group's attributes are its variables.
  static absl::StatusOr<OptimizerSpec> Create(OptimizerKind kind,
                                              const std::map<std::string, double>& explicit_attrs,
                                              const std::vector<ParamGroupOptions>& groups = {});

  // `attr` is an optimizer-wide name or a group's "group/<i>/<attr>".
  absl::Status MarkAsConstant(absl::string_view attr);
  absl::Status MarkAsVariable(absl::string_view attr);

  OptimizerKind kind() const { return kind_; }
  // The optimizer-wide attributes.
  const std::map<std::string, OptimizerAttribute>& attributes() const { return attrs_; }
  // REQUIRES: attr is one of attributes().
  double value(absl::string_view attr) const;

  const std::vector<ParamGroup>& groups() const { return groups_; }
  // attributes() under their names plus every group's under
  // "group/<i>/<attr>".
  std::map<std::string, OptimizerAttribute> QualifiedAttributes() const;
  // The spec (without groups) weights of group `group` are updated with:
  // the optimizer-wide attributes with the group's over them.
  // REQUIRES: group < groups().size().
  OptimizerSpec GroupSpec(size_t group) const;
  // The index of the group holding `weight`, or -1.
  int64_t GroupOf(absl::string_view weight) const;

 private:
  friend class Optimizer;
  // An optimizer-wide name or "group/<i>/<attr>".
  absl::StatusOr<OptimizerAttribute*> Find(absl::string_view name);
  absl::StatusOr<OptimizerAttribute*> FindWide(absl::string_view attr);
  absl::Status AddGroup(const ParamGroupOptions& options);
  absl::Status Validate() const;
  absl::Status ValidateOne() const;

  OptimizerKind kind_;
  std::map<std::string, OptimizerAttribute> attrs_;
  std::vector<ParamGroup> groups_;
  std::map<std::string, size_t, std::less<>> group_of_;  // weight -> its group
};

class Optimizer {
 public:
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(OptimizerSpec spec);

  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  const OptimizerSpec& spec() const { return spec_; }
  int64_t step() const { return step_; }

  // One update of every weight that has a gradient; weights without one
  // are left alone (torch skips parameters whose grad is None). Checks every
  // gradient and state tensor before changing anything.
  absl::Status Step(TensorMap& weights, const TensorMap& gradients);

  // Automatic loss scaling (IPUConfig auto_loss_scaling; call before the
  // first Step). The scale starts at loss_scaling and after every Step's
  // gradients (which carry the scale they were computed with) it moves by a
  // factor of 2, as Graphcore's ALS does: if any gradient is not finite the
  // update is skipped (weights and state unchanged, step() still counts it)
  // and the scale halves; else if more than 1e-7 of the gradient elements
  // lie in the upper bin (|g| >= 65504 / 8, near float16's overflow) it
  // halves, otherwise it doubles, within [2^-14, 2^15]. The current scale is
  // state ("loss_scaling" in ExportState), so a resumed run continues it;
  // SetVariable("loss_scaling") restarts it there.
  void EnableAutomaticLossScaling();
  // What the next backward pass multiplies the loss by.
  double loss_scale() const;
  // True when the last Step skipped its update (automatic loss scaling).
  bool last_step_skipped() const { return skipped_; }

  // lr when one Step would be w = w + (-lr) * g for every weight, with no
  // state: SGD without momentum and weight decay. A caller may then apply
  // that update itself, fused with computing g (Autodiff::RunSgdStep), and
  // record it with CountAppliedStep. nullopt for any other optimizer.
  std::optional<double> PlainSgdLearningRate() const;
  // Records one update applied outside Step (see above): step() + 1.
  // REQUIRES: PlainSgdLearningRate() has a value.
  void CountAppliedStep() { ++step_; }

  // Changes a variable attribute (e.g. "lr", or group 1's "group/1/lr")
  // for later steps.
  absl::Status SetVariable(absl::string_view attr, double value);

  // The state as named tensors (see the file comment), for checkpoints.
  TensorMap ExportState() const;
  // Replaces the whole state with `state` (as ExportState wrote it). Names
  // and dtypes are checked here, shapes against the weights at Step.
  absl::Status ImportState(const TensorMap& state);

 private:
  using Slots = std::map<std::string, tensor::Tensor>;  // slot name -> tensor
  explicit Optimizer(OptimizerSpec spec);
  // Rebuilds group_specs_ from spec_.
  void ResolveGroups();
  // What `weight` is updated with: its group's spec, or spec_.
  const OptimizerSpec& SpecOf(const std::string& weight) const;
  absl::Status CheckStep(const TensorMap& weights, const TensorMap& gradients) const;
  absl::Status UpdateScaled(const OptimizerSpec& s, tensor::Tensor& w, const tensor::Tensor& g,
                            double scale, Slots& slots);
  // The update with the gradient divided by `scale`, in float32.
  absl::Status UpdateUnscaled(const OptimizerSpec& s, tensor::Tensor& w, const tensor::Tensor& g,
                              double scale, Slots& slots);
  // Automatic loss scaling's move after gradients computed at scale_; true
  // when the update must be skipped.
  bool AdjustLossScale(const TensorMap& gradients);
  absl::Status CheckSlotName(absl::string_view slot) const;

  OptimizerSpec spec_;
  std::vector<OptimizerSpec> group_specs_;  // spec_.GroupSpec(i) for every group i
  std::map<std::string, Slots> state_;      // weight name -> its slots
  bool auto_scale_ = false;
  double scale_ = 1.0;  // the automatic loss scale (auto_scale_ only)
  bool skipped_ = false;
  int64_t step_ = 0;
};

}  // namespace ipupod::training

#endif  // IPUPOD_TRAINING_OPTIMIZER_H_
