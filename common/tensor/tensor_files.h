// File: common/tensor/tensor_files.h
//
// Named tensors in the files users keep weights and data in:
//   .npz          numpy.savez and numpy.savez_compressed (zip of .npy;
//                 stored or deflated members, zip64 when large)
//   .safetensors  Hugging Face safetensors (8-byte header length, JSON
//                 header, raw little-endian data); BF16 widens to float32
//   .onnx         the initializers of an ONNX model (raw_data, typed
//                 fields or external data next to the model file), read
//                 with protobuf's wire-format reader: no ONNX library
// Tensors keep the order they have in the file (.safetensors: the order of
// their data; npz: the central directory's). Dtypes: float32, float16,
// int64, int32, bool (DType); float64 narrows to float32 on read (.npy,
// .npz: refused), other
// dtypes are INVALID_ARGUMENT naming the tensor.
//
// Hostile files: every size a file declares (member sizes, header lengths,
// shapes, data offsets) is checked against the file's own size, and the
// tensor bytes all of a file's tensors decode to against
// TensorReadLimits::bytes_max, before anything is allocated. A deflated .npz
// member cannot expand beyond its declared size (nor can that size exceed
// what deflate can produce from its compressed bytes); it is inflated
// straight into its tensor, so reading costs about the file plus its
// tensors, whatever the file claims.
//
// Thread safety: pure functions.
// Errors: NOT_FOUND for a missing file, INVALID_ARGUMENT for a malformed or
// unsupported file or a path that is not a regular file (what is wrong,
// which tensor, what to do), RESOURCE_EXHAUSTED for a file over the read
// limit (what it declares, the limit), INTERNAL for I/O failures. Never an
// exception. Writers go through a temporary file and rename.
#ifndef IPUPOD_TENSOR_TENSOR_FILES_H_
#define IPUPOD_TENSOR_TENSOR_FILES_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor/tensor.h"

namespace ipupod::tensor {

using NamedTensor = std::pair<std::string, Tensor>;
using NamedTensors = std::vector<NamedTensor>;
// A named tensor owned elsewhere.
using TensorRef = std::pair<std::string, const Tensor*>;

// The default bound on the tensor bytes one file may decode to: 4 GiB, the
// size of the largest single tensor (kTensorBytesMax).
inline constexpr int64_t kTensorFileBytesMaxDefault = int64_t{4} << 30;

struct TensorReadLimits {
  // All of one file's tensors together, in bytes as decoded (BF16 counts as
  // the float32 it widens to). The file itself may be at most this plus
  // kTensorFileOverheadMax bytes.
  int64_t bytes_max = kTensorFileBytesMaxDefault;
};
// Headers, names and other non-tensor bytes a file may add to its tensors.
inline constexpr int64_t kTensorFileOverheadMax = int64_t{256} << 20;

enum class TensorFileFormat { kNpz, kSafetensors, kOnnx };

// From the path's extension (.npz, .safetensors, .onnx); INVALID_ARGUMENT
// otherwise, listing the three.
absl::StatusOr<TensorFileFormat> TensorFileFormatOf(absl::string_view path);

absl::StatusOr<NamedTensors> ParseNpz(absl::string_view bytes, const TensorReadLimits& limits = {});
// Uncompressed, as numpy.savez; zip64 fields only where sizes need them.
std::string SerializeNpz(const NamedTensors& tensors);

absl::StatusOr<NamedTensors> ParseSafetensors(absl::string_view bytes,
                                              const TensorReadLimits& limits = {});
std::string SerializeSafetensors(const NamedTensors& tensors);

// `model_dir` resolves external-data locations ("" = none allowed).
absl::StatusOr<NamedTensors> ParseOnnxInitializers(absl::string_view model_bytes,
                                                   absl::string_view model_dir = "",
                                                   const TensorReadLimits& limits = {});

// Writes `bytes` to `path` via a temporary file, fsync and a rename (then
// fsyncs the directory): a crash leaves the old file or the whole new one,
// and the new one survives a power loss once this returns.
// FAILED_PRECONDITION naming the file, RESOURCE_EXHAUSTED when the disk is
// full.
absl::Status WriteFileAtomically(absl::string_view path, absl::string_view bytes);

// By extension. Writing .onnx is not supported here (INVALID_ARGUMENT).
absl::StatusOr<NamedTensors> ReadTensorFile(absl::string_view path,
                                            const TensorReadLimits& limits = {});
absl::Status WriteTensorFile(absl::string_view path, const NamedTensors& tensors);

namespace internal {
// RESOURCE_EXHAUSTED: "`what`, over the limit of N bytes for one tensor
// file; ...what to do".
absl::Status OverReadLimit(absl::string_view what, const TensorReadLimits& limits);
}  // namespace internal

}  // namespace ipupod::tensor

#endif  // IPUPOD_TENSOR_TENSOR_FILES_H_
