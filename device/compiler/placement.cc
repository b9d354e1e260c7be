#include "device/compiler/placement.h"

#include <algorithm>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "device/compiler/layer_blocks.h"
#include "device/hardware.h"

namespace ipupod::compiler {
namespace {

using Json = nlohmann::json;

std::string ModuleText(const graph::Node& node) {
  return node.module_path.empty() ? "(root)" : node.module_path;
}

absl::Status CheckIpuNumber(int64_t ipu, absl::string_view what) {
  if (ipu >= 0 && ipu < device::kMaxPodIpus) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " places nodes on IPU ", ipu,
                                                 "; IPU numbers run from 0 to ",
                                                 device::kMaxPodIpus - 1, " (the largest pod)"));
}

std::string AscendError(const graph::Graph& graph, const Placement& p, size_t node, size_t from,
                        const std::string& input) {
  const graph::Node& n = graph.nodes[node];
  const graph::Node& f = graph.nodes[from];
  const absl::string_view what = p.phased() ? "phase" : "stage";
  const int64_t here = p.StageOrder(p.node_stage[node]);
  const int64_t there = p.StageOrder(p.node_stage[from]);
  return absl::StrCat(p.phased() ? "execution phases" : "pipeline stages",
                      " must ascend through the graph, but node '", n.name, "' (module ",
                      ModuleText(n), ") on ", what, " ", here, " (IPU ", p.NodeIpu(node),
                      ") reads '", input, "' from node '", f.name, "' (module ", ModuleText(f),
                      ") on later ", what, " ", there, " (IPU ", p.NodeIpu(from), "): move '",
                      ModuleText(n), "' to ", what, " ", there, " or later, or '", ModuleText(f),
                      "' earlier");
}

// Every node reads values made in its own or an earlier stage (phased:
// phase).
absl::Status CheckAscending(const graph::Graph& graph, const Placement& p) {
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const graph::Node& node = graph.nodes[i];
    for (const std::string& input : node.inputs) {
      auto it = producer.find(input);
      if (input.empty() || it == producer.end()) continue;
      if (p.StageOrder(p.node_stage[it->second]) <= p.StageOrder(p.node_stage[i])) continue;
      return absl::InvalidArgumentError(AscendError(graph, p, i, it->second, input));
    }
    for (const std::string& output : node.outputs) {
      if (!output.empty()) producer[output] = i;
    }
  }
  return absl::OkStatus();
}

void NoteIdleIpus(Placement& p) {
  std::set<int64_t> used(p.stage_ipu.begin(), p.stage_ipu.end());
  std::vector<int64_t> idle;
  for (int64_t ipu = 0; ipu < p.ipus_per_replica; ++ipu) {
    if (used.count(ipu) == 0) idle.push_back(ipu);
  }
  if (idle.empty()) return;
  p.notes.push_back(absl::StrCat("IPU ", absl::StrJoin(idle, ", IPU "),
                                 " of each replica has no nodes and idles"));
}

// A phased stage's key: its phase, then its IPU.
int64_t PhasedKey(int64_t phase, int64_t ipu) { return phase * device::kMaxPodIpus + ipu; }

// Dense stages from per-node stage keys, each stage on one IPU; `phased`
// keys are PhasedKey's.
absl::StatusOr<Placement> FinishPlacement(const graph::Graph& graph, PlacementMethod method,
                                          const std::vector<int64_t>& stage_key,
                                          const std::vector<int64_t>& ipu, int64_t min_ipus,
                                          bool phased = false) {
  Placement p;
  p.method = method;
  const std::set<int64_t> keys(stage_key.begin(), stage_key.end());
  const std::vector<int64_t> ordered(keys.begin(), keys.end());
  p.stage_ipu.assign(ordered.size(), -1);
  p.ipus_per_replica = std::max<int64_t>(min_ipus, 1);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const int64_t stage =
        std::lower_bound(ordered.begin(), ordered.end(), stage_key[i]) - ordered.begin();
    if (p.stage_ipu[stage] >= 0 && p.stage_ipu[stage] != ipu[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline stage ", stage_key[i], " has nodes on IPU ", p.stage_ipu[stage], " and IPU ",
          ipu[i], " (node '", graph.nodes[i].name, "'); a stage runs on one IPU"));
    }
    p.stage_ipu[stage] = ipu[i];
    p.node_names.push_back(graph.nodes[i].name);
    p.node_stage.push_back(stage);
    p.ipus_per_replica = std::max(p.ipus_per_replica, ipu[i] + 1);
  }
  if (p.stage_ipu.empty()) p.stage_ipu.push_back(0);  // a graph with no nodes
  if (phased) {
    for (int64_t key : ordered) p.stage_phase.push_back(key / device::kMaxPodIpus);
    if (p.stage_phase.empty()) p.stage_phase.push_back(0);
  }
  IPUPOD_RETURN_IF_ERROR(CheckAscending(graph, p));
  NoteIdleIpus(p);
  return p;
}

std::string LayerRange(const std::vector<int64_t>& layer_ipu, int64_t ipu) {
  std::vector<int64_t> mine;
  for (size_t l = 0; l < layer_ipu.size(); ++l) {
    if (layer_ipu[l] == ipu) mine.push_back(static_cast<int64_t>(l));
  }
  if (mine.empty()) return "no layers";
  if (mine.size() == 1) return absl::StrCat("layer ", mine[0]);
  return absl::StrCat("layers ", mine.front(), "-", mine.back());
}

void NoteLayers(const LayerBlocks& blocks, const std::vector<int64_t>& layer_ipu, int64_t ipus,
                Placement& p) {
  std::string siblings;
  if (blocks.containers.size() > 1) {
    siblings = absl::StrCat(
        " (with ", absl::StrJoin(blocks.containers.begin() + 1, blocks.containers.end(), ", "),
        ")");
  }
  p.notes.push_back(
      absl::StrCat("layers: ", blocks.num_layers, " of ", blocks.Pattern(), siblings));
  for (int64_t ipu = 0; ipu < ipus; ++ipu) {
    p.notes.push_back(absl::StrCat("IPU ", ipu, ": ", LayerRange(layer_ipu, ipu),
                                   ipu == 0 ? ", and what precedes the first layer" : ""));
  }
}

bool IsUnder(absl::string_view module_path, absl::string_view key) {
  if (key.empty()) return true;
  return module_path == key || (absl::StartsWith(module_path, key) &&
                                module_path.size() > key.size() && module_path[key.size()] == '.');
}

// The IPU of the deepest non-root key over `module_path`, or -1.
int64_t DeepestMatch(const ModuleMap& map, absl::string_view module_path, std::string* key) {
  int64_t ipu = -1;
  for (const auto& [k, v] : map) {
    if (k.empty() || !IsUnder(module_path, k)) continue;
    if (ipu < 0 || k.size() > key->size()) {
      ipu = v;
      *key = k;
    }
  }
  return ipu;
}

absl::Status CheckModuleMap(const graph::Graph& graph, const ModuleMap& map) {
  for (const auto& [key, ipu] : map) {
    IPUPOD_RETURN_IF_ERROR(CheckIpuNumber(ipu, absl::StrCat("module map key '", key, "'")));
    if (key.empty()) continue;
    // clang 14 cannot capture a structured binding: name the key first.
    const std::string& prefix = key;
    const bool used =
        std::any_of(graph.nodes.begin(), graph.nodes.end(),
                    [&](const graph::Node& n) { return IsUnder(n.module_path, prefix); });
    if (used) continue;
    std::set<std::string> examples;
    for (const graph::Node& n : graph.nodes) {
      if (!n.module_path.empty() && examples.size() < 5) examples.insert(n.module_path);
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "module map key '", key, "' matches no node of the model; its module paths look like '",
        absl::StrJoin(examples, "', '"), "'"));
  }
  return absl::OkStatus();
}

// Parallel phased execution alternates two groups of IPUs: PopTorch
// requires even phases on even IPUs and odd phases on odd IPUs.
absl::Status CheckPhaseParity(const graph::Graph& graph, const Placement& p) {
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const int64_t phase = p.stage_phase[p.node_stage[i]];
    const int64_t ipu = p.NodeIpu(i);
    if (phase % 2 == ipu % 2) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "when phases are executed in parallel, even phases must run on even IPUs and odd "
        "phases on odd IPUs, but node '",
        graph.nodes[i].name, "' (module ", ModuleText(graph.nodes[i]), ") is in phase ", phase,
        " on IPU ", ipu, ": place phase ", phase, "'s stages on ", phase % 2 == 0 ? "even" : "odd",
        " IPUs (Phase.ipus / Stage.ipu), or use serial phased execution"));
  }
  return absl::OkStatus();
}

// "phase 0: IPU 0, 2; phase 1: IPU 1, 3".
std::string PhasesNote(const Placement& p) {
  std::map<int64_t, std::vector<int64_t>> ipus;
  for (int64_t s = 0; s < p.num_stages(); ++s) ipus[p.stage_phase[s]].push_back(p.stage_ipu[s]);
  std::vector<std::string> parts;
  for (const auto& [phase, list] : ipus) {
    parts.push_back(absl::StrCat("phase ", phase, ": IPU ", absl::StrJoin(list, ", ")));
  }
  return absl::StrCat("execution phases (", parts.size(), "): ", absl::StrJoin(parts, "; "));
}

absl::StatusOr<Placement> PlaceByPhases(const graph::Graph& graph,
                                        const NodeAnnotations& annotations,
                                        ExecutionStrategy strategy) {
  std::vector<int64_t> key(graph.nodes.size(), 0);
  std::vector<int64_t> ipu(graph.nodes.size(), 0);
  int64_t cur_phase = 0, cur_ipu = 0, phased = 0;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    auto it = annotations.find(graph.nodes[i].name);
    if (it != annotations.end()) {
      const NodeAnnotation& a = it->second;
      if (a.ipu.has_value() || a.stage.has_value()) cur_ipu = a.ipu.value_or(a.stage.value_or(0));
      if (a.phase.has_value()) cur_phase = *a.phase;
      phased += a.phase.has_value() ? 1 : 0;
      IPUPOD_RETURN_IF_ERROR(
          CheckIpuNumber(cur_ipu, absl::StrCat("node '", graph.nodes[i].name, "'")));
    }
    key[i] = PhasedKey(cur_phase, cur_ipu);
    ipu[i] = cur_ipu;
  }
  if (phased == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        ExecutionStrategyName(strategy),
        " execution runs the model's execution phases, but no node carries __execution_phase "
        "(PopTorch's Phase): annotate the model's blocks with phases, or use "
        "execution_strategy=pipelined or sharded"));
  }
  IPUPOD_ASSIGN_OR_RETURN(Placement p, FinishPlacement(graph, PlacementMethod::kOnnxAttributes, key,
                                                       ipu, 1, /*phased=*/true));
  if (strategy == ExecutionStrategy::kParallelPhased) {
    IPUPOD_RETURN_IF_ERROR(CheckPhaseParity(graph, p));
  }
  p.notes.insert(p.notes.begin(), PhasesNote(p));
  p.notes.insert(p.notes.begin(),
                 absl::StrCat(phased, " of ", graph.nodes.size(),
                              " nodes carry __execution_phase; the others inherit the phase and "
                              "IPU of the node before them"));
  return p;
}

}  // namespace

absl::string_view PlacementMethodName(PlacementMethod method) {
  switch (method) {
    case PlacementMethod::kLayersPerIpu:
      return "layers_per_ipu";
    case PlacementMethod::kModuleMap:
      return "module_map";
    case PlacementMethod::kOnnxAttributes:
      return "onnx_attributes";
  }
  return "layers_per_ipu";
}

absl::StatusOr<PlacementMethod> ParsePlacementMethod(absl::string_view name) {
  for (PlacementMethod m : {PlacementMethod::kLayersPerIpu, PlacementMethod::kModuleMap,
                            PlacementMethod::kOnnxAttributes}) {
    if (PlacementMethodName(m) == name) return m;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "placement method '", name, "' is not one of layers_per_ipu, module_map, onnx_attributes"));
}

absl::StatusOr<ModuleMap> ParseModuleMapJson(absl::string_view text) {
  Json doc;
  try {
    doc = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("module map is not valid JSON: ", e.what()));
  }
  if (!doc.is_object()) {
    return absl::InvalidArgumentError(
        "module map must be a JSON object of module path -> IPU, e.g. {\"\": 0, \"layers.2\": 1}");
  }
  ModuleMap map;
  for (const auto& [key, value] : doc.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "module map entry '", key, "': expected a non-negative integer IPU, got ", value.dump()));
    }
    map[key] = value.get<int64_t>();
  }
  return map;
}

absl::StatusOr<Placement> PlaceByLayers(const graph::Graph& graph,
                                        absl::Span<const int64_t> layers_per_ipu,
                                        int64_t ipus_per_replica) {
  IPUPOD_RETURN_IF_ERROR(CheckIpuNumber(ipus_per_replica - 1, "ipus_per_replica"));
  std::vector<int64_t> ipu(graph.nodes.size(), 0);
  if (ipus_per_replica <= 1) {
    return FinishPlacement(graph, PlacementMethod::kLayersPerIpu, ipu, ipu, 1);
  }
  IPUPOD_ASSIGN_OR_RETURN(LayerBlocks blocks, FindLayerBlocks(graph));
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> layer_ipu,
                          LayerIpus(layers_per_ipu, ipus_per_replica, blocks.num_layers));
  int64_t current = 0;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (blocks.node_layer[i] >= 0) current = layer_ipu[blocks.node_layer[i]];
    ipu[i] = current;
  }
  IPUPOD_ASSIGN_OR_RETURN(Placement p, FinishPlacement(graph, PlacementMethod::kLayersPerIpu, ipu,
                                                       ipu, ipus_per_replica));
  std::vector<std::string> notes = std::move(p.notes);
  p.notes.clear();
  NoteLayers(blocks, layer_ipu, ipus_per_replica, p);
  p.notes.insert(p.notes.end(), notes.begin(), notes.end());
  return p;
}

absl::StatusOr<Placement> PlaceByModuleMap(const graph::Graph& graph, const ModuleMap& map) {
  IPUPOD_RETURN_IF_ERROR(CheckModuleMap(graph, map));
  auto root = map.find("");
  int64_t current = root == map.end() ? 0 : root->second;
  std::vector<int64_t> ipu(graph.nodes.size(), 0);
  std::map<std::string, int64_t> matched_nodes;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    std::string key;
    const int64_t match = DeepestMatch(map, graph.nodes[i].module_path, &key);
    if (match >= 0) {
      current = match;
      ++matched_nodes[key];
    }
    ipu[i] = current;
  }
  IPUPOD_ASSIGN_OR_RETURN(Placement p,
                          FinishPlacement(graph, PlacementMethod::kModuleMap, ipu, ipu, 1));
  for (const auto& [key, count] : matched_nodes) {
    p.notes.push_back(absl::StrCat("module '", key, "' -> IPU ", map.at(key), " (", count,
                                   count == 1 ? " node)" : " nodes)"));
  }
  return p;
}

absl::StatusOr<Placement> PlaceByAnnotations(const graph::Graph& graph,
                                             const NodeAnnotations& annotations,
                                             ExecutionStrategy strategy) {
  if (IsPhased(strategy)) return PlaceByPhases(graph, annotations, strategy);
  std::vector<int64_t> stage(graph.nodes.size(), 0);
  std::vector<int64_t> ipu(graph.nodes.size(), 0);
  int64_t cur_stage = 0, cur_ipu = 0, annotated = 0;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    auto it = annotations.find(graph.nodes[i].name);
    if (it != annotations.end() && (it->second.ipu.has_value() || it->second.stage.has_value())) {
      const NodeAnnotation& a = it->second;
      cur_ipu = a.ipu.has_value() ? *a.ipu : *a.stage;
      cur_stage = a.stage.has_value() ? *a.stage : *a.ipu;
      ++annotated;
      IPUPOD_RETURN_IF_ERROR(
          CheckIpuNumber(cur_ipu, absl::StrCat("node '", graph.nodes[i].name, "'")));
    }
    stage[i] = cur_stage;
    ipu[i] = cur_ipu;
  }
  IPUPOD_ASSIGN_OR_RETURN(Placement p,
                          FinishPlacement(graph, PlacementMethod::kOnnxAttributes, stage, ipu, 1));
  p.notes.insert(p.notes.begin(),
                 absl::StrCat(annotated, " of ", graph.nodes.size(),
                              " nodes carry __ipu_number/__pipeline_stage; the others inherit "
                              "the placement of the node before them"));
  return p;
}

absl::Status CheckPlacementMatchesGraph(const Placement& p, const graph::Graph& graph) {
  if (p.node_names.size() != graph.nodes.size() || p.node_stage.size() != graph.nodes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "executable placement covers ", p.node_names.size(), " nodes but the model has ",
        graph.nodes.size(), ": the executable is inconsistent; recompile it"));
  }
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (p.node_names[i] != graph.nodes[i].name || p.node_stage[i] < 0 ||
        p.node_stage[i] >= p.num_stages()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "executable placement entry ", i, " ('", p.node_names[i], "', stage ", p.node_stage[i],
          ") does not match model node '", graph.nodes[i].name, "': recompile the executable"));
    }
  }
  if (p.phased() && p.stage_phase.size() != p.stage_ipu.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("executable placement gives ", p.stage_phase.size(), " stage phases for ",
                     p.stage_ipu.size(), " stages: recompile the executable"));
  }
  for (int64_t phase : p.stage_phase) {
    if (phase < 0) {
      return absl::InvalidArgumentError(absl::StrCat("executable placement puts a stage in phase ",
                                                     phase, ": recompile the executable"));
    }
  }
  for (int64_t ipu : p.stage_ipu) {
    if (ipu < 0 || ipu >= p.ipus_per_replica) {
      return absl::InvalidArgumentError(absl::StrCat("executable placement puts a stage on IPU ",
                                                     ipu, " of a ", p.ipus_per_replica,
                                                     "-IPU replica: recompile the executable"));
    }
  }
  return CheckAscending(graph, p);
}

}  // namespace ipupod::compiler
