// common/tensor/float16.h: IEEE binary16 conversions, rounding to nearest even.
#include "common/tensor/float16.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include <gtest/gtest.h>

#include "common/tensor/tensor.h"

namespace ipupod::tensor {
namespace {

uint16_t Bits(float v) { return ToFloat16(v).bits; }

TEST(Float16Test, RoundsToNearestTiesToEven) {
  EXPECT_EQ(Bits(1.0f), 0x3c00);
  EXPECT_EQ(Bits(-2.5f), 0xc100);
  EXPECT_EQ(Bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // a tie: down to the even 1.0
  EXPECT_EQ(Bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // a tie: up to the even one
  EXPECT_EQ(Bits(1.0f + std::ldexp(1.2f, -11)), 0x3c01);      // past the tie: up
  EXPECT_EQ(Bits(65504.0f), 0x7bff);                          // the largest finite
  EXPECT_EQ(Bits(65519.0f), 0x7bff);
  EXPECT_EQ(Bits(65520.0f), 0x7c00);  // the tie with 65536 rounds to infinity
  EXPECT_EQ(Bits(-1e6f), 0xfc00);
  EXPECT_EQ(Bits(std::ldexp(1.0f, -24)), 0x0001);  // the smallest subnormal
  EXPECT_EQ(Bits(std::ldexp(1.0f, -25)), 0x0000);  // half of it: a tie, to even zero
  EXPECT_EQ(Bits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(Bits(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(ToFloat32(ToFloat16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Float16Test, EveryValueWidensExactlyAndNarrowsBack) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const Float16 h{static_cast<uint16_t>(b)};
    const float f = ToFloat32(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(ToFloat16(f).bits, h.bits) << b;
  }
  EXPECT_EQ(ToFloat32(Float16{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(ToFloat32(Float16{0x7c00}), std::numeric_limits<float>::infinity());
}

TEST(Float16Test, TensorsConvertBetweenTheFloatTypes) {
  auto f = Tensor::FromValues<float>({3}, {1.0f, 1e-8f, 70000.0f});
  ASSERT_TRUE(f.ok());
  auto h = f->ConvertedTo(DType::kFloat16);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->dtype(), DType::kFloat16);
  EXPECT_EQ(h->byte_size(), 6u);
  auto back = h->WidenedToFloat32();
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->values<float>()[0], 1.0f);
  EXPECT_EQ(back->values<float>()[1], 0.0f);  // under float16's smallest subnormal
  EXPECT_TRUE(std::isinf(back->values<float>()[2]));
  EXPECT_EQ(h->DebugString(), "float16[3] {1, 0, inf}");
  EXPECT_EQ(*ParseDTypeName("float16"), DType::kFloat16);
  auto ints = Tensor::FromValues<int64_t>({1}, {1});
  EXPECT_EQ(ints->ConvertedTo(DType::kFloat16).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ipupod::tensor
