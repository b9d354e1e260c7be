// File: device/compiler/onnx_annotations.h
//
// PopART's placement attributes on ONNX nodes: `__ipu_number` (the virtual
// graph, i.e. the IPU within a replica), `__pipeline_stage` and
// `__execution_phase` (the phase of PopTorch's phased strategies), all INT.
// graph::ImportOnnx rejects attributes an op does not define, so the
// compiler reads these first and strips them: ExtractPlacementAttributes
// returns the annotations by node name plus model bytes ImportOnnx accepts.
// When annotations are stripped, every node is also given the name
// ImportOnnx would give it ("<op>_<index>" for unnamed nodes, "_<index>"
// appended to repeats), so the names key the imported graph's nodes.
//
// Thread safety: pure functions.
// Errors: INVALID_ARGUMENT for an annotation that is not an INT or is
// negative (naming node and attribute). Bytes that do not parse as an
// ONNX model are returned unchanged, for ImportOnnx to report.
#ifndef IPUPOD_COMPILER_ONNX_ANNOTATIONS_H_
#define IPUPOD_COMPILER_ONNX_ANNOTATIONS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ipupod::compiler {

inline constexpr absl::string_view kIpuNumberAttribute = "__ipu_number";
inline constexpr absl::string_view kPipelineStageAttribute = "__pipeline_stage";
inline constexpr absl::string_view kExecutionPhaseAttribute = "__execution_phase";

struct NodeAnnotation {
  std::optional<int64_t> ipu = std::nullopt;
  std::optional<int64_t> stage = std::nullopt;
  std::optional<int64_t> phase = std::nullopt;
};

// By node name (as ImportOnnx names nodes).
using NodeAnnotations = std::map<std::string, NodeAnnotation>;

struct AnnotatedModel {
  std::string onnx_bytes;       // the input unchanged if it had no annotations
  NodeAnnotations annotations;  // empty if none
};

absl::StatusOr<AnnotatedModel> ExtractPlacementAttributes(absl::string_view onnx_bytes);

}  // namespace ipupod::compiler

#endif  // IPUPOD_COMPILER_ONNX_ANNOTATIONS_H_
