// File: device/compiler/layer_blocks.h
//
// Finds a model's layers - the repeated, indexed block that
// optimum-graphcore's layers_per_ipu counts (GPT-2's transformer.h.N,
// BERT's encoder.layer.N, layers.N, blocks.N) - from the torch module
// paths graph::Node carries, and maps layers to IPUs as optimum-graphcore's
// get_layer_ipu does.
//
// The layer container is the module path followed by an integer atom that
// covers the most nodes (ties: the shallower, then the earlier one).
// Sibling containers with the same parent and the same indices count as the
// same layers (a model that zips ModuleLists attn.N, ff.N, norm.N). The
// layer count is the largest index + 1: a layer with no ONNX nodes (a
// Dropout in eval mode) still counts, as len(ModuleList) does in optimum.
//
// Thread safety: pure functions.
// Errors: INVALID_ARGUMENT when the model has no indexed container, and for
// layers_per_ipu that does not fit the model (naming both counts).
#ifndef IPUPOD_COMPILER_LAYER_BLOCKS_H_
#define IPUPOD_COMPILER_LAYER_BLOCKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "device/graph/graph.h"

namespace ipupod::compiler {

struct LayerBlocks {
  std::vector<std::string> containers;  // the layer container first, then its siblings
  int64_t num_layers = 0;               // largest index + 1
  std::vector<int64_t> node_layer;      // per graph node: its layer, or -1 outside every layer

  // "transformer.h.N"; the root container shows as "N".
  std::string Pattern() const;
};

absl::StatusOr<LayerBlocks> FindLayerBlocks(const graph::Graph& graph);

// The IPU of each of `num_layers` layers (optimum-graphcore's
// get_layer_ipu): with one IPU every layer is on IPU 0 and layers_per_ipu
// is not consulted; [-1] (or all -1) splits evenly over ipus_per_replica,
// the remainder going to the last IPU; -1 entries mixed with counts share
// the layers the counts leave, the remainder to the last -1; otherwise the
// counts must sum to num_layers.
// REQUIRES: layers_per_ipu entries >= -1.
absl::StatusOr<std::vector<int64_t>> LayerIpus(absl::Span<const int64_t> layers_per_ipu,
                                               int64_t ipus_per_replica, int64_t num_layers);

}  // namespace ipupod::compiler

#endif  // IPUPOD_COMPILER_LAYER_BLOCKS_H_
