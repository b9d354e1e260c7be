// File: tests/device/graph/fake_custom_ops.h
//
// In-process custom ops for the tests of the graph and training (no helper process):
// FakeCube is com.acme::Cube of the tests' library (tests/device/customop/test_ops.c) -
// (x, bias) -> (x^3 + bias, x^3), gradient dx = 3 x^2 (g0 + g1), dbias = g0 - written
// in C++, counting its calls; FakeResolver hands out the ops it holds and records what
// ImportOnnx asked for. Also the ONNX of a model with a Cube node (CubeModel).
//
// Thread safety: the counters are atomic; FakeResolver's record is not (one import at a
// time).
#ifndef IPUPOD_TESTS_GRAPH_FAKE_CUSTOM_OPS_H_
#define IPUPOD_TESTS_GRAPH_FAKE_CUSTOM_OPS_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "device/graph/custom_ops.h"
#include "tests/device/graph/onnx_builder.h"

namespace ipupod::graph::testing {

class FakeCube : public CustomOp {
 public:
  explicit FakeCube(bool with_gradient = true, absl::Status check = absl::OkStatus())
      : with_gradient_(with_gradient), check_(std::move(check)) {}

  const std::string& name() const override { return name_; }
  std::string origin() const override { return "library 'fake'"; }
  absl::Status CheckNode(const Node& node) const override { return check_; }
  absl::StatusOr<std::vector<TensorType>> Infer(
      const Node&, absl::Span<const TensorType* const> inputs) const override {
    ++infers;
    return std::vector<TensorType>{*inputs[0], *inputs[0]};
  }
  absl::Status Compute(const Node&, absl::Span<const Tensor* const> in,
                       absl::Span<Tensor> out) const override {
    ++computes;
    const float* x = in[0]->data<float>();
    const float* bias = in[1]->data<float>();
    for (int64_t i = 0; i < in[0]->num_elements(); ++i) {
      out[1].mutable_data<float>()[i] = x[i] * x[i] * x[i];
      out[0].mutable_data<float>()[i] = x[i] * x[i] * x[i] + bias[i];
    }
    return absl::OkStatus();
  }
  bool has_gradient() const override { return with_gradient_; }
  absl::Status Gradient(const Node&, absl::Span<const Tensor* const> in,
                        absl::Span<const Tensor* const>, absl::Span<const Tensor* const> g,
                        const std::vector<bool>& wants,
                        std::vector<std::optional<Tensor>>& grads) const override {
    ++gradients;
    const int64_t n = in[0]->num_elements();
    for (size_t k = 0; k < 2; ++k) {
      if (!wants[k]) continue;
      absl::StatusOr<Tensor> t = Tensor::Create(tensor::DType::kFloat32, in[k]->shape());
      if (!t.ok()) return t.status();
      for (int64_t i = 0; i < n; ++i) {
        const float x = in[0]->data<float>()[i];
        const float g0 = g[0] ? g[0]->data<float>()[i] : 0.0f;
        const float g1 = g[1] ? g[1]->data<float>()[i] : 0.0f;
        t->mutable_data<float>()[i] = k == 0 ? 3.0f * x * x * (g0 + g1) : g0;
      }
      grads[k] = *std::move(t);
    }
    return absl::OkStatus();
  }

  mutable std::atomic<int> infers{0};
  mutable std::atomic<int> computes{0};
  mutable std::atomic<int> gradients{0};

 private:
  const std::string name_ = "com.acme::Cube";
  const bool with_gradient_;
  const absl::Status check_;
};

class FakeResolver : public CustomOpResolver {
 public:
  explicit FakeResolver(std::shared_ptr<CustomOp> cube, absl::Status status = absl::OkStatus())
      : cube_(std::move(cube)), status_(std::move(status)) {}
  absl::StatusOr<CustomOpMap> Resolve(const std::vector<CustomDomainUse>& uses) const override {
    asked = uses;
    if (!status_.ok()) return status_;
    return CustomOpMap{{"com.acme::Cube", cube_}};
  }
  mutable std::vector<CustomDomainUse> asked;

 private:
  std::shared_ptr<CustomOp> cube_;
  absl::Status status_;
};

// x [2, 3] -> Cube(x, bias) -> (out, cube), out = out + 0 via an Add so that a model has a
// default-domain node after the custom one. `bias_constant`: bias is an initializer (all
// 1), else an input. The model's metadata names `library` for com.acme ("" = none).
inline std::string CubeModel(bool bias_constant, const std::string& library = "/ops/libacme.so",
                             int64_t domain_version = 1, bool x_constant = false) {
  OnnxBuilder b(14);
  if (x_constant) {
    b.Floats("x", {2, 3}, {1, 2, 3, -1, -2, 0.5f});
  } else {
    b.Input("x", kFloat, {2, 3});
  }
  if (bias_constant) {
    b.Floats("bias", {2, 3}, std::vector<float>(6, 1.0f));
  } else {
    b.Input("bias", kFloat, {2, 3});
  }
  b.Floats("zero", {}, {0.0f});
  b.Node("Cube", {"x", "bias"}, {"out", "cube"}, "/Cube_0").set_domain("com.acme");
  b.Node("Add", {"out", "zero"}, {"y"});
  b.Output("y", kFloat).Output("cube", kFloat);
  auto* opset = b.model().add_opset_import();
  opset->set_domain("com.acme");
  opset->set_version(domain_version);
  if (!library.empty()) {
    auto* entry = b.model().add_metadata_props();
    entry->set_key(kCustomOpLibrariesMetadataKey);
    entry->set_value(absl::StrCat("com.acme=", library));
  }
  return b.Bytes();
}

}  // namespace ipupod::graph::testing

#endif  // IPUPOD_TESTS_GRAPH_FAKE_CUSTOM_OPS_H_
