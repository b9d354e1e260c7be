// File: server/tensor_stream.h
//
// Tensors on the wire (execution.proto): each moves as a TensorHeader
// followed by its bytes in TensorData chunks of at most kTensorChunkBytes.
//
//   TensorAssembler  receives headers and chunks in stream order and builds
//                    tensor::NamedTensors, checking as it goes: a known
//                    dtype name, non-negative dims, total_bytes equal to the
//                    shape's element count x dtype size, no data before a
//                    header, no chunk over 1 MiB, no more bytes than the
//                    header declared, no header before the previous tensor
//                    is complete, no name twice, and at most `bytes_max`
//                    bytes in all (checked on each header, before anything
//                    is allocated).
//   StreamTensors    cuts tensors into header + chunk messages for a writer.
//
// Thread safety: TensorAssembler is not shared (one per RPC); StreamTensors
// is a pure function over its callbacks.
// Errors: INVALID_ARGUMENT naming the tensor and what to fix (also when
// `bytes_max` would be passed: the program takes no more, so the request
// is wrong); StreamTensors: CANCELLED when a write fails (the client went away).
#ifndef IPUPOD_SERVER_TENSOR_STREAM_H_
#define IPUPOD_SERVER_TENSOR_STREAM_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ipupod/v1/execution.pb.h"
#include "tensor/tensor.h"
#include "tensor/tensor_files.h"

namespace ipupod::server {

inline constexpr size_t kTensorChunkBytes = size_t{1} << 20;  // 1 MiB

// "float32", "int64", "int32", "bool"; INVALID_ARGUMENT listing them.
absl::StatusOr<tensor::DType> ParseDType(absl::string_view name);

class TensorAssembler {
 public:
  // `what` names the stream in messages ("weights", "inputs").
  TensorAssembler(std::string what, int64_t bytes_max);
  TensorAssembler(const TensorAssembler&) = delete;
  TensorAssembler& operator=(const TensorAssembler&) = delete;

  absl::Status AddHeader(const v1::TensorHeader& header);
  absl::Status AddData(absl::string_view data);
  // Every tensor, in stream order. INVALID_ARGUMENT if the last one is
  // incomplete. REQUIRES: called once.
  absl::StatusOr<tensor::NamedTensors> Finish();

 private:
  struct Pending {
    std::string name;
    tensor::DType dtype = tensor::DType::kFloat32;
    tensor::Shape shape;
    std::string bytes;
    uint64_t total_bytes = 0;
  };
  absl::Status CheckHeader(const v1::TensorHeader& header, tensor::DType* dtype) const;
  absl::Status CompletePending();

  const std::string what_;
  const int64_t bytes_max_;
  int64_t bytes_declared_ = 0;
  std::optional<Pending> pending_;
  tensor::NamedTensors done_;
};

// Calls on_header, then on_data for each chunk (none for an empty tensor),
// for every tensor in order. A callback returning false stops with CANCELLED.
absl::Status StreamTensors(const std::vector<tensor::TensorRef>& tensors,
                           const std::function<bool(const v1::TensorHeader&)>& on_header,
                           const std::function<bool(absl::string_view)>& on_data);
absl::Status StreamTensors(const tensor::NamedTensors& tensors,
                           const std::function<bool(const v1::TensorHeader&)>& on_header,
                           const std::function<bool(absl::string_view)>& on_data);

// The header of `tensor` named `name`.
v1::TensorHeader HeaderOf(const std::string& name, const tensor::Tensor& tensor);

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_TENSOR_STREAM_H_
