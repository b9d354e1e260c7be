// File: device/kernels/elementwise.h
//
// Elementwise kernels with numpy broadcasting: binary arithmetic, comparisons,
// Where, unary math, and the activations torch exports (ReLU, sigmoid, tanh,
// erf-GELU exactly as torch.onnx decomposes it).
//
// Every kernel checks that the operand shapes broadcast to the output shape
// it is given and returns INVALID_ARGUMENT otherwise (nothing is written).
// Integer division by zero is INVALID_ARGUMENT too; integer Add/Sub/Mul wrap
// (two's complement) instead of invoking undefined behaviour.
//
// Thread safety: pure functions; single-threaded.
#ifndef IPUPOD_KERNELS_ELEMENTWISE_H_
#define IPUPOD_KERNELS_ELEMENTWISE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "device/kernels/view.h"

namespace ipupod::kernels {

// kMod: the remainder with the divisor's sign (ONNX Mod, fmod 0; Python's %),
// integers only; kFmod: with the dividend's sign (C fmod; ONNX Mod, fmod 1).
enum class BinaryOp { kAdd, kSub, kMul, kDiv, kPow, kMax, kMin, kMod, kFmod };
enum class CompareOp { kEqual, kLess, kGreater, kLessOrEqual, kGreaterOrEqual };
enum class LogicalOp { kAnd, kOr };
enum class UnaryOp {
  kNeg,
  kAbs,
  kRelu,  // also on integers
  kSqrt,
  kExp,
  kLog,
  kErf,
  kSigmoid,
  kTanh,
  kReciprocal,
  kGelu,      // x * (erf(x / sqrt(2)) + 1) * 0.5, in torch's export order
  kGeluTanh,  // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
};

// out = a <op> b. T is float, int64_t or int32_t. kPow is float-only, kMod integer-only;
// an integer kDiv, kMod or kFmod by zero is INVALID_ARGUMENT.
// Float kPow with a one-element exponent of 2, 3, 0.5, -0.5, -1 or -2 uses
// the same exact forms as torch (x*x, x*x*x, sqrt, ...).
template <typename T>
absl::Status Binary(BinaryOp op, View<T> a, View<T> b, MutableView<T> out);

// out = a <op> b as bool. T is float, int64_t, int32_t or bool.
template <typename T>
absl::Status Compare(CompareOp op, View<T> a, View<T> b, MutableView<bool> out);

// out = cond ? x : y. T is float, int64_t, int32_t or bool.
template <typename T>
absl::Status Where(View<bool> cond, View<T> x, View<T> y, MutableView<T> out);

// out = op(in), same shape. T is float; int64_t/int32_t allow kNeg, kAbs, kRelu.
template <typename T>
absl::Status Unary(UnaryOp op, View<T> in, MutableView<T> out);

// out = !in, same shape.
absl::Status LogicalNot(View<bool> in, MutableView<bool> out);

// out = a && b (kAnd) or a || b (kOr), broadcasting.
absl::Status Logical(LogicalOp op, View<bool> a, View<bool> b, MutableView<bool> out);

// out = x >= 0 ? x : alpha * x, same shape.
absl::Status LeakyRelu(float alpha, View<float> in, MutableView<float> out);

// ONNX HardSigmoid: out = max(0, min(1, alpha * x + beta)); HardSwish (torch's
// hardswish, alpha 1/6 and beta 0.5): out = x * HardSigmoid(x).
absl::Status HardSigmoid(float alpha, float beta, View<float> in, MutableView<float> out);
absl::Status HardSwish(View<float> in, MutableView<float> out);

// out = min(max(x, lo), hi), same shape. REQUIRES nothing of lo <= hi: like
// ONNX and torch, hi wins when lo > hi.
template <typename T>
absl::Status Clip(T lo, T hi, View<T> in, MutableView<T> out);

}  // namespace ipupod::kernels

#endif  // IPUPOD_KERNELS_ELEMENTWISE_H_
