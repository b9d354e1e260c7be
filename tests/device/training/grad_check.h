// File: tests/device/training/grad_check.h
//
// Test helper: builds a one-op (or few-op) ONNX graph whose trainable
// weights feed the op under test, adds loss = sum(y * r) with a fixed random
// r, and checks Autodiff's gradients against central finite differences of
// sum(y * r) accumulated in double from the forward outputs.
//
// Each weight W enters the graph as Mul(W, one) with `one` a runtime input
// (fed 1.0): otherwise graph import would constant-fold the op away.
#ifndef IPUPOD_TESTS_TRAINING_GRAD_CHECK_H_
#define IPUPOD_TESTS_TRAINING_GRAD_CHECK_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "device/graph/onnx_import.h"
#include "device/training/autodiff.h"
#include "tests/device/graph/onnx_builder.h"

namespace ipupod::training::testing {

using graph::testing::kFloat;
using graph::testing::kInt64;
using graph::testing::OnnxBuilder;

// Deterministic values in [lo, hi).
inline std::vector<float> RandomValues(int64_t n, float lo, float hi, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (float& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = lo + (hi - lo) * static_cast<float>((s >> 40) & 0xffffff) / 16777216.0f;
  }
  return v;
}

inline int64_t Count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

class GradCase {
 public:
  explicit GradCase(int64_t opset) : b_(opset) {
    b_.Input("one", kFloat, {1});
    inputs_.push_back(*tensor::Tensor::FromValues<float>({1}, std::vector<float>{1.0f}));
  }

  OnnxBuilder& builder() { return b_; }

  // A trainable weight with the given values; returns its non-constant alias.
  std::string Weight(const std::string& name, const std::vector<int64_t>& shape,
                     const std::vector<float>& values) {
    b_.Floats(name, shape, values);
    b_.Node("Mul", {name, "one"}, {name + "_"});
    weights_.push_back(name);
    return name + "_";
  }
  std::string RandomWeight(const std::string& name, const std::vector<int64_t>& shape,
                           float lo = -1.0f, float hi = 1.0f) {
    return Weight(name, shape, RandomValues(Count(shape), lo, hi, weights_.size() + 7));
  }

  // A runtime int64 input (indices, labels).
  void IntInput(const std::string& name, const std::vector<int64_t>& shape,
                const std::vector<int64_t>& values) {
    b_.Input(name, kInt64, shape);
    inputs_.push_back(*tensor::Tensor::FromValues<int64_t>(shape, values));
  }

  // loss = ReduceSum(y * r): the op's output `y` of `shape` weighted by r.
  void Finish(const std::string& y, const std::vector<int64_t>& shape) {
    b_.Floats("r", shape, RandomValues(Count(shape), -1.0f, 1.0f, 99));
    b_.Node("Mul", {y, "r"}, {"yr"});
    auto& sum = b_.Node("ReduceSum", {"yr"}, {"loss"});
    OnnxBuilder::AttrInt(sum, "keepdims", 0);
    b_.Output(y, kFloat).Output("loss", kFloat);
  }

  const std::vector<std::string>& weights() const { return weights_; }
  const std::vector<tensor::Tensor>& inputs() const { return inputs_; }

 private:
  OnnxBuilder b_;
  std::vector<std::string> weights_;
  std::vector<tensor::Tensor> inputs_;
};

// sum(y * r) in double from the forward outputs (y is output 0).
inline double WeightedSum(const Autodiff& ad, const std::vector<tensor::Tensor>& inputs,
                          const TensorMap& weights) {
  auto out = ad.Forward(inputs, weights);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return NAN;
  const tensor::Tensor& r = ad.graph().initializers.at("r");
  double sum = 0;
  for (int64_t i = 0; i < r.num_elements(); ++i) {
    sum += double{(*out)[0].data<float>()[i]} * r.data<float>()[i];
  }
  return sum;
}

// Compares every weight's gradient (up to 48 elements each) with central
// differences; eps 1e-2 in fp32, tolerance |ad - fd| <= 3e-3 + 1e-2 |fd|.
// `custom_ops` resolves the model's custom ops (device/graph/custom_ops.h), if it has any.
inline void ExpectGradientsMatch(GradCase& c, double eps = 1e-2,
                                 const graph::CustomOpResolver* custom_ops = nullptr) {
  auto graph = graph::ImportOnnx(c.builder().Bytes(), {}, custom_ops);
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto ad = Autodiff::Create(*graph, "loss", c.weights());
  ASSERT_TRUE(ad.ok()) << ad.status();
  const TensorMap weights = (*ad)->InitialWeights();
  auto result = (*ad)->Run(c.inputs(), weights);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->backward_flops, 0);
  EXPECT_NEAR(result->loss, WeightedSum(**ad, c.inputs(), weights),
              1e-4 + 1e-5 * std::fabs(result->loss));
  for (const std::string& name : c.weights()) {
    ASSERT_TRUE(result->gradients.contains(name)) << name << " got no gradient";
    const tensor::Tensor& grad = result->gradients.at(name);
    ASSERT_EQ(grad.shape(), weights.at(name).shape()) << name;
    const int64_t n = grad.num_elements();
    const int64_t stride = n > 48 ? n / 48 : 1;
    double worst = 0;
    for (int64_t i = 0; i < n; i += stride) {
      TensorMap plus = weights, minus = weights;
      float& up = plus.at(name).mutable_data<float>()[i];
      float& down = minus.at(name).mutable_data<float>()[i];
      up += static_cast<float>(eps);
      down -= static_cast<float>(eps);
      const double fd =
          (WeightedSum(**ad, c.inputs(), plus) - WeightedSum(**ad, c.inputs(), minus)) /
          (double{up} - double{down});
      const double got = grad.data<float>()[i];
      const double err = std::fabs(got - fd);
      worst = std::max(worst, err / (3e-3 + 1e-2 * std::fabs(fd)));
      EXPECT_LE(err, 3e-3 + 1e-2 * std::fabs(fd))
          << name << "[" << i << "]: autodiff " << got << ", finite difference " << fd;
    }
    std::printf("%s: worst error %.3f of tolerance\n", name.c_str(), worst);
  }
}

}  // namespace ipupod::training::testing

#endif  // IPUPOD_TESTS_TRAINING_GRAD_CHECK_H_
