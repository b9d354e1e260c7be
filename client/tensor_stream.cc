#include "client/tensor_stream.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ipupod::client {

absl::StatusOr<tensor::DType> DTypeFromName(absl::string_view name) {
  for (tensor::DType d : {tensor::DType::kFloat32, tensor::DType::kInt64, tensor::DType::kInt32,
                          tensor::DType::kBool}) {
    if (tensor::DTypeName(d) == name) return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "'; expected float32, int64, int32 or bool"));
}

v1::TensorHeader TensorHeaderOf(absl::string_view name, const tensor::Tensor& tensor) {
  v1::TensorHeader header;
  header.set_name(std::string(name));
  header.set_dtype(std::string(tensor::DTypeName(tensor.dtype())));
  for (int64_t d : tensor.shape()) header.add_shape(d);
  header.set_total_bytes(tensor.byte_size());
  return header;
}

v1::TensorSpec TensorSpecOf(absl::string_view name, const tensor::Tensor& tensor) {
  v1::TensorSpec spec;
  spec.set_name(std::string(name));
  spec.set_dtype(std::string(tensor::DTypeName(tensor.dtype())));
  for (int64_t d : tensor.shape()) spec.add_shape(d);
  return spec;
}

bool ForEachChunk(absl::string_view bytes,
                  const std::function<bool(absl::string_view chunk)>& emit) {
  for (size_t offset = 0; offset < bytes.size(); offset += kTensorChunkBytesMax) {
    if (!emit(bytes.substr(offset, kTensorChunkBytesMax))) return false;
  }
  return true;
}

absl::Status TensorAssembler::OnHeader(const v1::TensorHeader& header) {
  if (absl::Status done = CompleteCurrent(); !done.ok()) return done;
  absl::StatusOr<tensor::DType> dtype = DTypeFromName(header.dtype());
  if (!dtype.ok()) {
    return absl::InternalError(
        absl::StrCat("ipupodd sent tensor '", header.name(), "' with ", dtype.status().message()));
  }
  tensor::Shape shape(header.shape().begin(), header.shape().end());
  absl::StatusOr<int64_t> elements = tensor::CheckedNumElements(*dtype, shape);
  if (!elements.ok() ||
      static_cast<uint64_t>(*elements) * tensor::DTypeSize(*dtype) != header.total_bytes()) {
    return absl::InternalError(absl::StrCat("ipupodd sent tensor '", header.name(), "' of shape [",
                                            absl::StrJoin(shape, ","), "] announcing ",
                                            header.total_bytes(), " bytes"));
  }
  absl::StatusOr<tensor::Tensor> tensor = tensor::Tensor::Create(*dtype, std::move(shape));
  if (!tensor.ok()) return tensor.status();  // RESOURCE_EXHAUSTED-like: out of host memory
  current_ = header;
  tensor_ = *std::move(tensor);
  filled_ = 0;
  return absl::OkStatus();
}

absl::Status TensorAssembler::OnData(absl::string_view data) {
  if (!current_) return absl::InternalError("ipupodd sent tensor data before a tensor header");
  if (filled_ + data.size() > current_->total_bytes()) {
    return absl::InternalError(absl::StrCat("ipupodd sent more than the ", current_->total_bytes(),
                                            " bytes announced for '", current_->name(), "'"));
  }
  std::memcpy(static_cast<char*>(tensor_->mutable_raw_data()) + filled_, data.data(), data.size());
  filled_ += data.size();
  return absl::OkStatus();
}

absl::Status TensorAssembler::CompleteCurrent() {
  if (!current_) return absl::OkStatus();
  if (filled_ != current_->total_bytes()) {
    return absl::InternalError(absl::StrCat("ipupodd sent ", filled_, " of the ",
                                            current_->total_bytes(), " bytes announced for '",
                                            current_->name(), "'"));
  }
  if (tensor_->dtype() == tensor::DType::kBool) {
    for (char byte : tensor_->bytes()) {
      if (static_cast<unsigned char>(byte) > 1) {
        return absl::InternalError(absl::StrCat("ipupodd sent bool tensor '", current_->name(),
                                                "' with a byte that is neither 0 nor 1"));
      }
    }
  }
  done_.emplace_back(current_->name(), *std::move(tensor_));
  current_.reset();
  tensor_.reset();
  return absl::OkStatus();
}

absl::StatusOr<tensor::NamedTensors> TensorAssembler::Finish() {
  if (absl::Status done = CompleteCurrent(); !done.ok()) return done;
  return std::move(done_);
}

}  // namespace ipupod::client
