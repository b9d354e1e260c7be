#include "common/tensor/tensor_files.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/tensor/npy.h"
#include "tests/device/graph/onnx_builder.h"
#include "tests/support/hostile_files.h"

namespace ipupod::tensor {
namespace {

using tensor::DType;
using tensor::Tensor;
using test_support::PutLe;
using ::testing::HasSubstr;

Tensor F(tensor::Shape shape, std::vector<float> v) { return *Tensor::FromValues<float>(shape, v); }

NamedTensors Sample() {
  NamedTensors t;
  t.emplace_back("layer.0.weight", F({2, 3}, {1, -2, 3.5f, 4, 5, 6}));
  t.emplace_back("ids", *Tensor::FromValues<int64_t>({3}, std::vector<int64_t>{7, -8, 1LL << 40}));
  t.emplace_back("count", *Tensor::FromValues<int32_t>({1}, std::vector<int32_t>{-3}));
  const bool mask[] = {true, false, true, true};
  t.emplace_back("mask", *Tensor::FromValues<bool>({2, 2}, absl::MakeConstSpan(mask)));
  t.emplace_back("scale", Tensor::Scalar<float>(0.25f));
  t.emplace_back("empty", F({0, 4}, {}));
  return t;
}

void ExpectInvalid(const absl::Status& s, const std::string& text) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(text));
}

// A one-member zip whose member is raw-deflated, as numpy.savez_compressed
// writes (built here with zlib so the unit test needs no Python).
std::string DeflatedNpz(const std::string& name, const std::string& npy) {
  test_support::ZipMember member;
  member.name = name;
  member.data = test_support::DeflateZeros(npy, 0, member.crc);
  member.uncompressed = npy.size();
  return test_support::Zip(member);
}

TEST(TensorFilesTest, NpzRoundTripKeepsOrderAndDtypes) {
  const NamedTensors in = Sample();
  auto out = ParseNpz(SerializeNpz(in));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, in);
}

TEST(TensorFilesTest, NpzReadsDeflatedMembers) {
  const Tensor t = F({64}, std::vector<float>(64, 1.5f));  // compressible
  const std::string zip = DeflatedNpz("w.npy", tensor::SerializeNpy(t));
  auto out = ParseNpz(zip);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].first, "w");
  EXPECT_EQ((*out)[0].second, t);
}

TEST(TensorFilesTest, NpzRejectsMalformedArchives) {
  const std::string good = SerializeNpz(Sample());
  ExpectInvalid(ParseNpz("PK").status(), "too short to be a zip archive");
  ExpectInvalid(ParseNpz(std::string(100, 'x')).status(), "no end-of-central-directory");
  ExpectInvalid(ParseNpz(good.substr(0, good.size() - 30)).status(), "malformed .npz file");
  std::string corrupt = good;
  corrupt[180] ^= 0x55;  // first member's data (after 48 + 128 header bytes)
  ExpectInvalid(ParseNpz(corrupt).status(), "CRC mismatch");
  NamedTensors twice;
  twice.emplace_back("a", F({1}, {1}));
  twice.emplace_back("a", F({1}, {2}));
  ExpectInvalid(ParseNpz(SerializeNpz(twice)).status(), "'a' appears twice");
  std::string deflated =
      DeflatedNpz("w.npy", tensor::SerializeNpy(F({64}, std::vector<float>(64))));
  deflated[40] ^= 0x7f;  // inside the deflate stream
  EXPECT_EQ(ParseNpz(deflated).status().code(), absl::StatusCode::kInvalidArgument);
  ExpectInvalid(ParseNpz(DeflatedNpz("w.txt", "hello")).status(), "'w.txt' is not a .npy file");
  ExpectInvalid(ParseNpz(DeflatedNpz("w.npy", "not an npy file")).status(), "tensor 'w' in .npz");
}

TEST(TensorFilesTest, SafetensorsRoundTripKeepsOrderAndDtypes) {
  const NamedTensors in = Sample();
  const std::string bytes = SerializeSafetensors(in);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);  // data starts 8-byte aligned
  auto out = ParseSafetensors(bytes);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, in);
}

std::string Safetensors(const std::string& header, const std::string& data) {
  std::string out;
  PutLe<uint64_t>(out, header.size());
  return out + header + data;
}

Tensor H(const Shape& shape, std::initializer_list<uint16_t> bits) {
  std::vector<tensor::Float16> v;
  for (uint16_t b : bits) v.push_back(tensor::Float16{b});
  return *Tensor::FromValues<tensor::Float16>(shape, v);
}

TEST(TensorFilesTest, SafetensorsKeepsHalfWidensBfloatAndNarrowsDouble) {
  std::string data;
  PutLe<uint16_t>(data, 0x3c00);  // F16 1.0
  PutLe<uint16_t>(data, 0xc100);  // F16 -2.5
  PutLe<uint16_t>(data, 0x3fc0);  // BF16 1.5
  PutLe<double>(data, 0.125);
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
      R"("d":{"dtype":"F64","shape":[],"data_offsets":[6,14]},)"
      R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]}})";
  auto out = ParseSafetensors(Safetensors(header, data));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 3u);
  EXPECT_EQ((*out)[0], NamedTensor("h", H({2}, {0x3c00, 0xc100})));  // float16, not widened
  EXPECT_EQ((*out)[1], NamedTensor("b", F({1}, {1.5f})));            // file (data) order
  EXPECT_EQ((*out)[2], NamedTensor("d", Tensor::Scalar<float>(0.125f)));
}

TEST(TensorFilesTest, Float16RoundTripsThroughEveryFormat) {
  const NamedTensors in = {{"h", H({2, 2}, {0x3c00, 0xc100, 0x0001, 0x7bff})}};
  for (const std::string& bytes : {SerializeNpz(in), SerializeSafetensors(in)}) {
    auto out = bytes.substr(0, 2) == "PK" ? ParseNpz(bytes) : ParseSafetensors(bytes);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, in);
  }
}

TEST(TensorFilesTest, SafetensorsRejectsMalformedHeaders) {
  const std::string entry = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data(8, '\0');
  ASSERT_TRUE(ParseSafetensors(Safetensors(entry, data)).ok());
  ExpectInvalid(ParseSafetensors("abc").status(), "shorter than its 8-byte header length");
  std::string huge;
  PutLe<uint64_t>(huge, 1ULL << 40);
  ExpectInvalid(ParseSafetensors(huge + "{}").status(), "header length 1099511627776 exceeds");
  ExpectInvalid(ParseSafetensors(Safetensors("{not json", "")).status(), "header is not JSON");
  ExpectInvalid(ParseSafetensors(Safetensors("[1]", "")).status(), "not a JSON object");
  ExpectInvalid(ParseSafetensors(Safetensors(R"({"a":{"dtype":"F32"}})", "")).status(),
                "tensor 'a': needs \"dtype\"");
  ExpectInvalid(ParseSafetensors(
                    Safetensors(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data))
                    .status(),
                "non-negative integers");
  ExpectInvalid(ParseSafetensors(
                    Safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data))
                    .status(),
                "begin after they end");
  ExpectInvalid(ParseSafetensors(Safetensors(entry, data + "xx")).status(),
                "2 data bytes follow the last tensor");
  ExpectInvalid(ParseSafetensors(Safetensors(entry, "1234")).status(), "pass the end of the data");
  ExpectInvalid(ParseSafetensors(
                    Safetensors(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data))
                    .status(),
                "has 8 data bytes but its dtype and shape need 12");
  ExpectInvalid(ParseSafetensors(
                    Safetensors(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", data))
                    .status(),
                "tensor 'a' has dtype U8");
  ExpectInvalid(ParseSafetensors(
                    Safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data))
                    .status(),
                "leave a hole");
}

TEST(TensorFilesTest, OnnxInitializersFromRawTypedAndExternalData) {
  graph::testing::OnnxBuilder b(14);
  b.Input("x", graph::testing::kFloat, {2});
  b.Floats("w", {2}, {1.5f, -2});
  b.Ints("shape", {2}, {1, 2});  // typed int64_data
  onnx::TensorProto* d = b.model().mutable_graph()->add_initializer();
  d->set_name("d");
  d->set_data_type(onnx::TensorProto::DOUBLE);
  d->add_double_data(0.5);
  onnx::TensorProto* h = b.model().mutable_graph()->add_initializer();
  h->set_name("h");  // FLOAT16 in int32_data: the bits in the low half
  h->set_data_type(onnx::TensorProto::FLOAT16);
  h->add_dims(2);
  h->add_int32_data(0x3c00);
  h->add_int32_data(0xc100);
  onnx::TensorProto* ext = b.model().mutable_graph()->add_initializer();
  ext->set_name("ext");
  ext->set_data_type(onnx::TensorProto::FLOAT);
  ext->add_dims(2);
  ext->set_data_location(onnx::TensorProto::EXTERNAL);
  for (auto [k, v] : {std::pair{"location", "weights.bin"}, {"offset", "4"}, {"length", "8"}}) {
    auto* kv = ext->add_external_data();
    kv->set_key(k);
    kv->set_value(v);
  }
  const std::string dir = ::testing::TempDir() + "/onnx_ext";
  std::filesystem::create_directories(dir);
  const float floats[] = {9, 3, 4};
  std::ofstream(dir + "/weights.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(floats), sizeof(floats));

  auto out = ParseOnnxInitializers(b.Bytes(), dir);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 5u);
  EXPECT_EQ((*out)[0], NamedTensor("w", F({2}, {1.5f, -2})));
  EXPECT_EQ((*out)[1].second.IntAt(1), 2);
  EXPECT_EQ((*out)[2], NamedTensor("d", Tensor::Scalar<float>(0.5f)));
  EXPECT_EQ((*out)[3], NamedTensor("h", H({2}, {0x3c00, 0xc100})));
  EXPECT_EQ((*out)[4], NamedTensor("ext", F({2}, {3, 4})));

  ExpectInvalid(ParseOnnxInitializers(b.Bytes()).status(), "stored in an external file");
  ext->mutable_external_data(0)->set_value("../escape.bin");
  ExpectInvalid(ParseOnnxInitializers(b.Bytes(), dir).status(), "must be a relative path");
  ext->mutable_external_data(0)->set_value("missing.bin");
  EXPECT_EQ(ParseOnnxInitializers(b.Bytes(), dir).status().code(), absl::StatusCode::kNotFound);
  ext->mutable_external_data(0)->set_value("weights.bin");
  ext->mutable_external_data(2)->set_value("100");
  ExpectInvalid(ParseOnnxInitializers(b.Bytes(), dir).status(), "runs past the end of its file");
  ext->mutable_external_data(2)->set_value("eight");
  ExpectInvalid(ParseOnnxInitializers(b.Bytes(), dir).status(), "'eight' is not a byte count");
}

TEST(TensorFilesTest, OnnxInitializersRejectBadModelsAndTypes) {
  ExpectInvalid(ParseOnnxInitializers("\xff\xff garbage").status(), "not an ONNX model");
  graph::testing::OnnxBuilder b(14);
  onnx::TensorProto* t = b.model().mutable_graph()->add_initializer();
  t->set_name("u8");
  t->set_data_type(onnx::TensorProto::UINT8);
  ExpectInvalid(ParseOnnxInitializers(b.Bytes()).status(), "initializer 'u8': element type 2");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(3);
  t->add_float_data(1);
  ExpectInvalid(ParseOnnxInitializers(b.Bytes()).status(), "holds 1 values but its shape needs 3");
  t->set_raw_data("12345");
  ExpectInvalid(ParseOnnxInitializers(b.Bytes()).status(), "initializer 'u8'");
}

// Protobuf wire bytes by hand, for encodings onnx's serializer never emits.
std::string Varint(uint64_t v) {
  std::string out;
  do {
    out += static_cast<char>((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
    v >>= 7;
  } while (v != 0);
  return out;
}
std::string Field(int number, int wire_type, const std::string& payload) {
  std::string out = Varint(static_cast<uint64_t>(number) << 3 | static_cast<uint64_t>(wire_type));
  if (wire_type == 2) out += Varint(payload.size());
  return out + payload;
}

TEST(TensorFilesTest, OnnxInitializersReadPackedUnpackedAndBoolFields) {
  // TensorProto: packed dims [2], data_type INT64, unpacked int64_data 5 and
  // -6, name "p", plus a field ipupod does not know (99), which is skipped.
  const std::string tensor = Field(1, 2, Varint(2)) + Field(2, 0, Varint(7)) +
                             Field(7, 0, Varint(5)) + Field(7, 0, Varint(uint64_t(-6))) +
                             Field(8, 2, "p") + Field(99, 2, "ignored");
  const std::string model = Field(1, 0, Varint(8)) + Field(7, 2, Field(5, 2, tensor));
  auto out = ParseOnnxInitializers(model);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].first, "p");
  EXPECT_EQ((*out)[0].second, *Tensor::FromValues<int64_t>({2}, std::vector<int64_t>{5, -6}));

  graph::testing::OnnxBuilder b(14);
  onnx::TensorProto* mask = b.model().mutable_graph()->add_initializer();
  mask->set_name("mask");
  mask->set_data_type(onnx::TensorProto::BOOL);
  mask->add_dims(2);
  mask->add_int32_data(1);
  mask->add_int32_data(0);
  onnx::TensorProto* i32 = b.model().mutable_graph()->add_initializer();
  i32->set_name("i32");
  i32->set_data_type(onnx::TensorProto::INT32);
  i32->add_int32_data(-3);
  auto typed = ParseOnnxInitializers(b.Bytes());
  ASSERT_TRUE(typed.ok()) << typed.status();
  const bool mask_values[] = {true, false};
  EXPECT_EQ((*typed)[0].second, *Tensor::FromValues<bool>({2}, absl::MakeConstSpan(mask_values)));
  EXPECT_EQ((*typed)[1].second, Tensor::Scalar<int32_t>(-3));
}

TEST(TensorFilesTest, OnnxInitializersRejectTruncatedAndMalformedWireData) {
  graph::testing::OnnxBuilder b(14);
  b.Floats("w", {2}, {1.5f, -2});
  const std::string bytes = b.Bytes();
  for (size_t cut : {size_t{1}, size_t{3}, size_t{9}}) {
    ExpectInvalid(ParseOnnxInitializers(bytes.substr(0, bytes.size() - cut)).status(),
                  "not an ONNX model");
  }
  // An end-group tag with no group, and a length past the end.
  ExpectInvalid(ParseOnnxInitializers(Varint(7 << 3 | 4)).status(), "not an ONNX model");
  ExpectInvalid(ParseOnnxInitializers(Varint(7 << 3 | 2) + Varint(50) + "x").status(),
                "not an ONNX model");
}

TEST(TensorFilesTest, FilesByExtension) {
  const std::string dir = ::testing::TempDir();
  EXPECT_EQ(*TensorFileFormatOf("a/b.npz"), TensorFileFormat::kNpz);
  EXPECT_EQ(*TensorFileFormatOf("b.safetensors"), TensorFileFormat::kSafetensors);
  EXPECT_EQ(*TensorFileFormatOf("m.onnx"), TensorFileFormat::kOnnx);
  ExpectInvalid(TensorFileFormatOf("w.bin").status(), "use .npz, .safetensors or .onnx");
  for (const char* name : {"/rt_files.npz", "/rt_files.safetensors"}) {
    ASSERT_TRUE(WriteTensorFile(dir + name, Sample()).ok()) << name;
    auto back = ReadTensorFile(dir + name);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, Sample()) << name;
  }
  ExpectInvalid(WriteTensorFile(dir + "/m.onnx", Sample()), "only as .npz or .safetensors");
  EXPECT_EQ(ReadTensorFile(dir + "/missing.npz").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(WriteTensorFile(dir + "/no/such/dir/w.npz", Sample()).code(),
            absl::StatusCode::kFailedPrecondition);
  std::ofstream(dir + "/bad.safetensors") << "garbage!";
  ExpectInvalid(ReadTensorFile(dir + "/bad.safetensors").status(), "bad.safetensors': malformed");

  graph::testing::OnnxBuilder b(14);
  b.Floats("w", {1}, {2});
  std::ofstream(dir + "/m.onnx", std::ios::binary) << b.Bytes();
  auto onnx = ReadTensorFile(dir + "/m.onnx");
  ASSERT_TRUE(onnx.ok()) << onnx.status();
  EXPECT_EQ(onnx->at(0), NamedTensor("w", F({1}, {2})));
}

}  // namespace
}  // namespace ipupod::tensor
