// Backward rules of the shape and data-movement ops. Reshape, Flatten,
// Squeeze and Unsqueeze reshape the gradient back. Transpose, Slice, Gather,
// Expand, Concat and Split share one rule: the forward op itself is run on
// an int64 "index map" of the input (element j holds j), so each output
// element names the input element it was copied from, and the gradient is
// scatter-added through that map. This reuses the forward op's own
// parameter handling (negative indices, steps, broadcasting) exactly;
// Gather's repeated indices and Expand's broadcast copies accumulate.
// PopTorch's DynamicSlice and DynamicUpdate use it too (their runtime index
// is kept for the backward pass).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/graph/run_context.h"
#include "device/training/grad_rules.h"

namespace ipupod::training {
namespace {

using Grads = std::vector<std::optional<Tensor>>;

absl::StatusOr<int64_t> ReshapeGrad(const GradContext& c, Grads& grads) {
  if (c.wants[0]) {
    IPUPOD_ASSIGN_OR_RETURN(grads[0], Reshaped(c.grad(0), c.op.shape(0)));
  }
  return 0;
}

// An int64 tensor of `shape` holding iota (0, 1, ...) or all -1.
absl::StatusOr<Tensor> IndexTensor(const Shape& shape, bool iota) {
  IPUPOD_ASSIGN_OR_RETURN(Tensor t, Tensor::Create(DType::kInt64, shape));
  int64_t* p = t.mutable_data<int64_t>();
  for (int64_t j = 0; j < t.num_elements(); ++j) p[j] = iota ? j : -1;
  return t;
}

// Runs the node's forward op with float input `i` replaced by its index map
// and every other float input by -1s. Returns one map per output.
absl::StatusOr<std::vector<Tensor>> IndexMaps(const GradContext& c, size_t i) {
  const graph::OpDef* def = graph::FindOp(c.op.node.op_type);
  if (def == nullptr) return absl::InternalError("op without a definition");
  std::vector<Tensor> maps;  // keeps the replaced inputs alive
  std::vector<graph::TensorType> types(c.op.types.size());
  graph::OpContext ctx{c.op.node, c.op.opset, c.op.types, c.op.values, c.op.half_partials};
  maps.reserve(c.op.types.size());
  for (size_t j = 0; j < c.op.types.size(); ++j) {
    if (!c.op.has(j) || c.op.dtype(j) != DType::kFloat32) continue;
    IPUPOD_ASSIGN_OR_RETURN(Tensor m, IndexTensor(c.op.shape(j), j == i));
    maps.push_back(std::move(m));
    types[j] = {DType::kInt64, c.op.shape(j)};
    ctx.types[j] = &types[j];
    ctx.values[j] = &maps.back();
  }
  std::vector<Tensor> outs;
  for (const graph::TensorType* t : c.output_types) {
    IPUPOD_ASSIGN_OR_RETURN(Tensor o, Tensor::Create(DType::kInt64, t->shape));
    outs.push_back(std::move(o));
  }
  IPUPOD_RETURN_IF_ERROR(graph::RunOp(*def, ctx, absl::MakeSpan(outs)));
  return outs;
}

// dx[map[j]] += g[j] for every output with a gradient.
absl::StatusOr<int64_t> IndexMapGrad(const GradContext& c, Grads& grads) {
  int64_t flops = 0;
  for (size_t i = 0; i < c.wants.size(); ++i) {
    if (!c.wants[i]) continue;
    IPUPOD_ASSIGN_OR_RETURN(std::vector<Tensor> maps, IndexMaps(c, i));
    IPUPOD_ASSIGN_OR_RETURN(Tensor dx, Zeros(c.op.shape(i)));
    float* out = dx.mutable_data<float>();
    for (size_t k = 0; k < maps.size(); ++k) {
      if (c.output_grads[k] == nullptr) continue;
      const int64_t* map = maps[k].data<int64_t>();
      const float* g = c.output_grads[k]->data<float>();
      for (int64_t j = 0; j < maps[k].num_elements(); ++j) {
        if (map[j] >= 0) out[map[j]] += g[j];
      }
      flops += maps[k].num_elements();
    }
    grads[i] = std::move(dx);
  }
  return flops;
}

// PopTorch's Nop and IpuPrint pass the gradient through; IpuPrint with
// print_gradient (PopTorch sets it) also prints it as "<title>_gradient".
absl::StatusOr<int64_t> PassThroughGrad(const GradContext& c, Grads& grads) {
  if (!c.wants[0]) return 0;
  grads[0] = c.grad(0);
  if (c.op.node.op_type != "ai.graphcore.IpuPrint") return 0;
  IPUPOD_ASSIGN_OR_RETURN(int64_t print, c.op.Int("print_gradient", 0));
  if (print == 0) return 0;
  IPUPOD_ASSIGN_OR_RETURN(std::string title, c.op.String("title", ""));
  graph::Node node = c.op.node;
  node.attributes["title"] = absl::StrCat(title.empty() ? node.name : title, "_gradient");
  graph::OpContext ctx{node, c.op.opset, c.op.types, c.op.values};
  IPUPOD_ASSIGN_OR_RETURN(std::string line, graph::PrintLine(ctx, c.grad(0)));
  graph::AppendToRunLog(std::move(line));
  return 0;
}

}  // namespace

void RegisterTensorGrads(std::vector<GradRule>& rules) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}) {
    rules.push_back({op, ReshapeGrad, false, false});
  }
  for (const char* op : {"Transpose", "Slice", "Expand", "Concat", "Split"}) {
    rules.push_back({op, IndexMapGrad, false, false});
  }
  rules.push_back({"Gather", IndexMapGrad, true, false});  // needs runtime indices
  rules.push_back({"ai.graphcore.DynamicSlice", IndexMapGrad, true, false});
  rules.push_back({"ai.graphcore.DynamicUpdate", IndexMapGrad, true, false});
  rules.push_back({"ai.graphcore.Nop", PassThroughGrad, false, false});
  rules.push_back({"ai.graphcore.IpuPrint", PassThroughGrad, false, false});
}

}  // namespace ipupod::training
