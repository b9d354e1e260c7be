#include "device/kernels/elementwise.h"

#include <cmath>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/device/kernels/test_util.h"

namespace ipupod::kernels {
namespace {

using testing::BoolBuffer;
using ::testing::ElementsAre;
using ::testing::FloatEq;
using testing::In;
using testing::Out;
using ::testing::Pointwise;

TEST(ElementwiseTest, AddBroadcastsRowAndColumn) {
  const std::vector<float> a = {1, 2, 3};  // [3, 1]
  const std::vector<float> b = {10, 20};   // [2]
  std::vector<float> out(6);
  ASSERT_TRUE(Binary(BinaryOp::kAdd, In(a, {3, 1}), In(b, {2}), Out(out, {3, 2})).ok());
  EXPECT_THAT(out, ElementsAre(11, 21, 12, 22, 13, 23));
}

TEST(ElementwiseTest, SubDivMulSameShapeAndScalar) {
  const std::vector<float> a = {6, 8, 10, 12};
  const std::vector<float> s = {2};
  std::vector<float> out(4);
  ASSERT_TRUE(Binary(BinaryOp::kDiv, In(a, {2, 2}), In(s, {}), Out(out, {2, 2})).ok());
  EXPECT_THAT(out, ElementsAre(3, 4, 5, 6));
  ASSERT_TRUE(Binary(BinaryOp::kSub, In(s, {}), In(a, {2, 2}), Out(out, {2, 2})).ok());
  EXPECT_THAT(out, ElementsAre(-4, -6, -8, -10));
  ASSERT_TRUE(Binary(BinaryOp::kMul, In(a, {2, 2}), In(a, {2, 2}), Out(out, {2, 2})).ok());
  EXPECT_THAT(out, ElementsAre(36, 64, 100, 144));
}

TEST(ElementwiseTest, ModTakesTheDivisorsSignAndFmodTheDividends) {
  const std::vector<int64_t> a = {7, -7, 7, -7, 6}, b = {3, 3, -3, -3, -1};
  std::vector<int64_t> out(5);
  ASSERT_TRUE(Binary(BinaryOp::kMod, In(a, {5}), In(b, {5}), Out(out, {5})).ok());
  EXPECT_EQ(out, std::vector<int64_t>({1, 2, -2, -1, 0}));  // Python's %
  ASSERT_TRUE(Binary(BinaryOp::kFmod, In(a, {5}), In(b, {5}), Out(out, {5})).ok());
  EXPECT_EQ(out, std::vector<int64_t>({1, -1, 1, -1, 0}));  // C's %
  const std::vector<int64_t> zero = {0};
  EXPECT_EQ(Binary(BinaryOp::kMod, In(a, {5}), In(zero, {}), Out(out, {5})).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<float> x = {5.5f, -5.5f}, y = {2.0f};
  std::vector<float> f(2);
  ASSERT_TRUE(Binary(BinaryOp::kFmod, In(x, {2}), In(y, {}), Out(f, {2})).ok());
  EXPECT_EQ(f, std::vector<float>({1.5f, -1.5f}));
  EXPECT_EQ(Binary(BinaryOp::kMod, In(x, {2}), In(y, {}), Out(f, {2})).code(),
            absl::StatusCode::kInvalidArgument);  // float Mod needs fmod=1
}

TEST(ElementwiseTest, MiddleAxisBroadcast) {
  std::vector<float> a(2 * 3 * 2);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i);
  const std::vector<float> b = {100, 200, 300};  // [1, 3, 1]
  std::vector<float> out(12);
  ASSERT_TRUE(Binary(BinaryOp::kAdd, In(a, {2, 3, 2}), In(b, {1, 3, 1}), Out(out, {2, 3, 2})).ok());
  EXPECT_THAT(out, ElementsAre(100, 101, 202, 203, 304, 305, 106, 107, 208, 209, 310, 311));
}

TEST(ElementwiseTest, PowSpecialExponentsMatchExactForms) {
  const std::vector<float> a = {1.5f, -2.0f, 3.0f};
  std::vector<float> out(3);
  const std::vector<float> two = {2.0f};
  ASSERT_TRUE(Binary(BinaryOp::kPow, In(a, {3}), In(two, {1}), Out(out, {3})).ok());
  EXPECT_THAT(out, ElementsAre(2.25f, 4.0f, 9.0f));
  const std::vector<float> e = {0.5f, 3.0f, -1.0f};
  ASSERT_TRUE(Binary(BinaryOp::kPow, In(a, {3}), In(e, {3}), Out(out, {3})).ok());
  EXPECT_FLOAT_EQ(out[0], std::sqrt(1.5f));
  EXPECT_FLOAT_EQ(out[1], -8.0f);
  EXPECT_FLOAT_EQ(out[2], 1.0f / 3.0f);
}

TEST(ElementwiseTest, IntegerArithmetic) {
  const std::vector<int64_t> a = {7, -7, 9};
  const std::vector<int64_t> b = {2};
  std::vector<int64_t> out(3);
  ASSERT_TRUE(Binary(BinaryOp::kDiv, In(a, {3}), In(b, {1}), Out(out, {3})).ok());
  EXPECT_THAT(out, ElementsAre(3, -3, 4));  // truncation, as ONNX Runtime
  const std::vector<int64_t> big = {std::numeric_limits<int64_t>::max()};
  std::vector<int64_t> one_out(1);
  ASSERT_TRUE(Binary(BinaryOp::kAdd, In(big, {1}), In(big, {1}), Out(one_out, {1})).ok());
  EXPECT_EQ(one_out[0], -2);  // wraps, no UB
}

TEST(ElementwiseTest, IntegerDivisionByZeroIsRejected) {
  const std::vector<int64_t> a = {1, 2};
  const std::vector<int64_t> zero = {0};
  std::vector<int64_t> out = {5, 5};
  const absl::Status s = Binary(BinaryOp::kDiv, In(a, {2}), In(zero, {1}), Out(out, {2}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out, ElementsAre(5, 5));
  const std::vector<int64_t> e = {2};
  EXPECT_EQ(Binary(BinaryOp::kPow, In(a, {2}), In(e, {1}), Out(out, {2})).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ElementwiseTest, ShapeErrors) {
  const std::vector<float> a = {1, 2, 3};
  const std::vector<float> b = {1, 2};
  std::vector<float> out(6);
  EXPECT_EQ(Binary(BinaryOp::kAdd, In(a, {3}), In(b, {2}), Out(out, {3})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Binary(BinaryOp::kAdd, In(a, {3}), In(a, {3}), Out(out, {6})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Unary(UnaryOp::kExp, In(a, {3}), Out(out, {2, 3})).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ElementwiseTest, CompareAndWhere) {
  const std::vector<int64_t> a = {1, 2, 3, 4};
  const std::vector<int64_t> b = {2};
  BoolBuffer eq(4);
  ASSERT_TRUE(Compare(CompareOp::kEqual, In(a, {2, 2}), In(b, {}),
                      MutableView<bool>{eq.data.get(), std::vector<int64_t>{2, 2}})
                  .ok());
  EXPECT_THAT(eq.ToInts(), ElementsAre(0, 1, 0, 0));
  BoolBuffer gt(4);
  ASSERT_TRUE(Compare(CompareOp::kGreater, In(a, {2, 2}), In(b, {}),
                      MutableView<bool>{gt.data.get(), std::vector<int64_t>{2, 2}})
                  .ok());
  EXPECT_THAT(gt.ToInts(), ElementsAre(0, 0, 1, 1));

  BoolBuffer cond({1, 0});                 // [2, 1]
  const std::vector<float> x = {1, 2, 3};  // [3]
  const std::vector<float> y = {-std::numeric_limits<float>::infinity()};
  std::vector<float> out(6);
  ASSERT_TRUE(Where(View<bool>{cond.data.get(), std::vector<int64_t>{2, 1}}, In(x, {3}), In(y, {}),
                    Out(out, {2, 3}))
                  .ok());
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[2], 3);
  EXPECT_TRUE(std::isinf(out[3]) && out[3] < 0);
  EXPECT_EQ(Where(View<bool>{cond.data.get(), std::vector<int64_t>{2}}, In(x, {3}), In(y, {}),
                  Out(out, {2, 3}))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ElementwiseTest, OrderedComparisonsIncludeEqualValues) {
  const std::vector<float> a = {1.0f, 2.0f, 3.0f};
  const std::vector<float> b = {2.0f};
  BoolBuffer ge(3), le(3);
  ASSERT_TRUE(Compare(CompareOp::kGreaterOrEqual, In(a, {3}), In(b, {}),
                      MutableView<bool>{ge.data.get(), std::vector<int64_t>{3}})
                  .ok());
  EXPECT_THAT(ge.ToInts(), ElementsAre(0, 1, 1));
  ASSERT_TRUE(Compare(CompareOp::kLessOrEqual, In(a, {3}), In(b, {}),
                      MutableView<bool>{le.data.get(), std::vector<int64_t>{3}})
                  .ok());
  EXPECT_THAT(le.ToInts(), ElementsAre(1, 1, 0));
}

TEST(ElementwiseTest, LogicalAndOrBroadcast) {
  BoolBuffer a({1, 0, 1, 0});  // [2, 2]
  BoolBuffer b({1, 0});        // [2, 1]
  BoolBuffer both(4), either(4);
  const std::vector<int64_t> a_shape = {2, 2}, b_shape = {2, 1};  // views do not own shapes
  const View<bool> va{a.data.get(), a_shape};
  const View<bool> vb{b.data.get(), b_shape};
  ASSERT_TRUE(Logical(LogicalOp::kAnd, va, vb,
                      MutableView<bool>{both.data.get(), std::vector<int64_t>{2, 2}})
                  .ok());
  EXPECT_THAT(both.ToInts(), ElementsAre(1, 0, 0, 0));
  ASSERT_TRUE(Logical(LogicalOp::kOr, va, vb,
                      MutableView<bool>{either.data.get(), std::vector<int64_t>{2, 2}})
                  .ok());
  EXPECT_THAT(either.ToInts(), ElementsAre(1, 1, 1, 0));
  EXPECT_EQ(
      Logical(LogicalOp::kOr, va, vb, MutableView<bool>{either.data.get(), std::vector<int64_t>{4}})
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(ElementwiseTest, UnaryMath) {
  const std::vector<float> x = {-1.0f, 0.0f, 0.5f, 2.0f};
  std::vector<float> out(4);
  ASSERT_TRUE(Unary(UnaryOp::kRelu, In(x, {4}), Out(out, {4})).ok());
  EXPECT_THAT(out, ElementsAre(0, 0, 0.5f, 2.0f));
  ASSERT_TRUE(Unary(UnaryOp::kErf, In(x, {4}), Out(out, {4})).ok());
  EXPECT_THAT(out, Pointwise(FloatEq(), std::vector<float>{std::erf(-1.0f), 0.0f, std::erf(0.5f),
                                                           std::erf(2.0f)}));
  ASSERT_TRUE(Unary(UnaryOp::kSigmoid, In(x, {4}), Out(out, {4})).ok());
  EXPECT_FLOAT_EQ(out[1], 0.5f);
  EXPECT_FLOAT_EQ(out[3], 1.0f / (1.0f + std::exp(-2.0f)));
  ASSERT_TRUE(Unary(UnaryOp::kTanh, In(x, {4}), Out(out, {4})).ok());
  EXPECT_FLOAT_EQ(out[0], std::tanh(-1.0f));
  ASSERT_TRUE(Unary(UnaryOp::kNeg, In(x, {4}), Out(out, {4})).ok());
  EXPECT_THAT(out, ElementsAre(1.0f, -0.0f, -0.5f, -2.0f));
  const std::vector<float> pos = {4.0f, 0.25f};
  std::vector<float> o2(2);
  ASSERT_TRUE(Unary(UnaryOp::kSqrt, In(pos, {2}), Out(o2, {2})).ok());
  EXPECT_THAT(o2, ElementsAre(2.0f, 0.5f));
  ASSERT_TRUE(Unary(UnaryOp::kReciprocal, In(pos, {2}), Out(o2, {2})).ok());
  EXPECT_THAT(o2, ElementsAre(0.25f, 4.0f));
}

TEST(ElementwiseTest, GeluMatchesTorchDecomposition) {
  const std::vector<float> x = {-3.0f, -0.5f, 0.0f, 0.7f, 2.5f};
  std::vector<float> out(5);
  ASSERT_TRUE(Unary(UnaryOp::kGelu, In(x, {5}), Out(out, {5})).ok());
  for (size_t i = 0; i < x.size(); ++i) {
    // Div(x, sqrt2) -> Erf -> Add 1 -> Mul x -> Mul 0.5, all in float.
    const float want = (x[i] * (std::erf(x[i] / 1.41421356f) + 1.0f)) * 0.5f;
    EXPECT_EQ(out[i], want) << i;
  }
  EXPECT_NEAR(out[3], 0.7f * 0.5f * (1.0f + std::erf(0.7f / std::sqrt(2.0f))), 1e-7);
  ASSERT_TRUE(Unary(UnaryOp::kGeluTanh, In(x, {5}), Out(out, {5})).ok());
  EXPECT_NEAR(out[4], 2.5 * 0.5 * (1 + std::tanh(std::sqrt(2 / M_PI) * (2.5 + 0.044715 * 15.625))),
              1e-6);
}

TEST(ElementwiseTest, IntegerUnaryAndClip) {
  const std::vector<int64_t> x = {-3, 4};
  std::vector<int64_t> out(2);
  ASSERT_TRUE(Unary(UnaryOp::kNeg, In(x, {2}), Out(out, {2})).ok());
  EXPECT_THAT(out, ElementsAre(3, -4));
  EXPECT_EQ(Unary(UnaryOp::kExp, In(x, {2}), Out(out, {2})).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<float> f = {-2.0f, 0.5f, 9.0f};
  std::vector<float> fo(3);
  ASSERT_TRUE(Clip(0.0f, 6.0f, In(f, {3}), Out(fo, {3})).ok());
  EXPECT_THAT(fo, ElementsAre(0.0f, 0.5f, 6.0f));
  ASSERT_TRUE(LeakyRelu(0.1f, In(f, {3}), Out(fo, {3})).ok());
  EXPECT_THAT(fo, ElementsAre(-0.2f, 0.5f, 9.0f));
  BoolBuffer b({1, 0});
  BoolBuffer nb(2);
  ASSERT_TRUE(LogicalNot(View<bool>{b.data.get(), std::vector<int64_t>{2}},
                         MutableView<bool>{nb.data.get(), std::vector<int64_t>{2}})
                  .ok());
  EXPECT_THAT(nb.ToInts(), ElementsAre(0, 1));
}

}  // namespace
}  // namespace ipupod::kernels
