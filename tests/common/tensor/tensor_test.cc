#include "common/tensor/tensor.h"

#include <cstdint>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

namespace ipupod::tensor {
namespace {

using ::testing::ElementsAre;

TEST(TensorTest, CreateIsZeroFilled) {
  auto t = Tensor::Create(DType::kInt64, {2, 3});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->num_elements(), 6);
  EXPECT_EQ(t->byte_size(), 48u);
  EXPECT_THAT(t->values<int64_t>(), ElementsAre(0, 0, 0, 0, 0, 0));
  const Tensor empty;
  EXPECT_EQ(empty.num_elements(), 0);
  EXPECT_EQ(empty.shape(), (Shape{0}));
}

// Storage is no longer value-initialised by std::vector, so Create must zero
// memory a freed tensor left dirty; CreateForOverwrite only sizes it.
TEST(TensorTest, CreateZeroFillsReusedMemoryAndCreateForOverwriteSizes) {
  for (int round = 0; round < 4; ++round) {
    auto dirty = Tensor::CreateForOverwrite(DType::kFloat32, {256, 256});
    ASSERT_TRUE(dirty.ok());
    EXPECT_EQ(dirty->byte_size(), 256u * 256u * 4u);
    float* p = dirty->mutable_data<float>();
    for (int64_t i = 0; i < dirty->num_elements(); ++i) p[i] = 7.0f;
    *dirty = Tensor();  // frees the block for the next allocation
    auto clean = Tensor::Create(DType::kFloat32, {256, 256});
    ASSERT_TRUE(clean.ok());
    for (float v : clean->values<float>()) ASSERT_EQ(v, 0.0f);
  }
  EXPECT_FALSE(Tensor::CreateForOverwrite(DType::kFloat32, {-1}).ok());
}

// Blocks of kPopulatedBytesMin or more arrive with every page present, so
// filling them costs no page fault per 4 KiB; copies and moves keep values.
TEST(TensorTest, LargeTensorsArePopulatedAndBehaveAsValues) {
  const int64_t n = static_cast<int64_t>(internal::kPopulatedBytesMin / sizeof(float)) + 1000;
  auto big = Tensor::CreateForOverwrite(DType::kFloat32, {n});
  ASSERT_TRUE(big.ok()) << big.status();
  const long page = ::sysconf(_SC_PAGESIZE);
  const uintptr_t begin = reinterpret_cast<uintptr_t>(big->raw_data()) & ~uintptr_t(page - 1);
  const size_t length = reinterpret_cast<uintptr_t>(big->raw_data()) + big->byte_size() - begin;
  std::vector<unsigned char> resident((length + page - 1) / page);
  ASSERT_EQ(::mincore(reinterpret_cast<void*>(begin), length, resident.data()), 0);
  size_t present = 0;
  for (unsigned char r : resident) present += r & 1;
  EXPECT_EQ(present, resident.size()) << "pages not yet present before the first write";

  float* values = big->mutable_data<float>();
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 977);
  Tensor copy = *big;
  EXPECT_EQ(copy, *big);
  Tensor moved = std::move(copy);
  EXPECT_EQ(moved.values<float>()[n - 1], static_cast<float>((n - 1) % 977));
  auto zeros = Tensor::Create(DType::kFloat32, {n});
  ASSERT_TRUE(zeros.ok());
  EXPECT_EQ(zeros->values<float>()[n / 2], 0.0f);
}

TEST(TensorTest, FromValuesAndScalar) {
  auto t = Tensor::FromValues<float>({2}, std::vector<float>{1.5f, -2});
  ASSERT_TRUE(t.ok());
  EXPECT_THAT(t->values<float>(), ElementsAre(1.5f, -2));
  const Tensor s = Tensor::Scalar<int64_t>(42);
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.IntAt(0), 42);
  const bool flags[] = {true, false};
  auto b = Tensor::FromValues<bool>({2}, flags);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->IntAt(0), 1);
  EXPECT_EQ(b->IntAt(1), 0);
}

TEST(TensorTest, Errors) {
  EXPECT_EQ(Tensor::Create(DType::kFloat32, {2, -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tensor::Create(DType::kFloat32, {1 << 20, 1 << 20}).status().code(),
            absl::StatusCode::kInvalidArgument);  // 4 TiB
  EXPECT_EQ(Tensor::FromBytes(DType::kFloat32, {2}, "abc").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tensor::FromBytes(DType::kBool, {1}, "\x02").status().code(),
            absl::StatusCode::kInvalidArgument);
  Tensor t = *Tensor::Create(DType::kFloat32, {2, 3});
  EXPECT_EQ(t.Reshape({4}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_TRUE(t.Reshape({3, 2}).ok());
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
}

TEST(TensorTest, ValueSemanticsAndNames) {
  Tensor a = *Tensor::FromValues<int32_t>({2}, std::vector<int32_t>{1, 2});
  Tensor b = a;
  b.mutable_data<int32_t>()[0] = 9;
  EXPECT_EQ(a.values<int32_t>()[0], 1);
  EXPECT_FALSE(a == b);
  EXPECT_EQ(DTypeName(DType::kBool), "bool");
  EXPECT_EQ(DTypeSize(DType::kInt64), 8u);
  EXPECT_EQ(a.DebugString(), "int32[2] {1, 2}");
}

TEST(TensorDeathTest, WrongTypedAccessAborts) {
  const Tensor t = *Tensor::Create(DType::kFloat32, {1});
  EXPECT_DEATH(t.data<int64_t>(), "accessed float32 tensor as int64");
}

TEST(TensorTest, ParseDTypeNameIsTheInverseOfDTypeName) {
  for (DType dtype : {DType::kFloat32, DType::kInt64, DType::kInt32, DType::kBool}) {
    EXPECT_EQ(*ParseDTypeName(DTypeName(dtype)), dtype);
  }
  // Moved from the server's ParseDType test.
  EXPECT_EQ(*ParseDTypeName("float32"), DType::kFloat32);
  EXPECT_EQ(*ParseDTypeName("int64"), DType::kInt64);
  EXPECT_EQ(*ParseDTypeName("int32"), DType::kInt32);
  EXPECT_EQ(*ParseDTypeName("bool"), DType::kBool);
  EXPECT_EQ(ParseDTypeName("f32").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseDTypeName("float16"), DType::kFloat16);
  const absl::Status bad = ParseDTypeName("bfloat16").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()),
              ::testing::HasSubstr("use float32, float16, int64, int32 or bool"));
}

}  // namespace
}  // namespace ipupod::tensor
