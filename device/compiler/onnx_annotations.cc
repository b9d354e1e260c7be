#include "device/compiler/onnx_annotations.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/graph/onnx_import.h"
#include "onnx/onnx_pb.h"

namespace ipupod::compiler {
namespace {

bool IsPlacementAttribute(const onnx::AttributeProto& a) {
  return a.name() == kIpuNumberAttribute || a.name() == kPipelineStageAttribute ||
         a.name() == kExecutionPhaseAttribute;
}

bool HasAnnotations(const onnx::GraphProto& g) {
  for (const onnx::NodeProto& node : g.node()) {
    for (const onnx::AttributeProto& a : node.attribute()) {
      if (IsPlacementAttribute(a)) return true;
    }
  }
  return false;
}

absl::StatusOr<int64_t> AnnotationValue(const std::string& node, const onnx::AttributeProto& a) {
  if (a.type() != onnx::AttributeProto::INT || a.i() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node '", node, "': attribute '", a.name(),
        "' must be a non-negative INT (PopART's IPU, pipeline stage or execution phase number)"));
  }
  return a.i();
}

// Reads and removes the node's placement attributes.
absl::StatusOr<NodeAnnotation> TakeAnnotation(const std::string& name, onnx::NodeProto& node) {
  NodeAnnotation annotation;
  auto* attributes = node.mutable_attribute();
  for (int i = attributes->size() - 1; i >= 0; --i) {
    const onnx::AttributeProto& a = attributes->Get(i);
    if (!IsPlacementAttribute(a)) continue;
    IPUPOD_ASSIGN_OR_RETURN(int64_t value, AnnotationValue(name, a));
    if (a.name() == kIpuNumberAttribute) {
      annotation.ipu = value;
    } else if (a.name() == kPipelineStageAttribute) {
      annotation.stage = value;
    } else {
      annotation.phase = value;
    }
    attributes->DeleteSubrange(i, 1);
  }
  return annotation;
}

}  // namespace

absl::StatusOr<AnnotatedModel> ExtractPlacementAttributes(absl::string_view onnx_bytes) {
  AnnotatedModel out;
  onnx::ModelProto model;
  if (static_cast<int64_t>(onnx_bytes.size()) > graph::kOnnxBytesMax ||
      !model.ParseFromArray(onnx_bytes.data(), static_cast<int>(onnx_bytes.size())) ||
      !HasAnnotations(model.graph())) {
    out.onnx_bytes = std::string(onnx_bytes);
    return out;
  }
  std::set<std::string> names;
  auto* nodes = model.mutable_graph()->mutable_node();
  for (int i = 0; i < nodes->size(); ++i) {
    onnx::NodeProto& node = *nodes->Mutable(i);
    // The same naming as graph::ImportOnnx.
    std::string name = node.name().empty() ? absl::StrCat(node.op_type(), "_", i) : node.name();
    if (!names.insert(name).second) name = absl::StrCat(name, "_", i);
    node.set_name(name);
    IPUPOD_ASSIGN_OR_RETURN(NodeAnnotation annotation, TakeAnnotation(name, node));
    if (annotation.ipu.has_value() || annotation.stage.has_value() ||
        annotation.phase.has_value()) {
      out.annotations[name] = annotation;
    }
  }
  if (!model.SerializeToString(&out.onnx_bytes)) {
    return absl::InvalidArgumentError(
        "cannot re-serialize the ONNX model after reading its "
        "__ipu_number/__pipeline_stage/__execution_phase attributes");
  }
  return out;
}

}  // namespace ipupod::compiler
