#include "device/compiler/onnx_state.h"

#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "device/graph/graph.h"
#include "device/graph/onnx_import.h"
#include "onnx/onnx_pb.h"

namespace ipupod::compiler {
namespace {

bool IsFloatProto(const onnx::TensorProto& t) {
  return t.data_type() == onnx::TensorProto::FLOAT || t.data_type() == onnx::TensorProto::FLOAT16;
}

bool DeclaresModuleState(const onnx::ModelProto& model) {
  for (const onnx::StringStringEntryProto& entry : model.metadata_props()) {
    if (entry.key() == graph::kParametersMetadataKey) return true;
  }
  return false;
}

// Identity nodes reading a float initializer, their outputs made initializers
// of their own (copies); returns the names.
std::vector<std::string> SplitMergedInitializers(onnx::GraphProto& g) {
  std::map<std::string, int> initializer;
  std::set<std::string> taken;
  for (int i = 0; i < g.initializer_size(); ++i) {
    initializer[g.initializer(i).name()] = i;
    taken.insert(g.initializer(i).name());
  }
  std::vector<std::string> split;
  auto* nodes = g.mutable_node();
  for (int i = nodes->size() - 1; i >= 0; --i) {
    const onnx::NodeProto& node = nodes->Get(i);
    if (node.op_type() != "Identity" || !node.domain().empty() || node.input_size() != 1 ||
        node.output_size() != 1 || node.output(0).empty() || taken.contains(node.output(0))) {
      continue;
    }
    auto source = initializer.find(node.input(0));
    if (source == initializer.end() || !IsFloatProto(g.initializer(source->second))) continue;
    onnx::TensorProto* copy = g.add_initializer();
    *copy = g.initializer(source->second);
    copy->set_name(node.output(0));
    taken.insert(node.output(0));
    split.push_back(node.output(0));
    nodes->DeleteSubrange(i, 1);
  }
  return split;
}

// "onnx::MatMul_45 (read by /fc/MatMul)" for each float initializer torch's
// constant folding made.
std::vector<std::string> FoldedInitializers(const onnx::GraphProto& g) {
  std::map<std::string, std::string> reader;
  for (const onnx::NodeProto& node : g.node()) {
    for (const std::string& in : node.input()) reader.emplace(in, node.name());
  }
  std::vector<std::string> folded;
  for (const onnx::TensorProto& t : g.initializer()) {
    if (!IsFloatProto(t) || !absl::StartsWith(t.name(), "onnx::")) continue;
    auto it = reader.find(t.name());
    folded.push_back(it == reader.end() || it->second.empty()
                         ? t.name()
                         : absl::StrCat(t.name(), " (read by ", it->second, ")"));
  }
  return folded;
}

bool ExportedByTorch(const onnx::ModelProto& model) { return model.producer_name() == "pytorch"; }

// The torch module a node belongs to ("lm_head" for "/lm_head/MatMul").
std::string ModuleOf(const onnx::NodeProto& node) {
  return graph::ModulePathFromNodeName(node.name());
}

// The rank-2 float initializer a node reads as a Linear's or Embedding's
// weight (a Transpose's input, a Gemm's B with transB=1, a Gather's table),
// or "".
std::string WeightRead(const onnx::NodeProto& node, const std::set<std::string>& tables) {
  int64_t trans_b = 0;
  for (const onnx::AttributeProto& a : node.attribute()) {
    if (a.name() == "transB") trans_b = a.i();
  }
  const bool reads = (node.op_type() == "Transpose" && node.input_size() == 1) ||
                     (node.op_type() == "Gemm" && node.input_size() >= 2 && trans_b == 1) ||
                     (node.op_type() == "Gather" && node.input_size() == 2);
  if (!reads || !node.domain().empty()) return "";
  const std::string& weight = node.input(node.op_type() == "Gemm" ? 1 : 0);
  return tables.contains(weight) ? weight : "";
}

// Tied weights: a Linear or Embedding in module P that reads another
// module's weight W has the PyTorch name P.weight for W ("lm_head.weight=
// transformer.wte.weight"), when P.weight is no initializer of its own.
std::vector<std::string> TiedNames(const onnx::GraphProto& g) {
  std::set<std::string> initializers, tables;
  for (const onnx::TensorProto& t : g.initializer()) {
    initializers.insert(t.name());
    if (IsFloatProto(t) && t.dims_size() == 2) tables.insert(t.name());
  }
  std::map<std::string, std::string> aliases;
  for (const onnx::NodeProto& node : g.node()) {
    const std::string weight = WeightRead(node, tables);
    const std::string module = ModuleOf(node);
    if (weight.empty() || module.empty()) continue;
    const std::string name = absl::StrCat(module, ".weight");
    if (name != weight && !initializers.contains(name)) aliases.emplace(name, weight);
  }
  std::vector<std::string> lines;
  for (const auto& [alias, weight] : aliases) lines.push_back(absl::StrCat(alias, "=", weight));
  return lines;
}

// Float scalars torch named as module state (not "onnx::..." constants).
std::vector<std::string> ScalarState(const onnx::GraphProto& g) {
  std::vector<std::string> names;
  for (const onnx::TensorProto& t : g.initializer()) {
    if (IsFloatProto(t) && t.dims_size() == 0 && !absl::StartsWith(t.name(), "onnx::")) {
      names.push_back(t.name());
    }
  }
  return names;
}

// Writes what a torch export without a declared module state implies of one
// (see the header); true if it wrote anything.
bool InferTorchState(onnx::ModelProto& model) {
  if (!ExportedByTorch(model) || DeclaresModuleState(model)) return false;
  bool wrote = false;
  for (const auto& [key, lines] :
       {std::pair(graph::kAliasesMetadataKey, TiedNames(model.graph())),
        std::pair(graph::kBuffersMetadataKey, ScalarState(model.graph()))}) {
    if (lines.empty()) continue;
    onnx::StringStringEntryProto* entry = model.add_metadata_props();
    entry->set_key(key);
    entry->set_value(absl::StrJoin(lines, "\n"));
    wrote = true;
  }
  return wrote;
}

}  // namespace

absl::StatusOr<WritableModel> KeepModuleStateWritable(absl::string_view onnx_bytes) {
  WritableModel out;
  onnx::ModelProto model;
  if (static_cast<int64_t>(onnx_bytes.size()) > graph::kOnnxBytesMax ||
      !model.ParseFromArray(onnx_bytes.data(), static_cast<int>(onnx_bytes.size()))) {
    out.onnx_bytes = std::string(onnx_bytes);
    return out;
  }
  const std::vector<std::string> folded = FoldedInitializers(model.graph());
  if (!folded.empty() && !DeclaresModuleState(model)) {
    out.warnings.push_back(absl::StrCat(
        folded.size(),
        " weight(s) of this model were computed by the exporter's constant "
        "folding and lost their PyTorch names: ",
        absl::StrJoin(folded, ", "),
        ". They run as exported, but a weights file keyed by PyTorch names (--weights, "
        "copyWeightsToDevice) cannot write them; export with torch.onnx.export(..., "
        "do_constant_folding=False) and the model in eval mode, or use ipupod.poptorch, to "
        "keep every parameter writable"));
  }
  out.split = SplitMergedInitializers(*model.mutable_graph());
  const bool inferred = InferTorchState(model);
  if (out.split.empty() && !inferred) {
    out.onnx_bytes = std::string(onnx_bytes);
    return out;
  }
  if (!model.SerializeToString(&out.onnx_bytes)) {
    return absl::InternalError("cannot re-serialize the ONNX model after splitting its weights");
  }
  return out;
}

}  // namespace ipupod::compiler
