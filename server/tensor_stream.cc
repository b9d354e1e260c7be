#include "server/tensor_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace ipupod::server {
namespace {

constexpr tensor::DType kDTypes[] = {tensor::DType::kFloat32, tensor::DType::kInt64,
                                     tensor::DType::kInt32, tensor::DType::kBool};

std::string ShapeText(const tensor::Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::StatusOr<tensor::DType> ParseDType(absl::string_view name) {
  for (tensor::DType dtype : kDTypes) {
    if (tensor::DTypeName(dtype) == name) return dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("dtype \"%s\" is not supported; use float32, int64, int32 or bool", name));
}

v1::TensorHeader HeaderOf(const std::string& name, const tensor::Tensor& tensor) {
  v1::TensorHeader header;
  header.set_name(name);
  header.set_dtype(std::string(tensor::DTypeName(tensor.dtype())));
  for (int64_t d : tensor.shape()) header.add_shape(d);
  header.set_total_bytes(tensor.byte_size());
  return header;
}

TensorAssembler::TensorAssembler(std::string what, int64_t bytes_max)
    : what_(std::move(what)), bytes_max_(bytes_max) {}

absl::Status TensorAssembler::CheckHeader(const v1::TensorHeader& header,
                                          tensor::DType* dtype) const {
  const std::string& name = header.name();
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("a tensor of the ", what_, " has no name"));
  }
  for (const auto& [done_name, tensor] : done_) {
    if (done_name == name) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensor %s is sent twice in the %s; send each once", name, what_));
    }
  }
  absl::StatusOr<tensor::DType> parsed = ParseDType(header.dtype());
  if (!parsed.ok())
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", parsed.status().message()));
  *dtype = *parsed;
  const tensor::Shape shape(header.shape().begin(), header.shape().end());
  absl::StatusOr<int64_t> elements = tensor::CheckedNumElements(*dtype, shape);
  if (!elements.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", elements.status().message()));
  }
  const uint64_t expected = static_cast<uint64_t>(*elements) * tensor::DTypeSize(*dtype);
  if (header.total_bytes() != expected) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor %s: total_bytes is %d but %s%s holds %d bytes", name,
                        header.total_bytes(), header.dtype(), ShapeText(shape), expected));
  }
  if (static_cast<int64_t>(expected) > bytes_max_ - bytes_declared_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s (%d bytes) takes the %s past %d bytes, all this program can take; send only "
        "the tensors it has, with their shapes",
        name, expected, what_, bytes_max_));
  }
  return absl::OkStatus();
}

absl::Status TensorAssembler::AddHeader(const v1::TensorHeader& header) {
  if (pending_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s started before tensor %s was complete (%d of %d bytes); send all of a "
        "tensor's bytes before the next header",
        header.name(), pending_->name, pending_->bytes.size(), pending_->total_bytes));
  }
  tensor::DType dtype = tensor::DType::kFloat32;
  IPUPOD_RETURN_IF_ERROR(CheckHeader(header, &dtype));
  Pending p;
  p.name = header.name();
  p.dtype = dtype;
  p.shape.assign(header.shape().begin(), header.shape().end());
  p.total_bytes = header.total_bytes();
  p.bytes.reserve(p.total_bytes);
  bytes_declared_ += static_cast<int64_t>(p.total_bytes);
  pending_ = std::move(p);
  return pending_->total_bytes == 0 ? CompletePending() : absl::OkStatus();
}

absl::Status TensorAssembler::AddData(absl::string_view data) {
  if (data.size() > kTensorChunkBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a TensorData chunk of %d bytes is over the 1 MiB limit; split tensors into chunks of "
        "at most %d bytes",
        data.size(), kTensorChunkBytes));
  }
  if (!pending_) {
    return absl::InvalidArgumentError(
        absl::StrCat("TensorData arrived without a TensorHeader in the ", what_,
                     "; send each tensor's header first"));
  }
  if (data.size() > pending_->total_bytes - pending_->bytes.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor %s: more data than its header's total_bytes (%d)", pending_->name,
                        pending_->total_bytes));
  }
  pending_->bytes.append(data.data(), data.size());
  if (pending_->bytes.size() < pending_->total_bytes) return absl::OkStatus();
  return CompletePending();
}

absl::Status TensorAssembler::CompletePending() {
  Pending p = std::move(*pending_);
  pending_.reset();
  absl::StatusOr<tensor::Tensor> tensor = tensor::Tensor::FromBytes(p.dtype, p.shape, p.bytes);
  if (!tensor.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", p.name, ": ", tensor.status().message()));
  }
  done_.emplace_back(std::move(p.name), *std::move(tensor));
  return absl::OkStatus();
}

absl::StatusOr<tensor::NamedTensors> TensorAssembler::Finish() {
  if (pending_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the %s ended inside tensor %s: %d of %d bytes arrived; send all of its bytes", what_,
        pending_->name, pending_->bytes.size(), pending_->total_bytes));
  }
  return std::move(done_);
}

absl::Status StreamTensors(const tensor::NamedTensors& tensors,
                           const std::function<bool(const v1::TensorHeader&)>& on_header,
                           const std::function<bool(absl::string_view)>& on_data) {
  std::vector<tensor::TensorRef> refs;
  refs.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) refs.emplace_back(name, &tensor);
  return StreamTensors(refs, on_header, on_data);
}

absl::Status StreamTensors(const std::vector<tensor::TensorRef>& tensors,
                           const std::function<bool(const v1::TensorHeader&)>& on_header,
                           const std::function<bool(absl::string_view)>& on_data) {
  const absl::Status gone = absl::CancelledError("the client stopped reading; the call ended");
  for (const auto& [name, tensor] : tensors) {
    if (!on_header(HeaderOf(name, *tensor))) return gone;
    const absl::string_view bytes = tensor->bytes();
    for (size_t offset = 0; offset < bytes.size(); offset += kTensorChunkBytes) {
      if (!on_data(bytes.substr(offset, kTensorChunkBytes))) return gone;
    }
  }
  return absl::OkStatus();
}

}  // namespace ipupod::server
