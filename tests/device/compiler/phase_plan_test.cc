#include "device/compiler/phase_plan.h"

#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/hardware.h"

namespace ipupod::compiler {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;

constexpr const device::IpuSpec& kIpu = device::kGc200;
constexpr double kLink = kIpu.ipu_link_bytes_per_s;
constexpr double kHost = kIpu.host_link_bytes_per_s;

// Two phases on IPU 0 (serial): phase 0 big weights, phase 1 small; phase 1
// reads 640 bytes from phase 0, 320 of them made on IPU 1.
std::vector<StageNeeds> SerialStages() {
  StageNeeds a{.phase = 0,
               .ipu = 0,
               .weight_bytes = 640'000,
               .kept_bytes = 1000,
               .compute_s = 1e-6,
               .later_bytes = 320};
  StageNeeds b{.phase = 0,
               .ipu = 1,
               .weight_bytes = 64'000,
               .kept_bytes = 100,
               .compute_s = 2e-6,
               .later_bytes = 320};
  StageNeeds c{.phase = 1,
               .ipu = 0,
               .weight_bytes = 320'000,
               .kept_bytes = 500,
               .compute_s = 1e-6,
               .earlier_link_bytes = 320,
               .earlier_bytes = 640};
  return {a, b, c};
}

std::vector<IpuPlan> Sums(const std::vector<StageNeeds>& stages) {
  std::vector<IpuPlan> ipus(2);
  for (size_t i = 0; i < ipus.size(); ++i) ipus[i].ipu = static_cast<int64_t>(i);
  for (const StageNeeds& s : stages) {
    ipus[s.ipu].weight_bytes += s.weight_bytes;
    ipus[s.ipu].activation_bytes += s.kept_bytes;
  }
  return ipus;
}

PhaseModel Serial(Liveness liveness, bool training = false) {
  return {.strategy = ExecutionStrategy::kSerialPhased, .liveness = liveness, .training = training};
}

TEST(PhasePlanTest, AlwaysLiveKeepsEverythingAndMovesNothing) {
  std::vector<IpuPlan> ipus = Sums(SerialStages());
  HoldLargestPhase(SerialStages(), Serial(Liveness::kAlwaysLive), ipus);
  EXPECT_EQ(ipus[0].weight_bytes, 960'000);
  EXPECT_EQ(ipus[0].held_phase, -1);
  EXPECT_EQ(ipus[0].streaming_memory_bytes, 0);
  const std::vector<PhasePlan> phases =
      PlanPhaseTimes(SerialStages(), Serial(Liveness::kAlwaysLive));
  ASSERT_EQ(phases.size(), 2u);
  EXPECT_THAT(phases[0].ipus, ElementsAre(0, 1));
  EXPECT_DOUBLE_EQ(phases[0].compute_s, 2e-6);  // the slower IPU
  EXPECT_EQ(phases[0].streaming_bytes, 0);
  // Phase 1 takes IPU 1's value by a cross-IPU copy.
  EXPECT_THAT(phases[1].ipu_link_s, DoubleNear(320 / kLink, 1e-18));
  EXPECT_DOUBLE_EQ(phases[1].time_s, 1e-6 + 320 / kLink);
}

TEST(PhasePlanTest, OffChipAfterFwdHoldsTheLargestPhaseAndPrefetchesTheNext) {
  std::vector<IpuPlan> ipus = Sums(SerialStages());
  HoldLargestPhase(SerialStages(), Serial(Liveness::kOffChipAfterFwd), ipus);
  // Phase 0 (640 kB + 1 kB) with phase 1's 320 kB of weights loading.
  EXPECT_EQ(ipus[0].held_phase, 0);
  EXPECT_EQ(ipus[0].weight_bytes, 960'000);
  EXPECT_EQ(ipus[0].activation_bytes, 1000);
  EXPECT_EQ(ipus[0].streaming_memory_bytes, 500);
  EXPECT_EQ(ipus[1].weight_bytes, 64'000);  // one phase only
  // Transfers overlap compute: each phase costs the larger.
  const std::vector<PhasePlan> phases =
      PlanPhaseTimes(SerialStages(), Serial(Liveness::kOffChipAfterFwd));
  EXPECT_EQ(phases[0].streaming_bytes, 640'000);
  EXPECT_DOUBLE_EQ(phases[0].time_s, 640'000 / kHost);  // 10 us of loads hide 2 us of compute
  EXPECT_DOUBLE_EQ(phases[0].streaming_s, 640'000 / kHost - 2e-6);
}

TEST(PhasePlanTest, NoOverlapAddsTransfersAndHoldsOnePhase) {
  std::vector<IpuPlan> ipus = Sums(SerialStages());
  HoldLargestPhase(SerialStages(), Serial(Liveness::kOffChipAfterFwdNoOverlap), ipus);
  EXPECT_EQ(ipus[0].weight_bytes, 640'000);
  EXPECT_EQ(ipus[0].streaming_memory_bytes, 320'500);
  const std::vector<PhasePlan> phases =
      PlanPhaseTimes(SerialStages(), Serial(Liveness::kOffChipAfterFwdNoOverlap));
  EXPECT_DOUBLE_EQ(phases[1].time_s, 1e-6 + 320 / kLink + 320'000 / kHost);
}

TEST(PhasePlanTest, OffChipAfterEachPhasePassesValuesThroughStreamingMemory) {
  const std::vector<PhasePlan> phases =
      PlanPhaseTimes(SerialStages(), Serial(Liveness::kOffChipAfterEachPhase));
  EXPECT_EQ(phases[0].streaming_bytes, 640'000 + 320);  // weights in, value out
  EXPECT_EQ(phases[1].streaming_bytes, 320'000 + 640);  // weights and both values in
  EXPECT_DOUBLE_EQ(phases[1].ipu_link_s, 0);            // no cross-IPU copy
  EXPECT_DOUBLE_EQ(phases[1].time_s, 1e-6 + 320'640 / kHost);
}

TEST(PhasePlanTest, TrainingAddsTheBackwardPhases) {
  std::vector<StageNeeds> stages = {{.phase = 0,
                                     .ipu = 0,
                                     .weight_bytes = 1000,
                                     .gradient_bytes = 1000,
                                     .kept_bytes = 200,
                                     .compute_s = 1e-6}};
  const PhasePlan live = PlanPhaseTimes(stages, Serial(Liveness::kAlwaysLive, true))[0];
  EXPECT_DOUBLE_EQ(live.compute_s, 3e-6);  // forward + 2x backward
  PhaseModel recompute = Serial(Liveness::kAlwaysLive, true);
  recompute.recompute = true;
  EXPECT_DOUBLE_EQ(PlanPhaseTimes(stages, recompute)[0].compute_s, 4e-6);
  // Forward: weights in, kept activations out; backward: weights and
  // activations in, gradients out.
  const PhasePlan off =
      PlanPhaseTimes(stages, Serial(Liveness::kOffChipAfterFwdNoOverlap, true))[0];
  EXPECT_EQ(off.streaming_bytes, 1200 + 2200);
  EXPECT_THAT(off.time_s, DoubleNear(3e-6 + 3400 / kHost, 1e-15));
}

TEST(PhasePlanTest, ParallelPhasesOverlapWithTheOtherGroup) {
  std::vector<StageNeeds> stages = {
      {.phase = 0, .ipu = 0, .weight_bytes = 640'000, .compute_s = 2e-6},
      {.phase = 1, .ipu = 1, .weight_bytes = 640'000, .compute_s = 2e-6}};
  PhaseModel parallel{.strategy = ExecutionStrategy::kParallelPhased,
                      .liveness = Liveness::kOffChipAfterFwd};
  const std::vector<PhasePlan> phases = PlanPhaseTimes(stages, parallel);
  EXPECT_DOUBLE_EQ(phases[0].time_s, 640'000 / kHost);
  std::vector<IpuPlan> ipus = Sums(stages);
  HoldLargestPhase(stages, parallel, ipus);
  EXPECT_EQ(ipus[0].weight_bytes, 640'000);  // nothing prefetched on the computing IPU
  EXPECT_EQ(ipus[0].held_phase, 0);
  EXPECT_EQ(ipus[1].held_phase, 1);
}

TEST(PhasePlanTest, OnlyAlwaysLiveStaysOnChip) {
  EXPECT_FALSE(SendsOffChip(Liveness::kAlwaysLive));
  EXPECT_TRUE(SendsOffChip(Liveness::kOffChipAfterFwd));
  EXPECT_TRUE(SendsOffChip(Liveness::kOffChipAfterFwdNoOverlap));
  EXPECT_TRUE(SendsOffChip(Liveness::kOffChipAfterEachPhase));
}

}  // namespace
}  // namespace ipupod::compiler
