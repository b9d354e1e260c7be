// File: tests/support/models.h
//
// The standard small training models that tests of several layers share,
// as ONNX bytes (tests/device/graph/onnx_builder.h; header-only, so only tests that
// use them link ONNX). Each test passes its own weights so its expected
// numbers stay its own.
//   RegressorModel: y = tanh(x W + bias), loss = mean((y - t)^2);
//     x [rows, 3], t [rows, 2], W [3, 2], bias [2]; outputs y, loss.
//   CounterModel: the seed's CounterModel (PopTorch 4.8) with a loss: the
//     buffer count <- count + 1 on every forward pass (count_next),
//     y = (x W) * count_next, loss = mean((y - t)^2); x [2, 3], t [2, 2];
//     outputs `first_output` ("y" or "count_next"), loss.
//   LinearModel: y = x W + b, x float32[rows, 8], W [8, cols] (a fixed
//     ramp), b [cols] all `bias`; output y, rows x cols floats - the
//     tests of the step paths size a step's messages with it.
//   BufferModel: a buffer `state` float32[elements] (all zero) the model
//     updates in place, state_next = state + 1 (compile it with
//     buffers {"state": "state_next"}), and y = x * mean(state_next),
//     x float32[2, 4]; output y. Its size sets the buffers' bytes.
//
// Thread safety: pure functions.
// Errors: none (the builder aborts on a malformed model, a test bug).
#ifndef IPUPOD_TESTS_SUPPORT_MODELS_H_
#define IPUPOD_TESTS_SUPPORT_MODELS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tests/device/graph/onnx_builder.h"

namespace ipupod::test_support {

// REQUIRES: w.size() == 6.
inline std::string RegressorModel(int64_t rows, const std::vector<float>& w) {
  using graph::testing::kFloat;
  graph::testing::OnnxBuilder b(14);
  b.Input("x", kFloat, {rows, 3}).Input("t", kFloat, {rows, 2});
  b.Floats("W", {3, 2}, w).Floats("bias", {2}, {0.1f, -0.2f});
  b.Floats("two", {}, {2.0f});
  b.Node("MatMul", {"x", "W"}, {"xw"});
  b.Node("Add", {"xw", "bias"}, {"h"});
  b.Node("Tanh", {"h"}, {"y"});
  b.Node("Sub", {"y", "t"}, {"d"});
  b.Node("Pow", {"d", "two"}, {"sq"});
  graph::testing::OnnxBuilder::AttrInt(b.Node("ReduceMean", {"sq"}, {"loss"}), "keepdims", 0);
  b.Output("y", kFloat).Output("loss", kFloat);
  return b.Bytes();
}

// REQUIRES: w.size() == 6; first_output is "y" or "count_next".
inline std::string CounterModel(const std::vector<float>& w,
                                const std::string& first_output = "y") {
  using graph::testing::kFloat;
  graph::testing::OnnxBuilder b(14);
  b.Input("x", kFloat, {2, 3}).Input("t", kFloat, {2, 2});
  b.Floats("W", {3, 2}, w);
  b.Floats("count", {1}, {0.0f}).Floats("one", {1}, {1.0f}).Floats("two", {}, {2.0f});
  b.Node("Add", {"count", "one"}, {"count_next"});
  b.Node("MatMul", {"x", "W"}, {"xw"});
  b.Node("Mul", {"xw", "count_next"}, {"y"});
  b.Node("Sub", {"y", "t"}, {"d"});
  b.Node("Pow", {"d", "two"}, {"sq"});
  graph::testing::OnnxBuilder::AttrInt(b.Node("ReduceMean", {"sq"}, {"loss"}), "keepdims", 0);
  b.Output(first_output, kFloat).Output("loss", kFloat);
  return b.Bytes();
}

inline std::string LinearModel(int64_t rows, int64_t cols, float bias = 0.25f) {
  using graph::testing::kFloat;
  graph::testing::OnnxBuilder b(14);
  b.Input("x", kFloat, {rows, 8});
  std::vector<float> w(static_cast<size_t>(8 * cols));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.01f * static_cast<float>(int(i % 17) - 8);
  b.Floats("W", {8, cols}, w);
  b.Floats("b", {cols}, std::vector<float>(static_cast<size_t>(cols), bias));
  b.Node("MatMul", {"x", "W"}, {"xw"});
  b.Node("Add", {"xw", "b"}, {"y"});
  b.Output("y", kFloat);
  return b.Bytes();
}

// REQUIRES: elements >= 1.
inline std::string BufferModel(int64_t elements) {
  using graph::testing::kFloat;
  graph::testing::OnnxBuilder b(14);
  b.Input("x", kFloat, {2, 4});
  b.Floats("state", {elements}, std::vector<float>(static_cast<size_t>(elements), 0.0f));
  b.Floats("one", {1}, {1.0f});
  b.Node("Add", {"state", "one"}, {"state_next"});
  graph::testing::OnnxBuilder::AttrInt(b.Node("ReduceMean", {"state_next"}, {"m"}), "keepdims", 0);
  b.Node("Mul", {"x", "m"}, {"y"});
  b.Output("y", kFloat);
  return b.Bytes();
}

}  // namespace ipupod::test_support

#endif  // IPUPOD_TESTS_SUPPORT_MODELS_H_
