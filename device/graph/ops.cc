#include "device/graph/ops.h"

#include <algorithm>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "device/graph/custom_ops.h"

namespace ipupod::graph {
namespace {

using Registry = absl::flat_hash_map<std::string, OpDef>;

const Registry& GetRegistry() {
  static const Registry* registry = [] {
    std::vector<OpDef> defs;
    RegisterElementwiseOps(defs);
    RegisterTensorOps(defs);
    RegisterNnOps(defs);
    RegisterLossOps(defs);
    RegisterConvOps(defs);
    RegisterPoptorchOps(defs);
    auto* r = new Registry();
    for (OpDef& d : defs) {
      std::string key = d.op_type;
      r->emplace(std::move(key), std::move(d));
    }
    return r;
  }();
  return *registry;
}

absl::Status AttrTypeError(absl::string_view attr, absl::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat("attribute '", attr, "' must be ", want));
}

}  // namespace

absl::StatusOr<const Tensor*> OpContext::Constant(size_t i, absl::string_view role) const {
  if (!has(i))
    return absl::InvalidArgumentError(absl::StrCat("input ", i, " (", role, ") is missing"));
  if (values[i] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input ", i, " (", role, ", value '", node.inputs[i],
        "') must be a constant after folding; ipupod compiles static shapes only - export "
        "without dynamic_axes"));
  }
  return values[i];
}

absl::StatusOr<std::vector<int64_t>> OpContext::ConstantInts(size_t i,
                                                             absl::string_view role) const {
  IPUPOD_ASSIGN_OR_RETURN(const Tensor* t, Constant(i, role));
  if (t->dtype() != DType::kInt64 && t->dtype() != DType::kInt32) {
    return absl::InvalidArgumentError(
        absl::StrCat("input ", i, " (", role, ") must be int64, got ", DTypeName(t->dtype())));
  }
  std::vector<int64_t> out(static_cast<size_t>(t->num_elements()));
  for (int64_t k = 0; k < t->num_elements(); ++k) out[k] = t->IntAt(k);
  return out;
}

absl::StatusOr<float> OpContext::ConstantScalar(size_t i, absl::string_view role) const {
  IPUPOD_ASSIGN_OR_RETURN(const Tensor* t, Constant(i, role));
  if (t->num_elements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("input ", i, " (", role, ") must hold one element"));
  }
  if (t->dtype() == DType::kFloat32) return t->data<float>()[0];
  if (t->dtype() == DType::kFloat16) return ToFloat32(t->data<Float16>()[0]);
  return static_cast<float>(t->IntAt(0));
}

bool OpContext::HasAttr(absl::string_view attr) const {
  return node.FindAttribute(attr) != nullptr;
}

absl::StatusOr<int64_t> OpContext::Int(absl::string_view attr, int64_t fallback) const {
  const AttributeValue* v = node.FindAttribute(attr);
  if (v == nullptr) return fallback;
  if (const auto* i = std::get_if<int64_t>(v)) return *i;
  return AttrTypeError(attr, "an int");
}

absl::StatusOr<int64_t> OpContext::RequiredInt(absl::string_view attr) const {
  if (!HasAttr(attr)) {
    return absl::InvalidArgumentError(absl::StrCat("required attribute '", attr, "' is missing"));
  }
  return Int(attr, 0);
}

absl::StatusOr<float> OpContext::Float(absl::string_view attr, float fallback) const {
  const AttributeValue* v = node.FindAttribute(attr);
  if (v == nullptr) return fallback;
  if (const auto* f = std::get_if<float>(v)) return *f;
  return AttrTypeError(attr, "a float");
}

absl::StatusOr<std::optional<std::vector<int64_t>>> OpContext::Ints(absl::string_view attr) const {
  const AttributeValue* v = node.FindAttribute(attr);
  if (v == nullptr) return std::optional<std::vector<int64_t>>();
  if (const auto* i = std::get_if<std::vector<int64_t>>(v)) return std::optional(*i);
  return AttrTypeError(attr, "a list of ints");
}

absl::StatusOr<std::string> OpContext::String(absl::string_view attr,
                                              absl::string_view fallback) const {
  const AttributeValue* v = node.FindAttribute(attr);
  if (v == nullptr) return std::string(fallback);
  if (const auto* text = std::get_if<std::string>(v)) return *text;
  return AttrTypeError(attr, "a string");
}

absl::StatusOr<const Tensor*> OpContext::TensorAttr(absl::string_view attr) const {
  const AttributeValue* v = node.FindAttribute(attr);
  if (v == nullptr) return nullptr;
  if (const auto* t = std::get_if<Tensor>(v)) return t;
  return AttrTypeError(attr, "a tensor");
}

OpDef MakeOpDef(std::string op, int min_in, int max_in, InferFn infer, RunFn run, FlopsFn flops,
                std::vector<std::string> attrs) {
  OpDef d;
  d.op_type = std::move(op);
  d.min_inputs = min_in;
  d.max_inputs = max_in;
  d.attributes = std::move(attrs);
  d.infer = infer;
  d.run = run;
  d.flops = flops;
  return d;
}

const OpDef* FindOp(absl::string_view op_type) {
  const Registry& r = GetRegistry();
  auto it = r.find(op_type);
  return it == r.end() ? nullptr : &it->second;
}

const OpDef* FindNodeOp(const Node& node) {
  return node.custom_op != nullptr ? &CustomOpDef() : FindOp(node.op_type);
}

std::vector<std::string> SupportedOps() {
  std::vector<std::string> ops;
  for (const auto& [name, def] : GetRegistry()) ops.push_back(name);
  std::sort(ops.begin(), ops.end());
  return ops;
}

bool IsPlanningAttribute(absl::string_view op_type, absl::string_view attr) {
  if (attr == kRecomputeCheckpoint) return true;
  if (attr == kAvailableMemoryProportion) {
    return op_type == "MatMul" || op_type == "Gemm" || op_type == "Conv" || op_type == "Gather";
  }
  return op_type == "MatMul" && (attr == kSerializationMode || attr == kSerializationFactor);
}

bool IsPopartBuilderAttribute(absl::string_view attr) {
  // Placement is the compiler's to read and strip: one that reaches a graph went unread.
  if (attr == "__ipu_number" || attr == "__pipeline_stage") return false;
  return attr.size() > 2 && absl::StartsWith(attr, "__");
}

absl::Status CheckNodeSignature(const Node& node, int64_t opset) {
  if (node.custom_op != nullptr) return NodeError(node, node.custom_op->CheckNode(node));
  const OpDef* def = FindOp(node.op_type);
  if (def == nullptr) {
    return NodeError(node, absl::InvalidArgumentError(absl::StrCat(
                               "op '", node.op_type, "' is not supported; supported ops: ",
                               absl::StrJoin(SupportedOps(), ", "))));
  }
  if (opset < def->since_opset) {
    return NodeError(node, absl::InvalidArgumentError(absl::StrCat(
                               "op needs opset >= ", def->since_opset, ", model has ", opset)));
  }
  const int n_in = static_cast<int>(node.inputs.size());
  const int n_out = static_cast<int>(node.outputs.size());
  if (n_in < def->min_inputs || n_in > def->max_inputs || n_out < def->min_outputs ||
      n_out > def->max_outputs) {
    return NodeError(node, absl::InvalidArgumentError(absl::StrCat(
                               "has ", n_in, " inputs and ", n_out, " outputs; expected ",
                               def->min_inputs, "..", def->max_inputs, " inputs and ",
                               def->min_outputs, "..", def->max_outputs, " outputs")));
  }
  for (int i = 0; i < def->min_inputs; ++i) {
    if (node.inputs[i].empty()) {
      return NodeError(
          node, absl::InvalidArgumentError(absl::StrCat("required input ", i, " is omitted")));
    }
  }
  for (const auto& [attr, value] : node.attributes) {
    if (IsPlanningAttribute(node.op_type, attr) || IsPopartBuilderAttribute(attr)) continue;
    if (std::find(def->attributes.begin(), def->attributes.end(), attr) == def->attributes.end()) {
      return NodeError(node, absl::InvalidArgumentError(
                                 absl::StrCat("attribute '", attr, "' is not supported")));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> CreateOutputs(const OpDef& def,
                                                  absl::Span<const TensorType> types) {
  std::vector<Tensor> outputs;
  outputs.reserve(types.size());
  for (const TensorType& t : types) {
    IPUPOD_ASSIGN_OR_RETURN(Tensor tensor, def.writes_every_output
                                               ? Tensor::CreateForOverwrite(t.dtype, t.shape)
                                               : Tensor::Create(t.dtype, t.shape));
    outputs.push_back(std::move(tensor));
  }
  return outputs;
}

absl::Status NodeError(const Node& node, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(node.op_type, " node '", node.name, "': ", status.message()));
}

absl::Status RequireDType(absl::string_view what, DType dtype,
                          std::initializer_list<DType> allowed) {
  for (DType d : allowed) {
    if (d == dtype) return absl::OkStatus();
  }
  std::vector<std::string> names;
  for (DType d : allowed) names.emplace_back(DTypeName(d));
  return absl::InvalidArgumentError(absl::StrCat(what, " has dtype ", DTypeName(dtype),
                                                 "; supported: ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<DType> DTypeFromOnnxCode(int64_t code) {
  // Codes from onnx.proto TensorProto.DataType.
  switch (code) {
    case 1:
      return DType::kFloat32;
    case 6:
      return DType::kInt32;
    case 7:
      return DType::kInt64;
    case 9:
      return DType::kBool;
    case 10:
      return DType::kFloat16;
    default:
      break;
  }
  static constexpr const char* kNames[] = {"UNDEFINED",  "FLOAT",   "UINT8",  "INT8",   "UINT16",
                                           "INT16",      "INT32",   "INT64",  "STRING", "BOOL",
                                           "FLOAT16",    "DOUBLE",  "UINT32", "UINT64", "COMPLEX64",
                                           "COMPLEX128", "BFLOAT16"};
  const char* name = code >= 0 && code < 17 ? kNames[code] : "unknown";
  return absl::InvalidArgumentError(
      absl::StrCat("element type ", name, " (", code,
                   ") is not supported; ipupod handles FLOAT, FLOAT16, "
                   "INT64, INT32 and BOOL"));
}

}  // namespace ipupod::graph
