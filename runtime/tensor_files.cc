#include "runtime/tensor_files.h"

#include <bit>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/shape_util.h"
#include "onnx/onnx_pb.h"
#include <unistd.h>

namespace ipupod::runtime {
namespace {

static_assert(std::endian::native == std::endian::little, "ONNX raw_data is little-endian");

namespace fs = std::filesystem;

absl::Status BadTensor(const onnx::TensorProto& p, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("ONNX initializer '", p.name(), "': ", what));
}

// The ONNX element type as read (float64 widens to float32).
absl::StatusOr<graph::DType> DTypeOf(const onnx::TensorProto& p) {
  switch (p.data_type()) {
    case onnx::TensorProto::FLOAT:
    case onnx::TensorProto::DOUBLE:
      return graph::DType::kFloat32;
    case onnx::TensorProto::INT64:
      return graph::DType::kInt64;
    case onnx::TensorProto::INT32:
      return graph::DType::kInt32;
    case onnx::TensorProto::BOOL:
      return graph::DType::kBool;
    default:
      return BadTensor(p, absl::StrCat("element type ", p.data_type(),
                                       " is not supported; export float32, float64, int64, "
                                       "int32 or bool tensors"));
  }
}

// External data: {location, offset, length} relative to model_dir.
absl::StatusOr<std::string> ReadExternal(const onnx::TensorProto& p, absl::string_view model_dir) {
  std::string location;
  uint64_t offset = 0;
  int64_t length = -1;
  for (const auto& kv : p.external_data()) {
    bool ok = true;
    if (kv.key() == "location") location = kv.value();
    if (kv.key() == "offset") ok = absl::SimpleAtoi(kv.value(), &offset);
    if (kv.key() == "length") ok = absl::SimpleAtoi(kv.value(), &length) && length >= 0;
    if (!ok)
      return BadTensor(
          p, absl::StrCat("external data ", kv.key(), " '", kv.value(), "' is not a byte count"));
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
                                            p.name(), "' is missing"));
  file.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(file.tellg());
  if (offset > size) return BadTensor(p, "external data offset lies past the end of its file");
  const uint64_t n = length < 0 ? size - offset : static_cast<uint64_t>(length);
  if (n > size - offset) return BadTensor(p, "external data runs past the end of its file");
  std::string data(n, '\0');
  file.seekg(static_cast<std::streamoff>(offset));
  if (!file.read(data.data(), static_cast<std::streamsize>(n))) {
    return absl::InternalError(absl::StrCat("error reading external data file '", location, "'"));
  }
  return data;
}

template <typename Src, typename Dst, typename Field>
absl::StatusOr<graph::Tensor> FromField(graph::DType dtype, graph::Shape shape,
                                        const Field& field) {
  IPUPOD_ASSIGN_OR_RETURN(graph::Tensor t, graph::Tensor::Create(dtype, std::move(shape)));
  if (static_cast<int64_t>(field.size()) != t.num_elements()) {
    return absl::InvalidArgumentError(
        absl::StrCat("holds ", field.size(), " values but its shape needs ", t.num_elements()));
  }
  Dst* out = t.mutable_data<Dst>();
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<Dst>(static_cast<Src>(field[i]));
  return t;
}

// float64 raw bytes narrowed to float32.
absl::StatusOr<graph::Tensor> FromDoubleBytes(graph::Shape shape, absl::string_view raw) {
  IPUPOD_ASSIGN_OR_RETURN(graph::Tensor t, graph::Tensor::Create(graph::DType::kFloat32, shape));
  if (raw.size() != static_cast<size_t>(t.num_elements()) * 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("holds ", raw.size(), " bytes but its shape needs ", t.num_elements() * 8));
  }
  float* out = t.mutable_data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    double v;
    std::memcpy(&v, raw.data() + i * 8, 8);
    out[i] = static_cast<float>(v);
  }
  return t;
}

absl::StatusOr<graph::Tensor> FromTypedFields(const onnx::TensorProto& p, graph::Shape shape) {
  switch (p.data_type()) {
    case onnx::TensorProto::FLOAT:
      return FromField<float, float>(graph::DType::kFloat32, shape, p.float_data());
    case onnx::TensorProto::DOUBLE:
      return FromField<double, float>(graph::DType::kFloat32, shape, p.double_data());
    case onnx::TensorProto::INT64:
      return FromField<int64_t, int64_t>(graph::DType::kInt64, shape, p.int64_data());
    case onnx::TensorProto::INT32:
      return FromField<int32_t, int32_t>(graph::DType::kInt32, shape, p.int32_data());
    default:  // BOOL travels in int32_data
      return FromField<bool, bool>(graph::DType::kBool, shape, p.int32_data());
  }
}

absl::StatusOr<graph::Tensor> TensorFromProto(const onnx::TensorProto& p,
                                              absl::string_view model_dir) {
  IPUPOD_ASSIGN_OR_RETURN(graph::DType dtype, DTypeOf(p));
  graph::Shape shape(p.dims().begin(), p.dims().end());
  absl::StatusOr<graph::Tensor> t;
  if (p.data_location() == onnx::TensorProto::EXTERNAL || p.has_raw_data()) {
    std::string external;
    if (p.data_location() == onnx::TensorProto::EXTERNAL) {
      IPUPOD_ASSIGN_OR_RETURN(external, ReadExternal(p, model_dir));
    }
    const absl::string_view raw = p.has_raw_data() ? absl::string_view(p.raw_data()) : external;
    t = p.data_type() == onnx::TensorProto::DOUBLE ? FromDoubleBytes(shape, raw)
                                                   : graph::Tensor::FromBytes(dtype, shape, raw);
  } else {
    t = FromTypedFields(p, shape);
  }
  if (!t.ok() && t.status().code() == absl::StatusCode::kInvalidArgument) {
    return BadTensor(p, t.status().message());
  }
  return t;
}

absl::StatusOr<std::string> ReadFile(absl::string_view path) {
  std::ifstream file(std::string(path), std::ios::binary | std::ios::ate);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open '", path, "': no such file"));
  const std::streamoff size = file.tellg();
  if (size < 0) return absl::InternalError(absl::StrCat("cannot read '", path, "'"));
  std::string bytes(static_cast<size_t>(size), '\0');
  file.seekg(0);
  if (!file.read(bytes.data(), size)) {
    return absl::InternalError(absl::StrCat("error reading '", path, "'"));
  }
  return bytes;
}

absl::Status InFile(absl::string_view path, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("'", path, "': ", status.message()));
}

}  // namespace

absl::StatusOr<TensorFileFormat> TensorFileFormatOf(absl::string_view path) {
  if (absl::EndsWith(path, ".npz")) return TensorFileFormat::kNpz;
  if (absl::EndsWith(path, ".safetensors")) return TensorFileFormat::kSafetensors;
  if (absl::EndsWith(path, ".onnx")) return TensorFileFormat::kOnnx;
  return absl::InvalidArgumentError(
      absl::StrCat("cannot tell the tensor file format of '", path,
                   "' from its extension; use .npz, .safetensors or .onnx"));
}

absl::StatusOr<NamedTensors> ParseOnnxInitializers(absl::string_view model_bytes,
                                                   absl::string_view model_dir) {
  onnx::ModelProto model;
  if (model_bytes.size() > static_cast<size_t>(INT_MAX) ||
      !model.ParseFromArray(model_bytes.data(), static_cast<int>(model_bytes.size()))) {
    return absl::InvalidArgumentError(
        "not an ONNX model (the bytes do not parse as onnx.ModelProto); pass a .onnx file "
        "written by torch.onnx.export or onnx.save");
  }
  NamedTensors out;
  for (const onnx::TensorProto& p : model.graph().initializer()) {
    IPUPOD_ASSIGN_OR_RETURN(graph::Tensor t, TensorFromProto(p, model_dir));
    out.emplace_back(p.name(), std::move(t));
  }
  return out;
}

absl::Status WriteFileAtomically(absl::string_view path, absl::string_view bytes) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    if (!file) return absl::InternalError(absl::StrCat("cannot create '", tmp, "'"));
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    file.flush();
    if (!file) {
      std::remove(tmp.c_str());
      return absl::InternalError(absl::StrCat("error writing '", tmp, "' (disk full?)"));
    }
  }
  if (std::rename(tmp.c_str(), std::string(path).c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot rename '", tmp, "' to '", path, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReplaceOnnxInitializers(absl::string_view model_bytes,
                                                    const NamedTensors& tensors) {
  onnx::ModelProto model;
  if (model_bytes.size() > static_cast<size_t>(INT_MAX) ||
      !model.ParseFromArray(model_bytes.data(), static_cast<int>(model_bytes.size()))) {
    return absl::InvalidArgumentError("the executable's model is not an ONNX ModelProto");
  }
  std::map<std::string, onnx::TensorProto*> by_name;
  for (onnx::TensorProto& p : *model.mutable_graph()->mutable_initializer()) {
    by_name[p.name()] = &p;
  }
  for (const auto& [name, t] : tensors) {
    auto it = by_name.find(name);
    if (it == by_name.end() || it->second->data_type() != onnx::TensorProto::FLOAT ||
        t.dtype() != graph::DType::kFloat32 ||
        graph::Shape(it->second->dims().begin(), it->second->dims().end()) != t.shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "' is not a float initializer of the model with shape ",
                       kernels::ShapeString(t.shape())));
    }
    onnx::TensorProto& p = *it->second;
    p.clear_float_data();
    p.clear_external_data();
    p.set_data_location(onnx::TensorProto::DEFAULT);
    p.set_raw_data(std::string(t.bytes()));
  }
  return model.SerializeAsString();
}

absl::StatusOr<NamedTensors> ReadTensorFile(absl::string_view path) {
  IPUPOD_ASSIGN_OR_RETURN(TensorFileFormat format, TensorFileFormatOf(path));
  IPUPOD_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  absl::StatusOr<NamedTensors> tensors;
  switch (format) {
    case TensorFileFormat::kNpz:
      tensors = ParseNpz(bytes);
      break;
    case TensorFileFormat::kSafetensors:
      tensors = ParseSafetensors(bytes);
      break;
    case TensorFileFormat::kOnnx: {
      const fs::path dir = fs::path(std::string(path)).parent_path();
      tensors = ParseOnnxInitializers(bytes, dir.empty() ? "." : dir.string());
      break;
    }
  }
  if (!tensors.ok()) return InFile(path, tensors.status());
  return tensors;
}

absl::Status WriteTensorFile(absl::string_view path, const NamedTensors& tensors) {
  IPUPOD_ASSIGN_OR_RETURN(TensorFileFormat format, TensorFileFormatOf(path));
  switch (format) {
    case TensorFileFormat::kNpz:
      return WriteFileAtomically(path, SerializeNpz(tensors));
    case TensorFileFormat::kSafetensors:
      return WriteFileAtomically(path, SerializeSafetensors(tensors));
    case TensorFileFormat::kOnnx:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "cannot write '", path, "': ipupod writes tensors only as .npz or .safetensors"));
}

}  // namespace ipupod::runtime
