#include "device/training/buffers.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/graph/ops.h"

namespace ipupod::training {
namespace {

// BatchNormalization's outputs 1 and 2 exist only in training mode (the op
// rejects them otherwise), so their presence is the test.
bool IsBatchNormTraining(const graph::Node& node) {
  return node.op_type == "BatchNormalization" && node.outputs.size() >= 3 &&
         node.inputs.size() >= 5 && !(node.outputs[1].empty() && node.outputs[2].empty());
}

absl::Status Add(BufferUpdates& updates, const std::string& buffer, const std::string& value,
                 absl::string_view origin) {
  auto [it, inserted] = updates.emplace(buffer, value);
  if (!inserted && it->second != value) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer '", buffer, "' would be replaced by both '", it->second, "' and '",
                     value, "' (", origin, "); a buffer takes one update per pass"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BufferUpdates> ImplicitBufferUpdates(const graph::Graph& graph) {
  BufferUpdates updates;
  for (const graph::Node& node : graph.nodes) {
    if (!IsBatchNormTraining(node)) continue;
    for (int k = 1; k <= 2; ++k) {
      const std::string& stat = node.inputs[static_cast<size_t>(k + 2)];
      const std::string& update = node.outputs[static_cast<size_t>(k)];
      if (update.empty()) continue;
      if (graph.FindInitializer(stat) == nullptr) {
        return graph::NodeError(
            node, absl::InvalidArgumentError(absl::StrCat(
                      "in training mode its running ", k == 1 ? "mean" : "variance", " '", stat,
                      "' must be an initializer (a buffer it updates in place); export with "
                      "training=torch.onnx.TrainingMode.TRAINING and do_constant_folding=False")));
      }
      IPUPOD_RETURN_IF_ERROR(Add(updates, stat, update, node.name));
    }
  }
  return updates;
}

absl::StatusOr<BufferUpdates> AllBufferUpdates(const graph::Graph& graph,
                                               const BufferUpdates& explicit_updates) {
  IPUPOD_ASSIGN_OR_RETURN(BufferUpdates updates, ImplicitBufferUpdates(graph));
  for (const auto& [buffer, value] : explicit_updates) {
    IPUPOD_RETURN_IF_ERROR(Add(updates, buffer, value, "explicit update"));
  }
  return updates;
}

}  // namespace ipupod::training
