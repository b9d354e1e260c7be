#include "device/kernels/data_movement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/device/kernels/test_util.h"

namespace ipupod::kernels {
namespace {

using ::testing::ElementsAre;

std::vector<float> Iota(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}

TEST(ScatterNDTest, WritesSlicesAndElementsAtTheirIndices) {
  const std::vector<float> x = Iota(6);  // [3, 2]
  // Rows (k = 1): row 2 <- {10, 11}, row -3 (= 0) <- {20, 21}.
  const std::vector<int64_t> rows = {2, -3};
  const std::vector<float> row_updates = {10, 11, 20, 21};
  std::vector<float> out(6);
  ASSERT_TRUE(ScatterND(x.data(), std::vector<int64_t>{3, 2}, {rows.data(), {2, 1}},
                        row_updates.data(), sizeof(float), out.data())
                  .ok());
  EXPECT_THAT(out, ElementsAre(20, 21, 2, 3, 10, 11));
  // Elements (k = 2); a later tuple wins.
  const std::vector<int64_t> cells = {1, 0, 1, 0};
  const std::vector<float> cell_updates = {7, 8};
  ASSERT_TRUE(ScatterND(x.data(), std::vector<int64_t>{3, 2}, {cells.data(), {2, 2}},
                        cell_updates.data(), sizeof(float), out.data())
                  .ok());
  EXPECT_THAT(out, ElementsAre(0, 1, 8, 3, 4, 5));
  // An index outside its dim writes nothing.
  const std::vector<int64_t> bad = {3};
  std::fill(out.begin(), out.end(), -1.0f);
  EXPECT_EQ(ScatterND(x.data(), std::vector<int64_t>{3, 2}, {bad.data(), {1, 1}},
                      row_updates.data(), sizeof(float), out.data())
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out, ElementsAre(-1, -1, -1, -1, -1, -1));
}

TEST(TransposeTest, Permutes3d) {
  const std::vector<float> x = Iota(24);  // [2, 3, 4]
  std::vector<float> out(24);
  ASSERT_TRUE(Transpose(x.data(), std::vector<int64_t>{2, 3, 4}, std::vector<int64_t>{2, 0, 1},
                        sizeof(float), out.data())
                  .ok());
  // out[k][i][j] = x[i][j][k] = 12 i + 4 j + k, out shape [4, 2, 3].
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[1], 4);
  EXPECT_EQ(out[3], 12);
  EXPECT_EQ(out[6], 1);
  EXPECT_EQ(out[23], 23);
  EXPECT_THAT(*TransposedShape(std::vector<int64_t>{2, 3, 4}, std::vector<int64_t>{2, 0, 1}),
              ElementsAre(4, 2, 3));
}

TEST(TransposeTest, RejectsBadPerm) {
  const std::vector<float> x = Iota(6);
  std::vector<float> out(6);
  EXPECT_EQ(Transpose(x.data(), std::vector<int64_t>{2, 3}, std::vector<int64_t>{0, 0},
                      sizeof(float), out.data())
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      Transpose(x.data(), std::vector<int64_t>{2, 3}, std::vector<int64_t>{1, 0}, 3, out.data())
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(ExpandTest, BroadcastsInt64) {
  const std::vector<int64_t> x = {7, 8};  // [2, 1]
  std::vector<int64_t> out(6);
  ASSERT_TRUE(Expand(x.data(), std::vector<int64_t>{2, 1}, std::vector<int64_t>{2, 3},
                     sizeof(int64_t), out.data())
                  .ok());
  EXPECT_THAT(out, ElementsAre(7, 7, 7, 8, 8, 8));
  EXPECT_EQ(Expand(x.data(), std::vector<int64_t>{2, 1}, std::vector<int64_t>{3, 3},
                   sizeof(int64_t), out.data())
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SliceTest, ResolvesOnnxBounds) {
  auto a = *ResolveSliceAxis(1, INT64_MAX, 1, 5);
  EXPECT_EQ(a.start, 1);
  EXPECT_EQ(a.count, 4);
  a = *ResolveSliceAxis(-1, INT64_MIN, -1, 5);  // reverse
  EXPECT_EQ(a.start, 4);
  EXPECT_EQ(a.count, 5);
  a = *ResolveSliceAxis(0, 5, 2, 5);
  EXPECT_EQ(a.count, 3);
  a = *ResolveSliceAxis(-3, -1, 1, 5);
  EXPECT_EQ(a.start, 2);
  EXPECT_EQ(a.count, 2);
  a = *ResolveSliceAxis(4, 2, 1, 5);
  EXPECT_EQ(a.count, 0);
  EXPECT_EQ(ResolveSliceAxis(0, 1, 0, 5).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SliceTest, StridedAndReversed) {
  const std::vector<float> x = Iota(12);  // [3, 4]
  std::vector<float> out(4);
  const SliceAxis rows = *ResolveSliceAxis(0, 3, 2, 3);    // rows 0, 2
  const SliceAxis cols = *ResolveSliceAxis(-1, 0, -2, 4);  // cols 3, 1
  ASSERT_TRUE(Slice(x.data(), std::vector<int64_t>{3, 4}, std::vector<SliceAxis>{rows, cols},
                    sizeof(float), out.data())
                  .ok());
  EXPECT_THAT(out, ElementsAre(3, 1, 11, 9));
  EXPECT_EQ(Slice(x.data(), std::vector<int64_t>{3, 4}, std::vector<SliceAxis>{rows}, sizeof(float),
                  out.data())
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConcatTest, AlongMiddleAxis) {
  const std::vector<float> a = Iota(4);           // [2, 1, 2]
  const std::vector<float> b = {10, 11, 12, 13};  // [2, 1, 2]
  std::vector<float> out(8);
  const std::vector<int64_t> s = {2, 1, 2};
  const void* ins[] = {a.data(), b.data()};
  const Dims shapes[] = {s, s};
  ASSERT_TRUE(Concat(ins, shapes, 1, sizeof(float), out.data()).ok());
  EXPECT_THAT(out, ElementsAre(0, 1, 10, 11, 2, 3, 12, 13));
  const std::vector<int64_t> bad = {3, 1, 2};
  const Dims bad_shapes[] = {s, bad};
  EXPECT_EQ(Concat(ins, bad_shapes, 1, sizeof(float), out.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GatherTest, EmbeddingLookupWithNegativeIndex) {
  const std::vector<float> table = Iota(6);        // [3, 2]
  const std::vector<int64_t> idx = {2, 0, -1, 1};  // [2, 2]
  std::vector<float> out(8);
  ASSERT_TRUE(Gather(table.data(), std::vector<int64_t>{3, 2}, 0,
                     View<int64_t>{idx.data(), std::vector<int64_t>{2, 2}}, sizeof(float),
                     out.data())
                  .ok());
  EXPECT_THAT(out, ElementsAre(4, 5, 0, 1, 4, 5, 2, 3));
}

TEST(GatherTest, InnerAxisAndOutOfRange) {
  const std::vector<int64_t> shape_vec = {2, 8, 32};
  const std::vector<int64_t> idx = {-1};
  std::vector<int64_t> out(1);
  ASSERT_TRUE(Gather(shape_vec.data(), std::vector<int64_t>{3}, 0,
                     View<int64_t>{idx.data(), std::vector<int64_t>{}}, sizeof(int64_t), out.data())
                  .ok());
  EXPECT_EQ(out[0], 32);
  const std::vector<int64_t> bad = {3};
  EXPECT_EQ(Gather(shape_vec.data(), std::vector<int64_t>{3}, 0,
                   View<int64_t>{bad.data(), std::vector<int64_t>{1}}, sizeof(int64_t), out.data())
                .code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<float> m = Iota(6);  // [2, 3], gather columns
  const std::vector<int32_t> cols = {2, 0};
  std::vector<float> o2(4);
  ASSERT_TRUE(Gather(m.data(), std::vector<int64_t>{2, 3}, 1,
                     View<int32_t>{cols.data(), std::vector<int64_t>{2}}, sizeof(float), o2.data())
                  .ok());
  EXPECT_THAT(o2, ElementsAre(2, 0, 5, 3));
}

}  // namespace
}  // namespace ipupod::kernels
