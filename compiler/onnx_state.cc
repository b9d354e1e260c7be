#include "compiler/onnx_state.h"

#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/graph.h"
#include "graph/onnx_import.h"
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
  if (out.split.empty()) {
    out.onnx_bytes = std::string(onnx_bytes);
    return out;
  }
  if (!model.SerializeToString(&out.onnx_bytes)) {
    return absl::InternalError("cannot re-serialize the ONNX model after splitting its weights");
  }
  return out;
}

}  // namespace ipupod::compiler
