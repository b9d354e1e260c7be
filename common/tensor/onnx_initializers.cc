// ParseOnnxInitializers (common/tensor/tensor_files.h) without the ONNX library:
// the model is walked with protobuf's generic wire-format reader, so
// ipupod_tensor (and the client library above it) links no onnx_proto. Only
// the fields on the path to the initializers are decoded:
//   ModelProto.graph (7) -> GraphProto.initializer (5) -> TensorProto
// with TensorProto's dims (1), data_type (2), float_data (4), int32_data (5),
// int64_data (7), name (8), raw_data (9), double_data (10), external_data
// (13: key 1, value 2) and data_location (14). Every other field is skipped
// as protobuf skips unknown fields; repeated fields accept packed and
// unpacked encodings; a singular field seen twice keeps the last value.
#include <bit>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tensor/tensor_files.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace ipupod::tensor {
namespace {

static_assert(std::endian::native == std::endian::little, "ONNX raw_data is little-endian");

namespace fs = std::filesystem;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// onnx.TensorProto.DataType values ipupod reads.
constexpr int32_t kOnnxFloat = 1;
constexpr int32_t kOnnxInt32 = 6;
constexpr int32_t kOnnxInt64 = 7;
constexpr int32_t kOnnxBool = 9;
constexpr int32_t kOnnxFloat16 = 10;
constexpr int32_t kOnnxDouble = 11;
// onnx.TensorProto.DataLocation.
constexpr int32_t kLocationDefault = 0;
constexpr int32_t kLocationExternal = 1;

// The part of one onnx.TensorProto that ipupod reads.
struct OnnxTensor {
  std::string name;
  int32_t data_type = 0;
  std::vector<int64_t> dims;
  std::vector<float> float_data;
  std::vector<int32_t> int32_data;
  std::vector<int64_t> int64_data;
  std::vector<double> double_data;
  bool has_raw_data = false;
  std::string raw_data;
  std::vector<std::pair<std::string, std::string>> external_data;
  int32_t data_location = kLocationDefault;
};

// ---- wire-format walking ------------------------------------------------

// Reads one scalar of a repeated numeric field in its wire encoding.
template <typename T>
bool ReadScalar(CodedInputStream& in, WireFormatLite::WireType type, T* value) {
  if (type == WireFormatLite::WIRETYPE_VARINT) {
    uint64_t v = 0;
    if (!in.ReadVarint64(&v)) return false;
    *value = static_cast<T>(static_cast<int64_t>(v));
    return true;
  }
  if (type == WireFormatLite::WIRETYPE_FIXED32 && sizeof(T) == 4) {
    uint32_t v = 0;
    if (!in.ReadLittleEndian32(&v)) return false;
    std::memcpy(value, &v, 4);
    return true;
  }
  if (type == WireFormatLite::WIRETYPE_FIXED64 && sizeof(T) == 8) {
    uint64_t v = 0;
    if (!in.ReadLittleEndian64(&v)) return false;
    std::memcpy(value, &v, 8);
    return true;
  }
  return false;
}

// Runs `body` over a length-delimited payload; false if it is malformed or
// `body` does not consume it exactly.
template <typename Body>
bool ReadDelimited(CodedInputStream& in, Body&& body) {
  uint32_t length = 0;
  if (!in.ReadVarint32(&length) || length > static_cast<uint32_t>(INT_MAX)) return false;
  const int remaining = in.BytesUntilLimit();
  if (remaining >= 0 && static_cast<int>(length) > remaining) return false;
  const CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(length));
  const bool ok = body() && in.BytesUntilLimit() == 0;
  in.PopLimit(limit);
  return ok;
}

// A repeated numeric field: `scalar_type` is its unpacked wire type; the
// packed form (length-delimited) is accepted too, as protobuf does.
template <typename T>
bool ReadRepeated(CodedInputStream& in, uint32_t tag, WireFormatLite::WireType scalar_type,
                  std::vector<T>* out) {
  const WireFormatLite::WireType type = WireFormatLite::GetTagWireType(tag);
  if (type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
    return ReadDelimited(in, [&] {
      while (in.BytesUntilLimit() > 0) {
        T value{};
        if (!ReadScalar(in, scalar_type, &value)) return false;
        out->push_back(value);
      }
      return true;
    });
  }
  if (type != scalar_type) return WireFormatLite::SkipField(&in, tag);
  T value{};
  if (!ReadScalar(in, scalar_type, &value)) return false;
  out->push_back(value);
  return true;
}

bool ReadString(CodedInputStream& in, std::string* out) {
  uint32_t length = 0;
  if (!in.ReadVarint32(&length) || length > static_cast<uint32_t>(INT_MAX)) return false;
  return in.ReadString(out, static_cast<int>(length));
}

// Calls `on_field(tag)` for each field up to the current limit; `on_field`
// reads the field's value (or skips it). False on malformed wire data.
template <typename OnField>
bool ForEachField(CodedInputStream& in, OnField&& on_field) {
  while (in.BytesUntilLimit() > 0) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0 || WireFormatLite::GetTagFieldNumber(tag) == 0) return false;
    if (WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_END_GROUP) return false;
    if (!on_field(tag)) return false;
  }
  return true;
}

bool IsDelimited(uint32_t tag) {
  return WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
}
bool IsVarint(uint32_t tag) {
  return WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_VARINT;
}

bool ReadInt32(CodedInputStream& in, int32_t* out) {
  uint64_t v = 0;
  if (!in.ReadVarint64(&v)) return false;
  *out = static_cast<int32_t>(static_cast<int64_t>(v));
  return true;
}

bool ReadExternalEntry(CodedInputStream& in, OnnxTensor& t) {
  std::string key;
  std::string value;
  const bool ok = ReadDelimited(in, [&] {
    return ForEachField(in, [&](uint32_t tag) {
      const int field = WireFormatLite::GetTagFieldNumber(tag);
      if (field == 1 && IsDelimited(tag)) return ReadString(in, &key);
      if (field == 2 && IsDelimited(tag)) return ReadString(in, &value);
      return WireFormatLite::SkipField(&in, tag);
    });
  });
  if (ok) t.external_data.emplace_back(std::move(key), std::move(value));
  return ok;
}

bool ReadDataLocation(CodedInputStream& in, OnnxTensor& t) {
  int32_t location = 0;
  if (!ReadInt32(in, &location)) return false;
  // An enum value proto2 does not know is kept as an unknown field.
  if (location == kLocationDefault || location == kLocationExternal) t.data_location = location;
  return true;
}

bool ReadTensorField(CodedInputStream& in, uint32_t tag, OnnxTensor& t) {
  using W = WireFormatLite;
  switch (W::GetTagFieldNumber(tag)) {
    case 1:
      return ReadRepeated(in, tag, W::WIRETYPE_VARINT, &t.dims);
    case 2:
      if (IsVarint(tag)) return ReadInt32(in, &t.data_type);
      break;
    case 4:
      return ReadRepeated(in, tag, W::WIRETYPE_FIXED32, &t.float_data);
    case 5:
      return ReadRepeated(in, tag, W::WIRETYPE_VARINT, &t.int32_data);
    case 7:
      return ReadRepeated(in, tag, W::WIRETYPE_VARINT, &t.int64_data);
    case 8:
      if (IsDelimited(tag)) return ReadString(in, &t.name);
      break;
    case 9:
      if (IsDelimited(tag)) return t.has_raw_data = true, ReadString(in, &t.raw_data);
      break;
    case 10:
      return ReadRepeated(in, tag, W::WIRETYPE_FIXED64, &t.double_data);
    case 13:
      if (IsDelimited(tag)) return ReadExternalEntry(in, t);
      break;
    case 14:
      if (IsVarint(tag)) return ReadDataLocation(in, t);
      break;
  }
  return W::SkipField(&in, tag);
}

bool ReadGraph(CodedInputStream& in, std::vector<OnnxTensor>& out) {
  return ReadDelimited(in, [&] {
    return ForEachField(in, [&](uint32_t tag) {
      if (WireFormatLite::GetTagFieldNumber(tag) != 5 || !IsDelimited(tag)) {
        return WireFormatLite::SkipField(&in, tag);
      }
      OnnxTensor t;
      if (!ReadDelimited(in, [&] {
            return ForEachField(in, [&](uint32_t field) { return ReadTensorField(in, field, t); });
          })) {
        return false;
      }
      out.push_back(std::move(t));
      return true;
    });
  });
}

// The initializers of every graph field of the model, in order (a repeated
// message field seen twice merges by appending, as protobuf does).
bool ReadModel(absl::string_view bytes, std::vector<OnnxTensor>& out) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                      static_cast<int>(bytes.size()));
  in.SetTotalBytesLimit(INT_MAX);
  const CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(bytes.size()));
  const bool ok = ForEachField(in, [&](uint32_t tag) {
    if (WireFormatLite::GetTagFieldNumber(tag) == 7 && IsDelimited(tag)) return ReadGraph(in, out);
    return WireFormatLite::SkipField(&in, tag);
  });
  in.PopLimit(limit);
  return ok;
}

// ---- conversion ----------------------------------------------------------

absl::Status BadTensor(const OnnxTensor& p, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("ONNX initializer '", p.name, "': ", what));
}

// The ONNX element type as read (float64 widens to float32).
absl::StatusOr<DType> DTypeOf(const OnnxTensor& p) {
  switch (p.data_type) {
    case kOnnxFloat:
    case kOnnxDouble:
      return DType::kFloat32;
    case kOnnxInt64:
      return DType::kInt64;
    case kOnnxInt32:
      return DType::kInt32;
    case kOnnxBool:
      return DType::kBool;
    case kOnnxFloat16:
      return DType::kFloat16;
    default:
      return BadTensor(p, absl::StrCat("element type ", p.data_type,
                                       " is not supported; export float32, float16, float64, "
                                       "int64, int32 or bool tensors"));
  }
}

// External data: {location, offset, length} relative to model_dir.
absl::StatusOr<std::string> ReadExternal(const OnnxTensor& p, absl::string_view model_dir,
                                         const TensorReadLimits& limits) {
  std::string location;
  uint64_t offset = 0;
  int64_t length = -1;
  for (const auto& kv : p.external_data) {
    bool ok = true;
    if (kv.first == "location") location = kv.second;
    if (kv.first == "offset") ok = absl::SimpleAtoi(kv.second, &offset);
    if (kv.first == "length") ok = absl::SimpleAtoi(kv.second, &length) && length >= 0;
    if (!ok)
      return BadTensor(
          p, absl::StrCat("external data ", kv.first, " '", kv.second, "' is not a byte count"));
  }
  if (model_dir.empty()) {
    return BadTensor(p,
                     "its data is stored in an external file; read the model from its file "
                     "so the data next to it can be found");
  }
  const fs::path rel(location);
  if (location.empty() || rel.is_absolute() || absl::StrContains(location, "..")) {
    return BadTensor(p, absl::StrCat("external data location '", location,
                                     "' must be a relative path inside the model's directory"));
  }
  std::ifstream file(fs::path(std::string(model_dir)) / rel, std::ios::binary);
  if (!file)
    return absl::NotFoundError(absl::StrCat("external data file '", location, "' of initializer '",
                                            p.name, "' is missing"));
  file.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(file.tellg());
  if (offset > size) return BadTensor(p, "external data offset lies past the end of its file");
  const uint64_t n = length < 0 ? size - offset : static_cast<uint64_t>(length);
  if (n > size - offset) return BadTensor(p, "external data runs past the end of its file");
  if (n > static_cast<uint64_t>(limits.bytes_max)) {
    return internal::OverReadLimit(
        absl::StrCat("external data of initializer '", p.name, "' holds ", n, " bytes"), limits);
  }
  std::string data(n, '\0');
  file.seekg(static_cast<std::streamoff>(offset));
  if (!file.read(data.data(), static_cast<std::streamsize>(n))) {
    return absl::InternalError(absl::StrCat("error reading external data file '", location, "'"));
  }
  return data;
}

// The counts are checked before the tensor is allocated: dims alone must
// not buy memory.
template <typename Src, typename Dst, typename Field>
absl::StatusOr<Tensor> FromField(DType dtype, Shape shape, const Field& field) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t n, CheckedNumElements(dtype, shape));
  if (static_cast<int64_t>(field.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("holds ", field.size(), " values but its shape needs ", n));
  }
  IPUPOD_ASSIGN_OR_RETURN(Tensor t, Tensor::CreateForOverwrite(dtype, std::move(shape)));
  Dst* out = t.mutable_data<Dst>();
  for (size_t i = 0; i < field.size(); ++i) {
    if constexpr (std::is_same_v<Dst, Float16>) {
      out[i] = Float16{static_cast<uint16_t>(field[i])};  // the bits, in the low half
    } else {
      out[i] = static_cast<Dst>(static_cast<Src>(field[i]));
    }
  }
  return t;
}

// float64 raw bytes narrowed to float32.
absl::StatusOr<Tensor> FromDoubleBytes(Shape shape, absl::string_view raw) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t n, CheckedNumElements(DType::kFloat32, shape));
  if (raw.size() != static_cast<size_t>(n) * 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("holds ", raw.size(), " bytes but its shape needs ", n * 8));
  }
  IPUPOD_ASSIGN_OR_RETURN(Tensor t, Tensor::CreateForOverwrite(DType::kFloat32, shape));
  float* out = t.mutable_data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    double v;
    std::memcpy(&v, raw.data() + i * 8, 8);
    out[i] = static_cast<float>(v);
  }
  return t;
}

absl::StatusOr<Tensor> FromTypedFields(const OnnxTensor& p, Shape shape) {
  switch (p.data_type) {
    case kOnnxFloat:
      return FromField<float, float>(DType::kFloat32, shape, p.float_data);
    case kOnnxDouble:
      return FromField<double, float>(DType::kFloat32, shape, p.double_data);
    case kOnnxInt64:
      return FromField<int64_t, int64_t>(DType::kInt64, shape, p.int64_data);
    case kOnnxInt32:
      return FromField<int32_t, int32_t>(DType::kInt32, shape, p.int32_data);
    case kOnnxFloat16:  // the bits travel in int32_data
      return FromField<int32_t, Float16>(DType::kFloat16, shape, p.int32_data);
    default:  // BOOL travels in int32_data
      return FromField<bool, bool>(DType::kBool, shape, p.int32_data);
  }
}

absl::StatusOr<Tensor> TensorFromProto(const OnnxTensor& p, absl::string_view model_dir,
                                       const TensorReadLimits& limits) {
  IPUPOD_ASSIGN_OR_RETURN(DType dtype, DTypeOf(p));
  Shape shape(p.dims.begin(), p.dims.end());
  absl::StatusOr<Tensor> t;
  if (p.data_location == kLocationExternal || p.has_raw_data) {
    std::string external;
    if (p.data_location == kLocationExternal) {
      IPUPOD_ASSIGN_OR_RETURN(external, ReadExternal(p, model_dir, limits));
    }
    const absl::string_view raw = p.has_raw_data ? absl::string_view(p.raw_data) : external;
    t = p.data_type == kOnnxDouble ? FromDoubleBytes(shape, raw)
                                   : Tensor::FromBytes(dtype, shape, raw);
  } else {
    t = FromTypedFields(p, shape);
  }
  if (!t.ok() && t.status().code() == absl::StatusCode::kInvalidArgument) {
    return BadTensor(p, t.status().message());
  }
  return t;
}

}  // namespace

absl::StatusOr<NamedTensors> ParseOnnxInitializers(absl::string_view model_bytes,
                                                   absl::string_view model_dir,
                                                   const TensorReadLimits& limits) {
  std::vector<OnnxTensor> initializers;
  if (model_bytes.size() > static_cast<size_t>(INT_MAX) || !ReadModel(model_bytes, initializers)) {
    return absl::InvalidArgumentError(
        "not an ONNX model (the bytes do not parse as onnx.ModelProto); pass a .onnx file "
        "written by torch.onnx.export or onnx.save");
  }
  NamedTensors out;
  int64_t decoded = 0;
  for (const OnnxTensor& p : initializers) {
    IPUPOD_ASSIGN_OR_RETURN(Tensor t, TensorFromProto(p, model_dir, limits));
    decoded += static_cast<int64_t>(t.byte_size());
    if (decoded > limits.bytes_max) {
      return internal::OverReadLimit(
          absl::StrCat("ONNX initializers decode to ", decoded, " bytes or more"), limits);
    }
    out.emplace_back(p.name, std::move(t));
  }
  return out;
}

}  // namespace ipupod::tensor
