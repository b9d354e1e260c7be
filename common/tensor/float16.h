// File: common/tensor/float16.h
//
// Float16: an IEEE 754 binary16 value as tensors store it (2 bytes,
// little-endian), and the conversions between it and float32. The IPU's
// half type is this one (1 sign, 5 exponent, 10 mantissa bits, subnormals,
// infinities and NaN).
//
// Conversions are Imath's (the library OpenEXR stores its half images
// with): float32 -> float16 rounds to nearest, ties to even; values beyond
// float16's range become infinities; NaN stays NaN. float16 -> float32 is
// exact. With F16C the compiler's instructions do the work.
//
// Thread safety: pure functions.
#ifndef IPUPOD_TENSOR_FLOAT16_H_
#define IPUPOD_TENSOR_FLOAT16_H_

#include <cstdint>

#include "absl/types/span.h"

namespace ipupod::tensor {

struct Float16 {
  uint16_t bits = 0;
};

// The largest finite float16, 65504.
inline constexpr float kFloat16Max = 65504.0f;

float ToFloat32(Float16 value);
Float16 ToFloat16(float value);

// out[i] = ToFloat32(in[i]). REQUIRES: out holds in.size() values.
void WidenToFloat32(absl::Span<const Float16> in, float* out);
// out[i] = ToFloat16(in[i]). REQUIRES: out holds in.size() values.
void NarrowToFloat16(absl::Span<const float> in, Float16* out);
// values[i] = ToFloat32(ToFloat16(values[i])): what storing in float16 keeps.
void RoundThroughFloat16(absl::Span<float> values);

}  // namespace ipupod::tensor

#endif  // IPUPOD_TENSOR_FLOAT16_H_
