// File: device/graph/custom_ops.h
//
// Custom ops as the graph sees them (PopTorch user guide 4.9): an ONNX node in a domain
// other than ONNX's and PopTorch's (ai.graphcore) - "com.acme" "Cube" - whose shapes,
// values and gradient come from a library the user names, not from ipupod's op registry.
// The graph knows only these interfaces; device/customop/ implements them by running the
// library in a helper process (device/customop/library_registry.h), and ipupodd hands its
// resolver to the compiler and the runtime. Without a resolver (ipupod compile on a
// user's machine) a custom domain is refused.
//
// ImportOnnx asks the resolver once per model for every custom domain it uses
// (CustomDomainUse: the model's version of the domain, from its opset_import, and the
// library the model names for it in its metadata, kCustomOpLibrariesMetadataKey) and
// binds each custom node to its CustomOp (Node::custom_op). From then on a custom node is
// an op like the others: device/graph/ops.h's CustomOpDef calls the bound op's Infer for shapes
// and Compute to run; custom nodes are never folded or prepared ahead (they are what the
// user wants run); training calls Gradient (device/training/grad_rules.h), and an op without one
// on the path from a trained weight to the loss fails the compile.
//
// Thread safety: a CustomOp is shared by every copy of its graph and called from any
// thread (Interpreter::Run is const and concurrent): implementations are thread-safe.
// Errors: as the implementation documents (device/customop/custom_op_library.h): INVALID_ARGUMENT
// for what the library refused (its message), INTERNAL when it misbehaved (crashed, hung,
// wrote past its outputs, returned a malformed result), FAILED_PRECONDITION when it can no
// longer be run; the resolver adds PERMISSION_DENIED for a library outside what the server
// allows and NOT_FOUND for one that does not exist.
#ifndef IPUPOD_GRAPH_CUSTOM_OPS_H_
#define IPUPOD_GRAPH_CUSTOM_OPS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tensor/tensor.h"
#include "device/graph/graph.h"

namespace ipupod::graph {

// The model metadata (onnx ModelProto.metadata_props) naming the library of each custom
// domain: one "domain=path" per line (ipupod.poptorch writes it; docs/python.md).
inline constexpr char kCustomOpLibrariesMetadataKey[] = "ipupod.custom_op_libraries";

// Most inputs, and most outputs, a custom node may have.
inline constexpr int kCustomOperandsMax = 64;

// "com.acme::Cube": a custom node's op_type, and how messages name the op.
std::string CustomOpName(absl::string_view domain, absl::string_view op);

// True for a domain ImportOnnx hands to the resolver: neither ONNX's ("", "ai.onnx") nor
// PopTorch's (ai.graphcore).
bool IsCustomDomain(absl::string_view domain);

class CustomOp {
 public:
  virtual ~CustomOp() = default;

  // "com.acme::Cube".
  virtual const std::string& name() const = 0;
  // Where the op comes from, for messages: "library /opt/ipupod/ops/libacme.so".
  virtual std::string origin() const = 0;
  // The node's operand counts and attributes against what the op declares
  // (INVALID_ARGUMENT).
  virtual absl::Status CheckNode(const Node& node) const = 0;
  // Output types from the node's attributes and its inputs' types.
  virtual absl::StatusOr<std::vector<TensorType>> Infer(
      const Node& node, absl::Span<const TensorType* const> inputs) const = 0;
  // Writes every output (allocated with the inferred types).
  virtual absl::Status Compute(const Node& node, absl::Span<const Tensor* const> inputs,
                               absl::Span<Tensor> outputs) const = 0;
  virtual bool has_gradient() const = 0;
  // The gradients of the inputs `wants` names (float32, each its input's shape) from the
  // forward's inputs and outputs and the gradients of the outputs (nullptr: none flows,
  // zero). `input_grads` is sized like the inputs, all empty on entry.
  virtual absl::Status Gradient(const Node& node, absl::Span<const Tensor* const> inputs,
                                absl::Span<const Tensor* const> outputs,
                                absl::Span<const Tensor* const> output_grads,
                                const std::vector<bool>& wants,
                                std::vector<std::optional<Tensor>>& input_grads) const = 0;
};

// One custom domain a model uses.
struct CustomDomainUse {
  std::string domain;
  int64_t version = 1;        // the model's opset_import of the domain (1 when it has none)
  std::string library;        // the path the model's metadata names; "" when none
  std::set<std::string> ops;  // the op types of its nodes
};

// Custom ops by CustomOpName.
using CustomOpMap = std::map<std::string, std::shared_ptr<const CustomOp>>;

class CustomOpResolver {
 public:
  virtual ~CustomOpResolver() = default;
  // Every op of `uses`, ready to run, or why not. REQUIRES: uses is not empty.
  virtual absl::StatusOr<CustomOpMap> Resolve(const std::vector<CustomDomainUse>& uses) const = 0;
};

}  // namespace ipupod::graph

#endif  // IPUPOD_GRAPH_CUSTOM_OPS_H_
