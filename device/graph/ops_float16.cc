// How ops compute with float16 operands (device/graph/ops.h, InferOp and RunOp).
//
// ipupod models the IPU's half precision as a storage type: a float16 value
// is held in 2 bytes, and an op that reads float16 operands computes in
// float32 on their exact widened values, then rounds each float output to
// float16 (round to nearest even). Element-wise ops therefore round once, at
// their outputs, as the IPU's half arithmetic does. Matrix products and
// convolutions accumulate in float32 unless the graph asks for half partials
// (IPUConfig enable_half_partials): then the sum over the reduced axis runs
// in blocks of kHalfPartialsBlock products, each block summed in float32 and
// added to a running partial that is rounded to float16 after every block.
// docs/differences.md states what this model leaves out.
//
// Cast, Constant and ConstantOfShape handle float16 themselves (their output
// type comes from an attribute, not from their operands).
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tensor/float16.h"
#include "device/graph/ops.h"

namespace ipupod::graph {
namespace {

bool HandlesFloat16Itself(const OpDef& def) {
  return def.op_type == "Cast" || def.op_type == "Constant" || def.op_type == "ConstantOfShape";
}

bool ReadsFloat16(const OpContext& c) {
  for (const TensorType* t : c.types) {
    if (t != nullptr && t->dtype == DType::kFloat16) return true;
  }
  return false;
}

// A context over the same node whose float16 operands read as float32: the
// types (and constant values) it points at live here.
struct WidenedContext {
  std::vector<TensorType> types;
  std::vector<Tensor> values;
  OpContext ctx;

  static absl::StatusOr<std::unique_ptr<WidenedContext>> Of(const OpContext& c) {
    auto w = std::unique_ptr<WidenedContext>(new WidenedContext{{}, {}, c});
    w->types.resize(c.types.size());
    w->values.resize(c.values.size());
    for (size_t i = 0; i < c.types.size(); ++i) {
      if (c.types[i] == nullptr) continue;
      w->types[i] = *c.types[i];
      if (w->types[i].dtype == DType::kFloat16) w->types[i].dtype = DType::kFloat32;
      w->ctx.types[i] = &w->types[i];
      // Every value present: constants during inference, all inputs in a run.
      if (i < c.values.size() && c.values[i] != nullptr &&
          c.values[i]->dtype() == DType::kFloat16) {
        IPUPOD_ASSIGN_OR_RETURN(w->values[i], c.values[i]->WidenedToFloat32());
        w->ctx.values[i] = &w->values[i];
      }
    }
    return w;
  }
};

// Float32 outputs of an op that read float16 are float16.
std::vector<TensorType> NarrowedTypes(std::vector<TensorType> types) {
  for (TensorType& t : types) {
    if (t.dtype == DType::kFloat32) t.dtype = DType::kFloat16;
  }
  return types;
}

// Runs `def` on float32 operands into float32 stand-ins for the float16
// outputs, then rounds each into its output.
absl::Status RunWidened(const OpDef& def, const OpContext& wide, absl::Span<Tensor> outputs) {
  std::vector<Tensor> staged(outputs.size());
  std::vector<TensorType> types;
  for (const Tensor& out : outputs) {
    types.push_back({out.dtype() == DType::kFloat16 ? DType::kFloat32 : out.dtype(), out.shape()});
  }
  IPUPOD_ASSIGN_OR_RETURN(staged, CreateOutputs(def, types));
  IPUPOD_RETURN_IF_ERROR(def.run(wide, absl::MakeSpan(staged)));
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].dtype() == DType::kFloat16) {
      IPUPOD_ASSIGN_OR_RETURN(outputs[i], staged[i].ConvertedTo(DType::kFloat16));
    } else {
      outputs[i] = std::move(staged[i]);
    }
  }
  return absl::OkStatus();
}

// ---- half partials ----

// The reduced axis' block: 16 products summed in float32 before the partial
// is rounded (ipupod's model, docs/differences.md).
constexpr int64_t kHalfPartialsBlock = 16;

// Where the reduced axis of a product's operands lies.
struct ReducedAxes {
  int64_t length = 0;    // K (for a Conv: input channels per group)
  int64_t axis_a = 0;    // of input 0
  int64_t groups_a = 1;  // input 0's axis holds this many groups of `length`
  int64_t axis_b = 0;    // of input 1
};

absl::StatusOr<ReducedAxes> ReducedAxesOf(const OpContext& c) {
  const std::string& op = c.node.op_type;
  ReducedAxes r;
  if (op == "MatMul") {
    r.axis_a = c.rank(0) - 1;
    r.axis_b = c.rank(1) == 1 ? 0 : c.rank(1) - 2;
  } else if (op == "Gemm") {
    IPUPOD_ASSIGN_OR_RETURN(int64_t ta, c.Int("transA", 0));
    IPUPOD_ASSIGN_OR_RETURN(int64_t tb, c.Int("transB", 0));
    r.axis_a = ta != 0 ? 0 : 1;
    r.axis_b = tb != 0 ? 1 : 0;
  } else {  // Conv: x [N, C, ...] grouped, w [M, C/group, ...]
    IPUPOD_ASSIGN_OR_RETURN(r.groups_a, c.Int("group", 1));
    r.axis_a = 1;
    r.axis_b = 1;
  }
  r.length = c.shape(1)[r.axis_b];
  return r;
}

// Elements [begin, end) of each of `groups` equal parts of `axis`.
absl::StatusOr<Tensor> SliceGroups(const Tensor& t, int64_t axis, int64_t groups, int64_t begin,
                                   int64_t end) {
  Shape shape = t.shape();
  const int64_t per_group = shape[axis] / groups;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  shape[axis] = groups * (end - begin);
  IPUPOD_ASSIGN_OR_RETURN(Tensor out, Tensor::CreateForOverwrite(t.dtype(), shape));
  const float* src = t.data<float>();
  float* dst = out.mutable_data<float>();
  const size_t run = static_cast<size_t>((end - begin) * inner);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t from = (o * groups + g) * per_group + begin;
      std::memcpy(dst, src + from * inner, run * sizeof(float));
      dst += run;
    }
  }
  return out;
}

// Gemm's beta * C, broadcast to y [M, N], then rounded.
absl::Status AddGemmBias(const OpContext& c, const Tensor& bias, Tensor& y) {
  IPUPOD_ASSIGN_OR_RETURN(float beta, c.Float("beta", 1.0f));
  const int64_t m = y.shape()[0], n = y.shape()[1];
  const int64_t rows = bias.rank() == 2 ? bias.shape()[0] : 1;
  const int64_t cols = bias.rank() >= 1 ? bias.shape()[bias.rank() - 1] : 1;
  const float* b = bias.data<float>();
  float* out = y.mutable_data<float>();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      out[i * n + j] += beta * b[(rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j)];
    }
  }
  RoundThroughFloat16(absl::MakeSpan(out, static_cast<size_t>(m * n)));
  return absl::OkStatus();
}

// A MatMul, Gemm or Conv of float32 operands holding float16 values, with
// half partials, into the float32 `sum` (already shaped).
absl::Status RunHalfPartials(const OpDef& def, const OpContext& wide, Tensor& sum) {
  IPUPOD_ASSIGN_OR_RETURN(ReducedAxes r, ReducedAxesOf(wide));
  float* acc = sum.mutable_data<float>();
  const auto n = static_cast<size_t>(sum.num_elements());
  std::fill(acc, acc + n, 0.0f);
  std::vector<Tensor> part(1);  // one block's sum, reused: the op writes all of it
  IPUPOD_ASSIGN_OR_RETURN(part[0], Tensor::CreateForOverwrite(DType::kFloat32, sum.shape()));
  for (int64_t begin = 0; begin < r.length; begin += kHalfPartialsBlock) {
    const int64_t end = std::min(r.length, begin + kHalfPartialsBlock);
    IPUPOD_ASSIGN_OR_RETURN(Tensor a,
                            SliceGroups(*wide.values[0], r.axis_a, r.groups_a, begin, end));
    IPUPOD_ASSIGN_OR_RETURN(Tensor b, SliceGroups(*wide.values[1], r.axis_b, 1, begin, end));
    OpContext block{wide.node, wide.opset, {}, {}};
    const TensorType ta{DType::kFloat32, a.shape()}, tb{DType::kFloat32, b.shape()};
    block.types = {&ta, &tb};
    block.values = {&a, &b};
    IPUPOD_RETURN_IF_ERROR(def.run(block, absl::MakeSpan(part)));
    const float* p = part[0].data<float>();
    for (size_t i = 0; i < n; ++i) acc[i] += p[i];
    RoundThroughFloat16(absl::MakeSpan(acc, n));
  }
  if (!wide.has(2)) return absl::OkStatus();
  if (wide.node.op_type == "Gemm") return AddGemmBias(wide, *wide.values[2], sum);
  // Conv's bias [M] adds to every position of channel m.
  const Tensor& bias = *wide.values[2];
  const int64_t channels = sum.shape()[1];
  const int64_t inner = sum.num_elements() / (sum.shape()[0] * channels);
  for (size_t i = 0; i < n; ++i) {
    acc[i] += bias.data<float>()[(static_cast<int64_t>(i) / inner) % channels];
  }
  RoundThroughFloat16(absl::MakeSpan(acc, n));
  return absl::OkStatus();
}

bool IsProduct(const OpDef& def) {
  return def.op_type == "MatMul" || def.op_type == "Gemm" || def.op_type == "Conv";
}

}  // namespace

absl::StatusOr<std::vector<TensorType>> InferOp(const OpDef& def, const OpContext& c) {
  if (HandlesFloat16Itself(def) || !ReadsFloat16(c)) return def.infer(c);
  IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<WidenedContext> wide, WidenedContext::Of(c));
  IPUPOD_ASSIGN_OR_RETURN(std::vector<TensorType> types, def.infer(wide->ctx));
  return NarrowedTypes(std::move(types));
}

absl::Status RunOp(const OpDef& def, const OpContext& c, absl::Span<Tensor> outputs) {
  if (HandlesFloat16Itself(def) || !ReadsFloat16(c)) return def.run(c, outputs);
  IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<WidenedContext> wide, WidenedContext::Of(c));
  if (!(c.half_partials && IsProduct(def))) return RunWidened(def, wide->ctx, outputs);
  IPUPOD_ASSIGN_OR_RETURN(Tensor sum,
                          Tensor::CreateForOverwrite(DType::kFloat32, outputs[0].shape()));
  IPUPOD_RETURN_IF_ERROR(RunHalfPartials(def, wide->ctx, sum));
  IPUPOD_ASSIGN_OR_RETURN(outputs[0], sum.ConvertedTo(DType::kFloat16));
  return absl::OkStatus();
}

}  // namespace ipupod::graph
