// Hostile tensor files, crafted here: archives whose declared sizes lie
// (zip64 or not), a deflate bomb, truncated headers, absurd shapes and
// offsets. Each must end in INVALID_ARGUMENT or RESOURCE_EXHAUSTED naming
// what is wrong - never an exception, an abort, or memory the file does not
// justify. Peak memory is measured with /proc/self/status's VmHWM, reset
// through /proc/self/clear_refs before each measured read.
#include "tests/support/hostile_files.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/tensor/npy.h"
#include "common/tensor/tensor_files.h"
#include "tests/device/graph/onnx_builder.h"
#include <zlib.h>

namespace ipupod::tensor {
namespace {

using test_support::DeflateZeros;
using test_support::NpyHeader;
using test_support::NpyHeaderWithShape;
using test_support::PutLe;
using test_support::Zip;
using test_support::ZipMember;
using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

void ExpectCode(const absl::Status& s, absl::StatusCode code, const std::string& text) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(text));
}

// ---- peak resident memory ------------------------------------------------

std::optional<int64_t> StatusKb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    int64_t kb = 0;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits += c;
    }
    if (absl::SimpleAtoi(digits, &kb)) return kb;
  }
  return std::nullopt;
}

// Peak RSS growth over what was resident at construction, in bytes;
// nullopt where the kernel does not let a process reset its peak.
class PeakGrowth {
 public:
  PeakGrowth() {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    clear.flush();
    base_ = StatusKb("VmRSS:");
    ok_ = clear.good() && base_.has_value();
  }
  std::optional<int64_t> Bytes() const {
    std::optional<int64_t> peak = StatusKb("VmHWM:");
    if (!ok_ || !peak) return std::nullopt;
    return (*peak - *base_) * 1024;
  }

 private:
  std::optional<int64_t> base_;
  bool ok_ = false;
};

void ExpectPeakBelow(const PeakGrowth& growth, int64_t bound) {
  std::optional<int64_t> bytes = growth.Bytes();
  if (!bytes) {
    GTEST_LOG_(WARNING) << "cannot reset the peak RSS here; memory bound not checked";
    return;
  }
  EXPECT_LT(*bytes, bound) << "peak RSS grew by " << *bytes / kMiB << " MiB";
}

// ---- .npz -----------------------------------------------------------------

TEST(HostileFilesTest, Zip64MemberWithALyingSizeIsRefusedBeforeAllocating) {
  uint32_t crc = 0;
  ZipMember m;
  m.data = DeflateZeros(NpyHeader(4), 16, crc);
  m.crc = crc;
  m.zip64 = true;
  m.uncompressed = uint64_t{1} << 62;  // an exabyte or four from a few bytes
  PeakGrowth growth;
  ExpectCode(ParseNpz(Zip(m)).status(), absl::StatusCode::kInvalidArgument,
             "more than deflate can produce");
  ExpectPeakBelow(growth, 16 * kMiB);
}

TEST(HostileFilesTest, TinyArchiveDeclaringGigabytesTouchesNone) {
  uint32_t crc = 0;
  ZipMember m;
  m.data = DeflateZeros(NpyHeader(4), 16, crc);
  m.crc = crc;
  m.uncompressed = 0xfffffff0u;  // 4 GB, without zip64
  const std::string zip = Zip(m);
  ASSERT_LT(zip.size(), 200u);
  PeakGrowth growth;
  ExpectCode(ParseNpz(zip).status(), absl::StatusCode::kInvalidArgument,
             "more than deflate can produce");
  ExpectPeakBelow(growth, 16 * kMiB);
}

TEST(HostileFilesTest, DeflateBombCostsItsTensorOnceAndHonoursTheLimit) {
  constexpr int64_t kFloats = 32 * kMiB;  // 128 MiB of float32 zeros
  uint32_t crc = 0;
  const std::string header = NpyHeader(kFloats);
  ZipMember m;
  m.data = DeflateZeros(header, kFloats * 4, crc);
  m.crc = crc;
  m.uncompressed = header.size() + kFloats * 4;
  const std::string zip = Zip(m);
  ASSERT_LT(zip.size(), 1u << 20) << "a bomb: under 1 MiB for 128 MiB";

  {  // Read whole: one copy of the tensor, not a buffer and then a tensor.
    PeakGrowth growth;
    absl::StatusOr<NamedTensors> out = ParseNpz(zip);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ((*out)[0].second.num_elements(), kFloats);
    ExpectPeakBelow(growth, 128 * kMiB + 48 * kMiB);
  }
  PeakGrowth growth;
  ExpectCode(ParseNpz(zip, {.bytes_max = 64 * kMiB}).status(), absl::StatusCode::kResourceExhausted,
             "over the limit of 67108864 bytes");
  ExpectPeakBelow(growth, 16 * kMiB);
}

TEST(HostileFilesTest, StreamLongerOrShorterThanDeclaredIsCorrupt) {
  uint32_t crc = 0;
  ZipMember m;
  m.data = DeflateZeros(NpyHeader(4), 64 * kMiB, crc);  // says 16 data bytes, holds 64 MiB
  m.crc = crc;
  m.uncompressed = NpyHeader(4).size() + 16;
  PeakGrowth growth;
  ExpectCode(ParseNpz(Zip(m)).status(), absl::StatusCode::kInvalidArgument,
             "does not inflate to its recorded");
  ExpectPeakBelow(growth, 16 * kMiB);
  m.data = DeflateZeros(NpyHeader(4), 8, crc);  // half the data it needs
  ExpectCode(ParseNpz(Zip(m)).status(), absl::StatusCode::kInvalidArgument,
             "does not inflate to its recorded");
}

TEST(HostileFilesTest, MemberWhoseHeaderDisagreesWithTheArchiveIsRefused) {
  uint32_t crc = 0;
  ZipMember m;
  const std::string header = NpyHeader(int64_t{1} << 28);  // 1 GiB of float32
  m.data = DeflateZeros(header, 16, crc);
  m.crc = crc;
  m.uncompressed = header.size() + 16;
  PeakGrowth growth;
  ExpectCode(ParseNpz(Zip(m)).status(), absl::StatusCode::kInvalidArgument,
             "tensor 'w' in .npz: its header needs");
  ExpectPeakBelow(growth, 16 * kMiB);
}

TEST(HostileFilesTest, EveryTruncationOfAnArchiveIsInvalid) {
  NamedTensors t;
  t.emplace_back("a", *Tensor::FromValues<float>({3}, std::vector<float>{1, 2, 3}));
  t.emplace_back("b", *Tensor::FromValues<int64_t>({2}, std::vector<int64_t>{4, 5}));
  const std::string stored = SerializeNpz(t);
  uint32_t crc = 0;
  ZipMember m;
  m.data = DeflateZeros(NpyHeader(4), 16, crc);
  m.crc = crc;
  m.uncompressed = NpyHeader(4).size() + 16;
  for (const std::string& whole : {stored, Zip(m)}) {
    ASSERT_TRUE(ParseNpz(whole).ok());
    for (size_t n = 0; n < whole.size(); ++n) {
      EXPECT_EQ(ParseNpz(whole.substr(0, n)).status().code(), absl::StatusCode::kInvalidArgument)
          << n;
    }
  }
}

// ---- .npy -----------------------------------------------------------------

TEST(HostileFilesTest, NpyWithAbsurdShapesOrHeaderLengthsIsInvalid) {
  const std::string absurd = NpyHeaderWithShape("(9999999999999999, 99)");
  ExpectCode(ParseNpy(absurd).status(), absl::StatusCode::kInvalidArgument,
             "invalid .npy file: shape [9999999999999999, 99] has a dimension over 2^40");
  std::string huge_header("\x93NUMPY\x02\x00", 8);
  PutLe<uint32_t>(huge_header, 0x7fffffffu);
  huge_header += "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\n";
  ExpectCode(ParseNpy(huge_header).status(), absl::StatusCode::kInvalidArgument,
             "header length 2147483647 exceeds");
  for (size_t n = 0; n < NpyHeader(4).size(); ++n) {
    EXPECT_EQ(ParseNpy(NpyHeader(4).substr(0, n)).status().code(),
              absl::StatusCode::kInvalidArgument)
        << n;
  }
}

// ---- .safetensors -----------------------------------------------------------

std::string Safetensors(const std::string& header, const std::string& data) {
  std::string out;
  PutLe<uint64_t>(out, header.size());
  return out + header + data;
}

TEST(HostileFilesTest, SafetensorsWithHugeHeaderLengthOrOffsetsIsInvalid) {
  std::string huge;
  PutLe<uint64_t>(huge, uint64_t{1} << 62);
  huge += "{}";
  ExpectCode(ParseSafetensors(huge).status(), absl::StatusCode::kInvalidArgument,
             "exceeds the file");
  const std::string past_end = Safetensors(
      R"({"w":{"dtype":"F32","shape":[1152921504606846976],"data_offsets":[0,4611686018427387904]}})",
      std::string(8, '\0'));
  ExpectCode(ParseSafetensors(past_end).status(), absl::StatusCode::kInvalidArgument,
             "pass the end of the data");
  const std::string lying_shape = Safetensors(
      R"({"w":{"dtype":"F32","shape":[1073741824],"data_offsets":[0,8]}})", std::string(8, '\0'));
  PeakGrowth growth;
  ExpectCode(ParseSafetensors(lying_shape).status(), absl::StatusCode::kInvalidArgument,
             "has 8 data bytes but its dtype and shape need 4294967296");
  ExpectPeakBelow(growth, 16 * kMiB);
}

TEST(HostileFilesTest, SafetensorsOverTheLimitIsResourceExhausted) {
  // BF16 widens to float32: 1 MiB in the file decodes to 2 MiB.
  const std::string bf16 =
      Safetensors(R"({"w":{"dtype":"BF16","shape":[524288],"data_offsets":[0,1048576]}})",
                  std::string(static_cast<size_t>(kMiB), '\0'));
  EXPECT_TRUE(ParseSafetensors(bf16).ok());
  ExpectCode(ParseSafetensors(bf16, {.bytes_max = 3 * kMiB / 2}).status(),
             absl::StatusCode::kResourceExhausted, "decode to 2097152 bytes");
}

// ---- .onnx initializers -------------------------------------------------------

TEST(HostileFilesTest, OnnxInitializerDimsAloneBuyNoMemory) {
  graph::testing::OnnxBuilder b(14);
  onnx::TensorProto* t = b.model().mutable_graph()->add_initializer();
  t->set_name("w");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(int64_t{1} << 28);  // 1 GiB of float32, with one value
  t->add_float_data(1);
  PeakGrowth growth;
  ExpectCode(ParseOnnxInitializers(b.Bytes()).status(), absl::StatusCode::kInvalidArgument,
             "holds 1 values but its shape needs 268435456");
  ExpectPeakBelow(growth, 16 * kMiB);
  t->set_data_type(onnx::TensorProto::DOUBLE);
  t->clear_float_data();
  t->set_raw_data(std::string(8, '\0'));
  ExpectCode(ParseOnnxInitializers(b.Bytes()).status(), absl::StatusCode::kInvalidArgument,
             "holds 8 bytes but its shape needs 2147483648");
  ExpectPeakBelow(growth, 16 * kMiB);
}

// ---- files --------------------------------------------------------------------

TEST(HostileFilesTest, ReadTensorFileRefusesWhatIsNotARegularFile) {
  const std::string dir = ::testing::TempDir() + "/hostile.npz";
  std::filesystem::create_directories(dir);
  ExpectCode(ReadTensorFile(dir).status(), absl::StatusCode::kInvalidArgument,
             "is not a regular file (a directory)");
  const std::string zero = ::testing::TempDir() + "/zero.npz";
  std::filesystem::remove(zero);
  std::filesystem::create_symlink("/dev/zero", zero);
  ExpectCode(ReadTensorFile(zero).status(), absl::StatusCode::kInvalidArgument,
             "a device, pipe or socket");
  const std::string big = ::testing::TempDir() + "/big.npz";
  { std::ofstream create(big); }
  std::filesystem::resize_file(big, 300 * kMiB);  // sparse: costs no disk
  ExpectCode(ReadTensorFile(big, {.bytes_max = kMiB}).status(),
             absl::StatusCode::kResourceExhausted, "holds 314572800 bytes, over the limit");
  std::filesystem::remove(big);
}

}  // namespace
}  // namespace ipupod::tensor
