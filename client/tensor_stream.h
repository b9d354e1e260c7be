// File: client/tensor_stream.h
//
// Tensors on the ExecutionService wire (proto/ipupod/v1/execution.proto):
// one tensor travels as a TensorHeader (name, dtype, shape, total_bytes)
// followed by its little-endian, row-major bytes in TensorData messages of
// at most kTensorChunkBytesMax. These helpers split tensors into that
// sequence (sending) and rebuild them from it (receiving), checking that
// what arrives is consistent before a byte is buffered.
//
// Thread safety: functions are pure; a TensorAssembler is used by one thread.
// Errors: DTypeFromName - INVALID_ARGUMENT for an unknown dtype name.
// TensorAssembler - INTERNAL "ipupodd sent ..." for a stream that breaks the
// contract (data before a header, more or fewer bytes than announced, a
// shape that does not match total_bytes): a server bug, not the caller's.
#ifndef IPUPOD_CLIENT_TENSOR_STREAM_H_
#define IPUPOD_CLIENT_TENSOR_STREAM_H_

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ipupod/v1/execution.pb.h"
#include "tensor/tensor.h"
#include "tensor/tensor_files.h"

namespace ipupod::client {

namespace v1 = ::ipupod::v1;

// The contract's bound on one TensorData (and one ExecutableChunk).
inline constexpr size_t kTensorChunkBytesMax = size_t{1} << 20;

// "float32", "int64", "int32", "bool".
absl::StatusOr<tensor::DType> DTypeFromName(absl::string_view name);

v1::TensorHeader TensorHeaderOf(absl::string_view name, const tensor::Tensor& tensor);
v1::TensorSpec TensorSpecOf(absl::string_view name, const tensor::Tensor& tensor);

// Calls `emit` with consecutive slices of `bytes`, each at most
// kTensorChunkBytesMax (none for empty `bytes`); stops at the first false.
// Returns false if `emit` did.
bool ForEachChunk(absl::string_view bytes,
                  const std::function<bool(absl::string_view chunk)>& emit);

// Rebuilds tensors from header/data messages in arrival order.
class TensorAssembler {
 public:
  TensorAssembler() = default;
  TensorAssembler(const TensorAssembler&) = delete;
  TensorAssembler& operator=(const TensorAssembler&) = delete;

  // A new tensor begins; the previous one must be complete.
  absl::Status OnHeader(const v1::TensorHeader& header);
  absl::Status OnData(absl::string_view data);
  // Every tensor received, in order. REQUIRES: called once, at the end.
  absl::StatusOr<tensor::NamedTensors> Finish();

 private:
  absl::Status CompleteCurrent();

  tensor::NamedTensors done_;
  std::optional<v1::TensorHeader> current_;
  // Allocated from the header; chunks are copied straight into it (one
  // copy per byte, no staging buffer: weights can be gigabytes).
  std::optional<tensor::Tensor> tensor_;
  size_t filled_ = 0;
};

}  // namespace ipupod::client

#endif  // IPUPOD_CLIENT_TENSOR_STREAM_H_
