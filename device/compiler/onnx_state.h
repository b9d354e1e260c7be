// File: device/compiler/onnx_state.h
//
// Every parameter stays a weight: what the compiler does to an ONNX model's
// initializers before importing it, so that a write by PyTorch name reaches
// every parameter the model reads (issue 28; docs/differences.md, "Weights").
//
// KeepModuleStateWritable rewrites the model:
//   * torch.onnx (eval mode) merges parameters whose values were equal at
//     export into one initializer and reads the others through Identity
//     nodes named as those parameters (two freshly initialised LayerNorms).
//     Each such Identity of a float initializer becomes an initializer of
//     its own, a copy of the merged value under the parameter's name, so a
//     later write reaches it alone;
//   * a torch export (producer "pytorch") without a declared module state
//     gets the part of one its names imply, in its metadata (device/graph/graph.h
//     ModuleState): tied weights as aliases - a Linear or Embedding in
//     module P reading another module's rank-2 weight W (through a
//     Transpose, a Gemm with transB=1 or a Gather) makes "P.weight" a name
//     of W when no initializer has that name (GPT-2's lm_head.weight is
//     transformer.wte.weight; torch.onnx exports the one tensor once) - and
//     its float scalars named as module state (not "onnx::...") as buffers,
//     so they stay writable weights (GPT-2's attn.masked_bias) rather than
//     constants folded away; without a declared state they are not trained,
//     as before;
// and says what it cannot undo, as compile warnings:
//   * initializers the exporter computed by constant folding (torch names
//     them "onnx::<Op>_<n>": a Linear's transposed weight, a Conv with its
//     BatchNorm fused in): their PyTorch names are lost, so a weights file
//     keyed by PyTorch names cannot write them. The warning names them and
//     the node each feeds, and says how to export instead.
// A model that declares its module state (device/graph/graph.h ModuleState, as
// ipupod.poptorch writes it) has no such folding to report.
//
// Thread safety: pure functions.
// Errors: bytes that do not parse are returned unchanged, for the import to
// report; INTERNAL if the rewritten model cannot be serialized.
#ifndef IPUPOD_COMPILER_ONNX_STATE_H_
#define IPUPOD_COMPILER_ONNX_STATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ipupod::compiler {

struct WritableModel {
  std::string onnx_bytes;             // the input unchanged when nothing was rewritten
  std::vector<std::string> split;     // parameters given their own initializer
  std::vector<std::string> warnings;  // what the exporter folded, one warning
};

absl::StatusOr<WritableModel> KeepModuleStateWritable(absl::string_view onnx_bytes);

}  // namespace ipupod::compiler

#endif  // IPUPOD_COMPILER_ONNX_STATE_H_
