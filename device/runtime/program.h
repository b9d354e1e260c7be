// File: device/runtime/program.h
//
// runtime::Program: a compiled executable made runnable on one session's
// IPUs - the imported graph, its current weights, and the run shape.
//
// One step (RunStep) consumes micro_batch x device_iterations x replication
// samples, given as host tensors whose dim 0 concatenates the micro-batches
// (compiler::HostInputShape). Sample order is PopTorch's: replica r of
// device iteration i takes micro-batch i x replication + r. Every
// micro-batch runs through the whole graph on the host (pipelining and
// sharding change where and when, not what, so numerics are those of the
// unsplit model); replicas are data-parallel with the same weights.
// Outputs follow the executable's output mode with PopART's shapes
// (compiler::HostOutputShape):
//   all      every micro-batch, in input order
//   final    the last device iteration's micro-batch of each replica
//   sum      per replica, the element-wise sum over device iterations
//            (in iteration order, in the output's dtype; bool: or)
//   every_n  device iterations N-1, 2N-1, ... of each replica
//
// Simulated device time of a step (SimulatedTime), from device/compiler/report.h's
// per-IPU figures per micro-batch (FLOPs at FP32 peak, IPU-Link bytes, host
// bytes, all at device/hardware.h rates), M = device_iterations:
//   pipelined over S > 1 stages: the IPUs advance in lockstep (every IPU
//     syncs each pipeline cycle), so a step is M + S - 1 cycles of the
//     slowest IPU: compute/link/host = M x that IPU's figures, and
//     pipeline_ramp_s = (S - 1) x its busy time (fill and drain);
//   sharded (or one stage): M x the sum of the IPUs' times (one IPU works
//     at a time), no ramp;
//   phased (device/compiler/phase_plan.h): M x the sum of the phases' times (each
//     its slowest IPU's compute and cross-IPU copies, and the streaming
//     memory transfers compute does not hide, counted as host time) plus
//     every IPU's host transfers, no ramp.
// total_s() equals the report's step_s. Replicas run at the same time, so
// a step takes as long as one replica.
//
// Weights: the model's ONNX initializers that are float tensors the graph
// reads at run time (folded constants and shape tensors are not weights).
// SetWeights is all-or-nothing and swaps values in place (no copy of the
// model). RunStep runs only the micro-batches whose outputs the mode
// returns (every one for all and sum); inference keeps no state between
// micro-batches, so the others cannot change the result (nor report data
// errors).
//
// Synthetic data (the config's synthetic_data, PopTorch's
// enableSyntheticData): RunStep still checks the inputs' names and shapes,
// then runs on inputs made on the device (random normal floats, zero
// integers) and returns zeros of the outputs' shapes (losses and stats stay).
//
// Training executables (mode training) hold a training::Trainer instead of
// an interpreter: RunStep updates the weights (device/runtime/training_step.h),
// the weights are the trainable ones plus the buffers the model updates in
// place (BatchNorm running statistics, device/training/buffers.h), and SetWeights
// also takes a whole checkpoint (weights, buffers and optimizer state).
//
// Thread safety: const methods may run concurrently; RunStep, SetWeights
// and SetOptimizer must not overlap anything else on the same Program (the
// server's session slot serialises).
// Errors: Create - INVALID_ARGUMENT if the executable's model does not
// import or its recorded shapes disagree with the model. SetWeights -
// INVALID_ARGUMENT naming the tensor for an unknown name (with close
// matches), a dtype or shape mismatch, or a duplicate. RunStep -
// INVALID_ARGUMENT naming the input for a missing, unknown, duplicated or
// mis-shaped input (with the expected host shape and how it is made), and
// naming the micro-batch (device iteration, replica) for data errors a
// kernel finds (e.g. a Gather index out of range); RESOURCE_EXHAUSTED if
// host memory runs out.
#ifndef IPUPOD_RUNTIME_PROGRAM_H_
#define IPUPOD_RUNTIME_PROGRAM_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor/tensor.h"
#include "common/tensor/tensor_files.h"
#include "device/compiler/executable.h"
#include "device/compiler/report.h"
#include "device/graph/custom_ops.h"

namespace ipupod::runtime {

struct SimulatedTime {
  double compute_s = 0;
  double pipeline_ramp_s = 0;  // fill + drain
  double ipu_link_s = 0;
  double host_s = 0;
  double total_s() const { return compute_s + pipeline_ramp_s + ipu_link_s + host_s; }
};

struct StepResult {
  tensor::NamedTensors outputs;    // executable output order, host shapes
  std::vector<float> losses;       // training: one per weight update (device iteration)
  int64_t step = 0;                // training: weight updates since the load, these included
  std::vector<float> loss_scales;  // training: each update's loss scale (Trainer)
  int64_t skipped_updates = 0;     // training: updates auto_loss_scaling skipped
  SimulatedTime simulated;
  int64_t samples = 0;
  int64_t flops = 0;  // every micro-batch of every replica
  double wall_s = 0;  // host time of RunStep
  // What the model's IpuPrint ops printed (forward and, training, backward
  // passes), in run order; at most graph::kRunLogLinesMax lines and a last
  // one counting those not kept.
  std::vector<std::string> log;
};

// A training program's optimizer: its attributes by kind and the number of
// weight updates so far.
struct OptimizerState {
  std::string optimizer;  // "sgd", ...
  // Optimizer-wide by name, param group i's as "group/<i>/<attr>".
  std::map<std::string, double> variables;
  std::map<std::string, double> constants;
  int64_t step = 0;
};

inline constexpr int64_t kWeightSlackBytes = int64_t{64} << 10;
// Weights + at most three weight-sized optimizer slots (amsgrad Adam,
// centered RMSprop with momentum).
inline constexpr int64_t kCheckpointWeightMultiple = 4;

// The interface both modes share. Create() makes the implementation the
// executable's mode needs: inference (device/runtime/inference_program.cc, a
// graph::Interpreter) or training (device/runtime/training_program.cc, a
// training::Trainer); no method asks which mode it is in.
// How Program::Create loads an executable.
struct LoadOptions {
  // Polled while the model is imported; true stops Create with CANCELLED
  // (a server's Load whose client has gone). Empty: never.
  std::function<bool()> cancelled = nullptr;
  // The most bytes constant folding may materialise while importing
  // (graph::FoldOptions::max_folded_bytes; -1: the graph's own default). A
  // server passes what it reserved for the program, so a model whose report
  // understates its folded constants is refused before it allocates them.
  int64_t max_folded_bytes = -1;
  // Resolves the model's custom ops (device/graph/custom_ops.h): the program holds their library
  // processes until it is destroyed. Null: a model with custom ops does not load. Must
  // outlive Create (the ops it returns hold what they need).
  const graph::CustomOpResolver* custom_ops = nullptr;
};

// The host memory a Program of this report holds: one replica's weights,
// gradients, optimizer state (whole, also when replicated_tensor_sharding
// shards it on the IPUs) and activations in flight (replicas run one after
// another on the same host tensors; code and op temporaries are simulated,
// not held).
int64_t HostMemoryBytes(const compiler::Report& report);

class Program {
 public:
  static absl::StatusOr<std::unique_ptr<Program>> Create(
      std::shared_ptr<const compiler::Executable> executable, const LoadOptions& options = {});
  virtual ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  const compiler::Executable& executable() const { return *executable_; }
  int64_t samples_per_step() const;
  // Host shapes of one step.
  std::vector<compiler::TensorSpec> host_inputs() const;
  std::vector<compiler::TensorSpec> host_outputs() const;
  // Every weight, sorted by name.
  std::vector<compiler::TensorSpec> weight_specs() const { return weights_; }
  int64_t weight_bytes() const;
  // HostMemoryBytes of this program's report (checked against its model at Create).
  int64_t host_memory_bytes() const;

  // Device bytes on each IPU of one replica (the memory plan's totals);
  // a session charges them on every replica's IPUs.
  std::vector<int64_t> memory_bytes_per_ipu() const;
  // What a session of `session_ipus` IPUs is charged on each of them: one
  // replica's plan on each replica's IPUs (replica r on IPUs r x
  // ipus_per_replica ...), nothing on the idle IPUs of an auto-rounded
  // count.
  std::vector<uint64_t> MemoryChargePerIpu(size_t session_ipus) const;

  // The most tensor bytes one SetWeights may be given: the weights, or for
  // training a whole checkpoint (weights and buffers plus at most
  // kCheckpointWeightMultiple - 1 weight-sized optimizer slots), plus
  // kWeightSlackBytes for scalars (optimizer step and attributes).
  virtual int64_t max_set_weights_bytes() const = 0;

  // Simulated seconds to move `bytes` from the host to every replica (the
  // host link's bandwidth; replicas share it: bytes x replicas / bandwidth),
  // and to load the executable (each IPU's code + weights from the report,
  // to every replica).
  double SimulatedHostToDeviceSeconds(int64_t bytes) const;
  double SimulatedLoadSeconds() const;

  // Weights by name. A name the model's module state declares as an alias
  // of a weight (tied weights: device/graph/graph.h ModuleState) writes that
  // weight; given with it, the two values must be equal.
  virtual absl::Status SetWeights(tensor::NamedTensors weights) = 0;
  // `names` empty: every weight sorted by name, then every alias (each with
  // its weight's value), so that the result is the module's whole state.
  // An alias name reads its weight. Unknown names: INVALID_ARGUMENT.
  absl::StatusOr<tensor::NamedTensors> GetWeights(absl::Span<const std::string> names) const;
  // PyTorch name -> the weight it is one tensor with (tied weights).
  const std::map<std::string, std::string>& weight_aliases() const { return aliases_; }
  // The same without copying: pointers into the program, valid until the
  // next SetWeights or the program's destruction (the caller serialises).
  absl::StatusOr<std::vector<tensor::TensorRef>> ViewWeights(
      absl::Span<const std::string> names) const;

  // Inference: the outputs. Training: device_iterations weight updates
  // (device/runtime/training_step.h) with their losses.
  absl::StatusOr<StepResult> RunStep(const tensor::NamedTensors& inputs);

  // Training programs only (FAILED_PRECONDITION for inference ones):
  virtual bool is_training() const = 0;
  // Weights, optimizer state and attributes (device/runtime/training_step.h);
  // SetWeights takes it back whole.
  virtual absl::StatusOr<tensor::NamedTensors> GetCheckpoint() const = 0;
  // Changes variable attributes (all or nothing; "group/<i>/<attr>" for a
  // param group's); FAILED_PRECONDITION for a constant.
  virtual absl::StatusOr<OptimizerState> SetOptimizer(
      const std::map<std::string, double>& values) = 0;
  virtual absl::StatusOr<OptimizerState> GetOptimizer() const = 0;

 protected:
  // `weights` sorted by name; `step_time` is one step's simulated time.
  // `aliases`: PyTorch name -> weight (the model's ModuleState::aliases);
  // those whose weight is not in `weights` are dropped.
  Program(std::shared_ptr<const compiler::Executable> executable, compiler::Report report,
          std::vector<compiler::TensorSpec> weights, SimulatedTime step_time,
          const std::map<std::string, std::string>& aliases = {});

  const compiler::Report& report() const { return report_; }
  // The bytes the aliases' weights add to a write that names them too.
  int64_t alias_bytes() const;
  // Replaces each alias in `weights` by its weight (dropping it when the
  // weight is given too and the values are equal). INVALID_ARGUMENT when an
  // alias and its weight, or two aliases of one weight, differ.
  absl::Status ResolveAliases(tensor::NamedTensors& weights) const;
  // SetWeights' checks: every name a weight, once, with its dtype and shape.
  absl::Status CheckWeights(const tensor::NamedTensors& weights) const;

 private:
  // REQUIRES: `name` is in weight_specs().
  virtual const tensor::Tensor* FindWeight(const std::string& name) const = 0;
  // One step on inputs in the executable's order with host shapes: the
  // outputs, and for training losses, step and flops (RunStep adds the
  // rest).
  virtual absl::StatusOr<StepResult> Step(const std::vector<const tensor::Tensor*>& inputs) = 0;

  const std::shared_ptr<const compiler::Executable> executable_;
  const compiler::Report report_;
  const std::vector<compiler::TensorSpec> weights_;
  const SimulatedTime step_time_;
  std::map<std::string, std::string> aliases_;  // alias -> weight in weights_
  std::atomic<uint64_t> synthetic_steps_{0};    // steps run on synthetic data
};

}  // namespace ipupod::runtime

#endif  // IPUPOD_RUNTIME_PROGRAM_H_
