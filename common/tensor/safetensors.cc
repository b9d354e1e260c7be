// .safetensors: uint64 header length N, N bytes of JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__"},
// then the data buffer the offsets index. As the format requires, regions
// must tile the buffer exactly (no holes, no overlaps).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tensor/tensor_files.h"

namespace ipupod::tensor {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

// The reference implementation's bound on the header.
constexpr uint64_t kJsonHeaderBytesMax = 100'000'000;

absl::Status MalformedSafetensors(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed .safetensors file: ", what,
                   "; write it with safetensors' save_file (or ipupod's WriteTensorFile)"));
}

struct Entry {
  std::string name;
  std::string dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

struct SafeDType {
  const char* name;
  DType dtype;       // after widening
  size_t file_size;  // bytes per element in the file
};

constexpr SafeDType kDTypes[] = {
    {"F32", DType::kFloat32, 4},  {"F64", DType::kFloat32, 8}, {"F16", DType::kFloat16, 2},
    {"BF16", DType::kFloat32, 2}, {"I64", DType::kInt64, 8},   {"I32", DType::kInt32, 4},
    {"BOOL", DType::kBool, 1},
};

const SafeDType* FindDType(absl::string_view name) {
  for (const SafeDType& d : kDTypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

// Widens BF16 to float32 (exactly: bfloat16 is float32's upper half; ipupod,
// like the IPU, has no bfloat16), narrows F64 to float32, copies everything
// else (F16 stays float16).
absl::StatusOr<Tensor> Decode(const Entry& e, const SafeDType& d, absl::string_view data) {
  if (d.dtype != DType::kFloat32 || d.file_size == 4) {
    return Tensor::FromBytes(d.dtype, e.shape, data);
  }
  IPUPOD_ASSIGN_OR_RETURN(Tensor t, Tensor::Create(d.dtype, e.shape));
  float* out = t.mutable_data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const char* p = data.data() + i * d.file_size;
    if (d.file_size == 8) {
      double v;
      std::memcpy(&v, p, 8);
      out[i] = static_cast<float>(v);
      continue;
    }
    uint16_t h;
    std::memcpy(&h, p, 2);
    out[i] = std::bit_cast<float>(uint32_t{h} << 16);
  }
  return t;
}

absl::StatusOr<Entry> ParseTensorEntry(const std::string& name, const nlohmann::ordered_json& j) {
  Entry e{name, "", {}, 0, 0};
  const auto bad = [&](absl::string_view what) {
    return MalformedSafetensors(absl::StrCat("tensor '", name, "': ", what));
  };
  if (!j.is_object() || !j.contains("dtype") || !j["dtype"].is_string() || !j.contains("shape") ||
      !j["shape"].is_array() || !j.contains("data_offsets") || !j["data_offsets"].is_array() ||
      j["data_offsets"].size() != 2) {
    return bad("needs \"dtype\" (string), \"shape\" (list) and \"data_offsets\" ([begin, end])");
  }
  e.dtype = j["dtype"].get<std::string>();
  for (const auto& d : j["shape"]) {
    if (!d.is_number_unsigned()) return bad("shape dims must be non-negative integers");
    e.shape.push_back(d.get<int64_t>());
  }
  for (const auto& o : j["data_offsets"]) {
    if (!o.is_number_unsigned()) return bad("data_offsets must be non-negative integers");
  }
  e.begin = j["data_offsets"][0].get<uint64_t>();
  e.end = j["data_offsets"][1].get<uint64_t>();
  if (e.begin > e.end) return bad("data_offsets begin after they end");
  return e;
}

absl::StatusOr<std::vector<Entry>> ParseJsonHeader(absl::string_view text) {
  nlohmann::ordered_json header;
  try {
    header = nlohmann::ordered_json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    return MalformedSafetensors(absl::StrCat("the header is not JSON (", e.what(), ")"));
  }
  if (!header.is_object()) return MalformedSafetensors("the header is not a JSON object");
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") continue;
    IPUPOD_ASSIGN_OR_RETURN(Entry e, ParseTensorEntry(name, value));
    entries.push_back(std::move(e));
  }
  // File order: by position in the data buffer.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  return entries;
}

absl::StatusOr<NamedTensor> ReadEntry(const Entry& e, absl::string_view data) {
  const SafeDType* d = FindDType(e.dtype);
  if (d == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", e.name, "' has dtype ", e.dtype,
        ", which ipupod does not read; convert it to F32, F64, F16, BF16, I64, I32 or BOOL"));
  }
  auto n = CheckedNumElements(d->dtype, e.shape);
  if (!n.ok())
    return MalformedSafetensors(absl::StrCat("tensor '", e.name, "': ", n.status().message()));
  if (e.end - e.begin != static_cast<uint64_t>(*n) * d->file_size) {
    return MalformedSafetensors(absl::StrCat("tensor '", e.name, "' has ", e.end - e.begin,
                                             " data bytes but its dtype and shape need ",
                                             static_cast<uint64_t>(*n) * d->file_size));
  }
  auto t = Decode(e, *d, data.substr(e.begin, e.end - e.begin));
  if (!t.ok())
    return MalformedSafetensors(absl::StrCat("tensor '", e.name, "': ", t.status().message()));
  return NamedTensor(e.name, *std::move(t));
}

// Bytes an entry decodes to (BF16 widens to float32, F64 narrows); its
// file bytes for a dtype ReadEntry will refuse.
uint64_t DecodedBytes(const Entry& e) {
  const SafeDType* d = FindDType(e.dtype);
  const uint64_t n = e.end - e.begin;
  return d == nullptr ? n : n / d->file_size * DTypeSize(d->dtype);
}

// The regions must tile the data exactly, and decode within the limit.
absl::Status CheckLayout(const std::vector<Entry>& entries, uint64_t data_size,
                         const TensorReadLimits& limits) {
  uint64_t next = 0, decoded = 0;
  for (const Entry& e : entries) {
    if (e.begin != next || e.end > data_size) {
      return MalformedSafetensors(
          absl::StrCat("tensor '", e.name, "' data_offsets [", e.begin, ", ", e.end,
                       "] leave a hole, overlap or pass the end of the data"));
    }
    next = e.end;
    decoded += DecodedBytes(e);
    if (decoded > static_cast<uint64_t>(limits.bytes_max)) {
      return internal::OverReadLimit(
          absl::StrCat(".safetensors tensors decode to ", decoded, " bytes or more"), limits);
    }
  }
  if (next != data_size) {
    return MalformedSafetensors(
        absl::StrCat(data_size - next, " data bytes follow the last tensor"));
  }
  return absl::OkStatus();
}

const char* SafeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "F32";
    case DType::kInt64:
      return "I64";
    case DType::kInt32:
      return "I32";
    case DType::kBool:
      return "BOOL";
    case DType::kFloat16:
      return "F16";
  }
  return "F32";
}

}  // namespace

absl::StatusOr<NamedTensors> ParseSafetensors(absl::string_view bytes,
                                              const TensorReadLimits& limits) {
  if (bytes.size() < 8) return MalformedSafetensors("shorter than its 8-byte header length");
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  if (n > kJsonHeaderBytesMax || n > bytes.size() - 8) {
    return MalformedSafetensors(absl::StrCat("header length ", n, " exceeds the file (",
                                             bytes.size(), " bytes) or the 100 MB limit"));
  }
  IPUPOD_ASSIGN_OR_RETURN(std::vector<Entry> entries, ParseJsonHeader(bytes.substr(8, n)));
  const absl::string_view data = bytes.substr(8 + n);
  IPUPOD_RETURN_IF_ERROR(CheckLayout(entries, data.size(), limits));
  NamedTensors out;
  for (const Entry& e : entries) {
    IPUPOD_ASSIGN_OR_RETURN(NamedTensor t, ReadEntry(e, data));
    out.push_back(std::move(t));
  }
  return out;
}

std::string SerializeSafetensors(const NamedTensors& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", SafeName(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.byte_size()}}};
    offset += t.byte_size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the format's 8-byte alignment of the data
  std::string out;
  const uint64_t n = text.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += text;
  for (const auto& [name, t] : tensors) out.append(t.bytes().data(), t.bytes().size());
  return out;
}

}  // namespace ipupod::tensor
