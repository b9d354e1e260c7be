#include "device/kernels/matmul.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/device/kernels/test_util.h"

namespace ipupod::kernels {
namespace {

using ::testing::ElementsAre;
using testing::In;
using testing::Out;

std::vector<float> Iota(int n, float start = 1.0f) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

TEST(MatMulTest, PlainMatrices) {
  const std::vector<float> a = Iota(6);  // [[1,2,3],[4,5,6]]
  const std::vector<float> b = Iota(6);  // [[1,2],[3,4],[5,6]]
  std::vector<float> out(4);
  ASSERT_TRUE(MatMul(In(a, {2, 3}), In(b, {3, 2}), Out(out, {2, 2})).ok());
  EXPECT_THAT(out, ElementsAre(22, 28, 49, 64));
}

TEST(MatMulTest, BatchTimesMatrixFoldsIntoOneGemm) {
  const std::vector<float> a = Iota(12);            // [2, 2, 3]
  const std::vector<float> b = {1, 0, 0, 1, 1, 1};  // [3, 2]
  std::vector<float> out(8);
  ASSERT_TRUE(MatMul(In(a, {2, 2, 3}), In(b, {3, 2}), Out(out, {2, 2, 2})).ok());
  EXPECT_THAT(out, ElementsAre(4, 5, 10, 11, 16, 17, 22, 23));
}

TEST(MatMulTest, BroadcastBatchDims) {
  // a: [2, 1, 1, 2], b: [3, 2, 1] -> out [2, 3, 1, 1]
  const std::vector<float> a = {1, 2, 3, 4};
  const std::vector<float> b = {1, 1, 1, 0, 0, 1};
  std::vector<float> out(6);
  ASSERT_TRUE(MatMul(In(a, {2, 1, 1, 2}), In(b, {3, 2, 1}), Out(out, {2, 3, 1, 1})).ok());
  EXPECT_THAT(out, ElementsAre(3, 1, 2, 7, 3, 4));
}

TEST(MatMulTest, OneDimensionalOperands) {
  const std::vector<float> v = {1, 2, 3};
  const std::vector<float> m = Iota(6);  // [3, 2]
  std::vector<float> out(2);
  ASSERT_TRUE(MatMul(In(v, {3}), In(m, {3, 2}), Out(out, {2})).ok());
  EXPECT_THAT(out, ElementsAre(22, 28));
  std::vector<float> dot(1);
  ASSERT_TRUE(MatMul(In(v, {3}), In(v, {3}), Out(dot, {})).ok());
  EXPECT_EQ(dot[0], 14);
  EXPECT_THAT(*MatMulShape(std::vector<int64_t>{5, 2, 3}, std::vector<int64_t>{3}),
              ElementsAre(5, 2));
}

TEST(MatMulTest, ShapeErrors) {
  const std::vector<float> a = Iota(6);
  std::vector<float> out(9);
  EXPECT_EQ(MatMul(In(a, {2, 3}), In(a, {2, 3}), Out(out, {2, 3})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MatMul(In(a, {2, 3}), In(a, {3, 2}), Out(out, {3, 3})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MatMul(In(a, {}), In(a, {3, 2}), Out(out, {2})).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GemmTest, LinearLayerWithTransBAndBias) {
  const std::vector<float> x = Iota(6);             // [2, 3]
  const std::vector<float> w = {1, 0, 0, 1, 1, 1};  // [2, 3] (out, in)
  const std::vector<float> bias = {10, 20};
  std::vector<float> out(4);
  GemmOptions opt;
  opt.trans_b = true;
  ASSERT_TRUE(Gemm(In(x, {2, 3}), In(w, {2, 3}), In(bias, {2}), opt, Out(out, {2, 2})).ok());
  EXPECT_THAT(out, ElementsAre(11, 26, 14, 35));
}

TEST(GemmTest, AlphaBetaTransAAndScalarC) {
  const std::vector<float> a = Iota(6);  // A^T is [3, 2] -> A stored [2, 3]... use transA on [3, 2]
  const std::vector<float> b = {1, 1};   // [2, 1]
  const std::vector<float> c = {100};
  std::vector<float> out(3);
  GemmOptions opt;
  opt.trans_a = true;
  opt.alpha = 2.0f;
  opt.beta = 0.5f;
  // A stored [2, 3] = [[1,2,3],[4,5,6]], op(A) = [3, 2]; op(A) * b = [5, 7, 9].
  ASSERT_TRUE(Gemm(In(a, {2, 3}), In(b, {2, 1}), In(c, {}), opt, Out(out, {3, 1})).ok());
  EXPECT_THAT(out, ElementsAre(60, 64, 68));
  opt.beta = 0.0f;
  ASSERT_TRUE(
      Gemm(In(a, {2, 3}), In(b, {2, 1}), View<float>{nullptr, {}}, opt, Out(out, {3, 1})).ok());
  EXPECT_THAT(out, ElementsAre(10, 14, 18));
}

TEST(GemmTest, CAliasingOutAccumulatesInPlace) {
  const std::vector<float> x = Iota(6);             // [3, 2]: three samples of two features
  const std::vector<float> g = {1, 0, 0, 1, 1, 1};  // [3, 2]
  std::vector<float> w = {10, 20, 30, 40};          // [2, 2]
  GemmOptions opt;
  opt.trans_a = true;  // w += -0.5 * g^T x, the SGD step of a Linear weight
  opt.alpha = -0.5f;
  // g^T x = [[1+5, 2+6], [3+5, 4+6]] = [[6, 8], [8, 10]].
  ASSERT_TRUE(Gemm(In(g, {3, 2}), In(x, {3, 2}), In(w, {2, 2}), opt, Out(w, {2, 2})).ok());
  EXPECT_THAT(w, ElementsAre(7, 16, 26, 35));
  // An aliased C must have out's shape: broadcasting in place is refused.
  EXPECT_EQ(Gemm(In(g, {3, 2}), In(x, {3, 2}), In(w, {2}), opt, Out(w, {2, 2})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(w, ElementsAre(7, 16, 26, 35));
}

TEST(GemmTest, Errors) {
  const std::vector<float> a = Iota(6);
  const std::vector<float> c = {1, 2, 3};
  std::vector<float> out(4);
  GemmOptions opt;
  EXPECT_EQ(
      Gemm(In(a, {2, 3}), In(a, {2, 3}), View<float>{nullptr, {}}, opt, Out(out, {2, 2})).code(),
      absl::StatusCode::kInvalidArgument);
  opt.trans_b = true;
  EXPECT_EQ(Gemm(In(a, {2, 3}), In(a, {2, 3}), In(c, {3}), opt, Out(out, {2, 2})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Gemm(In(a, {6}), In(a, {2, 3}), View<float>{nullptr, {}}, opt, Out(out, {2, 2})).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ipupod::kernels
