// File: device/runtime/onnx_model.h
//
// Writing weights back into an ONNX model: what `ipupod run --train
// --save-model` writes (PopART's modelToHost). Reading a model's
// initializers is tensor::ParseOnnxInitializers (common/tensor/tensor_files.h),
// which needs no ONNX library; rewriting one does, so it lives here.
//
// Thread safety: pure function.
// Errors: INVALID_ARGUMENT if `model_bytes` is not an ONNX ModelProto or a
// tensor does not name a float initializer of the same shape.
#ifndef IPUPOD_RUNTIME_ONNX_MODEL_H_
#define IPUPOD_RUNTIME_ONNX_MODEL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor/tensor_files.h"

namespace ipupod::runtime {

// The ONNX model `model_bytes` with the initializers named in `tensors`
// replaced (raw_data, little-endian). Every tensor must name a float
// initializer of the model with the same shape (INVALID_ARGUMENT
// otherwise); initializers not given keep their values.
absl::StatusOr<std::string> ReplaceOnnxInitializers(absl::string_view model_bytes,
                                                    const tensor::NamedTensors& tensors);

}  // namespace ipupod::runtime

#endif  // IPUPOD_RUNTIME_ONNX_MODEL_H_
