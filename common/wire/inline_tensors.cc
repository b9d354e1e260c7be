#include "common/wire/inline_tensors.h"

#include "common/status_macros.h"

namespace ipupod::wire {

uint64_t InlineDataBytes(const InlineTensors& tensors) {
  uint64_t bytes = 0;
  for (const v1::InlineTensor& t : tensors) bytes += t.data().size();
  return bytes;
}

uint64_t InlineDataBytes(const tensor::NamedTensors& tensors) {
  uint64_t bytes = 0;
  for (const auto& [name, tensor] : tensors) bytes += tensor.byte_size();
  return bytes;
}

void AddInline(const tensor::NamedTensors& tensors, InlineTensors* out) {
  out->Reserve(out->size() + static_cast<int>(tensors.size()));
  for (const auto& [name, tensor] : tensors) {
    v1::InlineTensor* t = out->Add();
    *t->mutable_header() = TensorHeaderOf(name, tensor);
    const absl::string_view bytes = tensor.bytes();
    t->set_data(bytes.data(), bytes.size());
  }
}

absl::StatusOr<tensor::NamedTensors> AssembleInline(const InlineTensors& tensors,
                                                    TensorAssembler& assembler) {
  for (const v1::InlineTensor& t : tensors) {
    IPUPOD_RETURN_IF_ERROR(assembler.AddHeader(t.header()));
    // The assembler's own chunk rule holds: all of it is at most 1 MiB.
    if (!t.data().empty()) IPUPOD_RETURN_IF_ERROR(assembler.AddData(t.data()));
  }
  return assembler.Finish();
}

}  // namespace ipupod::wire
