#include "common/wire/tensor_stream.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/format.h"
#include "common/status_macros.h"
#include "common/tensor/shape.h"

namespace ipupod::wire {

v1::TensorHeader TensorHeaderOf(absl::string_view name, const tensor::Tensor& tensor) {
  v1::TensorHeader header;
  header.set_name(std::string(name));
  header.set_dtype(std::string(tensor::DTypeName(tensor.dtype())));
  for (int64_t d : tensor.shape()) header.add_shape(d);
  header.set_total_bytes(tensor.byte_size());
  return header;
}

bool ForEachChunk(absl::string_view bytes,
                  const std::function<bool(absl::string_view chunk)>& emit) {
  for (size_t offset = 0; offset < bytes.size(); offset += kTensorChunkBytesMax) {
    if (!emit(bytes.substr(offset, kTensorChunkBytesMax))) return false;
  }
  return true;
}

absl::Status StreamTensors(const tensor::NamedTensors& tensors,
                           const std::function<bool(const v1::TensorHeader&)>& on_header,
                           const std::function<bool(absl::string_view)>& on_data) {
  std::vector<tensor::TensorRef> refs;
  refs.reserve(tensors.size());
  for (const auto& [name, t] : tensors) refs.emplace_back(name, &t);
  return StreamTensors(refs, on_header, on_data);
}

absl::Status StreamTensors(const std::vector<tensor::TensorRef>& tensors,
                           const std::function<bool(const v1::TensorHeader&)>& on_header,
                           const std::function<bool(absl::string_view)>& on_data) {
  const absl::Status gone = absl::CancelledError("the peer stopped reading; the call ended");
  for (const auto& [name, t] : tensors) {
    if (!on_header(TensorHeaderOf(name, *t))) return gone;
    if (!ForEachChunk(t->bytes(), on_data)) return gone;
  }
  return absl::OkStatus();
}

absl::Status CheckNameLength(absl::string_view what, absl::string_view name,
                             absl::string_view fix) {
  if (name.size() <= kNameBytesMax) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("a %s name of %d characters is over the limit of %d; %s (it begins \"%s\")",
                      what, name.size(), kNameBytesMax, fix, name.substr(0, 32)));
}

TensorAssembler::TensorAssembler(std::string what, int64_t bytes_max)
    : what_(std::move(what)), bytes_max_(bytes_max) {}

absl::StatusOr<tensor::DType> TensorAssembler::CheckHeader(const v1::TensorHeader& header) const {
  const std::string& name = header.name();
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("a tensor of the ", what_, " has no name"));
  }
  IPUPOD_RETURN_IF_ERROR(CheckNameLength("tensor", name, "send the model's own names"));
  if (done_.size() >= kTensorsMax) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the %s carry more than %d tensors, more than any program has; send only the "
        "program's own tensors",
        what_, kTensorsMax));
  }
  if (names_.contains(name)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor %s is sent twice in the %s; send each once", name, what_));
  }
  absl::StatusOr<tensor::DType> dtype = tensor::ParseDTypeName(header.dtype());
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", dtype.status().message()));
  }
  const tensor::Shape shape(header.shape().begin(), header.shape().end());
  absl::StatusOr<int64_t> elements = tensor::CheckedNumElements(*dtype, shape);
  if (!elements.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", elements.status().message()));
  }
  const uint64_t expected = static_cast<uint64_t>(*elements) * tensor::DTypeSize(*dtype);
  if (header.total_bytes() != expected) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s: total_bytes is %d but %s%s holds %d bytes", name, header.total_bytes(),
        header.dtype(), tensor::ShapeString(shape), expected));
  }
  if (static_cast<int64_t>(expected) > bytes_max_ - bytes_declared_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s (%d bytes) takes the %s past %d bytes, all this program can take; send only "
        "the tensors it has, with their shapes",
        name, expected, what_, bytes_max_));
  }
  return *dtype;
}

absl::Status TensorAssembler::AddHeader(const v1::TensorHeader& header) {
  if (pending_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s started before tensor %s was complete (%d of %d bytes); send all of a "
        "tensor's bytes before the next header",
        EchoName(header.name()), pending_->name, pending_->filled, pending_->tensor.byte_size()));
  }
  IPUPOD_ASSIGN_OR_RETURN(tensor::DType dtype, CheckHeader(header));
  // Every byte is written by a chunk before CompletePending reads any.
  IPUPOD_ASSIGN_OR_RETURN(tensor::Tensor t,
                          tensor::Tensor::CreateForOverwrite(
                              dtype, tensor::Shape(header.shape().begin(), header.shape().end())));
  bytes_declared_ += static_cast<int64_t>(t.byte_size());
  pending_ = Pending{header.name(), std::move(t), 0};
  return pending_->tensor.byte_size() == 0 ? CompletePending() : absl::OkStatus();
}

absl::Status TensorAssembler::AddData(absl::string_view data) {
  if (data.size() > kTensorChunkBytesMax) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a TensorData chunk of %d bytes is over the 1 MiB limit; split tensors into chunks of "
        "at most %d bytes",
        data.size(), kTensorChunkBytesMax));
  }
  if (!pending_) {
    return absl::InvalidArgumentError(
        absl::StrCat("TensorData arrived without a TensorHeader in the ", what_,
                     "; send each tensor's header first"));
  }
  Pending& p = *pending_;
  if (data.size() > p.tensor.byte_size() - p.filled) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s: more data than its header's total_bytes (%d)", p.name, p.tensor.byte_size()));
  }
  if (!data.empty()) {
    std::memcpy(static_cast<char*>(p.tensor.mutable_raw_data()) + p.filled, data.data(),
                data.size());
  }
  p.filled += data.size();
  return p.filled < p.tensor.byte_size() ? absl::OkStatus() : CompletePending();
}

absl::Status TensorAssembler::CompletePending() {
  Pending p = std::move(*pending_);
  pending_.reset();
  if (p.tensor.dtype() == tensor::DType::kBool) {
    for (char byte : p.tensor.bytes()) {
      if (byte != 0 && byte != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", p.name, ": bool tensor holds a byte other than 0 or 1"));
      }
    }
  }
  names_.insert(p.name);
  done_.emplace_back(std::move(p.name), std::move(p.tensor));
  return absl::OkStatus();
}

absl::StatusOr<tensor::NamedTensors> TensorAssembler::Finish() {
  if (pending_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the %s ended inside tensor %s: %d of %d bytes arrived; send all of its bytes", what_,
        pending_->name, pending_->filled, pending_->tensor.byte_size()));
  }
  return std::move(done_);
}

}  // namespace ipupod::wire
