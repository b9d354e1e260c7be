#include "device/compiler/phase_plan.h"

#include <algorithm>
#include <map>

#include "device/hardware.h"

namespace ipupod::compiler {
namespace {

constexpr const device::IpuSpec& kPhaseIpu = device::kGc200;

// One stage's work in one direction (forward or backward) of a micro-batch.
struct StageWork {
  double compute_s = 0;
  int64_t link_bytes = 0;
  int64_t streaming_bytes = 0;
};

// Values from earlier phases cross by IPU-Link unless they went off chip.
int64_t LinkBytes(const StageNeeds& s, const PhaseModel& m) {
  const bool each = m.liveness == Liveness::kOffChipAfterEachPhase;
  return s.link_bytes + (each ? 0 : s.earlier_link_bytes);
}

// After each phase every value a later phase reads goes out, and comes in
// before the phase that reads it.
int64_t PassedOffChip(const StageNeeds& s, const PhaseModel& m) {
  return m.liveness == Liveness::kOffChipAfterEachPhase ? s.earlier_bytes + s.later_bytes : 0;
}

// Forward: weights in; training, the kept activations out.
StageWork Forward(const StageNeeds& s, const PhaseModel& m) {
  const bool off = SendsOffChip(m.liveness);
  StageWork w;
  w.compute_s = s.compute_s;
  w.link_bytes = LinkBytes(s, m);
  w.streaming_bytes = PassedOffChip(s, m);
  if (off) w.streaming_bytes += s.weight_bytes + (m.training ? s.kept_bytes : 0);
  return w;
}

// Backward: weights and kept activations in, gradients out; gradients of
// the values exchanged with other stages travel back the way they came.
StageWork Backward(const StageNeeds& s, const PhaseModel& m) {
  StageWork w;
  w.compute_s = s.compute_s * (m.recompute ? 3 : 2);
  w.link_bytes = LinkBytes(s, m);
  w.streaming_bytes = PassedOffChip(s, m);
  if (SendsOffChip(m.liveness))
    w.streaming_bytes += s.weight_bytes + s.kept_bytes + s.gradient_bytes;
  return w;
}

// A phase's stages run at once: its slowest IPU sets compute and link
// time, its busiest IPU the streaming time; overlapped, the two hide each
// other (the phase costs the larger), else they add up.
PhasePlan Combine(const std::vector<StageWork>& work, bool overlap) {
  PhasePlan p;
  double busy = 0;
  for (const StageWork& w : work) {
    p.compute_s = std::max(p.compute_s, w.compute_s);
    busy = std::max(
        busy, w.compute_s + static_cast<double>(w.link_bytes) / kPhaseIpu.ipu_link_bytes_per_s);
    p.streaming_bytes = std::max(p.streaming_bytes, w.streaming_bytes);
  }
  const double streaming = static_cast<double>(p.streaming_bytes) / kPhaseIpu.host_link_bytes_per_s;
  p.time_s = overlap ? std::max(busy, streaming) : busy + streaming;
  p.ipu_link_s = busy - p.compute_s;
  p.streaming_s = p.time_s - busy;
  return p;
}

void Add(PhasePlan& into, const PhasePlan& more) {
  into.compute_s += more.compute_s;
  into.ipu_link_s += more.ipu_link_s;
  into.streaming_bytes += more.streaming_bytes;
  into.streaming_s += more.streaming_s;
  into.time_s += more.time_s;
}

}  // namespace

bool SendsOffChip(Liveness liveness) { return liveness != Liveness::kAlwaysLive; }

void HoldLargestPhase(absl::Span<const StageNeeds> stages, const PhaseModel& model,
                      std::vector<IpuPlan>& ipus) {
  if (!SendsOffChip(model.liveness)) return;
  // Serially, with overlap, the IPU loads its next phase's weights while it computes.
  const bool prefetch = model.strategy == ExecutionStrategy::kSerialPhased &&
                        model.liveness == Liveness::kOffChipAfterFwd;
  for (IpuPlan& plan : ipus) {
    std::vector<const StageNeeds*> mine;  // in phase order, as the stages are
    for (const StageNeeds& s : stages) {
      if (s.ipu == plan.ipu) mine.push_back(&s);
    }
    if (mine.empty()) continue;
    size_t best = 0;
    int64_t best_bytes = -1, best_next = 0;
    for (size_t k = 0; k < mine.size(); ++k) {
      const int64_t next = prefetch && k + 1 < mine.size() ? mine[k + 1]->weight_bytes : 0;
      if (mine[k]->held_bytes() + next <= best_bytes) continue;
      best = k;
      best_bytes = mine[k]->held_bytes() + next;
      best_next = next;
    }
    const StageNeeds& s = *mine[best];
    const int64_t before = plan.weight_bytes + plan.gradient_bytes + plan.optimizer_state_bytes +
                           plan.activation_bytes;
    plan.weight_bytes = s.weight_bytes + best_next;
    plan.gradient_bytes = s.gradient_bytes;
    plan.optimizer_state_bytes = s.optimizer_state_bytes;
    plan.activation_bytes_per_micro_batch = s.kept_bytes;
    plan.recompute_bytes = s.recompute_bytes;
    plan.activation_bytes = s.kept_bytes + s.recompute_bytes;
    plan.micro_batches_in_flight = 1;
    plan.held_phase = s.phase;
    plan.streaming_memory_bytes = std::max<int64_t>(0, before - best_bytes);
  }
}

std::vector<PhasePlan> PlanPhaseTimes(absl::Span<const StageNeeds> stages,
                                      const PhaseModel& model) {
  std::map<int64_t, std::vector<const StageNeeds*>> by_phase;
  for (const StageNeeds& s : stages) by_phase[s.phase].push_back(&s);
  const bool overlap = model.strategy == ExecutionStrategy::kParallelPhased ||
                       model.liveness == Liveness::kOffChipAfterFwd;
  std::vector<PhasePlan> out;
  for (const auto& [phase, mine] : by_phase) {
    std::vector<StageWork> forward, backward;
    PhasePlan plan;
    plan.phase = phase;
    for (const StageNeeds* s : mine) {
      plan.ipus.push_back(s->ipu);
      forward.push_back(Forward(*s, model));
      backward.push_back(Backward(*s, model));
    }
    Add(plan, Combine(forward, overlap));
    if (model.training) Add(plan, Combine(backward, overlap));
    out.push_back(std::move(plan));
  }
  return out;
}

}  // namespace ipupod::compiler
