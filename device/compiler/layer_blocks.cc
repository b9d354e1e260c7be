#include "device/compiler/layer_blocks.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "device/compiler/ipu_config.h"

namespace ipupod::compiler {
namespace {

struct ContainerStats {
  std::string parent;  // module path of the container's parent
  std::set<int64_t> indices;
  int64_t nodes = 0;
  size_t depth = 0;
  size_t first_node = 0;
};

bool IsIndex(absl::string_view atom, int64_t* index) {
  if (atom.empty() || !std::all_of(atom.begin(), atom.end(), absl::ascii_isdigit)) return false;
  return absl::SimpleAtoi(atom, index) && *index < kLayersMax;
}

// (container, index) for every "<container>.<integer>" in a module path,
// outermost first. The root container is "".
std::vector<std::pair<std::string, int64_t>> IndexedContainers(absl::string_view module_path) {
  std::vector<std::pair<std::string, int64_t>> out;
  if (module_path.empty()) return out;
  const std::vector<absl::string_view> atoms = absl::StrSplit(module_path, '.');
  int64_t index = 0;
  for (size_t j = 0; j < atoms.size(); ++j) {
    if (!IsIndex(atoms[j], &index)) continue;
    out.emplace_back(absl::StrJoin(atoms.begin(), atoms.begin() + j, "."), index);
  }
  return out;
}

std::string ParentOf(const std::string& container) {
  const size_t dot = container.rfind('.');
  return dot == std::string::npos ? "" : container.substr(0, dot);
}

std::map<std::string, ContainerStats> CollectContainers(const graph::Graph& graph) {
  std::map<std::string, ContainerStats> stats;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    for (auto& [container, index] : IndexedContainers(graph.nodes[i].module_path)) {
      auto [it, inserted] = stats.try_emplace(container);
      ContainerStats& s = it->second;
      if (inserted) {
        s.parent = container.empty() ? "" : ParentOf(container);
        s.depth = container.empty() ? 0 : std::count(container.begin(), container.end(), '.') + 1;
        s.first_node = i;
      }
      s.indices.insert(index);
      ++s.nodes;
    }
  }
  return stats;
}

// The layer container and its siblings with the same parent and indices.
std::vector<std::string> ChooseContainers(const std::map<std::string, ContainerStats>& stats) {
  auto rank = [](const ContainerStats& s) {
    return std::make_tuple(-s.nodes, s.depth, s.first_node);
  };
  auto best = stats.begin();
  for (auto it = stats.begin(); it != stats.end(); ++it) {
    if (rank(it->second) < rank(best->second)) best = it;
  }
  std::vector<std::string> chosen{best->first};
  for (const auto& [name, s] : stats) {
    if (name != best->first && s.parent == best->second.parent && s.depth == best->second.depth &&
        s.indices == best->second.indices) {
      chosen.push_back(name);
    }
  }
  return chosen;
}

std::string ListText(absl::Span<const int64_t> v) {
  return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
}

// Replaces -1 entries as optimum-graphcore does; the result has one count per IPU.
absl::StatusOr<std::vector<int64_t>> ExpandWildcards(absl::Span<const int64_t> layers, int64_t ipus,
                                                     int64_t num_layers) {
  std::vector<int64_t> counts(layers.begin(), layers.end());
  const bool all_wildcards =
      std::all_of(layers.begin(), layers.end(), [](int64_t n) { return n == -1; });
  if (all_wildcards && (layers.size() == 1 || static_cast<int64_t>(layers.size()) == ipus)) {
    counts.assign(ipus, num_layers / ipus);
    counts.back() += num_layers % ipus;
    return counts;
  }
  if (static_cast<int64_t>(layers.size()) != ipus) {
    return absl::InvalidArgumentError(
        absl::StrCat("layers_per_ipu=", ListText(layers), " has ", layers.size(),
                     " entries but ipus_per_replica is ", ipus, ": give one entry per IPU"));
  }
  std::vector<size_t> wildcards;
  int64_t fixed = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == -1)
      wildcards.push_back(i);
    else
      fixed += counts[i];
  }
  if (wildcards.empty()) return counts;
  const int64_t rest = num_layers - fixed;
  if (rest < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layers_per_ipu=", ListText(layers), " places ", fixed,
        " layers before the -1 entries but the model has ", num_layers, ": lower the counts"));
  }
  for (size_t i : wildcards) counts[i] = rest / static_cast<int64_t>(wildcards.size());
  counts[wildcards.back()] += rest % static_cast<int64_t>(wildcards.size());
  return counts;
}

}  // namespace

std::string LayerBlocks::Pattern() const {
  if (containers.empty()) return "";
  return containers[0].empty() ? "N" : absl::StrCat(containers[0], ".N");
}

absl::StatusOr<LayerBlocks> FindLayerBlocks(const graph::Graph& graph) {
  const std::map<std::string, ContainerStats> stats = CollectContainers(graph);
  if (stats.empty()) {
    return absl::InvalidArgumentError(
        "found no repeated layers in the model: no node's torch module path has an indexed "
        "container (layers.N, h.N, encoder.layer.N, blocks.N); place it with a module map or "
        "__ipu_number attributes, or compile for one IPU (layers_per_ipu=[-1], "
        "ipus_per_replica=1)");
  }
  LayerBlocks blocks;
  blocks.containers = ChooseContainers(stats);
  const std::set<std::string> chosen(blocks.containers.begin(), blocks.containers.end());
  blocks.num_layers = *stats.at(blocks.containers[0]).indices.rbegin() + 1;
  blocks.node_layer.assign(graph.nodes.size(), -1);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    for (auto& [container, index] : IndexedContainers(graph.nodes[i].module_path)) {
      if (chosen.count(container) == 0) continue;
      blocks.node_layer[i] = index;
      break;
    }
  }
  return blocks;
}

absl::StatusOr<std::vector<int64_t>> LayerIpus(absl::Span<const int64_t> layers_per_ipu,
                                               int64_t ipus_per_replica, int64_t num_layers) {
  if (ipus_per_replica <= 1) return std::vector<int64_t>(num_layers, 0);
  auto counts = ExpandWildcards(layers_per_ipu, ipus_per_replica, num_layers);
  if (!counts.ok()) return counts.status();
  int64_t total = 0;
  for (int64_t n : *counts) total += n;
  if (total != num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("layers_per_ipu=", ListText(layers_per_ipu), " places ", total,
                     " layers but the model has ", num_layers, ": make the entries sum to ",
                     num_layers, ", or use -1 to split the rest evenly"));
  }
  std::vector<int64_t> ipus;
  for (size_t ipu = 0; ipu < counts->size(); ++ipu) {
    ipus.insert(ipus.end(), (*counts)[ipu], static_cast<int64_t>(ipu));
  }
  return ipus;
}

}  // namespace ipupod::compiler
