#include "tensor/tensor_files.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include <unistd.h>

namespace ipupod::tensor {
namespace {

namespace fs = std::filesystem;

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

}  // namespace ipupod::tensor
