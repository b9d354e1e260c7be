#include "device/compiler/checks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ipupod::compiler {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

ModeConfig Inference(int64_t device_iterations) {
  ModeConfig m;
  m.for_inference = true;
  m.device_iterations = device_iterations;
  return m;
}

TEST(ChecksTest, PowersOfTwo) {
  EXPECT_TRUE(IsPowerOfTwo(1));
  EXPECT_TRUE(IsPowerOfTwo(64));
  EXPECT_FALSE(IsPowerOfTwo(0));
  EXPECT_FALSE(IsPowerOfTwo(6));
  EXPECT_EQ(NextPowerOfTwo(1), 1);
  EXPECT_EQ(NextPowerOfTwo(3), 4);
  EXPECT_EQ(NextPowerOfTwo(129), 256);
}

TEST(ChecksTest, ASessionMustHoldTheReservedIpus) {
  const IpuCount two{2, 1, 2, 2};
  EXPECT_TRUE(CheckSessionIpus(two, 2, "s1-1").ok());
  const absl::Status more = CheckSessionIpus(two, 4, "s1-1");
  EXPECT_EQ(more.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(more.message(),
            "the executable needs 2 IPUs (reserves 2) but session s1-1 has 4; attach with 2 IPUs "
            "(ipupod attach --ipus 2)");
  EXPECT_EQ(CheckSessionIpus(two, 1, "s1-1").code(), absl::StatusCode::kFailedPrecondition);
  // Auto-rounded: 3 needed, 4 reserved; an attach of 4 fits, 3 does not.
  const IpuCount three{3, 1, 3, 4};
  EXPECT_TRUE(CheckSessionIpus(three, 4, "s1-2").ok());
  EXPECT_EQ(CheckSessionIpus(three, 3, "s1-2").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CheckSessionIpus(three, 8, "s1-2").code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ChecksTest, PowerOfTwoIpuCountPasses) {
  auto count = CheckIpuCount(4, 2, false);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(count->needed, 8);
  EXPECT_EQ(count->reserved, 8);
  EXPECT_EQ(count->idle(), 0);
}

TEST(ChecksTest, NonPowerOfTwoNamesNumbersAndFixes) {
  auto ipus = CheckIpuCount(3, 1, false);
  EXPECT_EQ(ipus.status().code(), kInvalid);
  EXPECT_THAT(ipus.status().message(),
              AllOf(HasSubstr("needs 3 IPUs (3 IPUs per replica x replication factor 1)"),
                    HasSubstr("not a power of two"), HasSubstr("on 2 or 4 IPUs per replica"),
                    HasSubstr("auto_round_num_ipus=true to reserve 4 IPUs (1 idle)")));
  auto replicas = CheckIpuCount(2, 3, false);
  EXPECT_THAT(replicas.status().message(),
              AllOf(HasSubstr("needs 6 IPUs"), HasSubstr("replication factor 2 or 4"),
                    HasSubstr("reserve 8 IPUs (2 idle)")));
}

TEST(ChecksTest, AutoRoundReservesIdleExtras) {
  auto count = CheckIpuCount(3, 2, true);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(count->needed, 6);
  EXPECT_EQ(count->reserved, 8);
  EXPECT_EQ(count->idle(), 2);
}

TEST(ChecksTest, MoreThanThePodIsRefused) {
  auto count = CheckIpuCount(4, 128, true);
  EXPECT_EQ(count.status().code(), kInvalid);
  EXPECT_THAT(count.status().message(),
              AllOf(HasSubstr("needs 512 IPUs"), HasSubstr("largest pod (256 IPUs)")));
  EXPECT_TRUE(CheckIpuCount(4, 64, false).ok());
  // 3 x 80 = 240 fits, but rounds up to 256: still within the pod.
  EXPECT_EQ(CheckIpuCount(3, 80, true)->reserved, 256);
}

TEST(ChecksTest, PipelinedInferenceNeedsEnoughDeviceIterations) {
  auto status = CheckPipelineDepth(4, Inference(2), ExecutionStrategy::kPipelined);
  EXPECT_EQ(status.code(), kInvalid);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("pipelined inference over 4 stages needs "
                                                "inference_device_iterations >= 4 (it is 2)"),
                                      HasSubstr("sharded execution")));
  EXPECT_TRUE(CheckPipelineDepth(4, Inference(4), ExecutionStrategy::kPipelined).ok());
  EXPECT_TRUE(CheckPipelineDepth(4, Inference(1), ExecutionStrategy::kSharded).ok());
  EXPECT_TRUE(CheckPipelineDepth(1, Inference(1), ExecutionStrategy::kPipelined).ok());
}

TEST(ChecksTest, PipelinedTrainingNeedsAccumulation) {
  ModeConfig m;
  m.for_inference = false;
  m.gradient_accumulation_steps = 6;
  auto status = CheckPipelineDepth(4, m, ExecutionStrategy::kPipelined);
  EXPECT_EQ(status.code(), kInvalid);
  EXPECT_THAT(status.message(), HasSubstr("gradient_accumulation_steps >= 7 (it is 6)"));
  m.gradient_accumulation_steps = 7;
  EXPECT_TRUE(CheckPipelineDepth(4, m, ExecutionStrategy::kPipelined).ok());
}

TEST(ChecksTest, EveryNMustDivideDeviceIterations) {
  ModeConfig m = Inference(6);
  m.output_mode = {OutputMode::Kind::kEveryN, 4};
  auto status = CheckOutputMode(m);
  EXPECT_EQ(status.code(), kInvalid);
  EXPECT_THAT(status.message(),
              HasSubstr("every_n:4 needs inference_device_iterations (6) to be a multiple of 4"));
  m.output_mode.every_n = 3;
  EXPECT_TRUE(CheckOutputMode(m).ok());
}

TEST(ChecksTest, StrategyNames) {
  EXPECT_EQ(*ParseExecutionStrategy("sharded"), ExecutionStrategy::kSharded);
  EXPECT_EQ(*ParseExecutionStrategy("pipelined"), ExecutionStrategy::kPipelined);
  EXPECT_EQ(*ParseExecutionStrategy("serial_phased"), ExecutionStrategy::kSerialPhased);
  EXPECT_EQ(*ParseExecutionStrategy("parallel_phased"), ExecutionStrategy::kParallelPhased);
  EXPECT_EQ(ParseExecutionStrategy("phased").status().code(), kInvalid);
  EXPECT_TRUE(IsPhased(ExecutionStrategy::kParallelPhased));
  EXPECT_FALSE(IsPhased(ExecutionStrategy::kSharded));
}

TEST(ChecksTest, LivenessNames) {
  for (Liveness l : {Liveness::kAlwaysLive, Liveness::kOffChipAfterFwd,
                     Liveness::kOffChipAfterFwdNoOverlap, Liveness::kOffChipAfterEachPhase}) {
    EXPECT_EQ(*ParseLiveness(LivenessName(l)), l);
  }
  EXPECT_EQ(ParseLiveness("OffChipAfterFwd").status().code(), kInvalid);
}

TEST(ChecksTest, ConfiguredStrategy) {
  IpuConfig c;
  EXPECT_EQ(*ConfiguredStrategy(c, true), ExecutionStrategy::kPipelined);
  c.sharded_execution_for_inference = true;
  EXPECT_EQ(*ConfiguredStrategy(c, true), ExecutionStrategy::kSharded);
  EXPECT_EQ(*ConfiguredStrategy(c, false), ExecutionStrategy::kPipelined);
  c.execution_strategy = "serial_phased";  // both modes, over optimum's key
  EXPECT_EQ(*ConfiguredStrategy(c, true), ExecutionStrategy::kSerialPhased);
  EXPECT_EQ(*ConfiguredStrategy(c, false), ExecutionStrategy::kSerialPhased);
  c.execution_strategy = "interleaved";
  EXPECT_EQ(ConfiguredStrategy(c, false).status().code(), kInvalid);
  EXPECT_EQ(*ConfiguredLiveness(c), Liveness::kAlwaysLive);
  c.tensors_liveness = "never";
  EXPECT_EQ(ConfiguredLiveness(c).status().code(), kInvalid);
}

TEST(ChecksTest, PhasedAndShardedNeedNoPipelineDepth) {
  ModeConfig m = Inference(1);
  for (ExecutionStrategy s : {ExecutionStrategy::kSharded, ExecutionStrategy::kSerialPhased,
                              ExecutionStrategy::kParallelPhased}) {
    EXPECT_TRUE(CheckPipelineDepth(6, m, s).ok());
  }
}

}  // namespace
}  // namespace ipupod::compiler
