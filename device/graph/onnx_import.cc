#include "device/graph/onnx_import.h"

#include <bit>
#include <fstream>
#include <new>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "device/graph/custom_ops.h"
#include "device/graph/ops.h"
#include "device/graph/shape_inference.h"
#include "device/kernels/shape_util.h"
#include "onnx/onnx_pb.h"

namespace ipupod::graph {
namespace {

static_assert(std::endian::native == std::endian::little,
              "ONNX raw_data is little-endian; ipupod assumes a little-endian host");

absl::Status Invalid(absl::string_view what, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", message));
}

// Copies typed repeated fields (float_data, int64_data, int32_data).
template <typename T, typename Field>
absl::StatusOr<Tensor> FromTypedField(DType dtype, Shape shape, const Field& field) {
  std::vector<T> values(field.begin(), field.end());
  return Tensor::FromBytes(
      dtype, std::move(shape),
      absl::string_view(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T)));
}

absl::StatusOr<Tensor> BoolFromInt32Field(Shape shape,
                                          const google::protobuf::RepeatedField<int32_t>& field) {
  std::string bytes;
  for (int32_t v : field) bytes.push_back(v != 0 ? 1 : 0);
  return Tensor::FromBytes(DType::kBool, std::move(shape), bytes);
}

absl::StatusOr<Tensor> TensorFromRawData(DType dtype, Shape shape, const std::string& raw) {
  if (dtype != DType::kBool) return Tensor::FromBytes(dtype, std::move(shape), raw);
  std::string bytes = raw;
  for (char& c : bytes) c = c != 0 ? 1 : 0;  // any non-zero byte is true
  return Tensor::FromBytes(dtype, std::move(shape), bytes);
}

absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& p, absl::string_view what) {
  if (p.data_location() == onnx::TensorProto::EXTERNAL || p.external_data_size() > 0) {
    return Invalid(what,
                   "stores its data externally (ONNX external data format); ipupod needs "
                   "a self-contained model - export it without external data");
  }
  if (p.has_segment()) return Invalid(what, "is segmented; segmented tensors are not supported");
  auto dtype = DTypeFromOnnxCode(p.data_type());
  if (!dtype.ok()) return Invalid(what, dtype.status().message());
  Shape shape(p.dims().begin(), p.dims().end());
  absl::StatusOr<Tensor> t;
  if (p.has_raw_data()) {
    t = TensorFromRawData(*dtype, shape, p.raw_data());
  } else if (*dtype == DType::kFloat32) {
    t = FromTypedField<float>(*dtype, shape, p.float_data());
  } else if (*dtype == DType::kInt64) {
    t = FromTypedField<int64_t>(*dtype, shape, p.int64_data());
  } else if (*dtype == DType::kInt32) {
    t = FromTypedField<int32_t>(*dtype, shape, p.int32_data());
  } else {
    t = BoolFromInt32Field(shape, p.int32_data());
  }
  if (!t.ok()) return Invalid(what, t.status().message());
  return t;
}

absl::StatusOr<AttributeValue> AttributeFromProto(const onnx::AttributeProto& a) {
  const std::string what = absl::StrCat("attribute '", a.name(), "'");
  if (!a.ref_attr_name().empty()) {
    return Invalid(what, "refers to a function attribute; model functions are not supported");
  }
  using A = onnx::AttributeProto;
  switch (a.type()) {
    case A::INT:
      return AttributeValue(int64_t{a.i()});
    case A::FLOAT:
      return AttributeValue(a.f());
    case A::STRING:
      return AttributeValue(a.s());
    case A::INTS:
      return AttributeValue(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
    case A::FLOATS:
      return AttributeValue(std::vector<float>(a.floats().begin(), a.floats().end()));
    case A::STRINGS:
      return AttributeValue(std::vector<std::string>(a.strings().begin(), a.strings().end()));
    case A::TENSOR: {
      IPUPOD_ASSIGN_OR_RETURN(Tensor t, TensorFromProto(a.t(), what));
      return AttributeValue(std::move(t));
    }
    default:
      return Invalid(what, absl::StrCat("has type ", A::AttributeType_Name(a.type()),
                                        "; subgraphs, sparse tensors and type protos are not "
                                        "supported"));
  }
}

absl::StatusOr<Node> NodeFromProto(const onnx::NodeProto& p, int index, const CustomOpMap& custom) {
  Node node;
  node.op_type = p.op_type();
  node.name = p.name().empty() ? absl::StrCat(p.op_type(), "_", index) : p.name();
  node.module_path = ModulePathFromNodeName(node.name);
  if (p.domain() == kGraphcoreDomain) {
    // PopTorch's own ops (ipupod.poptorch exports them as PopART names them); the domain
    // stays in the op type so they never collide with a default-domain op.
    node.op_type = absl::StrCat(kGraphcoreDomain, ".", p.op_type());
  } else if (IsCustomDomain(p.domain())) {
    node.op_type = CustomOpName(p.domain(), p.op_type());
    auto it = custom.find(node.op_type);
    if (it == custom.end() || it->second == nullptr) {
      return absl::InternalError(absl::StrCat("custom op ", node.op_type, " was not resolved"));
    }
    node.custom_op = it->second;
  }
  node.inputs.assign(p.input().begin(), p.input().end());
  node.outputs.assign(p.output().begin(), p.output().end());
  for (const onnx::AttributeProto& a : p.attribute()) {
    auto value = AttributeFromProto(a);
    if (!value.ok()) return NodeError(node, value.status());
    if (!node.attributes.emplace(a.name(), *std::move(value)).second) {
      return NodeError(
          node, absl::InvalidArgumentError(absl::StrCat("attribute '", a.name(), "' is repeated")));
    }
  }
  return node;
}

// Declared type of a graph input/output; unknown dims become -1 and are
// errors for inputs (`require_static`).
absl::StatusOr<ValueInfo> ValueInfoFromProto(const onnx::ValueInfoProto& p, bool require_static) {
  const std::string what =
      absl::StrCat(require_static ? "graph input '" : "graph output '", p.name(), "'");
  if (!p.type().has_tensor_type()) return Invalid(what, "is not a tensor");
  const auto& tt = p.type().tensor_type();
  auto dtype = DTypeFromOnnxCode(tt.elem_type());
  if (!dtype.ok()) return Invalid(what, dtype.status().message());
  ValueInfo info{p.name(), {*dtype, {}}};
  if (!tt.has_shape()) {
    if (require_static) return Invalid(what, "has no shape; export with static input shapes");
    return info;
  }
  for (int i = 0; i < tt.shape().dim_size(); ++i) {
    const auto& dim = tt.shape().dim(i);
    if (dim.has_dim_value() && dim.dim_value() >= 0) {
      info.type.shape.push_back(dim.dim_value());
    } else if (!require_static) {
      info.type.shape.push_back(-1);
    } else {
      return Invalid(what, absl::StrCat("dim ", i, " is ",
                                        dim.has_dim_param()
                                            ? absl::StrCat("symbolic ('", dim.dim_param(), "')")
                                            : std::string("unknown"),
                                        "; ipupod compiles static shapes only - export without "
                                        "dynamic_axes"));
    }
  }
  return info;
}

absl::StatusOr<int64_t> DefaultOpset(const onnx::ModelProto& m) {
  std::optional<int64_t> opset;
  for (const auto& o : m.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  }
  if (!opset.has_value()) {
    return absl::InvalidArgumentError(
        "model declares no opset for the default ONNX domain; re-export it with torch.onnx.export");
  }
  if (*opset < kOpsetMin || *opset > kOpsetMax) {
    return absl::InvalidArgumentError(absl::StrCat(
        "opset ", *opset, " is not supported; export with opset_version between ", kOpsetMin,
        " and ", kOpsetMax, " (torch 1.13 default: 14; 17 for LayerNormalization)"));
  }
  return *opset;
}

absl::Status ReadInitializers(const onnx::GraphProto& g, Graph& out) {
  if (g.sparse_initializer_size() > 0) {
    return absl::InvalidArgumentError("sparse initializers are not supported");
  }
  for (const onnx::TensorProto& t : g.initializer()) {
    IPUPOD_ASSIGN_OR_RETURN(Tensor tensor,
                            TensorFromProto(t, absl::StrCat("initializer '", t.name(), "'")));
    if (!out.initializers.emplace(t.name(), std::move(tensor)).second) {
      return absl::InvalidArgumentError(absl::StrCat("initializer '", t.name(), "' is repeated"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadGraph(const onnx::GraphProto& g, const CustomOpMap& custom, Graph& out) {
  IPUPOD_RETURN_IF_ERROR(ReadInitializers(g, out));
  for (const onnx::ValueInfoProto& in : g.input()) {
    if (out.initializers.count(in.name()) > 0) continue;  // a constant, not a runtime input
    IPUPOD_ASSIGN_OR_RETURN(ValueInfo info, ValueInfoFromProto(in, /*require_static=*/true));
    out.inputs.push_back(std::move(info));
  }
  for (const onnx::ValueInfoProto& o : g.output()) {
    IPUPOD_ASSIGN_OR_RETURN(ValueInfo info, ValueInfoFromProto(o, /*require_static=*/false));
    out.outputs.push_back(std::move(info));
  }
  if (out.outputs.empty()) return absl::InvalidArgumentError("model graph has no outputs");
  std::set<std::string> names;
  for (int i = 0; i < g.node_size(); ++i) {
    IPUPOD_ASSIGN_OR_RETURN(Node node, NodeFromProto(g.node(i), i, custom));
    if (!names.insert(node.name).second) node.name = absl::StrCat(node.name, "_", i);
    out.nodes.push_back(std::move(node));
  }
  return absl::OkStatus();
}

std::vector<std::string> MetadataLines(absl::string_view value) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(value, '\n', absl::SkipEmpty())) {
    lines.emplace_back(line);
  }
  return lines;
}

absl::Status MetadataError(absl::string_view key, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "the model's metadata '", key, "' ", what,
      "; it declares the module's state (device/graph/graph.h): export the model again, or remove "
      "the ipupod.* metadata_props"));
}

// The module state the metadata declares (device/graph/graph.h). Every declared
// name must be an initializer, every alias one of an initializer.
absl::StatusOr<ModuleState> ReadModuleState(const onnx::ModelProto& model, const Graph& g) {
  ModuleState state;
  for (const onnx::StringStringEntryProto& entry : model.metadata_props()) {
    const std::string& key = entry.key();
    if (key != kParametersMetadataKey && key != kBuffersMetadataKey && key != kAliasesMetadataKey) {
      continue;
    }
    // The parameters declare the state; buffers and aliases alone (what the
    // compiler infers for a torch export, device/compiler/onnx_state.h) do not.
    state.declared = state.declared || key == kParametersMetadataKey;
    for (const std::string& line : MetadataLines(entry.value())) {
      if (key == kAliasesMetadataKey) {
        std::pair<std::string, std::string> alias = absl::StrSplit(line, absl::MaxSplits('=', 1));
        if (alias.second.empty() || g.initializers.count(alias.second) == 0) {
          return MetadataError(key, absl::StrCat("names '", line, "', not alias=initializer"));
        }
        state.aliases.insert(std::move(alias));
        continue;
      }
      if (g.initializers.count(line) == 0) {
        return MetadataError(key, absl::StrCat("names '", line, "', which is no initializer"));
      }
      (key == kParametersMetadataKey ? state.parameters : state.buffers).insert(line);
    }
  }
  return state;
}

// "domain=path" lines of the custom op libraries' metadata, by domain.
absl::StatusOr<std::map<std::string, std::string>> CustomOpLibraries(
    const onnx::ModelProto& model) {
  std::map<std::string, std::string> libraries;
  for (const onnx::StringStringEntryProto& entry : model.metadata_props()) {
    if (entry.key() != kCustomOpLibrariesMetadataKey) continue;
    for (const std::string& line : MetadataLines(entry.value())) {
      std::pair<std::string, std::string> pair = absl::StrSplit(line, absl::MaxSplits('=', 1));
      if (pair.first.empty() || pair.second.empty() || !libraries.insert(std::move(pair)).second) {
        return MetadataError(
            kCustomOpLibrariesMetadataKey,
            absl::StrCat("has the line '", line, "', not one domain=library per custom domain"));
      }
    }
  }
  return libraries;
}

// The custom domains the model's nodes use, with its version of each and the library
// its metadata names, resolved to their ops (device/graph/custom_ops.h).
absl::StatusOr<CustomOpMap> ResolveCustomOps(const onnx::ModelProto& model,
                                             const CustomOpResolver* resolver) {
  std::map<std::string, CustomDomainUse> uses;
  for (const onnx::NodeProto& node : model.graph().node()) {
    if (!IsCustomDomain(node.domain())) continue;
    CustomDomainUse& use = uses[node.domain()];
    use.domain = node.domain();
    use.ops.insert(node.op_type());
    if (resolver != nullptr) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        node.op_type(), " node '", node.name(), "': op domain '", node.domain(),
        "' is a custom op's (PopTorch's custom_op); custom ops run only on ipupodd, from a "
        "library in a directory its admin allows (custom_ops.library_dirs): compile the model "
        "on the server (poptorch, or ipupod compile --remote)"));
  }
  if (uses.empty()) return CustomOpMap{};
  for (const auto& o : model.opset_import()) {
    auto it = uses.find(o.domain());
    if (it != uses.end()) it->second.version = o.version();
  }
  IPUPOD_ASSIGN_OR_RETURN(auto libraries, CustomOpLibraries(model));
  std::vector<CustomDomainUse> list;
  for (auto& [domain, use] : uses) {
    auto it = libraries.find(domain);
    if (it != libraries.end()) use.library = it->second;
    list.push_back(std::move(use));
  }
  return resolver->Resolve(list);
}

absl::StatusOr<Graph> Import(absl::string_view bytes, const FoldOptions& fold,
                             const CustomOpResolver* resolver) {
  if (static_cast<int64_t>(bytes.size()) > kOnnxBytesMax) {
    return absl::InvalidArgumentError("model is larger than 2 GiB, protobuf's limit");
  }
  onnx::ModelProto model;
  if (bytes.empty() || !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        "not an ONNX model: the bytes do not parse as onnx.ModelProto (garbage or truncated file)");
  }
  if (model.ir_version() < 3 || !model.has_graph()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a usable ONNX model: ir_version ", model.ir_version(),
                     model.has_graph() ? "" : " and no graph",
                     " (need ir_version >= 3 and a graph; the file may "
                     "be truncated or not ONNX)"));
  }
  Graph graph;
  IPUPOD_ASSIGN_OR_RETURN(graph.opset, DefaultOpset(model));
  graph.producer = absl::StrCat(model.producer_name(), " ", model.producer_version());
  IPUPOD_ASSIGN_OR_RETURN(CustomOpMap custom, ResolveCustomOps(model, resolver));
  IPUPOD_RETURN_IF_ERROR(ReadGraph(model.graph(), custom, graph));
  IPUPOD_ASSIGN_OR_RETURN(graph.module_state, ReadModuleState(model, graph));
  IPUPOD_RETURN_IF_ERROR(InferShapesAndFold(graph, fold));
  return graph;
}

absl::StatusOr<std::string> ReadFile(absl::string_view path) {
  std::ifstream file(std::string(path), std::ios::binary | std::ios::ate);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open ONNX file '", path, "'"));
  const std::streamoff size = file.tellg();
  if (size < 0 || size > kOnnxBytesMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("ONNX file '", path, "' is larger than 2 GiB, protobuf's limit"));
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  file.seekg(0);
  if (!file.read(bytes.data(), size)) {
    return absl::InternalError(absl::StrCat("error reading ONNX file '", path, "'"));
  }
  return bytes;
}

}  // namespace

absl::StatusOr<Graph> ImportOnnx(absl::string_view bytes, const FoldOptions& fold,
                                 const CustomOpResolver* custom_ops) {
  try {
    return Import(bytes, fold, custom_ops);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory while importing the ONNX model");
  }
}

absl::StatusOr<Graph> ImportOnnxFile(absl::string_view path, const FoldOptions& fold,
                                     const CustomOpResolver* custom_ops) {
  absl::StatusOr<std::string> bytes;
  try {
    bytes = ReadFile(path);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory while reading the ONNX file");
  }
  if (!bytes.ok()) return bytes.status();
  return ImportOnnx(*bytes, fold, custom_ops);
}

}  // namespace ipupod::graph
