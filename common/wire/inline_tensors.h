// File: common/wire/inline_tensors.h
//
// Tensors carried whole inside one message (ExecutionService.RunInline,
// proto/ipupod/v1/execution.proto: InlineTensor = a TensorHeader and all of
// its bytes), for steps small enough that a stream costs more than the data.
// The receiving side goes through the stream's TensorAssembler, so an inline
// tensor is checked exactly as a streamed one (names, dtypes, shapes,
// total_bytes, the receiver's byte bound); the whole message is bounded by
// kInlineStepBytesMax on each side.
//
// Thread safety: pure functions. Errors: INVALID_ARGUMENT from the
// assembler for malformed tensors (from the receiver's point of view, as in
// common/wire/tensor_stream.h).
#ifndef IPUPOD_WIRE_INLINE_TENSORS_H_
#define IPUPOD_WIRE_INLINE_TENSORS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "common/tensor/tensor_files.h"
#include "common/wire/tensor_stream.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "ipupod/v1/execution.pb.h"

namespace ipupod::wire {

using InlineTensors = google::protobuf::RepeatedPtrField<v1::InlineTensor>;

// The most data a RunInline request's inputs, or its response's outputs,
// may hold in all: 1 MiB (one stream chunk). Larger steps go through Run.
inline constexpr size_t kInlineStepBytesMax = size_t{1} << 20;

// The bytes of data `tensors` carry (headers not counted).
uint64_t InlineDataBytes(const InlineTensors& tensors);
// The bytes `tensors` would carry inline.
uint64_t InlineDataBytes(const tensor::NamedTensors& tensors);

// Appends each tensor, header and bytes, to `out`.
void AddInline(const tensor::NamedTensors& tensors, InlineTensors* out);

// Feeds every inline tensor to `assembler` (header, then its bytes) and
// returns them all, in order.
absl::StatusOr<tensor::NamedTensors> AssembleInline(const InlineTensors& tensors,
                                                    TensorAssembler& assembler);

}  // namespace ipupod::wire

#endif  // IPUPOD_WIRE_INLINE_TENSORS_H_
