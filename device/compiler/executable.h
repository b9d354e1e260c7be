// File: device/compiler/executable.h
//
// compiler::Executable: a compiled model, and its file format (.ipx) - one
// self-contained file holding the ONNX model, the placement, the options
// and the run shape, so a server can load and run it without the original
// model or config. See docs/executable-format.md.
//
// Layout (all integers little-endian):
//   offset  size  field
//        0     8  magic 89 49 50 58 0D 0A 1A 0A ("\x89IPX\r\n\x1a\n": the
//                 high byte and CR LF catch 7-bit and newline-translating
//                 copies, as PNG's signature does)
//        8     4  format version (uint32), kExecutableFormatVersion
//       12     4  header size (uint32), 64
//       16     8  payload size P (uint64)
//       24    32  SHA-256 of the P payload bytes
//       56     8  reserved, zero
//       64     P  payload:
//                   uint64 M, then M bytes of metadata JSON (UTF-8)
//                   uint64 N, then N bytes of ONNX ModelProto
// The metadata JSON holds: producer ("ipupod 0.1.0"), mode ("inference" or
// "training"), training (training executables only: TrainingSpec), execution
// ("pipelined"/"sharded"), output_mode, micro_batch_size, replication_factor, device_iterations,
// batch_size_factor, ipus (per_replica, needed, reserved), ipu_config (every
// IpuConfig key), placement (method, ipus_per_replica, stage_ipus, nodes,
// node_stages, notes), inputs and outputs ({name, dtype, shape} per
// micro-batch), report (device/compiler/report.h JSON) and warnings. The model is
// the one ImportOnnx accepts (PopART placement attributes already moved
// into the placement); its imported node names are placement.nodes.
// Readers check, in order: magic, format version (before anything else, so
// any future layout gets the version message), header size, exact length
// (no truncation, no trailing bytes), hash, then the payload fields.
//
// Thread safety: plain value and pure functions.
// Errors: INVALID_ARGUMENT for every malformed file, with what is wrong and
// what to do: too short or wrong magic ("not an ipupod executable"),
// another format version ("executable format 3 but this ipupod reads 1:
// recompile with this version of ipupod"), truncation or trailing bytes,
// a hash mismatch (corrupted), malformed metadata. Files: NOT_FOUND for a
// missing file, INTERNAL for I/O failures.
#ifndef IPUPOD_COMPILER_EXECUTABLE_H_
#define IPUPOD_COMPILER_EXECUTABLE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor/tensor.h"
#include "device/compiler/checks.h"
#include "device/compiler/ipu_config.h"
#include "device/compiler/placement.h"

namespace ipupod::compiler {

inline constexpr uint32_t kExecutableFormatVersion = 1;
inline constexpr absl::string_view kExecutableMagic{"\x89IPX\r\n\x1a\n", 8};
inline constexpr size_t kExecutableHeaderBytes = 64;
inline constexpr absl::string_view kExecutableExtension = ".ipx";

enum class ExecutableMode { kInference, kTraining };

// "inference", "training".
absl::string_view ExecutableModeName(ExecutableMode mode);

// A graph input or output for one micro-batch.
struct TensorSpec {
  std::string name;
  tensor::DType dtype = tensor::DType::kFloat32;
  tensor::Shape shape;
  bool operator==(const TensorSpec& other) const = default;
};

// An optimizer param group (torch's param_groups[i], device/training/optimizer.h):
// its weights are updated with `variables` over the optimizer-wide
// attributes. Each is a variable, named "group/<i>/<attr>" to SetOptimizer.
struct ParamGroup {
  std::vector<std::string> weights;         // trainable weights, sorted
  std::map<std::string, double> variables;  // attribute -> value
  bool operator==(const ParamGroup& other) const = default;
};

// What a training executable adds: the loss, the trainable weights, the
// buffers and the optimizer (device/training/optimizer.h names and defaults). Attributes given at
// compile are variables (SetOptimizer may change them between runs); the
// others are constants, fixed by the compile (PopTorch 4.5.4).
struct TrainingSpec {
  std::string loss;                  // a float scalar graph output
  std::vector<std::string> weights;  // trainable initializers, sorted
  int64_t gradient_accumulation_steps = 1;
  std::string optimizer = "sgd";            // training::OptimizerKindName
  std::map<std::string, double> variables;  // attribute -> value
  std::map<std::string, double> constants;  // attribute -> value
  // Buffers the model updates in place (device/training/buffers.h): initializer
  // -> the value that replaces it after every micro-batch.
  std::map<std::string, std::string> buffers;
  // Param groups whose attributes differ from the optimizer-wide ones, in
  // torch's order; empty: every weight takes the optimizer-wide values.
  std::vector<ParamGroup> param_groups;
  bool operator==(const TrainingSpec& other) const = default;
};

struct Executable {
  std::string producer;  // "ipupod <version>"
  ExecutableMode mode = ExecutableMode::kInference;
  ExecutionStrategy strategy = ExecutionStrategy::kPipelined;
  OutputMode output_mode;          // resolved for the mode
  int64_t micro_batch_size = 1;    // dim 0 of the first input of rank >= 1 (1 if none)
  int64_t replication_factor = 1;  // resolved for the mode
  int64_t device_iterations = 1;   // resolved for the mode
  int64_t batch_size_factor = 1;   // BatchSizeFactor for the mode (training: x accumulation)
  IpuCount ipus;
  IpuConfig config;  // as given, every key
  Placement placement;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  TrainingSpec training;  // mode kTraining only
  // Inference: buffers the model updates in place (PopTorch 4.8), initializer
  // -> the computed value replacing it after every micro-batch, in data order.
  std::map<std::string, std::string> inference_buffers;
  std::string report_json;  // device/compiler/report.h Report::Json()
  std::vector<std::string> warnings;
  std::string model_bytes;   // ONNX ModelProto ImportOnnx accepts
  std::string content_hash;  // hex SHA-256 of the payload; set by ReadExecutable and Compile

  bool operator==(const Executable& other) const = default;
};

// The .ipx bytes. INVALID_ARGUMENT if a string field is not valid UTF-8.
absl::StatusOr<std::string> WriteExecutable(const Executable& executable);
// Parses and verifies .ipx bytes; sets content_hash.
absl::StatusOr<Executable> ReadExecutable(absl::string_view bytes);

// Checks .ipx bytes against the hex SHA-256 their sender declared for them:
// INVALID_ARGUMENT if the header holds another hash (the sender declared the
// wrong one), DATA_LOSS if the payload does not hash to it (the bytes were
// corrupted on the way or on disk). Bytes that are not an .ipx at all pass:
// ReadExecutable then says what is wrong with them.
absl::Status CheckDeclaredHash(absl::string_view bytes, absl::string_view sha256);

// Writes via a temporary file and rename, so readers never see half a file.
absl::Status WriteExecutableFile(absl::string_view path, const Executable& executable);
absl::StatusOr<Executable> ReadExecutableFile(absl::string_view path);

// The "training" metadata object as JSON text (also printed by `ipupod
// compile --json`). Non-finite attribute values (LAMB's default
// max_weight_norm) are written as "inf" / "-inf", as JSON has no infinity.
std::string TrainingSpecJson(const TrainingSpec& spec);

// Host-side shapes of one step (PopTorch's convention: micro-batches are
// concatenated along dim 0). Inputs carry batch_size_factor micro-batches.
// Outputs: all - every micro-batch (device_iterations x replicas, and x
// gradient_accumulation_steps for training); every_n:N - device_iterations
// / N x replicas (the last micro-batch of each such iteration); final and
// sum - one per replica. A rank-0 tensor becomes a vector of that many
// elements (none if 1).
tensor::Shape HostInputShape(const Executable& executable, const TensorSpec& input);
tensor::Shape HostOutputShape(const Executable& executable, const TensorSpec& output);

}  // namespace ipupod::compiler

#endif  // IPUPOD_COMPILER_EXECUTABLE_H_
