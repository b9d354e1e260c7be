// File: device/compiler/phase_plan.h
//
// The phased strategies' part of the memory plan and of the simulated time:
// PopTorch's SerialPhasedExecution and ParallelPhasedExecution, with
// poptorch.Liveness saying what leaves the IPU between phases. A model of
// how PopART runs execution phases, not a measurement (docs/differences.md).
//
// A placed phased graph (device/compiler/placement.h) has one stage per (phase,
// IPU). Phases run one after another; the stages of a phase run at the same
// time on their IPUs. Serial: one group of IPUs runs every phase; parallel:
// even phases on the even IPUs, odd phases on the odd ones, so one group
// computes while the other moves its next phase's tensors. Training runs
// each forward phase, then the backward phases in reverse order (backward
// 2x the forward's FLOPs, 3x recomputing); a micro-batch's weights are
// updated as in the other strategies (device/compiler/memory_plan.h).
//
// Per stage (StageNeeds): its weights (W), their gradients and on-chip
// optimizer state, the activations it keeps per micro-batch (A: inference its
// peak; training what the backward needs), its forward compute time, and the
// values it exchanges with other stages.
//
// Liveness:
//  * always_live - everything stays on the IPU for the whole step: an IPU
//    holds every phase's weights and activations (the sum, as sharded
//    execution), nothing moves to streaming memory; values made on another
//    IPU (in this phase or an earlier one) arrive by cross-IPU copies over
//    IPU-Link.
//  * off_chip_after_fwd - each phase's weights are loaded from streaming
//    memory before it (again before its backward phase); the activations a
//    stage keeps for the backward go to streaming memory after its forward
//    phase and come back before its backward phase, and the gradients go
//    out after it. An IPU holds one phase at a time: its memory is that of
//    its largest phase (weights + training state + activations), not the
//    sum; the rest waits in streaming memory (IpuPlan::streaming_memory_bytes).
//    Transfers overlap compute: a phase costs the larger of its compute
//    (with IPU-Link copies) and its streaming transfers; serially the IPU
//    also holds the next phase's weights while it computes.
//  * off_chip_after_fwd_no_overlap - as off_chip_after_fwd, but a phase's
//    transfers and compute do not overlap (a phase costs their sum) and
//    the IPU holds no second phase's weights (serial only).
//  * off_chip_after_each_phase - as no_overlap, and every value a later
//    phase reads leaves through streaming memory after the phase that made
//    it (also on the same IPU) instead of staying live or crossing by
//    IPU-Link (serial only).
// Parallel phased execution overlaps transfers with the other group's
// compute, so its phases cost the larger of compute and transfers.
// Streaming memory moves at the host link's bandwidth and IPU-Link copies
// at one IPU-Link's (device/hardware.h); a phase's time is its slowest
// IPU's. One micro-batch costs the sum of its phases plus every IPU's host
// transfers (inputs and outputs).
//
// Thread safety: pure functions.
// Errors: none (the placement and plan are checked before).
#ifndef IPUPOD_COMPILER_PHASE_PLAN_H_
#define IPUPOD_COMPILER_PHASE_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "device/compiler/checks.h"
#include "device/compiler/report.h"

namespace ipupod::compiler {

// One stage of a phased placement, per micro-batch.
struct StageNeeds {
  int64_t phase = 0;
  int64_t ipu = 0;
  int64_t weight_bytes = 0;
  int64_t gradient_bytes = 0;         // training
  int64_t optimizer_state_bytes = 0;  // training, on the IPU
  int64_t kept_bytes = 0;             // activations kept per micro-batch
  int64_t recompute_bytes = 0;        // training, recomputing: the values to recompute in
  double compute_s = 0;               // forward FLOPs and serial passes
  int64_t link_bytes = 0;             // read from another IPU's stage of the same phase
  int64_t earlier_link_bytes = 0;     // read from another IPU's stage of an earlier phase
  int64_t earlier_bytes = 0;          // read from earlier phases (any IPU)
  int64_t later_bytes = 0;            // made here and read by later phases

  int64_t held_bytes() const {
    return weight_bytes + gradient_bytes + optimizer_state_bytes + kept_bytes + recompute_bytes;
  }
};

struct PhaseModel {
  ExecutionStrategy strategy = ExecutionStrategy::kSerialPhased;
  Liveness liveness = Liveness::kAlwaysLive;
  bool training = false;
  bool recompute = false;
};

// Whether phases leave the IPU between phases (every liveness but
// always_live).
bool SendsOffChip(Liveness liveness);

// Off-chip livenesses: each IPU's weights, gradients, optimizer state and
// activations become those of the phase it holds (its largest), and the
// rest of what `ipus` counted moves to streaming_memory_bytes. REQUIRES:
// every stage's ipu < ipus.size(); `ipus` hold the sums over their stages.
void HoldLargestPhase(absl::Span<const StageNeeds> stages, const PhaseModel& model,
                      std::vector<IpuPlan>& ipus);

// Per phase, in phase order: its IPUs and its time per micro-batch.
std::vector<PhasePlan> PlanPhaseTimes(absl::Span<const StageNeeds> stages, const PhaseModel& model);

}  // namespace ipupod::compiler

#endif  // IPUPOD_COMPILER_PHASE_PLAN_H_
