// The OpDef of custom nodes: each call goes to the node's CustomOp (device/graph/custom_ops.h).
#include "device/graph/custom_ops.h"

#include "absl/strings/str_cat.h"
#include "device/graph/onnx_import.h"
#include "device/graph/ops.h"

namespace ipupod::graph {
namespace {

absl::Status Unbound(const Node& node) {
  return absl::InternalError(
      absl::StrCat("custom node '", node.name, "' has no implementation bound"));
}

absl::StatusOr<std::vector<TensorType>> InferCustom(const OpContext& c) {
  if (c.node.custom_op == nullptr) return Unbound(c.node);
  return c.node.custom_op->Infer(c.node, c.types);
}

absl::Status RunCustom(const OpContext& c, absl::Span<Tensor> outputs) {
  if (c.node.custom_op == nullptr) return Unbound(c.node);
  return c.node.custom_op->Compute(c.node, c.values, outputs);
}

int64_t CustomFlops(const OpContext&, absl::Span<const TensorType> outputs) {
  int64_t flops = 0;
  for (const TensorType& t : outputs) flops += NumElementsOf(t);
  return flops;
}

}  // namespace

std::string CustomOpName(absl::string_view domain, absl::string_view op) {
  return absl::StrCat(domain, "::", op);
}

bool IsCustomDomain(absl::string_view domain) {
  return !domain.empty() && domain != "ai.onnx" && domain != kGraphcoreDomain;
}

const OpDef& CustomOpDef() {
  static const OpDef* def = [] {
    OpDef* d =
        new OpDef(MakeOpDef("custom", 0, kCustomOperandsMax, InferCustom, RunCustom, CustomFlops));
    d->max_outputs = kCustomOperandsMax;
    d->writes_every_output = true;  // Compute writes every output or fails
    d->never_fold = true;
    return d;
  }();
  return *def;
}

}  // namespace ipupod::graph
