// File: device/compiler/memory_plan.h
//
// Per-IPU memory and time model of one placed replica, and the check that
// every IPU fits in its memory. All hardware figures come from
// device/hardware.h (GC200: 900 MB, 1472 tiles, 62.5 TFLOPS FP32, 32 GB/s
// per IPU-Link, 64 GB/s host link).
//
// Host only: with broadcast_buffers false and R > 1 replicas, the program
// keeps replicas 1..R-1's own copies of the buffers on the host ((R - 1) x
// the buffers' bytes, Report::replica_buffer_bytes; replica 0's are among
// the weights). Each replica's IPUs hold their own copy in their weights, so
// the per-IPU totals do not change.
//
// Memory on an IPU = weights + activations + temporary + code (inference;
// training adds gradients and optimizer state, below):
//  * weights: every initializer (weights and folded constants) a node on
//    the IPU reads, once per IPU (a weight two IPUs read, such as a tied
//    embedding, is counted on both);
//  * activations: for each stage on the IPU, the peak live bytes of one
//    micro-batch (values coming in from the host or earlier stages and the
//    stage's own values, each live from its producer - or the stage start -
//    to its last reader in the stage, or to the stage end if a later stage
//    or the host reads it), times the micro-batches in flight: pipelined
//    with S stages, stage k holds S - k (conservative for inference);
//    sharded or single-stage, 1;
//  * temporary: the largest temporary of the IPU's matrix products,
//    convolutions and embedding lookups, capped by PlanOptions'
//    matmul_proportion for that IPU (or a node's own proportion), which
//    also sets how many serial passes each op runs in
//    (device/compiler/temporaries.h); embedding_serialization_factor pads the
//    word embedding's table (its padding counts as weight) and slices its
//    lookup (a model without such a lookup - one that serializes its own -
//    gets a note that the factor changes nothing). Passes beyond each op's
//    first add to compute_s;
//  * code: kCodeBytesPerTile on every tile plus kCodeBytesPerNode per node
//    (a model of Poplar's control and exchange programs and each op's
//    codelets, not a measurement); an IPU with no nodes holds none.
// Time per micro-batch on an IPU = its FLOPs at FP32 peak + the bytes it
// sends to other IPUs over one IPU-Link + its host traffic (inputs in,
// outputs out; outputs only for the micro-batches the output mode returns)
// over the host link. A step runs device_iterations micro-batches:
// pipelined, (device_iterations + S - 1) x the slowest IPU (fill and
// drain); otherwise device_iterations x the sum over IPUs. Replicas run in
// parallel, each on its own links.
//
// Training (PlanOptions::training set) adds, per IPU:
//  * gradients: one fp32 tensor per trainable weight the IPU reads (a
//    weight two IPUs read has a gradient on both);
//  * optimizer state: per trainable weight, TrainingPlan::state_element_bytes
//    per weight element (device/compiler/training_spec.h OptimizerStateElementBytes:
//    each slot float32 or float16; the per-weight step scalars are
//    negligible). On
//    the IPU, or with optimizer_state_offchip in streaming memory: reported
//    as optimizer_state_offchip_bytes, not counted in total_bytes, and read
//    and written once per weight update over the host link. With
//    replicated_tensor_sharding and R > 1 replicas, each holds (and moves)
//    1/R of it;
//  * activations: the backward pass needs the forward's values. Without
//    recompute one micro-batch of a stage keeps every value the stage makes
//    or reads (their sum, not the peak) until its backward; recomputing, it
//    keeps only its checkpoints - the values that cross a segment boundary
//    or come from the host or other stages - and the IPU also holds one
//    segment's values (every value it makes or reads, its largest
//    segment's) to recompute the forward in. Segments end where
//    recompute_checkpoint_every_layer puts a boundary, at every layer
//    boundary (TrainingPlan::node_layer; a model without layers at stage
//    boundaries), and after every node the model marks as a recomputation
//    checkpoint (TrainingPlan::node_checkpoint, poptorch.recomputationCheckpoint
//    on one of its outputs: graph::kRecomputeCheckpoint). Training
//    recomputes with recompute_checkpoint_every_layer, or with the model's
//    own checkpoints in a pipeline of several stages (PopTorch turns on
//    PopART's RecomputationType::Pipeline whenever it pipelines over
//    several IPUs: Recomputes); then, unless layers set the segments, the
//    last pipeline stage is not recomputed (its backward follows its
//    forward at once). Checkpoints in a single-stage model change nothing
//    (CheckpointWarnings says so).
//    In flight: pipelined over S stages, stage s stashes 2(S - s) - 1
//    micro-batches (PopART's stash); sharded or one stage, 1;
//  * FLOPs: backward ~ 2x forward, so a micro-batch costs 3x the forward's
//    FLOPs, 4x recomputing (the forward runs again during backward);
//    IPU-Link: each float value that crosses IPUs forward sends its
//    gradient back, charged to the reading IPU;
//  * outputs: every micro-batch of a step for "all", device_iterations / N
//    for every_n:N, one for final and sum - of device_iterations x
//    gradient_accumulation_steps micro-batches;
//  * per weight update: replicas all-reduce the gradients over IPU-Link
//    (2 x gradient bytes x (R - 1) / R per IPU, R = replication_factor;
//    with replicated_tensor_sharding a reduce-scatter of the gradients and
//    an all-gather of the updated weights, the same bytes),
//    and off-chip state is read and written over the host link
//    (update_ipu_link_s, update_host_s; IPUs update in parallel).
// A training step is device_iterations weight updates of
// gradient_accumulation_steps (GA) micro-batches per replica, and the
// pipeline is flushed before every update (the next forward needs the
// updated weights): pipelined, device_iterations x (GA + 2S - 2) cycles of
// the slowest IPU (a cycle is one micro-batch's forward and backward);
// otherwise device_iterations x GA x the sum over IPUs; plus
// device_iterations x the slowest IPU's update time.
//
// Thread safety: pure functions.
// Phased strategies (placements with execution phases) run no pipeline:
// one micro-batch in flight per stage, and device/compiler/phase_plan.h decides
// what an IPU holds (always_live: every phase, as above; otherwise its
// largest phase) and a micro-batch's time (the sum of its phases plus the
// IPUs' host transfers); a training step is then device_iterations x (GA x
// that + the slowest IPU's update).
//
// Errors: PlanMemory - INVALID_ARGUMENT if the placement does not match the
// graph or the strategy (phases without a phased strategy, or the reverse), a
// buffer that is not an initializer of the graph, and
// CheckPlanningAttributes' and FindSerializedEmbedding's errors (device/compiler/temporaries.h).
// CheckMemoryFits - INVALID_ARGUMENT "out of memory on IPU k: needs X of 900.0 MB ..." with the
// IPU's largest tensors and what to change (the fix is to the request: placement or IPU count; a
// lower matmul_proportion when the temporary is over a tenth of the IPU; for training also
// optimizer_state_offchip=true (or replicated_tensor_sharding=true with replicas) when state is on
// the IPU, and recompute_checkpoint_every_layer=true when it is off).
#ifndef IPUPOD_COMPILER_MEMORY_PLAN_H_
#define IPUPOD_COMPILER_MEMORY_PLAN_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "device/compiler/checks.h"
#include "device/compiler/executable.h"
#include "device/compiler/ipu_config.h"
#include "device/compiler/placement.h"
#include "device/compiler/report.h"
#include "device/compiler/training_spec.h"
#include "device/graph/graph.h"
#include "device/graph/interpreter.h"

namespace ipupod::compiler {

// Modelling constants of the code estimate (software, not hardware).
inline constexpr int64_t kCodeBytesPerTile = 16 * 1024;
inline constexpr int64_t kCodeBytesPerNode = 64 * 1024;
inline constexpr size_t kLargestTensorsReported = 5;

// What a training plan adds (see the header comment).
struct TrainingPlan {
  int64_t gradient_accumulation_steps = 1;
  // trainable weight -> bytes of optimizer state per weight element
  // (OptimizerStateElementBytes)
  std::map<std::string, int64_t> state_element_bytes;
  bool optimizer_state_offchip = false;
  bool recompute_checkpoint_every_layer = false;
  // Per graph node its layer (device/compiler/layer_blocks.h), -1 outside every
  // layer; empty when the model has no layers: recomputation then
  // checkpoints at stage boundaries only.
  std::vector<int64_t> node_layer;
  // Per graph node whether it carries graph::kRecomputeCheckpoint; empty
  // when none does (NodeCheckpoints).
  std::vector<bool> node_checkpoint;
  bool replicated_tensor_sharding = false;
};

// Per node of `graph` whether it is a recomputation checkpoint (a non-zero
// int graph::kRecomputeCheckpoint attribute); empty when none is.
std::vector<bool> NodeCheckpoints(const graph::Graph& graph);

// Whether a training compile recomputes (see the header): with
// recompute_checkpoint_every_layer, or with checkpoints in a pipeline of
// more than one stage.
bool Recomputes(const TrainingPlan& t, ExecutionStrategy strategy, int64_t stages);

// The compile warning for checkpoints that change nothing: a training
// compile of a model with recomputation checkpoints that does not recompute
// (one stage, no recompute_checkpoint_every_layer); otherwise none.
std::vector<std::string> CheckpointWarnings(const TrainingPlan& t, ExecutionStrategy strategy,
                                            int64_t stages);

struct PlanOptions {
  ExecutionStrategy strategy = ExecutionStrategy::kPipelined;
  Liveness liveness = Liveness::kAlwaysLive;  // phased strategies (device/compiler/phase_plan.h)
  IpuCount count;
  int64_t micro_batch_size = 1;
  int64_t device_iterations = 1;
  OutputMode output_mode;
  std::optional<TrainingPlan> training;  // nullopt: inference
  PerIpuFloat matmul_proportion;         // device/compiler/temporaries.h
  int64_t embedding_serialization_factor = 1;
  bool synthetic_data = false;  // no host transfers of inputs and outputs
  // The buffers the model updates in place (initializer names: an inference
  // executable's inference_buffers, a training one's TrainingSpec::buffers)
  // and whether each replica keeps its own copy of them (IpuConfig
  // broadcast_buffers false). With R > 1 replicas, replicas 1..R-1's copies
  // are host memory the program holds beside replica 0's weights:
  // Report::replica_buffer_bytes.
  std::vector<std::string> buffers;
  bool replica_buffers = false;
};

// The TrainingPlan of a training compile: `spec`'s weights and accumulation,
// its optimizer's state slots, the config's optimizer_state_offchip,
// recompute_checkpoint_every_layer and replicated_tensor_sharding, and
// `graph`'s layers and recomputation checkpoints.
TrainingPlan MakeTrainingPlan(const TrainingSpec& spec, const IpuConfig& config,
                              const graph::Graph& graph);

// Sets options.buffers to the buffers of `buffers` (buffer -> its update,
// as Executable::inference_buffers and TrainingSpec::buffers map them) and
// options.replica_buffers from `config`'s broadcast_buffers: the one place
// a compile and CheckReportCoversModel both take them from.
void SetPlanBuffers(const std::map<std::string, std::string>& buffers, const IpuConfig& config,
                    PlanOptions& options);

// REQUIRES: `graph` has been through InferShapesAndFold; `costs` are the
// Interpreter's node_costs for it (graph order).
absl::StatusOr<Report> PlanMemory(const graph::Graph& graph,
                                  absl::Span<const graph::NodeCost> costs,
                                  const Placement& placement, const PlanOptions& options);

absl::Status CheckMemoryFits(const Report& report);

// Checks an executable's report against its own model: the memory plan is
// recomputed from `graph` (the executable's model as the runtime imported
// it) and the run shape the executable records, and every IPU's total must
// be within what the report charges, and so must the host memory
// (Report::host_bytes, with the replicas' own buffer copies of an executable
// compiled with broadcast_buffers false). A server runs this at Load, so a
// crafted .ipx whose report understates its model (a few bytes of report
// for gigabytes of activations) is refused, not charged too little.
// INVALID_ARGUMENT "the executable's report ... recompile it" otherwise.
absl::Status CheckReportCoversModel(const Executable& executable, const Report& report,
                                    const graph::Graph& graph);

}  // namespace ipupod::compiler

#endif  // IPUPOD_COMPILER_MEMORY_PLAN_H_
