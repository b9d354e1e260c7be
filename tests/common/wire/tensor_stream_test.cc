// wire::TensorAssembler, StreamTensors and ForEachChunk: chunking, and every
// malformed stream (INVALID_ARGUMENT from the receiver's point of view).
#include "common/wire/tensor_stream.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/tensors.h"

namespace ipupod::wire {
namespace {

using test_support::Iota;
using ::testing::HasSubstr;

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

v1::TensorHeader Header(const std::string& name, const std::string& dtype,
                        std::vector<int64_t> shape, uint64_t total_bytes) {
  v1::TensorHeader h;
  h.set_name(name);
  h.set_dtype(dtype);
  for (int64_t d : shape) h.add_shape(d);
  h.set_total_bytes(total_bytes);
  return h;
}

tensor::Tensor Big(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return *tensor::Tensor::FromValues<float>({n}, v);
}

TEST(TensorStreamTest, RoundTripsInChunksOfAtMostOneMiB) {
  const tensor::NamedTensors tensors = {
      {"a", Big(700'000)},
      {"empty", *tensor::Tensor::Create(tensor::DType::kInt64, {0})},
      {"s", tensor::Tensor::Scalar<int32_t>(7)}};
  TensorAssembler assembler("weights", int64_t{1} << 30);
  size_t chunks = 0;
  absl::Status s = StreamTensors(
      tensors, [&](const v1::TensorHeader& h) { return assembler.AddHeader(h).ok(); },
      [&](absl::string_view data) {
        ++chunks;
        EXPECT_LE(data.size(), kTensorChunkBytesMax);
        return assembler.AddData(data).ok();
      });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(chunks, 4u);  // 2.8 MB in three chunks, the scalar in one, nothing for empty
  absl::StatusOr<tensor::NamedTensors> back = assembler.Finish();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, tensors);
}

TEST(TensorStreamTest, AFailedWriteCancels) {
  absl::Status s = StreamTensors(
      {{"a", Big(4)}}, [](const v1::TensorHeader&) { return true; },
      [](absl::string_view) { return false; });
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
}

TEST(TensorStreamTest, HeadersAreChecked) {
  TensorAssembler a("weights", 1000);
  EXPECT_THAT(a.AddHeader(Header("w", "bfloat16", {2}, 4)).message(),
              HasSubstr("dtype \"bfloat16\" is not supported; use float32"));
  EXPECT_THAT(a.AddHeader(Header("w", "float32", {2, 3}, 12)).message(),
              HasSubstr("tensor w: total_bytes is 12 but float32[2, 3] holds 24 bytes"));
  EXPECT_EQ(a.AddHeader(Header("w", "float32", {-1}, 0)).code(), kInvalid);
  EXPECT_EQ(a.AddHeader(Header("", "float32", {1}, 4)).code(), kInvalid);
  EXPECT_THAT(a.AddHeader(Header("w", "float32", {251}, 1004)).message(),
              HasSubstr("past 1000 bytes"));
  ASSERT_TRUE(a.AddHeader(Header("w", "int32", {1}, 4)).ok());
  EXPECT_THAT(a.AddHeader(Header("v", "int32", {1}, 4)).message(),
              HasSubstr("before tensor w was complete (0 of 4 bytes)"));
  ASSERT_TRUE(a.AddData(std::string(4, '\0')).ok());
  EXPECT_THAT(a.AddHeader(Header("w", "int32", {1}, 4)).message(), HasSubstr("sent twice"));
}

// Issue 11: zero-byte tensors pass any byte bound; their count is bounded.
TEST(TensorStreamTest, ZeroByteTensorsAreBoundedByCount) {
  TensorAssembler a("weights", 1000);
  for (size_t i = 0; i < kTensorsMax; ++i) {
    ASSERT_TRUE(a.AddHeader(Header(absl::StrCat("e", i), "float32", {0}, 0)).ok()) << i;
  }
  absl::Status over = a.AddHeader(Header("one_more", "float32", {0}, 0));
  EXPECT_EQ(over.code(), kInvalid);
  EXPECT_THAT(over.message(), HasSubstr("the weights carry more than 65536 tensors"));
  auto all = a.Finish();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), kTensorsMax);
}

TEST(TensorStreamTest, DataIsChecked) {
  TensorAssembler a("inputs", int64_t{1} << 30);
  EXPECT_THAT(a.AddData("abcd").message(), HasSubstr("without a TensorHeader"));
  ASSERT_TRUE(a.AddHeader(Header("x", "float32", {2}, 8)).ok());
  EXPECT_THAT(a.AddData(std::string(kTensorChunkBytesMax + 1, 'x')).message(),
              HasSubstr("over the 1 MiB limit"));
  EXPECT_THAT(a.AddData(std::string(9, 'x')).message(), HasSubstr("more data than"));
  ASSERT_TRUE(a.AddData(std::string(4, 'x')).ok());
  EXPECT_THAT(a.Finish().status().message(), HasSubstr("ended inside tensor x: 4 of 8 bytes"));
}

TEST(TensorStreamTest, BoolsMustBeZeroOrOne) {
  TensorAssembler a("inputs", 100);
  ASSERT_TRUE(a.AddHeader(Header("m", "bool", {2}, 2)).ok());
  EXPECT_EQ(a.AddData(std::string("\x01\x02", 2)).code(), kInvalid);
}

// Moved from tests/client/run_steps_test.cc (the client's former assembler).
TEST(TensorStreamTest, ChunksAndReassembles) {
  tensor::Tensor big = Iota({300000});  // 1.2 MB: two chunks
  int chunks = 0;
  TensorAssembler assembler("outputs");
  ASSERT_TRUE(assembler.AddHeader(TensorHeaderOf("big", big)).ok());
  ForEachChunk(big.bytes(), [&](absl::string_view chunk) {
    ++chunks;
    EXPECT_LE(chunk.size(), kTensorChunkBytesMax);
    return assembler.AddData(chunk).ok();
  });
  EXPECT_EQ(chunks, 2);
  auto out = assembler.Finish();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].second, big);
}

// The client's contract violations, now one code for the receiver; the
// client edge reports them as INTERNAL (tests/client/grpc_status_test.cc).
TEST(TensorStreamTest, ContractViolationsAreInvalidArgument) {
  TensorAssembler early("outputs");
  EXPECT_EQ(early.AddData("x").code(), kInvalid);
  TensorAssembler short_data("outputs");
  ASSERT_TRUE(short_data.AddHeader(TensorHeaderOf("t", Iota({4}))).ok());
  ASSERT_TRUE(short_data.AddData("abcd").ok());
  EXPECT_EQ(short_data.Finish().status().code(), kInvalid);
  TensorAssembler too_much("outputs");
  ASSERT_TRUE(too_much.AddHeader(TensorHeaderOf("t", Iota({1}))).ok());
  EXPECT_EQ(too_much.AddData("abcdefgh").code(), kInvalid);
  v1::TensorHeader lying = TensorHeaderOf("t", Iota({4}));
  lying.set_total_bytes(3);
  TensorAssembler bad_header("outputs");
  EXPECT_EQ(bad_header.AddHeader(lying).code(), kInvalid);
}

TEST(TensorStreamTest, HeaderDescribesTheTensor) {
  const v1::TensorHeader h = TensorHeaderOf("x", Iota({2, 3}));
  EXPECT_EQ(h.name(), "x");
  EXPECT_EQ(h.dtype(), "float32");
  EXPECT_THAT(h.shape(), ::testing::ElementsAre(2, 3));
  EXPECT_EQ(h.total_bytes(), 24u);
}

}  // namespace
}  // namespace ipupod::wire
