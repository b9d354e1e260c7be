// File: device/compiler/report.h
//
// compiler::Report: what a compile found out about one replica - per IPU:
// memory (weights, activations, code; for training also gradients and
// optimizer state) against the IPU's memory, FLOPs and estimated time per
// micro-batch - and the estimated time and throughput of one step (one host
// call: device_iterations micro-batches on every replica; for training
// device_iterations weight updates of gradient_accumulation_steps
// micro-batches each). Produced by PlanMemory (device/compiler/memory_plan.h); printed by
// `ipupod compile --report` as a table, and stored in executables as JSON.
// Sizes are decimal (1 MB = 10^6 bytes), as Graphcore states the GC200's
// 900 MB.
//
// Thread safety: plain value.
// Training reports carry mode "training" and the training fields below;
// JSON without them (inference, or reports older than training) reads back
// as inference with those fields at their defaults.
//
// Errors: ReportFromJson - INVALID_ARGUMENT for a malformed document.
#ifndef IPUPOD_COMPILER_REPORT_H_
#define IPUPOD_COMPILER_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/compiler/checks.h"

namespace ipupod::compiler {

struct TensorUse {
  std::string name;
  int64_t bytes = 0;
  bool is_weight = false;
};

struct IpuPlan {
  int64_t ipu = 0;
  std::vector<int64_t> stages;  // empty: the IPU idles
  int64_t nodes = 0;
  int64_t weight_bytes = 0;
  int64_t activation_bytes_per_micro_batch = 0;  // peak live bytes of one micro-batch
  int64_t micro_batches_in_flight = 0;           // the most any of its stages holds
  int64_t activation_bytes = 0;                  // sum over its stages of peak x in flight
  int64_t code_bytes = 0;
  int64_t total_bytes = 0;
  int64_t flops = 0;           // per micro-batch (training: forward + backward)
  int64_t ipu_link_bytes = 0;  // sent to other IPUs per micro-batch
  int64_t host_in_bytes = 0;   // per micro-batch
  int64_t host_out_bytes = 0;  // per micro-batch, before the output mode thins it
  double compute_s = 0;        // per micro-batch, at FP32 peak
  double ipu_link_s = 0;
  double host_s = 0;
  std::vector<TensorUse> largest;  // biggest weights and activations, largest first
  // Training only (0 for inference); see device/compiler/memory_plan.h.
  int64_t gradient_bytes = 0;
  int64_t optimizer_state_bytes = 0;          // on the IPU (in total_bytes)
  int64_t optimizer_state_offchip_bytes = 0;  // in streaming memory (not in total_bytes)
  int64_t recompute_bytes = 0;   // one micro-batch's peak to recompute in (in activation_bytes)
  int64_t all_reduce_bytes = 0;  // sent over IPU-Link per weight update
  double update_ipu_link_s = 0;  // per weight update: the gradient all-reduce
  double update_host_s = 0;      // per weight update: off-chip state read and written
  // Op temporaries (device/compiler/temporaries.h): the largest, in total_bytes.
  int64_t temporary_bytes = 0;
  std::string temporary_node;         // the op that needs it
  int64_t temporary_node_passes = 1;  // in how many serial passes that op runs
  int64_t serial_passes = 0;  // passes beyond each op's first, per micro-batch (in compute_s)
  // Phased strategies whose liveness sends tensors off chip
  // (device/compiler/phase_plan.h): the IPU holds one phase at a time, so the
  // totals above are those of `held_phase`, its largest; the rest of its
  // weights, training state and activations wait in streaming memory (not
  // in total_bytes). -1 and 0 otherwise.
  int64_t held_phase = -1;
  int64_t streaming_memory_bytes = 0;

  double busy_s() const { return compute_s + ipu_link_s + host_s; }
  double update_s() const { return update_ipu_link_s + update_host_s; }
};

// One execution phase of a phased strategy, per micro-batch (training: its
// forward and its backward phase), as device/compiler/phase_plan.h models it.
struct PhasePlan {
  int64_t phase = 0;
  std::vector<int64_t> ipus;    // the IPUs its stages run on
  double compute_s = 0;         // its slowest IPU's compute
  double ipu_link_s = 0;        // cross-IPU copies beyond that (the slowest IPU's)
  int64_t streaming_bytes = 0;  // to and from streaming memory (its busiest IPU's)
  double streaming_s = 0;       // the part of the transfers that compute does not hide
  double time_s = 0;            // compute_s + ipu_link_s + streaming_s
};

struct Report {
  std::vector<IpuPlan> ipus;  // one per IPU of a replica
  int64_t memory_bytes_per_ipu = 0;
  ExecutionStrategy strategy = ExecutionStrategy::kPipelined;
  int64_t num_stages = 1;
  IpuCount count;
  int64_t micro_batch_size = 1;
  int64_t device_iterations = 1;
  std::string output_mode = "all";
  std::string mode = "inference";           // or "training"
  int64_t gradient_accumulation_steps = 1;  // training: micro-batches per weight update
  bool recompute = false;                   // training recomputes (device/compiler/memory_plan.h)
  // recomputing: "layer" or "stage" boundaries (recompute_checkpoint_every_layer),
  // "checkpoint" (the model's poptorch.recomputationCheckpoint), or either
  // boundary + "+checkpoint"
  std::string recompute_checkpoints;
  bool replicated_tensor_sharding = false;  // training: state sharded over the replicas
  std::string liveness;                     // phased strategies: LivenessName
  std::vector<PhasePlan> phases;            // phased strategies, in phase order
  double step_s = 0;                        // one step, every replica in parallel
  double samples_per_s = 0;
  std::vector<std::string> notes;  // placement notes, warnings
  // broadcast_buffers false with R > 1 replicas: replicas 1..R-1's own
  // copies of the buffers, (R - 1) x their bytes, held on the host only
  // (device/compiler/memory_plan.h). 0 otherwise, and in reports written before it.
  int64_t replica_buffer_bytes = 0;

  bool training() const { return mode == "training"; }
  int64_t samples_per_step() const {
    return micro_batch_size * device_iterations * count.replication_factor *
           (training() ? gradient_accumulation_steps : 1);
  }
  // The host memory a program of this report holds (device/runtime/program.h): per
  // IPU its total without code and op temporaries (simulated, not held), and
  // the optimizer state whole where replicated_tensor_sharding shards it,
  // what a phased plan keeps in streaming memory, and the replicas' own
  // buffer copies (replica_buffer_bytes).
  int64_t host_bytes() const;
  // Human-readable table plus summary lines.
  std::string Table() const;
  std::string Json(int indent = -1) const;

 private:
  std::string Header() const;
  std::string RunShapeLine() const;
  std::string TrainingLines() const;
  std::string TemporaryLines() const;
  std::string PhaseLines() const;
  std::string ReplicaBufferLine() const;
};

// Reads Report::Json() back (for an executable's stored report).
// INVALID_ARGUMENT if the text is not such a document.
absl::StatusOr<Report> ReportFromJson(absl::string_view text);

// "950", "436.3 k", "1.2 G" (decimal prefixes, for FLOP counts).
std::string FormatCount(int64_t n);

}  // namespace ipupod::compiler

#endif  // IPUPOD_COMPILER_REPORT_H_
