// File: device/training/buffers.h
//
// Buffers: initializers a model overwrites on every forward pass, the
// state PyTorch keeps with register_buffer and updates in place (PopTorch
// features 4.8). ONNX has no in-place update, so a buffer is an
// initializer paired with the value that replaces it (BufferUpdates,
// autodiff.h). Some ops imply the pairing:
//
//   BatchNormalization in training mode (opset >= 14 with training_mode=1,
//   or opset 9-13 with its extra outputs, as torch.onnx.export writes with
//   training=TrainingMode.TRAINING) computes running_mean and running_var
//   as outputs 1 and 2: they replace its inputs 3 (input_mean) and 4
//   (input_var).
//
// A model can name further pairs explicitly (compile --buffer NAME=VALUE).
//
// Thread safety: pure functions.
// Errors: INVALID_ARGUMENT, naming the node, when a BatchNormalization in
// training mode reads its running statistics from something other than an
// initializer, or when two updates write one buffer. Autodiff::Create
// checks the rest (each buffer an initializer, each update a computed value
// of the buffer's dtype and shape).
#ifndef IPUPOD_TRAINING_BUFFERS_H_
#define IPUPOD_TRAINING_BUFFERS_H_

#include <string>

#include "absl/status/statusor.h"
#include "device/graph/graph.h"
#include "device/training/autodiff.h"

namespace ipupod::training {

// The buffers `graph`'s ops update by themselves.
absl::StatusOr<BufferUpdates> ImplicitBufferUpdates(const graph::Graph& graph);

// ImplicitBufferUpdates plus `explicit_updates`; no buffer written twice.
absl::StatusOr<BufferUpdates> AllBufferUpdates(const graph::Graph& graph,
                                               const BufferUpdates& explicit_updates);

}  // namespace ipupod::training

#endif  // IPUPOD_TRAINING_BUFFERS_H_
