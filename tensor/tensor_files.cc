#include "tensor/tensor_files.h"

#include <cerrno>
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

// The whole file, if it is a regular file within the limit's size.
absl::StatusOr<std::string> ReadFile(absl::string_view path, const TensorReadLimits& limits) {
  const std::string p(path);
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (!fs::exists(st))
    return absl::NotFoundError(absl::StrCat("cannot open '", path, "': no such file"));
  if (!fs::is_regular_file(st)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a regular file (",
                     fs::is_directory(st) ? "a directory" : "a device, pipe or socket",
                     "); pass a tensor file"));
  }
  std::ifstream file(p, std::ios::binary | std::ios::ate);
  if (!file)
    return absl::InternalError(absl::StrCat("cannot open '", path, "': ", std::strerror(errno)));
  const std::streamoff size = file.tellg();
  if (size < 0) return absl::InternalError(absl::StrCat("cannot read '", path, "'"));
  if (size > kTensorFileOverheadMax && size - kTensorFileOverheadMax > limits.bytes_max) {
    return internal::OverReadLimit(absl::StrCat("'", path, "' holds ", size, " bytes"), limits);
  }
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

namespace internal {
absl::Status OverReadLimit(absl::string_view what, const TensorReadLimits& limits) {
  return absl::ResourceExhaustedError(
      absl::StrCat(what, ", over the limit of ", limits.bytes_max,
                   " bytes for one tensor file; split the tensors across smaller files"));
}
}  // namespace internal

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

absl::StatusOr<NamedTensors> ReadTensorFile(absl::string_view path,
                                            const TensorReadLimits& limits) {
  IPUPOD_ASSIGN_OR_RETURN(TensorFileFormat format, TensorFileFormatOf(path));
  IPUPOD_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path, limits));
  absl::StatusOr<NamedTensors> tensors;
  switch (format) {
    case TensorFileFormat::kNpz:
      tensors = ParseNpz(bytes, limits);
      break;
    case TensorFileFormat::kSafetensors:
      tensors = ParseSafetensors(bytes, limits);
      break;
    case TensorFileFormat::kOnnx: {
      const fs::path dir = fs::path(std::string(path)).parent_path();
      tensors = ParseOnnxInitializers(bytes, dir.empty() ? "." : dir.string(), limits);
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
