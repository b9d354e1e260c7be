#include "common/tensor/npy.h"

#include <cstdio>
#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace ipupod::tensor {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A file laid out exactly as numpy 1.24 writes it for np.arange(6, dtype='<f4').reshape(2, 3).
std::string NumpyStyle(absl::string_view dict, absl::string_view data, char major = 1) {
  std::string header(dict);
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(major);
  out.push_back(0);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  if (major != 1) out.append(2, '\0');
  out += header;
  out.append(data.data(), data.size());
  return out;
}

std::string FloatBytes(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

TEST(NpyTest, ParsesNumpyHeaders) {
  auto t = ParseNpy(NumpyStyle("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                               FloatBytes({0, 1, 2, 3, 4, 5})));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->shape(), (Shape{2, 3}));
  EXPECT_THAT(t->values<float>(), ElementsAre(0, 1, 2, 3, 4, 5));
  auto scalar = ParseNpy(NumpyStyle("{'descr': '<i8', 'fortran_order': False, 'shape': (), }",
                                    std::string("\x07\0\0\0\0\0\0\0", 8)));
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(scalar->rank(), 0);
  EXPECT_EQ(scalar->IntAt(0), 7);
  auto v2 = ParseNpy(NumpyStyle("{'shape': (1,), 'descr': '|b1', 'fortran_order': False}",
                                std::string("\x01", 1), 2));
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->dtype(), DType::kBool);
}

TEST(NpyTest, RoundTripsEveryDType) {
  const std::vector<Tensor> tensors = {
      *Tensor::FromValues<float>({2, 2}, std::vector<float>{1, -2, 3.5f, 0}),
      *Tensor::FromValues<int64_t>({3}, std::vector<int64_t>{1, -1, 1LL << 40}),
      *Tensor::FromValues<int32_t>({1, 1}, std::vector<int32_t>{-7}), Tensor::Scalar(true),
      *Tensor::Create(DType::kFloat32, {0, 4})};
  for (const Tensor& t : tensors) {
    const std::string bytes = SerializeNpy(t);
    EXPECT_EQ((bytes.size() - t.byte_size()) % 64, 0u);
    auto back = ParseNpy(bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(*back == t) << t.DebugString();
  }
}

TEST(NpyTest, FilesRoundTrip) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/npy_test.npy");
  const Tensor t = *Tensor::FromValues<float>({3}, std::vector<float>{1, 2, 3});
  ASSERT_TRUE(WriteNpyFile(path, t).ok());
  auto back = ReadNpyFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == t);
  std::remove(path.c_str());
  EXPECT_EQ(ReadNpyFile(path).status().code(), absl::StatusCode::kNotFound);
}

void ExpectRejected(const std::string& bytes, const std::string& needle) {
  auto t = ParseNpy(bytes);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << needle;
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(needle));
}

TEST(NpyTest, RejectsMalformedFiles) {
  const std::string data = FloatBytes({0, 1});
  const std::string good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  ExpectRejected("not numpy at all", "magic");
  ExpectRejected(NumpyStyle(good, data, 4), "format version");
  ExpectRejected(NumpyStyle(good, data).substr(0, 40), "truncated header");
  ExpectRejected(NumpyStyle(good, data + "x"), "data holds 9 bytes");
  ExpectRejected(NumpyStyle(good, data.substr(0, 4)), "data holds 4 bytes");
  ExpectRejected(NumpyStyle("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", data),
                 "dtype '<f8' is not supported");
  ExpectRejected(NumpyStyle("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", data),
                 "dtype '>f4'");
  ExpectRejected(NumpyStyle("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", data),
                 "Fortran-order");
  ExpectRejected(NumpyStyle("{'descr': '<f4', 'shape': (2,), }", data), "lacks");
  ExpectRejected(NumpyStyle("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                            "'shape': (2,), }",
                            data),
                 "repeated");
  ExpectRejected(NumpyStyle("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", data),
                 "non-negative integers");
  ExpectRejected(
      NumpyStyle("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", data),
      "'x' is unknown");
  ExpectRejected(NumpyStyle("{'descr': '|b1', 'fortran_order': False, 'shape': (1,), }",
                            std::string("\x05", 1)),
                 "0 or 1");
  std::string no_newline = NumpyStyle(good, data);
  no_newline[no_newline.size() - data.size() - 1] = ' ';
  ExpectRejected(no_newline, "newline");
}

}  // namespace
}  // namespace ipupod::tensor
