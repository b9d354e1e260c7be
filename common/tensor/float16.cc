#include "common/tensor/float16.h"

#include <cstddef>

#include <Imath/half.h>

namespace ipupod::tensor {

float ToFloat32(Float16 value) { return imath_half_to_float(value.bits); }

Float16 ToFloat16(float value) { return Float16{imath_float_to_half(value)}; }

void WidenToFloat32(absl::Span<const Float16> in, float* out) {
  for (size_t i = 0; i < in.size(); ++i) out[i] = imath_half_to_float(in[i].bits);
}

void NarrowToFloat16(absl::Span<const float> in, Float16* out) {
  for (size_t i = 0; i < in.size(); ++i) out[i].bits = imath_float_to_half(in[i]);
}

void RoundThroughFloat16(absl::Span<float> values) {
  for (float& v : values) v = imath_half_to_float(imath_float_to_half(v));
}

}  // namespace ipupod::tensor
