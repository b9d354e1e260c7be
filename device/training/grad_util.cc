// The rule table and the tensor helpers the backward rules share.
#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/kernels/matmul.h"
#include "device/kernels/reduce.h"
#include "device/kernels/shape_util.h"
#include "device/training/grad_rules.h"

namespace ipupod::training {
namespace {

using RuleTable = absl::flat_hash_map<std::string, GradRule>;

const RuleTable& GetRules() {
  static const RuleTable* table = [] {
    std::vector<GradRule> rules;
    RegisterElementwiseGrads(rules);
    RegisterNnGrads(rules);
    RegisterTensorGrads(rules);
    RegisterLossGrads(rules);
    RegisterConvGrads(rules);
    auto* t = new RuleTable();
    for (GradRule& r : rules) {
      std::string key = r.op_type;
      t->emplace(std::move(key), std::move(r));
    }
    return t;
  }();
  return *table;
}

}  // namespace

const GradRule* FindGradRule(absl::string_view op_type) {
  const RuleTable& t = GetRules();
  auto it = t.find(op_type);
  return it == t.end() ? nullptr : &it->second;
}

std::vector<std::string> DifferentiableOps() {
  std::vector<std::string> ops;
  for (const auto& [name, rule] : GetRules()) ops.push_back(name);
  std::sort(ops.begin(), ops.end());
  return ops;
}

absl::StatusOr<Tensor> Zeros(const Shape& shape) { return Tensor::Create(DType::kFloat32, shape); }

absl::StatusOr<Tensor> SumToShape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int64_t offset = g.rank() - static_cast<int64_t>(shape.size());
  if (offset < 0 || !kernels::BroadcastsTo(shape, g.shape())) {
    return absl::InternalError(absl::StrCat("gradient ", kernels::ShapeString(g.shape()),
                                            " does not reduce to ", kernels::ShapeString(shape)));
  }
  std::vector<int64_t> axes;
  for (int64_t d = 0; d < g.rank(); ++d) {
    if (d < offset || (shape[d - offset] == 1 && g.shape()[d] != 1)) axes.push_back(d);
  }
  IPUPOD_ASSIGN_OR_RETURN(Tensor out, Zeros(shape));
  if (axes.empty()) {
    std::memcpy(out.mutable_raw_data(), g.raw_data(), g.byte_size());
    return out;
  }
  IPUPOD_RETURN_IF_ERROR(kernels::Reduce(kernels::ReduceOp::kSum, graph::ViewOf<float>(g), axes,
                                         graph::MutableViewOf<float>(out)));
  return out;
}

absl::StatusOr<Tensor> Binary(kernels::BinaryOp op, const Tensor& a, const Tensor& b) {
  IPUPOD_ASSIGN_OR_RETURN(Shape shape, kernels::BroadcastShapes(a.shape(), b.shape()));
  IPUPOD_ASSIGN_OR_RETURN(Tensor out, Zeros(shape));
  IPUPOD_RETURN_IF_ERROR(kernels::Binary(op, graph::ViewOf<float>(a), graph::ViewOf<float>(b),
                                         graph::MutableViewOf<float>(out)));
  return out;
}

absl::StatusOr<Tensor> Reshaped(const Tensor& t, const Shape& shape) {
  Tensor out = t;
  IPUPOD_RETURN_IF_ERROR(out.Reshape(shape));
  return out;
}

absl::Status AddInto(Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != DType::kFloat32 || b.dtype() != DType::kFloat32) {
    return absl::InternalError(absl::StrCat("cannot accumulate gradient ",
                                            kernels::ShapeString(b.shape()), " into ",
                                            kernels::ShapeString(a.shape())));
  }
  float* dst = a.mutable_data<float>();
  const float* src = b.data<float>();
  for (int64_t i = 0; i < a.num_elements(); ++i) dst[i] += src[i];
  return absl::OkStatus();
}

namespace {

kernels::GemmOptions ProductOptions(const ProductGrad& p, float alpha, float beta) {
  return kernels::GemmOptions{p.trans_a, p.trans_b, alpha, beta};
}

}  // namespace

absl::StatusOr<Shape> ProductShape(const ProductGrad& p) {
  return kernels::GemmShape(p.a_shape, p.b_shape, ProductOptions(p, p.alpha, 0.0f));
}

absl::StatusOr<Tensor> EvaluateProduct(const ProductGrad& p, const Shape& shape) {
  IPUPOD_ASSIGN_OR_RETURN(const Shape product, ProductShape(p));
  // sgemm with beta 0 writes every element of the output.
  IPUPOD_ASSIGN_OR_RETURN(Tensor out, Tensor::CreateForOverwrite(DType::kFloat32, product));
  IPUPOD_RETURN_IF_ERROR(
      kernels::Gemm(kernels::View<float>{p.a, p.a_shape}, kernels::View<float>{p.b, p.b_shape},
                    kernels::View<float>{nullptr, {}}, ProductOptions(p, p.alpha, 0.0f),
                    graph::MutableViewOf<float>(out)));
  IPUPOD_RETURN_IF_ERROR(out.Reshape(shape));
  return out;
}

absl::Status AccumulateProduct(const ProductGrad& p, float scale, Tensor& into) {
  IPUPOD_ASSIGN_OR_RETURN(const Shape product, ProductShape(p));
  if (kernels::NumElementsUnchecked(product) != into.num_elements() ||
      into.dtype() != DType::kFloat32) {
    return absl::InternalError(absl::StrCat("cannot accumulate a product ",
                                            kernels::ShapeString(product), " into ",
                                            kernels::ShapeString(into.shape())));
  }
  float* w = into.mutable_data<float>();
  return kernels::Gemm(kernels::View<float>{p.a, p.a_shape}, kernels::View<float>{p.b, p.b_shape},
                       kernels::View<float>{w, product}, ProductOptions(p, scale * p.alpha, 1.0f),
                       kernels::MutableView<float>{w, product});
}

}  // namespace ipupod::training
