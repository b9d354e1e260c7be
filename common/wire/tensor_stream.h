// File: common/wire/tensor_stream.h
//
// The one codec for tensors on the ExecutionService wire
// (proto/ipupod/v1/execution.proto), used by the client and the server
// alike. A tensor travels as a TensorHeader (name, dtype, shape,
// total_bytes) followed by its little-endian, row-major bytes in TensorData
// chunks of at most kTensorChunkBytesMax (none for an empty tensor).
//
//   StreamTensors / ForEachChunk  the sending side: cut tensors (or any
//                    bytes, such as an executable) into that sequence.
//   TensorAssembler  the receiving side: rebuilds tensor::NamedTensors from
//                    headers and chunks in stream order, checking as it
//                    goes: a name of at most kNameBytesMax bytes, not
//                    seen before; a known dtype name;
//                    non-negative dims; total_bytes equal to the shape's
//                    element count x dtype size; at most `bytes_max` bytes
//                    declared in all (checked on each header, before
//                    anything is allocated); at most kTensorsMax tensors,
//                    so empty ones cannot grow it either; no data before a header; no
//                    chunk over kTensorChunkBytesMax; no more bytes than
//                    declared; no header before the previous tensor is
//                    complete; bools 0 or 1. Chunks are copied straight
//                    into the tensor (one copy per byte: weights can be
//                    gigabytes).
//
// Thread safety: TensorAssembler is used by one thread (one per RPC); the
// functions are pure over their callbacks.
// Errors: a malformed stream is INVALID_ARGUMENT naming the tensor and what
// to fix - from the receiver's point of view. The server answers that to a
// client. The client, receiving a malformed stream from ipupodd, reports
// it as the server's fault: client::ServerStreamError (client/grpc_status.h)
// turns it into INTERNAL "ipupodd sent ...". StreamTensors: CANCELLED when a
// callback returns false (the peer went away).
#ifndef IPUPOD_WIRE_TENSOR_STREAM_H_
#define IPUPOD_WIRE_TENSOR_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor/tensor.h"
#include "common/tensor/tensor_files.h"
#include "ipupod/v1/execution.pb.h"

namespace ipupod::wire {

namespace v1 = ::ipupod::v1;

// The contract's bound on one TensorData (and one ExecutableChunk): 1 MiB.
inline constexpr size_t kTensorChunkBytesMax = size_t{1} << 20;
// The longest name a request may carry: a tensor, a weight, a session.
// Longer ones are INVALID_ARGUMENT up front (CheckNameLength), so no error
// message can grow with a client's name.
inline constexpr size_t kNameBytesMax = 256;

// The most tensors one stream may carry: far more than any model's weights,
// or a checkpoint of them with Adam's two moments each, yet a bound on what
// zero-byte tensors (which `bytes_max` does not see) can make a receiver hold.
inline constexpr size_t kTensorsMax = size_t{1} << 16;

// INVALID_ARGUMENT "a <what> name of N characters is over the limit of 256;
// <fix>" if `name` is longer than kNameBytesMax.
absl::Status CheckNameLength(absl::string_view what, absl::string_view name, absl::string_view fix);

v1::TensorHeader TensorHeaderOf(absl::string_view name, const tensor::Tensor& tensor);

// Calls `emit` with consecutive slices of `bytes`, each at most
// kTensorChunkBytesMax (none for empty `bytes`); stops at the first false.
// Returns false if `emit` did.
bool ForEachChunk(absl::string_view bytes,
                  const std::function<bool(absl::string_view chunk)>& emit);

// Calls on_header, then on_data for each chunk, for every tensor in order.
// A callback returning false stops with CANCELLED.
absl::Status StreamTensors(const std::vector<tensor::TensorRef>& tensors,
                           const std::function<bool(const v1::TensorHeader&)>& on_header,
                           const std::function<bool(absl::string_view)>& on_data);
absl::Status StreamTensors(const tensor::NamedTensors& tensors,
                           const std::function<bool(const v1::TensorHeader&)>& on_header,
                           const std::function<bool(absl::string_view)>& on_data);

class TensorAssembler {
 public:
  static constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();

  // `what` names the stream in messages ("weights", "inputs", "outputs").
  explicit TensorAssembler(std::string what, int64_t bytes_max = kNoLimit);
  TensorAssembler(const TensorAssembler&) = delete;
  TensorAssembler& operator=(const TensorAssembler&) = delete;

  absl::Status AddHeader(const v1::TensorHeader& header);
  absl::Status AddData(absl::string_view data);
  // Every tensor, in stream order. INVALID_ARGUMENT if the last one is
  // incomplete. REQUIRES: called once, at the end.
  absl::StatusOr<tensor::NamedTensors> Finish();

 private:
  struct Pending {
    std::string name;
    tensor::Tensor tensor;  // allocated from the header, filled by chunks
    size_t filled = 0;
  };
  absl::StatusOr<tensor::DType> CheckHeader(const v1::TensorHeader& header) const;
  absl::Status CompletePending();

  const std::string what_;
  const int64_t bytes_max_;
  int64_t bytes_declared_ = 0;
  std::optional<Pending> pending_;
  tensor::NamedTensors done_;
  absl::flat_hash_set<std::string> names_;  // of done_, for the duplicate check
};

}  // namespace ipupod::wire

#endif  // IPUPOD_WIRE_TENSOR_STREAM_H_
