// File: device/compiler/compile_request.h
//
// What a compile request names besides the model - the IPUConfig JSON, its
// overrides, a module map, the training options - turned into what Compile
// takes, and the summary of a compiled executable. `ipupod compile` reads
// these from files and flags; the server's CompileService
// (proto/ipupod/v1/compile.proto) from the request. Both go through here,
// so a remote compile means exactly what a local one does.
//
// Thread safety: pure functions.
// Errors: INVALID_ARGUMENT naming the part that is wrong ("ipu_config_json:
// ...", "--set 'k=v': ...", "module_map_json: ...") and what to change; the
// training options themselves are checked by Compile
// (device/compiler/training_spec.h).
#ifndef IPUPOD_COMPILER_COMPILE_REQUEST_H_
#define IPUPOD_COMPILER_COMPILE_REQUEST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "device/compiler/compile.h"
#include "device/compiler/executable.h"
#include "device/compiler/ipu_config.h"

namespace ipupod::compiler {

struct CompileInputs {
  std::string ipu_config_json;    // empty: every key at its default
  std::vector<std::string> sets;  // IPUConfig.update_from_string, in order
  std::string module_map_json;    // empty: no module map
  bool train = false;
  TrainingOptions training;  // must be empty unless train
};

struct PreparedCompile {
  IpuConfig config;
  CompileOptions options;
  std::vector<std::string> warnings;  // keys of the config that were ignored
};

// `config_name` and `map_name` name the sources in messages ("ipu_config.json",
// "module_map_json").
absl::StatusOr<PreparedCompile> PrepareCompile(const CompileInputs& inputs,
                                               absl::string_view config_name = "ipu_config_json",
                                               absl::string_view map_name = "module_map_json");

// INVALID_ARGUMENT unless `inputs` names no training option when it does not
// train (they describe training).
absl::Status CheckTrainingOptionsNeedTrain(const CompileInputs& inputs,
                                           absl::string_view how = "train");

// What the executable takes and makes, as one JSON object in a fixed key
// order: sha256, ipus, execution, stages, micro_batch_size,
// device_iterations, replication_factor, mode, samples_per_step,
// output_mode, inputs and outputs (host shapes), warnings, for training
// gradient_accumulation_steps and training, and for the phased strategies
// phases (how many) and liveness.
std::string ExecutableSummaryJson(const Executable& executable);

}  // namespace ipupod::compiler

#endif  // IPUPOD_COMPILER_COMPILE_REQUEST_H_
