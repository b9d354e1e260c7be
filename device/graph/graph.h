// File: device/graph/graph.h
//
// graph::Graph: ipupod's static-shape model IR, what ImportOnnx produces and
// graph::Interpreter (and later the IPU compiler) consumes. A Graph is a
// plain value: a list of nodes in topological order, the constants they read
// (initializers: weights and folded values), the runtime inputs and outputs,
// and - once InferShapesAndFold (device/graph/shape_inference.h) has run - the
// dtype and static shape of every value.
//
// Values are named by strings (ONNX SSA names). An empty name in a node's
// inputs or outputs marks an omitted optional operand.
//
// Each node keeps its ONNX name and the torch module path derived from it
// (`/h.3/attn/MatMul` -> "h.3.attn"), which is what pipeline placement by
// module name or layer index will key on.
//
// Thread safety: plain data; const access from many threads is safe.
#ifndef IPUPOD_GRAPH_GRAPH_H_
#define IPUPOD_GRAPH_GRAPH_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/tensor/tensor.h"

namespace ipupod::graph {

// The IR's values are the tensor library's value type (common/tensor/tensor.h);
// graph, kernel-facing and interpreter code names them unqualified.
using tensor::CheckedNumElements;
using tensor::DType;
using tensor::DTypeName;
using tensor::DTypeOf;
using tensor::DTypeSize;
using tensor::Float16;
using tensor::IsFloat;
using tensor::kTensorBytesMax;
using tensor::RoundThroughFloat16;
using tensor::Shape;
using tensor::Tensor;
using tensor::ToFloat16;
using tensor::ToFloat32;

// Supported ONNX default-domain opsets. torch 1.13 exports 13 or 14 by
// default and 17 for LayerNormalization.
inline constexpr int64_t kOpsetMin = 7;
inline constexpr int64_t kOpsetMax = 17;

struct TensorType {
  DType dtype = DType::kFloat32;
  Shape shape;  // -1 marks a dim not yet known (graph outputs before inference)

  bool operator==(const TensorType& other) const = default;
};

// "float32[2, 8, 32]".
std::string TypeString(const TensorType& type);

struct ValueInfo {
  std::string name;
  TensorType type;
};

using AttributeValue = std::variant<int64_t, float, std::string, std::vector<int64_t>,
                                    std::vector<float>, std::vector<std::string>, Tensor>;

class CustomOp;  // device/graph/custom_ops.h

struct Node {
  std::string name;  // unique within the graph; "<op>_<index>" if the model had none
  // ONNX op type in the default domain, e.g. "MatMul"; "ai.graphcore.<Op>" for PopTorch's
  // ops; "<domain>::<Op>" for a custom op (device/graph/custom_ops.h)
  std::string op_type;
  std::string module_path;  // torch module path, e.g. "h.0.mlp.0"; "" at the root
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::map<std::string, AttributeValue> attributes;
  // A custom op's implementation (ImportOnnx binds it); null for every other node.
  std::shared_ptr<const CustomOp> custom_op;

  const AttributeValue* FindAttribute(absl::string_view attr) const;
};

// The module state a front end declares in the model's ONNX metadata_props
// (ipupod.poptorch writes it; docs/executable-format.md): which initializers
// are the module's parameters and buffers, by their PyTorch names, and which
// PyTorch names are one tensor with an initializer (tied weights, e.g. GPT-2's
// LM head and its token embedding). Each value is one name per line;
// aliases are "alias=initializer" lines. A model without
// ipupod.parameters has declared == false and is read by the older rules
// (float initializers of rank >= 1 are weights and are trained); buffers
// and aliases it has still count (the compiler infers them for a torch
// export: device/compiler/onnx_state.h).
inline constexpr char kParametersMetadataKey[] = "ipupod.parameters";
inline constexpr char kBuffersMetadataKey[] = "ipupod.buffers";
inline constexpr char kAliasesMetadataKey[] = "ipupod.aliases";

struct ModuleState {
  bool declared = false;
  std::set<std::string> parameters;
  std::set<std::string> buffers;
  std::map<std::string, std::string> aliases;  // PyTorch name -> initializer
};

struct Graph {
  int64_t opset = 0;                           // default-domain opset the model was exported with
  std::string producer;                        // e.g. "pytorch 1.13.0"
  ModuleState module_state;                    // from the model's metadata_props
  std::vector<ValueInfo> inputs;               // runtime inputs (never initializers), model order
  std::vector<ValueInfo> outputs;              // model outputs, model order
  std::map<std::string, Tensor> initializers;  // constants by value name
  std::vector<Node> nodes;                     // topological order
  std::map<std::string, TensorType> value_types;  // every value, after inference
  // MatMul, Gemm and Conv of float16 operands accumulate in float16 rather
  // than float32 (IPUConfig enable_half_partials; device/graph/ops.h, RunOp). Set
  // by whoever imports the model for a config; no effect on float32 models.
  bool half_partials = false;

  // Type of a value, or nullptr if unknown.
  const TensorType* FindType(absl::string_view value) const;
  const Tensor* FindInitializer(absl::string_view value) const;
  // Total bytes of all initializers.
  int64_t InitializerBytes() const;
};

// The torch module path encoded in an ONNX node name written by
// torch.onnx.export: "/h.0/mlp/mlp.0/MatMul" -> "h.0.mlp.0",
// "/layers.0/fc/Gemm" -> "layers.0.fc", "/Add" or "Identity_3" -> "".
// torch names each scope by the module's attribute name plus trailing
// numeric atoms ("mlp.0" for h.0.mlp.0), so a scope that repeats its
// parent's name with a numeric suffix is a child of a called container.
// Scopes ipupod.poptorch pushes while exporting (a block, an Attribute:
// "/transformer/__ipupod_block_3/h.0/attn/MatMul") are not modules and are
// skipped: that node's path is "transformer.h.0.attn".
// Limitation: torch renames the second call of a shared module "fc_1",
// which cannot be told apart from a module named fc_1; it stays "fc_1".
std::string ModulePathFromNodeName(absl::string_view node_name);

}  // namespace ipupod::graph

#endif  // IPUPOD_GRAPH_GRAPH_H_
