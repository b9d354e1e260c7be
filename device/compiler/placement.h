// File: device/compiler/placement.h
//
// compiler::Placement: which pipeline stage, and so which IPU of a
// replica, runs each node of an imported graph. Three ways to place:
//
//  (a) PlaceByLayers - optimum-graphcore's layers_per_ipu over the model's
//      layers (device/compiler/layer_blocks.h). Nodes before the first layer go to
//      IPU 0; any other node outside a layer inherits the IPU of the node
//      before it, so what follows the last layer stays on the last layer's
//      IPU (GPT-2's ln_f) - PopTorch's BeginBlock semantics.
//  (b) PlaceByModuleMap - a module-name -> IPU map such as
//      {"": 0, "layers.2": 1, "head": 3}. For each node the deepest key that
//      is a dotted prefix of its module path wins. The root key "" only
//      sets the IPU the model starts on (default 0): a node no other key
//      matches inherits the IPU of the node before it (the block it falls
//      in), so {"": 0, "layers.2": 1} puts layers.3 on IPU 1, not back on 0.
//  (c) PlaceByAnnotations - PopART's __ipu_number / __pipeline_stage node
//      attributes (device/compiler/onnx_annotations.h). A node without them
//      inherits the previous node's placement (stage 0, IPU 0 at the start).
//      The stage defaults to the IPU number and the IPU to the stage.
//      Phased strategies (PopTorch's SerialPhasedExecution and
//      ParallelPhasedExecution) read __execution_phase instead of the
//      stage: each (phase, IPU) pair of the graph is one stage, stages
//      ordered by phase then IPU, and stage_phase gives each stage's phase.
//      A node without a phase inherits the previous node's (phase 0 at the
//      start). Values may cross between the stages of one phase (the IPUs of
//      a phase run together), so there the rule below is by phase.
//
// In (a) and (b) every used IPU is one stage, stages ordered by IPU. In all
// three, stages are numbered densely from 0, each stage runs on one IPU,
// and stages ascend through the graph: every node reads only values made
// in its own or an earlier stage (phased: its own or an earlier phase;
// parallel phased also runs even phases on even IPUs and odd phases on odd
// IPUs, as PopTorch requires). IPUs of a replica are 0..ipus_per_replica-1;
// an IPU with no stage idles (a note says so).
//
// Thread safety: plain values and pure functions.
// Errors: INVALID_ARGUMENT naming the node, module, stages and IPUs
// involved: a stage that reads a later stage (a phase that reads a later
// phase), a stage on two IPUs, an IPU number beyond the pod, a phase on an
// IPU of the other parity (parallel phased), a phased placement of a model
// without __execution_phase attributes, a module-map key that matches no
// node, and what FindLayerBlocks / LayerIpus report.
#ifndef IPUPOD_COMPILER_PLACEMENT_H_
#define IPUPOD_COMPILER_PLACEMENT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "device/compiler/checks.h"
#include "device/compiler/onnx_annotations.h"
#include "device/graph/graph.h"

namespace ipupod::compiler {

enum class PlacementMethod { kLayersPerIpu, kModuleMap, kOnnxAttributes };

// "layers_per_ipu", "module_map", "onnx_attributes".
absl::string_view PlacementMethodName(PlacementMethod method);
absl::StatusOr<PlacementMethod> ParsePlacementMethod(absl::string_view name);

// Module path ("" = the root) -> IPU within a replica.
using ModuleMap = std::map<std::string, int64_t>;

// A JSON object of module path -> non-negative integer IPU.
absl::StatusOr<ModuleMap> ParseModuleMapJson(absl::string_view text);

struct Placement {
  PlacementMethod method = PlacementMethod::kLayersPerIpu;
  std::vector<std::string> node_names;  // graph node order
  std::vector<int64_t> node_stage;      // per node
  std::vector<int64_t> stage_ipu;       // per stage: its IPU within the replica
  // Per stage: its execution phase; empty unless placed for a phased strategy.
  std::vector<int64_t> stage_phase;
  int64_t ipus_per_replica = 1;
  std::vector<std::string> notes;  // how nodes were placed, idle IPUs

  int64_t num_stages() const { return static_cast<int64_t>(stage_ipu.size()); }
  bool phased() const { return !stage_phase.empty(); }
  // REQUIRES: node < node_stage.size().
  int64_t NodeIpu(size_t node) const { return stage_ipu[node_stage[node]]; }
  // What must not decrease along the graph: the stage, or phased its phase.
  // REQUIRES: stage < num_stages().
  int64_t StageOrder(int64_t stage) const { return phased() ? stage_phase[stage] : stage; }
  bool operator==(const Placement& other) const = default;
};

// `ipus_per_replica` as resolved by ResolveMode; with 1 every node is on IPU
// 0 and the model need not have layers.
absl::StatusOr<Placement> PlaceByLayers(const graph::Graph& graph,
                                        absl::Span<const int64_t> layers_per_ipu,
                                        int64_t ipus_per_replica);
absl::StatusOr<Placement> PlaceByModuleMap(const graph::Graph& graph, const ModuleMap& map);
// `strategy` phased: by __execution_phase and __ipu_number (see above).
absl::StatusOr<Placement> PlaceByAnnotations(
    const graph::Graph& graph, const NodeAnnotations& annotations,
    ExecutionStrategy strategy = ExecutionStrategy::kPipelined);

// For a loaded executable: the placement's nodes are the graph's, in order,
// and its stages are well formed. INVALID_ARGUMENT otherwise.
absl::Status CheckPlacementMatchesGraph(const Placement& placement, const graph::Graph& graph);

}  // namespace ipupod::compiler

#endif  // IPUPOD_COMPILER_PLACEMENT_H_
