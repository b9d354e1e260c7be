#include "device/kernels/elementwise.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/kernels/interrupt.h"
#include "device/kernels/shape_util.h"
#include "device/kernels/strided_loop.h"

namespace ipupod::kernels {
namespace {

using internal::BroadcastStrides;
using internal::MakeStridedPlan;
using internal::RunStrided;

// Inner loop specialised on the common unit/zero strides so the compiler can
// vectorise same-shape and scalar-operand cases.
template <typename A, typename B, typename O, typename F>
void BinaryRun(const A* pa, int64_t sa, const B* pb, int64_t sb, O* po, int64_t n, F& f) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
  } else if (sa == 1 && sb == 0) {
    const B vb = *pb;
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], vb);
  } else if (sa == 0 && sb == 1) {
    const A va = *pa;
    for (int64_t i = 0; i < n; ++i) po[i] = f(va, pb[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i * sa], pb[i * sb]);
  }
}

template <typename A, typename B, typename O, typename F>
absl::Status BroadcastBinary(View<A> a, View<B> b, MutableView<O> out, F f) {
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> want, BroadcastShapes(a.shape, b.shape));
  IPUPOD_RETURN_IF_ERROR(CheckShape("elementwise output", out.shape, want));
  const auto plan = MakeStridedPlan<2>(
      out.shape, {BroadcastStrides(a.shape, out.shape), BroadcastStrides(b.shape, out.shape)});
  RunStrided(plan, [&](const auto& base, const auto& step, int64_t o, int64_t n) {
    BinaryRun(a.data + base[0], step[0], b.data + base[1], step[1], out.data + o, n, f);
  });
  return absl::OkStatus();
}

template <typename T, typename F>
absl::Status SameShapeUnary(View<T> in, MutableView<T> out, F f) {
  IPUPOD_RETURN_IF_ERROR(CheckShape("unary output", out.shape, in.shape));
  ForEachChunk(NumElementsUnchecked(in.shape), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out.data[i] = f(in.data[i]);
  });
  return absl::OkStatus();
}

// Integer arithmetic through the unsigned type: defined wrap-around.
template <typename T>
T WrapAdd(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <typename T>
T WrapSub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
}
template <typename T>
T WrapMul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}

template <typename T>
absl::Status CheckIntDivisor(View<T> b) {
  const int64_t n = NumElementsUnchecked(b.shape);
  for (int64_t i = 0; i < n; ++i) {
    if (b.data[i] == 0) return absl::InvalidArgumentError("integer division by zero");
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status IntegerBinary(BinaryOp op, View<T> a, View<T> b, MutableView<T> out) {
  switch (op) {
    case BinaryOp::kAdd:
      return BroadcastBinary(a, b, out, [](T x, T y) { return WrapAdd(x, y); });
    case BinaryOp::kSub:
      return BroadcastBinary(a, b, out, [](T x, T y) { return WrapSub(x, y); });
    case BinaryOp::kMul:
      return BroadcastBinary(a, b, out, [](T x, T y) { return WrapMul(x, y); });
    case BinaryOp::kDiv:
      IPUPOD_RETURN_IF_ERROR(CheckIntDivisor(b));
      // min / -1 overflows; its wrapped value is min itself.
      return BroadcastBinary(
          a, b, out, [](T x, T y) { return (y == -1) ? WrapSub(T{0}, x) : static_cast<T>(x / y); });
    case BinaryOp::kMax:
      return BroadcastBinary(a, b, out, [](T x, T y) { return std::max(x, y); });
    case BinaryOp::kMin:
      return BroadcastBinary(a, b, out, [](T x, T y) { return std::min(x, y); });
    case BinaryOp::kMod:
    case BinaryOp::kFmod: {
      IPUPOD_RETURN_IF_ERROR(CheckIntDivisor(b));
      const bool divisor_sign = op == BinaryOp::kMod;
      return BroadcastBinary(a, b, out, [divisor_sign](T x, T y) {
        if (y == -1) return T{0};  // min % -1 overflows; the remainder is 0
        T r = static_cast<T>(x % y);
        if (divisor_sign && r != 0 && ((r < 0) != (y < 0))) r = static_cast<T>(r + y);
        return r;
      });
    }
    case BinaryOp::kPow:
      break;
  }
  return absl::InvalidArgumentError("Pow is supported on float32 only");
}

// torch's pow(tensor, scalar) special-cases these exponents; matching them
// keeps x.pow(2) in the exported LayerNorm bit-identical to torch.
bool ScalarPow(View<float> a, float e, MutableView<float> out) {
  const int64_t n = NumElementsUnchecked(out.shape);
  const float* x = a.data;
  float* y = out.data;
  auto map = [&](auto f) {
    ForEachChunk(n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = f(x[i]);
    });
  };
  if (e == 2.0f) {
    map([](float v) { return v * v; });
  } else if (e == 3.0f) {
    map([](float v) { return v * v * v; });
  } else if (e == 0.5f) {
    map([](float v) { return std::sqrt(v); });
  } else if (e == -0.5f) {
    map([](float v) { return 1.0f / std::sqrt(v); });
  } else if (e == -1.0f) {
    map([](float v) { return 1.0f / v; });
  } else if (e == -2.0f) {
    map([](float v) { return 1.0f / (v * v); });
  } else {
    return false;
  }
  return true;
}

absl::Status FloatPow(View<float> a, View<float> b, MutableView<float> out) {
  const bool scalar_exponent = NumElementsUnchecked(b.shape) == 1;
  if (scalar_exponent && b.shape.size() <= a.shape.size()) {
    IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> want, BroadcastShapes(a.shape, b.shape));
    IPUPOD_RETURN_IF_ERROR(CheckShape("Pow output", out.shape, want));
    if (ScalarPow(a, b.data[0], out)) return absl::OkStatus();
  }
  return BroadcastBinary(a, b, out, [](float x, float y) { return std::pow(x, y); });
}

absl::Status FloatBinary(BinaryOp op, View<float> a, View<float> b, MutableView<float> out) {
  switch (op) {
    case BinaryOp::kAdd:
      return BroadcastBinary(a, b, out, [](float x, float y) { return x + y; });
    case BinaryOp::kSub:
      return BroadcastBinary(a, b, out, [](float x, float y) { return x - y; });
    case BinaryOp::kMul:
      return BroadcastBinary(a, b, out, [](float x, float y) { return x * y; });
    case BinaryOp::kDiv:
      return BroadcastBinary(a, b, out, [](float x, float y) { return x / y; });
    case BinaryOp::kPow:
      return FloatPow(a, b, out);
    case BinaryOp::kMax:
      return BroadcastBinary(a, b, out, [](float x, float y) { return std::max(x, y); });
    case BinaryOp::kMin:
      return BroadcastBinary(a, b, out, [](float x, float y) { return std::min(x, y); });
    case BinaryOp::kFmod:
      return BroadcastBinary(a, b, out, [](float x, float y) { return std::fmod(x, y); });
    case BinaryOp::kMod:
      break;
  }
  return absl::InvalidArgumentError(
      "Mod of float32 tensors needs fmod=1 (ONNX defines fmod=0 for integers only)");
}

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Order of operations copied from torch.onnx's gelu symbolic (opset 9):
// Div(x, sqrt2) -> Erf -> Add 1 -> Mul x -> Mul 0.5.
float Gelu(float x) {
  constexpr float kSqrt2 = 1.41421356237309504880f;
  return (x * (std::erf(x / kSqrt2) + 1.0f)) * 0.5f;
}

// torch.onnx gelu(approximate='tanh'): half * (x * (one + tanh(beta * (x + kappa * x*x*x)))).
float GeluTanh(float x) {
  constexpr float kBeta = 0.79788456080286535588f;  // sqrt(2 / pi)
  constexpr float kKappa = 0.044715f;
  const float cube = x * (x * x);
  const float inner = kBeta * (x + kKappa * cube);
  return 0.5f * (x * (1.0f + std::tanh(inner)));
}

absl::Status FloatUnary(UnaryOp op, View<float> in, MutableView<float> out) {
  switch (op) {
    case UnaryOp::kNeg:
      return SameShapeUnary(in, out, [](float x) { return -x; });
    case UnaryOp::kAbs:
      return SameShapeUnary(in, out, [](float x) { return std::fabs(x); });
    case UnaryOp::kRelu:
      // Keeps NaN (max would drop it), as torch does.
      return SameShapeUnary(in, out, [](float x) { return x < 0.0f ? 0.0f : x; });
    case UnaryOp::kSqrt:
      return SameShapeUnary(in, out, [](float x) { return std::sqrt(x); });
    case UnaryOp::kExp:
      return SameShapeUnary(in, out, [](float x) { return std::exp(x); });
    case UnaryOp::kLog:
      return SameShapeUnary(in, out, [](float x) { return std::log(x); });
    case UnaryOp::kErf:
      return SameShapeUnary(in, out, [](float x) { return std::erf(x); });
    case UnaryOp::kSigmoid:
      return SameShapeUnary(in, out, Sigmoid);
    case UnaryOp::kTanh:
      return SameShapeUnary(in, out, [](float x) { return std::tanh(x); });
    case UnaryOp::kReciprocal:
      return SameShapeUnary(in, out, [](float x) { return 1.0f / x; });
    case UnaryOp::kGelu:
      return SameShapeUnary(in, out, Gelu);
    case UnaryOp::kGeluTanh:
      return SameShapeUnary(in, out, GeluTanh);
  }
  return absl::InvalidArgumentError("unknown unary op");
}

template <typename T>
absl::Status IntegerUnary(UnaryOp op, View<T> in, MutableView<T> out) {
  switch (op) {
    case UnaryOp::kNeg:
      return SameShapeUnary(in, out, [](T x) { return WrapSub(T{0}, x); });
    case UnaryOp::kAbs:
      return SameShapeUnary(in, out, [](T x) { return x < 0 ? WrapSub(T{0}, x) : x; });
    case UnaryOp::kRelu:
      return SameShapeUnary(in, out, [](T x) { return x < 0 ? T{0} : x; });
    default:
      return absl::InvalidArgumentError("only Neg, Abs and Relu are supported on integer tensors");
  }
}

}  // namespace

template <typename T>
absl::Status Binary(BinaryOp op, View<T> a, View<T> b, MutableView<T> out) {
  if constexpr (std::is_same_v<T, float>) {
    return FloatBinary(op, a, b, out);
  } else {
    return IntegerBinary(op, a, b, out);
  }
}

template <typename T>
absl::Status Compare(CompareOp op, View<T> a, View<T> b, MutableView<bool> out) {
  switch (op) {
    case CompareOp::kEqual:
      return BroadcastBinary(a, b, out, [](T x, T y) { return x == y; });
    case CompareOp::kLess:
      return BroadcastBinary(a, b, out, [](T x, T y) { return x < y; });
    case CompareOp::kGreater:
      return BroadcastBinary(a, b, out, [](T x, T y) { return x > y; });
    case CompareOp::kLessOrEqual:
      return BroadcastBinary(a, b, out, [](T x, T y) { return x <= y; });
    case CompareOp::kGreaterOrEqual:
      return BroadcastBinary(a, b, out, [](T x, T y) { return x >= y; });
  }
  return absl::InvalidArgumentError("unknown compare op");
}

template <typename T>
absl::Status Where(View<bool> cond, View<T> x, View<T> y, MutableView<T> out) {
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> xy, BroadcastShapes(x.shape, y.shape));
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> want, BroadcastShapes(cond.shape, xy));
  IPUPOD_RETURN_IF_ERROR(CheckShape("Where output", out.shape, want));
  const auto plan = MakeStridedPlan<3>(
      out.shape, {BroadcastStrides(cond.shape, out.shape), BroadcastStrides(x.shape, out.shape),
                  BroadcastStrides(y.shape, out.shape)});
  RunStrided(plan, [&](const auto& base, const auto& step, int64_t o, int64_t n) {
    const bool* pc = cond.data + base[0];
    const T* px = x.data + base[1];
    const T* py = y.data + base[2];
    T* po = out.data + o;
    if (step[0] == 1 && step[1] == 1 && step[2] == 1) {
      for (int64_t i = 0; i < n; ++i) po[i] = pc[i] ? px[i] : py[i];
    } else if (step[0] == 1 && step[1] == 0 && step[2] == 1) {  // masked_fill
      const T vx = *px;
      for (int64_t i = 0; i < n; ++i) po[i] = pc[i] ? vx : py[i];
    } else {
      for (int64_t i = 0; i < n; ++i) po[i] = pc[i * step[0]] ? px[i * step[1]] : py[i * step[2]];
    }
  });
  return absl::OkStatus();
}

template <typename T>
absl::Status Unary(UnaryOp op, View<T> in, MutableView<T> out) {
  if constexpr (std::is_same_v<T, float>) {
    return FloatUnary(op, in, out);
  } else {
    return IntegerUnary(op, in, out);
  }
}

absl::Status LogicalNot(View<bool> in, MutableView<bool> out) {
  return SameShapeUnary(in, out, [](bool x) { return !x; });
}

absl::Status Logical(LogicalOp op, View<bool> a, View<bool> b, MutableView<bool> out) {
  switch (op) {
    case LogicalOp::kAnd:
      return BroadcastBinary(a, b, out, [](bool x, bool y) { return x && y; });
    case LogicalOp::kOr:
      return BroadcastBinary(a, b, out, [](bool x, bool y) { return x || y; });
  }
  return absl::InvalidArgumentError("unknown logical op");
}

absl::Status LeakyRelu(float alpha, View<float> in, MutableView<float> out) {
  return SameShapeUnary(in, out, [alpha](float x) { return x >= 0.0f ? x : alpha * x; });
}

absl::Status HardSigmoid(float alpha, float beta, View<float> in, MutableView<float> out) {
  return SameShapeUnary(
      in, out, [alpha, beta](float x) { return std::min(std::max(alpha * x + beta, 0.0f), 1.0f); });
}

absl::Status HardSwish(View<float> in, MutableView<float> out) {
  return SameShapeUnary(
      in, out, [](float x) { return x * std::min(std::max(x / 6.0f + 0.5f, 0.0f), 1.0f); });
}

template <typename T>
absl::Status Clip(T lo, T hi, View<T> in, MutableView<T> out) {
  return SameShapeUnary(in, out, [lo, hi](T x) { return std::min(std::max(x, lo), hi); });
}

template absl::Status Binary<float>(BinaryOp, View<float>, View<float>, MutableView<float>);
template absl::Status Binary<int64_t>(BinaryOp, View<int64_t>, View<int64_t>, MutableView<int64_t>);
template absl::Status Binary<int32_t>(BinaryOp, View<int32_t>, View<int32_t>, MutableView<int32_t>);
template absl::Status Compare<float>(CompareOp, View<float>, View<float>, MutableView<bool>);
template absl::Status Compare<int64_t>(CompareOp, View<int64_t>, View<int64_t>, MutableView<bool>);
template absl::Status Compare<int32_t>(CompareOp, View<int32_t>, View<int32_t>, MutableView<bool>);
template absl::Status Compare<bool>(CompareOp, View<bool>, View<bool>, MutableView<bool>);
template absl::Status Where<float>(View<bool>, View<float>, View<float>, MutableView<float>);
template absl::Status Where<int64_t>(View<bool>, View<int64_t>, View<int64_t>,
                                     MutableView<int64_t>);
template absl::Status Where<int32_t>(View<bool>, View<int32_t>, View<int32_t>,
                                     MutableView<int32_t>);
template absl::Status Where<bool>(View<bool>, View<bool>, View<bool>, MutableView<bool>);
template absl::Status Unary<float>(UnaryOp, View<float>, MutableView<float>);
template absl::Status Unary<int64_t>(UnaryOp, View<int64_t>, MutableView<int64_t>);
template absl::Status Unary<int32_t>(UnaryOp, View<int32_t>, MutableView<int32_t>);
template absl::Status Clip<float>(float, float, View<float>, MutableView<float>);
template absl::Status Clip<int64_t>(int64_t, int64_t, View<int64_t>, MutableView<int64_t>);
template absl::Status Clip<int32_t>(int32_t, int32_t, View<int32_t>, MutableView<int32_t>);

}  // namespace ipupod::kernels
