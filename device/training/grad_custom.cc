// The backward rule of custom ops (device/graph/custom_ops.h): the op's own gradient function,
// run where the op runs (device/customop/). One rule serves every custom op; it reads the
// forward's inputs and outputs, which the tape keeps for it.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/graph/custom_ops.h"
#include "device/training/grad_rules.h"

namespace ipupod::training {
namespace {

absl::StatusOr<int64_t> CustomGrad(const GradContext& c,
                                   std::vector<std::optional<Tensor>>& input_grads) {
  const graph::Node& node = c.op.node;
  if (node.custom_op == nullptr) {
    return absl::InternalError(absl::StrCat("node '", node.name, "' is not a custom op"));
  }
  IPUPOD_RETURN_IF_ERROR(
      node.custom_op->Gradient(node, c.op.values, c.outputs, c.output_grads, c.wants, input_grads));
  // A library says nothing of its cost: one operation per element read or written.
  int64_t flops = 0;
  for (const Tensor* t : c.outputs) flops += t != nullptr ? 2 * t->num_elements() : 0;
  for (const std::optional<Tensor>& g : input_grads) flops += g ? g->num_elements() : 0;
  return flops;
}

}  // namespace

const GradRule* FindNodeGradRule(const graph::Node& node) {
  static const GradRule kCustom{"custom", CustomGrad, /*needs_inputs=*/true,
                                /*needs_outputs=*/true};
  if (node.custom_op == nullptr) return FindGradRule(node.op_type);
  return node.custom_op->has_gradient() ? &kCustom : nullptr;
}

}  // namespace ipupod::training
