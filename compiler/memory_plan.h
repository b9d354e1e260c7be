// File: compiler/memory_plan.h
//
// Per-IPU memory and time model of one placed replica, and the check that
// every IPU fits in its memory. All hardware figures come from
// device/hardware.h (GC200: 900 MB, 1472 tiles, 62.5 TFLOPS FP32, 32 GB/s
// per IPU-Link, 64 GB/s host link).
//
// Memory on an IPU = weights + activations + code:
//  * weights: every initializer (weights and folded constants) a node on
//    the IPU reads, once per IPU (a weight two IPUs read, such as a tied
//    embedding, is counted on both);
//  * activations: for each stage on the IPU, the peak live bytes of one
//    micro-batch (values coming in from the host or earlier stages and the
//    stage's own values, each live from its producer - or the stage start -
//    to its last reader in the stage, or to the stage end if a later stage
//    or the host reads it), times the micro-batches in flight: pipelined
//    with S stages, stage k holds S - k (the pipelined-training stash;
//    conservative for inference); sharded or single-stage, 1;
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
// Thread safety: pure functions.
// Errors: PlanMemory - INVALID_ARGUMENT if the placement does not match the
// graph. CheckMemoryFits - INVALID_ARGUMENT
// "out of memory on IPU k: needs X of 900.0 MB ..." with the IPU's largest
// tensors and what to change (the fix is to the request: placement or IPU
// count).
#ifndef IPUPOD_COMPILER_MEMORY_PLAN_H_
#define IPUPOD_COMPILER_MEMORY_PLAN_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/checks.h"
#include "compiler/ipu_config.h"
#include "compiler/placement.h"
#include "compiler/report.h"
#include "graph/graph.h"
#include "graph/interpreter.h"

namespace ipupod::compiler {

// Modelling constants of the code estimate (software, not hardware).
inline constexpr int64_t kCodeBytesPerTile = 16 * 1024;
inline constexpr int64_t kCodeBytesPerNode = 64 * 1024;
inline constexpr size_t kLargestTensorsReported = 5;

struct PlanOptions {
  ExecutionStrategy strategy = ExecutionStrategy::kPipelined;
  IpuCount count;
  int64_t micro_batch_size = 1;
  int64_t device_iterations = 1;
  OutputMode output_mode;
};

// REQUIRES: `graph` has been through InferShapesAndFold; `costs` are the
// Interpreter's node_costs for it (graph order).
absl::StatusOr<Report> PlanMemory(const graph::Graph& graph,
                                  absl::Span<const graph::NodeCost> costs,
                                  const Placement& placement, const PlanOptions& options);

absl::Status CheckMemoryFits(const Report& report);

}  // namespace ipupod::compiler

#endif  // IPUPOD_COMPILER_MEMORY_PLAN_H_
