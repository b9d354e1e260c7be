#include "device/compiler/temporaries.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "device/graph/ops.h"
#include "device/hardware.h"

namespace ipupod::compiler {
namespace {

// Ops that pass ids through unchanged in value (a model casts or reshapes
// its input ids before the lookup).
const std::set<std::string>& IdPassThrough() {
  static const auto* ops = new std::set<std::string>{"Cast",    "Reshape",  "Unsqueeze", "Squeeze",
                                                     "Flatten", "Identity", "Expand"};
  return *ops;
}

// Whether `value` is a graph input, or made from one by pass-through ops.
bool FromGraphInput(const graph::Graph& g, const std::string& value) {
  std::string v = value;
  for (int hops = 0; hops < 8; ++hops) {
    for (const graph::ValueInfo& in : g.inputs) {
      if (in.name == v) return true;
    }
    const graph::Node* producer = nullptr;
    for (const graph::Node& n : g.nodes) {
      if (std::find(n.outputs.begin(), n.outputs.end(), v) != n.outputs.end()) producer = &n;
    }
    if (producer == nullptr || IdPassThrough().count(producer->op_type) == 0 ||
        producer->inputs.empty()) {
      return false;
    }
    v = producer->inputs[0];
  }
  return false;
}

// A Gather on a rank-2 initializer along axis 0: the table, else nullptr.
const tensor::Tensor* LookupTable(const graph::Graph& g, const graph::Node& node) {
  if (node.op_type != "Gather" || node.inputs.size() < 2) return nullptr;
  const tensor::Tensor* table = g.FindInitializer(node.inputs[0]);
  if (table == nullptr || table->shape().size() != 2) return nullptr;
  if (const graph::AttributeValue* axis = node.FindAttribute("axis"); axis != nullptr) {
    const int64_t* a = std::get_if<int64_t>(axis);
    if (a == nullptr || (*a != 0 && *a != -2)) return nullptr;
  }
  return table;
}

int64_t ConvNatural(const graph::Graph& g, const graph::Node& node) {
  if (node.inputs.size() < 2 || node.outputs.empty()) return 0;
  const graph::TensorType* x = g.FindType(node.inputs[0]);
  const graph::TensorType* y = g.FindType(node.outputs[0]);
  const tensor::Tensor* w = g.FindInitializer(node.inputs[1]);
  const graph::TensorType* wt = w == nullptr ? g.FindType(node.inputs[1]) : nullptr;
  const tensor::Shape* wshape = w != nullptr ? &w->shape() : (wt != nullptr ? &wt->shape : nullptr);
  if (x == nullptr || y == nullptr || wshape == nullptr || x->shape.size() < 3 ||
      y->shape.size() != x->shape.size() || wshape->size() != x->shape.size()) {
    return 0;
  }
  int64_t windows = y->shape[0] * x->shape[1];  // batch x input channels
  for (size_t i = 2; i < y->shape.size(); ++i) windows *= y->shape[i] * (*wshape)[i];
  if (windows < 0) return 0;
  return windows * static_cast<int64_t>(tensor::DTypeSize(x->dtype)) +
         ValueBytes(g, node.inputs[1]) + ValueBytes(g, node.outputs[0]);
}

// A MatMul's serialization (serializedMatMul): mode and factor, or factor 1.
struct Serialization {
  std::string mode;
  int64_t factor = 1;
};

Serialization SerializationOf(const graph::Node& node) {
  Serialization s;
  const graph::AttributeValue* mode = node.FindAttribute(graph::kSerializationMode);
  const graph::AttributeValue* factor = node.FindAttribute(graph::kSerializationFactor);
  if (mode == nullptr || factor == nullptr) return s;
  const std::string* m = std::get_if<std::string>(mode);
  const int64_t* f = std::get_if<int64_t>(factor);
  if (m == nullptr || f == nullptr) return s;
  s.mode = *m;
  s.factor = *f;
  return s;
}

// The dimension a mode splits: A's rows, the reduction, or B's columns.
int64_t SplitDim(const graph::Graph& g, const graph::Node& node, const std::string& mode) {
  const graph::TensorType* a = g.FindType(node.inputs[0]);
  const graph::TensorType* b = g.FindType(node.inputs[1]);
  if (a == nullptr || b == nullptr || a->shape.size() < 2 || b->shape.size() < 2) return -1;
  if (mode == "input_channels") return a->shape[a->shape.size() - 2];
  if (mode == "reducing_dim") return a->shape.back();
  if (mode == "output_channels") return b->shape.back();
  return -1;
}

// One pass of a serialized product (see the header).
int64_t SerializedPassBytes(const graph::Graph& g, const graph::Node& node,
                            const Serialization& s) {
  const int64_t a = ValueBytes(g, node.inputs[0]), b = ValueBytes(g, node.inputs[1]);
  const int64_t out = ValueBytes(g, node.outputs[0]);
  if (s.mode == "input_channels") return a / s.factor + b + out / s.factor;
  if (s.mode == "reducing_dim") return a / s.factor + b / s.factor + out;
  return a + b / s.factor + out / s.factor;  // output_channels
}

int64_t NaturalBytes(const graph::Graph& g, const graph::Node& node) {
  if (node.outputs.empty()) return 0;
  if (node.op_type == "MatMul" || node.op_type == "Gemm") {
    if (node.inputs.size() < 2) return 0;
    return ValueBytes(g, node.inputs[0]) + ValueBytes(g, node.inputs[1]) +
           ValueBytes(g, node.outputs[0]);
  }
  if (node.op_type == "Conv") return ConvNatural(g, node);
  if (LookupTable(g, node) != nullptr) {
    return ValueBytes(g, node.inputs[0]) + ValueBytes(g, node.outputs[0]);
  }
  return 0;
}

}  // namespace

absl::StatusOr<std::optional<SerializedEmbedding>> FindSerializedEmbedding(const graph::Graph& g,
                                                                           int64_t factor) {
  if (factor <= 1) return std::nullopt;
  std::optional<SerializedEmbedding> best;
  for (const graph::Node& node : g.nodes) {
    const tensor::Tensor* table = LookupTable(g, node);
    if (table == nullptr || !FromGraphInput(g, node.inputs[1])) continue;
    const int64_t rows = table->shape()[0];
    if (best.has_value() && best->vocab >= rows) continue;
    best = SerializedEmbedding{
        .table = node.inputs[0],
        .vocab = rows,
        .factor = factor,
        .row_bytes = static_cast<int64_t>(table->byte_size()) / std::max<int64_t>(rows, 1),
        .tied_products = {}};
  }
  if (!best.has_value()) return best;
  if (factor > best->vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "embedding_serialization_factor is ", factor, " but the embedding '", best->table,
        "' has a vocabulary of ", best->vocab, " rows: each of the factor's slices needs at least ",
        "one row; use a factor between 1 and ", best->vocab));
  }
  best->padded_vocab = (best->vocab + factor - 1) / factor * factor;
  // torch exports a tied head x @ table^T as MatMul(x, Transpose(table)), or
  // for 2-D x as Gemm(x, table, transB=1).
  std::set<std::string> transposed;
  for (const graph::Node& node : g.nodes) {
    if (node.op_type == "Transpose" && !node.inputs.empty() && !node.outputs.empty() &&
        node.inputs[0] == best->table) {
      transposed.insert(node.outputs[0]);
    }
    if (node.inputs.size() < 2) continue;
    const graph::AttributeValue* trans_b = node.FindAttribute("transB");
    const bool gemm_tied = node.op_type == "Gemm" && node.inputs[1] == best->table &&
                           trans_b != nullptr && std::get_if<int64_t>(trans_b) != nullptr &&
                           *std::get_if<int64_t>(trans_b) == 1;
    if (gemm_tied || (node.op_type == "MatMul" && transposed.count(node.inputs[1]) > 0)) {
      best->tied_products.insert(node.name);
    }
  }
  return best;
}

absl::Status CheckPlanningAttributes(const graph::Graph& g) {
  for (const graph::Node& node : g.nodes) {
    auto error = [&node](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat(
          node.op_type, " node '", node.name, "' (module '", node.module_path, "'): ", what));
    };
    if (const graph::AttributeValue* p = node.FindAttribute(graph::kAvailableMemoryProportion)) {
      const float* f = std::get_if<float>(p);
      if (f == nullptr || !(*f >= 0.0f && *f <= 1.0f)) {
        return error("available_memory_proportion must be a number between 0 and 1");
      }
    }
    const bool has_mode = node.FindAttribute(graph::kSerializationMode) != nullptr;
    if (!has_mode && node.FindAttribute(graph::kSerializationFactor) == nullptr) continue;
    const Serialization s = SerializationOf(node);
    if (s.mode != "input_channels" && s.mode != "reducing_dim" && s.mode != "output_channels") {
      return error(
          "serialization_mode must be input_channels, reducing_dim or output_channels, "
          "with an integer serialization_factor");
    }
    const int64_t dim = SplitDim(g, node, s.mode);
    if (s.factor < 1 || dim < 1 || dim % s.factor != 0) {
      return error(absl::StrCat("serialization_factor ", s.factor, " does not divide the ", s.mode,
                                " dimension (", dim, "); use a divisor of ", dim));
    }
  }
  return absl::OkStatus();
}

NodeTemporary PlanNodeTemporary(const graph::Graph& g, const graph::Node& node, double proportion,
                                int64_t memory_bytes,
                                const std::optional<SerializedEmbedding>& embedding) {
  NodeTemporary t;
  t.natural_bytes = NaturalBytes(g, node);
  if (t.natural_bytes <= 0) return NodeTemporary{};
  Serialization serialized = SerializationOf(node);
  if (serialized.factor <= 1 && embedding.has_value() &&
      embedding->tied_products.count(node.name) > 0) {
    serialized = Serialization{.mode = "output_channels", .factor = embedding->factor};
  }
  if ((node.op_type == "MatMul" || node.op_type == "Gemm") && serialized.factor > 1) {
    // Each of the factor's passes needs one pass's share (CheckPlanningAttributes
    // has checked the factor divides its dimension).
    const int64_t tile_bytes = memory_bytes / device::kGc200.tiles;
    const int64_t cap =
        std::max(tile_bytes, static_cast<int64_t>(proportion * static_cast<double>(memory_bytes)));
    const int64_t pass = SerializedPassBytes(g, node, serialized);
    const int64_t split = std::max<int64_t>(1, (pass + cap - 1) / cap);
    t.passes = serialized.factor * split;
    t.bytes = (pass + split - 1) / split;
    return t;
  }
  int64_t min_passes = 1;
  if (embedding.has_value() && LookupTable(g, node) != nullptr &&
      node.inputs[0] == embedding->table) {
    // The padded table, looked up one slice at a time.
    t.natural_bytes += embedding->PaddingBytes();
    min_passes = embedding->factor;
  }
  const int64_t tile_bytes = memory_bytes / device::kGc200.tiles;
  const int64_t cap =
      std::max(tile_bytes, static_cast<int64_t>(proportion * static_cast<double>(memory_bytes)));
  t.passes = std::max(min_passes, (t.natural_bytes + cap - 1) / cap);
  t.bytes = (t.natural_bytes + t.passes - 1) / t.passes;
  return t;
}

int64_t ValueBytes(const graph::Graph& g, const std::string& value) {
  if (const tensor::Tensor* w = g.FindInitializer(value); w != nullptr) {
    return static_cast<int64_t>(w->byte_size());
  }
  const graph::TensorType* type = g.FindType(value);
  if (type == nullptr) return 0;
  int64_t n = static_cast<int64_t>(tensor::DTypeSize(type->dtype));
  for (int64_t d : type->shape) {
    if (d < 0) return 0;
    n *= d;
  }
  return n;
}

}  // namespace ipupod::compiler
