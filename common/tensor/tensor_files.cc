#include "common/tensor/tensor_files.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"
#include <fcntl.h>
#include <unistd.h>

namespace ipupod::tensor {
namespace {

namespace fs = std::filesystem;

// "<what> '<path>': <strerror>", RESOURCE_EXHAUSTED when the disk is full.
absl::Status FileError(absl::string_view what, absl::string_view path) {
  const int err = errno;
  const std::string message = absl::StrCat(what, " '", path, "': ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(message);
  return absl::FailedPreconditionError(message);
}

// Makes a rename in the file's directory durable (best effort: some
// filesystems cannot fsync a directory).
void SyncDirectoryOf(const std::string& path) {
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

// The whole file, mapped, if it is a regular file within the limit's size.
absl::StatusOr<MappedFile> ReadFile(absl::string_view path, const TensorReadLimits& limits) {
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
  // Checked before the mapping reads the file in, and again on what was mapped.
  const auto over_limit = [&](int64_t size) {
    return size > kTensorFileOverheadMax && size - kTensorFileOverheadMax > limits.bytes_max;
  };
  const auto size = static_cast<int64_t>(fs::file_size(p, ec));
  if (!ec && over_limit(size)) {
    return internal::OverReadLimit(absl::StrCat("'", path, "' holds ", size, " bytes"), limits);
  }
  IPUPOD_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  if (over_limit(static_cast<int64_t>(file.size()))) {
    return internal::OverReadLimit(absl::StrCat("'", path, "' holds ", file.size(), " bytes"),
                                   limits);
  }
  return file;
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
  const std::string target(path);
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return FileError("cannot create", tmp);
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status error = FileError("cannot write", tmp);
      ::close(fd);
      std::remove(tmp.c_str());
      return error;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    absl::Status error = FileError("cannot flush", tmp);
    ::close(fd);
    std::remove(tmp.c_str());
    return error;
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    absl::Status error = FileError(absl::StrCat("cannot rename '", tmp, "' to"), target);
    std::remove(tmp.c_str());
    return error;
  }
  SyncDirectoryOf(target);
  return absl::OkStatus();
}

absl::StatusOr<NamedTensors> ReadTensorFile(absl::string_view path,
                                            const TensorReadLimits& limits) {
  IPUPOD_ASSIGN_OR_RETURN(TensorFileFormat format, TensorFileFormatOf(path));
  IPUPOD_ASSIGN_OR_RETURN(const MappedFile file, ReadFile(path, limits));
  const absl::string_view bytes = file.bytes();
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
