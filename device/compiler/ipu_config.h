// File: device/compiler/ipu_config.h
//
// compiler::IpuConfig: the compile and run options of one model, with the
// keys, types and defaults of optimum-graphcore's IPUConfig (the
// ipu_config.json files Graphcore published next to its models load as
// they are). A plain value; functions below parse, update, validate and
// resolve it.
//
// Keys (optimum-graphcore name = default):
//   replication_factor = 1, inference_replication_factor = 1,
//   gradient_accumulation_steps = 1, device_iterations = 1,
//   inference_device_iterations = 1,
//   layers_per_ipu = [-1]             layers of the model's repeated block per IPU;
//                                     -1 = split the remaining layers evenly
//   inference_layers_per_ipu = null   (null: layers_per_ipu)
//   ipus_per_replica = null           (null: len(layers_per_ipu))
//   inference_ipus_per_replica = null (null: optimum's fallback, see ResolveMode)
//   auto_round_num_ipus = false       round IPUs up to a power of two (idle extras)
//   sharded_execution_for_inference = false
//                                     inference runs PopTorch's ShardedExecution
//                                     (one IPU at a time, no pipeline) instead of
//                                     PipelinedExecution
//   execution_strategy = null         ipupod extension (PopTorch's
//                                     setExecutionStrategy): pipelined | sharded |
//                                     serial_phased | parallel_phased, for both
//                                     modes; null: pipelined (sharded for inference
//                                     with sharded_execution_for_inference)
//   tensors_liveness = "always_live"  ipupod extension (PopTorch's Liveness, phased
//                                     strategies only): always_live |
//                                     off_chip_after_fwd | off_chip_after_fwd_no_overlap
//                                     | off_chip_after_each_phase; the last two with
//                                     serial_phased only, as in PopTorch
//   optimizer_state_offchip = true, replicated_tensor_sharding = false,
//   matmul_proportion = 0.6           a number, or one number per IPU
//   inference_matmul_proportion = null
//   enable_half_partials = true, embedding_serialization_factor = 1,
//   recompute_checkpoint_every_layer = false,
//   output_mode = "final"             training: all | final | sum | every_n:N | default
//   inference_output_mode = null      ipupod extension; null = "all", as
//                                     optimum-graphcore always returns all
//                                     results for inference
//   seed = null, auto_loss_scaling = false, executable_cache_dir = "".
//   synthetic_data = false            ipupod extension (PopTorch's
//                                     enableSyntheticData): host I/O is disabled;
//                                     each step runs on random normal inputs made on
//                                     the device (integer inputs zero) and returns
//                                     zeros, and the simulated time has no host
//                                     transfers of inputs and outputs (benchmarking)
//   broadcast_buffers = true          ipupod extension (PopTorch's
//                                     broadcastBuffers): false gives each replica
//                                     its own copy of the buffers the model updates,
//                                     each updated by that replica's micro-batches
// seed keys the random stream of training-mode Dropout (device/graph/run_context.h);
// unset, Compile chooses one for a model with random ops and records it.
// replicated_tensor_sharding without replicas is accepted but changes
// nothing: IgnoredKeyWarnings says so, with the reason; Compile adds it to
// the executable's warnings and the report's notes. matmul_proportion,
// embedding_serialization_factor, replicated_tensor_sharding and
// recompute_checkpoint_every_layer change the memory plan and simulated time
// (device/compiler/memory_plan.h, device/compiler/temporaries.h); enable_half_partials and
// auto_loss_scaling change float16 numerics (device/graph/ops.h RunOp,
// device/training/optimizer.h).
// Defaults follow the optimum-graphcore documentation ipupod was specified
// from (matmul_proportion 0.6, optimizer_state_offchip true); later
// optimum-graphcore releases changed these to 0.2 and false. Training-only
// keys are kept and round-tripped but do not affect inference compiles.
// Output modes: "every_n:N" returns every N-th micro-batch's result
// (PopTorch OutputMode.EveryN with output_return_period N); "default" is
// "all" for inference and "final" for training.
//
// Thread safety: plain values and pure functions.
// Errors: INVALID_ARGUMENT naming the key, what was expected and what was
// given (JSON and update strings), or naming the numbers that disagree.
// A failed UpdateFromString leaves the config unchanged.
#ifndef IPUPOD_COMPILER_IPU_CONFIG_H_
#define IPUPOD_COMPILER_IPU_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ipupod::compiler {

inline constexpr double kDefaultMatmulProportion = 0.6;
// Bounds that keep batch arithmetic far from overflow.
inline constexpr int64_t kIterationsMax = int64_t{1} << 20;  // device iterations, GA steps
inline constexpr int64_t kLayersMax = int64_t{1} << 20;

// A float option given either as one value for every IPU or one per IPU.
struct PerIpuFloat {
  std::vector<double> values{kDefaultMatmulProportion};
  bool is_list = false;  // how it was written: 0.6 or [0.6, 0.6]

  // REQUIRES: !values.empty(); for a list, ipu < values.size().
  double ForIpu(int64_t ipu) const { return is_list ? values[ipu] : values[0]; }
  bool operator==(const PerIpuFloat& other) const = default;
};

struct IpuConfig {
  int64_t replication_factor = 1;
  int64_t inference_replication_factor = 1;
  int64_t gradient_accumulation_steps = 1;
  int64_t device_iterations = 1;
  int64_t inference_device_iterations = 1;

  std::vector<int64_t> layers_per_ipu{-1};
  std::optional<std::vector<int64_t>> inference_layers_per_ipu;
  std::optional<int64_t> ipus_per_replica;
  std::optional<int64_t> inference_ipus_per_replica;
  bool auto_round_num_ipus = false;
  bool sharded_execution_for_inference = false;
  std::optional<std::string> execution_strategy;
  std::string tensors_liveness = "always_live";

  bool optimizer_state_offchip = true;
  bool replicated_tensor_sharding = false;
  PerIpuFloat matmul_proportion;
  std::optional<PerIpuFloat> inference_matmul_proportion;
  bool enable_half_partials = true;
  int64_t embedding_serialization_factor = 1;
  bool recompute_checkpoint_every_layer = false;

  std::string output_mode = "final";
  std::optional<std::string> inference_output_mode;

  std::optional<int64_t> seed;
  bool auto_loss_scaling = false;
  std::string executable_cache_dir;
  bool synthetic_data = false;
  bool broadcast_buffers = true;

  bool operator==(const IpuConfig& other) const = default;
};

// Which results a step returns to the host.
struct OutputMode {
  enum class Kind { kAll, kFinal, kSum, kEveryN };
  Kind kind = Kind::kAll;
  int64_t every_n = 1;  // kEveryN only

  bool operator==(const OutputMode& other) const = default;
};

// Parses "all", "final", "sum", "every_n:N" (N >= 1) or "default" (all for
// inference, final for training).
absl::StatusOr<OutputMode> ParseOutputMode(absl::string_view text, bool for_inference);
// "all", "final", "sum", "every_n:4".
std::string OutputModeName(const OutputMode& mode);

// Every key IpuConfig understands, in documentation order.
std::vector<std::string> IpuConfigKeys();

struct ParsedIpuConfig {
  IpuConfig config;
  // One line per key that was ignored: unknown keys (with close matches)
  // and optimum-graphcore keys ipupod does not model.
  std::vector<std::string> warnings;
};

// Parses an ipu_config.json document: a JSON object whose missing keys, and
// keys set to null (Python's None), keep their defaults. The result is
// validated (ValidateIpuConfig).
absl::StatusOr<ParsedIpuConfig> ParseIpuConfigJson(absl::string_view text);

// Every key, unset optional ones as null; ParseIpuConfigJson reads it back
// to an equal config.
std::string IpuConfigToJson(const IpuConfig& config, int indent = -1);

// IPUConfig.update_from_string: "key=value,key2=[1 2 3]". Ints, floats and
// strings as is, booleans true/false (also 1/0, yes/no, y/n), lists as
// [a b c] (commas inside brackets also accepted), "none" or "null" to unset
// an optional key. Keys must exist. Validates the result.
absl::Status UpdateFromString(IpuConfig& config, absl::string_view update);

// Value ranges and the coherence optimum-graphcore checks for both modes
// (matmul_proportion and layers_per_ipu lengths vs ipus_per_replica).
absl::Status ValidateIpuConfig(const IpuConfig& config);

// The options of one mode, with optimum-graphcore's inference fallbacks
// applied (its ManagedAttribute `_layers_per_ipu` and friends).
struct ModeConfig {
  bool for_inference = true;
  std::vector<int64_t> layers_per_ipu;
  int64_t ipus_per_replica = 1;
  PerIpuFloat matmul_proportion;
  int64_t replication_factor = 1;
  int64_t gradient_accumulation_steps = 1;  // 1 for inference
  int64_t device_iterations = 1;
  OutputMode output_mode;
};

// REQUIRES nothing; returns INVALID_ARGUMENT if the config is not valid.
absl::StatusOr<ModeConfig> ResolveMode(const IpuConfig& config, bool for_inference);

// One line per key that is set (not its default) but that ipupod does not
// act on in this mode, saying why (docs/differences.md).
std::vector<std::string> IgnoredKeyWarnings(const IpuConfig& config, bool for_inference);

// optimum's batch_size_factor: replication x gradient accumulation x
// device iterations (inference: inference_replication_factor x
// inference_device_iterations). Multiply by the micro-batch size for the
// batch one host call passes.
int64_t BatchSizeFactor(const IpuConfig& config, bool for_inference);

}  // namespace ipupod::compiler

#endif  // IPUPOD_COMPILER_IPU_CONFIG_H_
