#include "device/graph/shape_inference.h"

#include <algorithm>
#include <new>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/graph/ops.h"
#include "device/kernels/interrupt.h"
#include "device/kernels/shape_util.h"

namespace ipupod::graph {
namespace {

// Working state of one pass; committed to the graph only on success. The
// model's own initializers stay in the graph (weights are not copied);
// folded values collect in `folded`.
struct PassState {
  const std::map<std::string, Tensor>* initializers = nullptr;
  const ModuleState* module_state = nullptr;
  bool keep_weights = false;
  bool half_partials = false;  // Graph::half_partials
  std::map<std::string, Tensor> folded;
  int64_t folded_bytes = 0;
  int64_t max_folded_bytes = 0;
  std::map<std::string, TensorType> types;
  std::vector<Node> kept;

  const Tensor* FindConstant(const std::string& name) const {
    auto it = initializers->find(name);
    if (it != initializers->end()) {
      return keep_weights && IsVariable(*module_state, it->first, it->second) ? nullptr
                                                                              : &it->second;
    }
    auto f = folded.find(name);
    return f == folded.end() ? nullptr : &f->second;
  }
};

absl::Status SeedState(const Graph& g, PassState& s) {
  s.initializers = &g.initializers;
  s.module_state = &g.module_state;
  for (const auto& [name, t] : g.initializers) s.types[name] = TensorType{t.dtype(), t.shape()};
  for (const ValueInfo& in : g.inputs) {
    for (int64_t d : in.type.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat("graph input '", in.name, "' has shape ",
                                                       kernels::ShapeString(in.type.shape),
                                                       " with an unknown dim"));
      }
    }
    // The rank and dim bounds (common/tensor/shape_bounds.h) hold for inputs as for every value.
    if (auto n = CheckedNumElements(in.type.dtype, in.type.shape); !n.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph input '", in.name, "': ", n.status().message()));
    }
    if (!s.types.emplace(in.name, in.type).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph input '", in.name, "' is defined twice"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<OpContext> MakeContext(const Node& node, int64_t opset, const PassState& s) {
  OpContext ctx{node, opset, {}, {}, s.half_partials};
  for (const std::string& in : node.inputs) {
    if (in.empty()) {
      ctx.types.push_back(nullptr);
      ctx.values.push_back(nullptr);
      continue;
    }
    auto t = s.types.find(in);
    if (t == s.types.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", in, "' is not a graph input, initializer or output of an earlier node"));
    }
    ctx.types.push_back(&t->second);
    ctx.values.push_back(s.FindConstant(in));
  }
  return ctx;
}

// The bytes of `types`. REQUIRES: each passed CheckedNumElements.
int64_t OutputBytes(const std::vector<TensorType>& types) {
  int64_t bytes = 0;
  for (const TensorType& t : types) {
    bytes += *CheckedNumElements(t.dtype, t.shape) * static_cast<int64_t>(DTypeSize(t.dtype));
  }
  return bytes;
}

bool CanFold(const OpDef& def, const OpContext& ctx) {
  if (def.never_fold) return false;
  if (def.fold_from_types) return true;
  for (size_t i = 0; i < ctx.types.size(); ++i) {
    if (ctx.types[i] != nullptr && ctx.values[i] == nullptr) return false;
  }
  return true;
}

// Infers (and maybe folds) one node into the pass state.
// REQUIRES: CheckNodeSignature(node, opset) is OK.
absl::Status VisitNode(const Node& node, int64_t opset, PassState& s) {
  const OpDef& def = *FindNodeOp(node);
  IPUPOD_ASSIGN_OR_RETURN(OpContext ctx, MakeContext(node, opset, s));
  IPUPOD_ASSIGN_OR_RETURN(std::vector<TensorType> types, InferOp(def, ctx));
  if (types.size() != node.outputs.size()) {
    return absl::InternalError(
        absl::StrCat("inferred ", types.size(), " outputs for ", node.outputs.size()));
  }
  for (const TensorType& t : types) {
    IPUPOD_RETURN_IF_ERROR(CheckedNumElements(t.dtype, t.shape).status());
  }
  std::vector<Tensor> folded;
  const int64_t bytes = OutputBytes(types);
  const bool fold = CanFold(def, ctx) && bytes <= s.max_folded_bytes - s.folded_bytes;
  if (fold) {
    s.folded_bytes += bytes;
    IPUPOD_ASSIGN_OR_RETURN(folded, CreateOutputs(def, types));
    IPUPOD_RETURN_IF_ERROR(RunOp(def, ctx, absl::MakeSpan(folded)));
    // A fold interrupted inside its kernels (device/kernels/interrupt.h) wrote
    // nothing usable: stop with why.
    IPUPOD_RETURN_IF_ERROR(kernels::InterruptStatus());
  } else {
    s.kept.push_back(node);
  }
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    const std::string& out = node.outputs[i];
    if (out.empty()) continue;
    if (!s.types.emplace(out, types[i]).second) {
      return absl::InvalidArgumentError(absl::StrCat("output '", out, "' is already defined"));
    }
    if (fold) s.folded.emplace(out, std::move(folded[i]));
  }
  return absl::OkStatus();
}

// Keeps only nodes and values that some graph output depends on; returns
// the live value names.
std::set<std::string> RemoveDeadValues(const Graph& g, PassState& s) {
  std::set<std::string> live;
  for (const ValueInfo& out : g.outputs) live.insert(out.name);
  std::vector<Node> kept;
  for (auto it = s.kept.rbegin(); it != s.kept.rend(); ++it) {
    bool needed = false;
    for (const std::string& out : it->outputs) needed = needed || live.count(out) > 0;
    if (!needed) continue;
    for (const std::string& out : it->outputs) live.insert(out);  // computed anyway
    for (const std::string& in : it->inputs) {
      if (!in.empty()) live.insert(in);
    }
    kept.push_back(std::move(*it));
  }
  s.kept.assign(std::make_move_iterator(kept.rbegin()), std::make_move_iterator(kept.rend()));
  for (const ValueInfo& in : g.inputs) live.insert(in.name);  // inputs stay typed even if unused
  for (auto it = s.types.begin(); it != s.types.end();) {
    it = live.count(it->first) > 0 ? std::next(it) : s.types.erase(it);
  }
  return live;
}

template <typename Map>
void EraseDead(Map& map, const std::set<std::string>& live) {
  for (auto it = map.begin(); it != map.end();) {
    it = live.count(it->first) > 0 ? std::next(it) : map.erase(it);
  }
}

bool Compatible(const TensorType& declared, const TensorType& inferred) {
  if (declared.dtype != inferred.dtype) return false;
  if (declared.shape.empty()) return true;  // ONNX often omits output shapes
  if (declared.shape.size() != inferred.shape.size()) return false;
  for (size_t i = 0; i < declared.shape.size(); ++i) {
    if (declared.shape[i] >= 0 && declared.shape[i] != inferred.shape[i]) return false;
  }
  return true;
}

absl::Status ResolveOutputs(std::vector<ValueInfo>& outputs, const PassState& s) {
  for (ValueInfo& out : outputs) {
    auto it = s.types.find(out.name);
    if (it == s.types.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph output '", out.name, "' is not produced by any node"));
    }
    if (!Compatible(out.type, it->second)) {
      return absl::InvalidArgumentError(absl::StrCat("graph output '", out.name, "' is declared ",
                                                     TypeString(out.type), " but computes ",
                                                     TypeString(it->second)));
    }
    out.type = it->second;
  }
  return absl::OkStatus();
}

int64_t FoldBudget(const Graph& graph, const FoldOptions& options) {
  if (options.max_folded_bytes >= 0) return options.max_folded_bytes;
  int64_t model_bytes = 0;
  for (const auto& [name, t] : graph.initializers)
    model_bytes += static_cast<int64_t>(t.byte_size());
  return std::max(kFoldFloorBytes, model_bytes);
}

absl::Status RunPass(Graph& graph, const FoldOptions& options) {
  PassState s;
  s.keep_weights = options.keep_weights;
  graph.half_partials = options.half_partials;
  s.half_partials = options.half_partials;
  s.max_folded_bytes = FoldBudget(graph, options);
  IPUPOD_RETURN_IF_ERROR(SeedState(graph, s));
  for (const Node& node : graph.nodes) {
    if (options.cancelled && options.cancelled()) {
      return absl::CancelledError("cancelled while importing the model");
    }
    IPUPOD_RETURN_IF_ERROR(kernels::CheckInterrupt());
    IPUPOD_RETURN_IF_ERROR(CheckNodeSignature(node, graph.opset));
    IPUPOD_RETURN_IF_ERROR(NodeError(node, VisitNode(node, graph.opset, s)));
  }
  std::vector<ValueInfo> outputs = graph.outputs;
  IPUPOD_RETURN_IF_ERROR(ResolveOutputs(outputs, s));
  // Commit: nothing below can fail.
  const std::set<std::string> live = RemoveDeadValues(graph, s);
  EraseDead(graph.initializers, live);
  EraseDead(s.folded, live);
  graph.initializers.merge(s.folded);
  graph.outputs = std::move(outputs);
  graph.nodes = std::move(s.kept);
  graph.value_types = std::move(s.types);
  return absl::OkStatus();
}

}  // namespace

bool IsWeightLike(const Tensor& initializer) {
  return IsFloat(initializer.dtype()) && !initializer.shape().empty();
}

bool IsVariable(const ModuleState& state, const std::string& name, const Tensor& initializer) {
  if (IsWeightLike(initializer)) return true;
  return IsFloat(initializer.dtype()) &&
         (state.parameters.contains(name) || state.buffers.contains(name));
}

absl::Status InferShapesAndFold(Graph& graph, const FoldOptions& options) {
  try {
    return RunPass(graph, options);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory while folding constants");
  }
}

}  // namespace ipupod::graph
