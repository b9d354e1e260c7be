// File: device/graph/onnx_import.h
//
// ONNX -> graph::Graph. Reads a serialized onnx.ModelProto (what
// torch.onnx.export writes), converts it to the IR and runs
// InferShapesAndFold, so the result has static shapes everywhere, no
// constant-only subgraphs, and only supported ops.
//
// Accepted: default-domain opsets kOpsetMin..kOpsetMax (7..17), IR version
// >= 3, float32/int64/int32/bool tensors, graph inputs with fully static
// shapes. Initializers also listed as graph inputs (keep_initializers_as_inputs)
// are treated as constants.
//
// Rejected with INVALID_ARGUMENT (message names the problem and what to do):
// bytes that are not a ModelProto (garbage, truncated files), a missing or
// unsupported opset, unsupported ops (PopTorch's ops in kGraphcoreDomain are
// imported with op type "ai.graphcore.<Op>", device/graph/ops_poptorch.cc), custom
// domains without a `custom_ops` resolver (with one, whatever it returns:
// device/graph/custom_ops.h; custom nodes get op type "<domain>::<Op>"), or
// attributes (naming op and node), symbolic/unknown input dims
// (dynamic_axes), external-data or sparse initializers, unsupported element
// types, subgraph attributes (If/Loop), and anything shape inference rejects.
// ImportOnnxFile adds NOT_FOUND for a missing file.
//
// Thread safety: pure functions.
#ifndef IPUPOD_GRAPH_ONNX_IMPORT_H_
#define IPUPOD_GRAPH_ONNX_IMPORT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/graph/custom_ops.h"
#include "device/graph/graph.h"
#include "device/graph/shape_inference.h"

namespace ipupod::graph {

// The domain PopART gives PopTorch's ops (IpuPrint, Nop, DynamicSlice, ...).
inline constexpr char kGraphcoreDomain[] = "ai.graphcore";

// Largest serialized model accepted: protobuf's 2 GiB message limit.
inline constexpr int64_t kOnnxBytesMax = (int64_t{1} << 31) - 1;

// `fold` goes to InferShapesAndFold (training imports keep weights);
// `custom_ops` resolves the model's custom domains (null: refused).
absl::StatusOr<Graph> ImportOnnx(absl::string_view bytes, const FoldOptions& fold = {},
                                 const CustomOpResolver* custom_ops = nullptr);
absl::StatusOr<Graph> ImportOnnxFile(absl::string_view path, const FoldOptions& fold = {},
                                     const CustomOpResolver* custom_ops = nullptr);

}  // namespace ipupod::graph

#endif  // IPUPOD_GRAPH_ONNX_IMPORT_H_
