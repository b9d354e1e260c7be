#include "device/device_ids.h"

#include <gtest/gtest.h>

#include "device/hardware.h"

namespace ipupod::device {
namespace {

TEST(DeviceIdsTest, PowerOfTwoHelpers) {
  EXPECT_FALSE(IsPowerOfTwo(0));
  EXPECT_FALSE(IsPowerOfTwo(-4));
  EXPECT_TRUE(IsPowerOfTwo(1));
  EXPECT_TRUE(IsPowerOfTwo(64));
  EXPECT_FALSE(IsPowerOfTwo(24));
  EXPECT_TRUE(IsPowerOfTwo(int64_t{1} << 40));
  EXPECT_EQ(RoundUpToPowerOfTwo(1), 1);
  EXPECT_EQ(RoundUpToPowerOfTwo(3), 4);
  EXPECT_EQ(RoundUpToPowerOfTwo(16), 16);
  EXPECT_EQ(RoundUpToPowerOfTwo(17), 32);
  EXPECT_EQ(RoundUpToPowerOfTwo(1 << 30), 1 << 30);
  EXPECT_EQ(RoundDownToPowerOfTwo(1), 1);
  EXPECT_EQ(RoundDownToPowerOfTwo(3), 2);
  EXPECT_EQ(RoundDownToPowerOfTwo(16), 16);
  EXPECT_EQ(RoundDownToPowerOfTwo(24), 16);
}

TEST(DeviceIdsTest, Pod16MatchesGcInfoNumbering) {
  EXPECT_EQ(NumDeviceIds(16), 31);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(DeviceIdOf(16, Block{i, 1}), i);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(DeviceIdOf(16, Block{2 * i, 2}), 16 + i);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(DeviceIdOf(16, Block{4 * i, 4}), 24 + i);
  EXPECT_EQ(DeviceIdOf(16, Block{0, 8}), 28);
  EXPECT_EQ(DeviceIdOf(16, Block{8, 8}), 29);
  EXPECT_EQ(DeviceIdOf(16, Block{0, 16}), 30);
}

TEST(DeviceIdsTest, Pod4MatchesGcInfoListing) {
  EXPECT_EQ(NumDeviceIds(4), 7);
  EXPECT_EQ(DeviceIdOf(4, Block{3, 1}), 3);
  EXPECT_EQ(DeviceIdOf(4, Block{0, 2}), 4);
  EXPECT_EQ(DeviceIdOf(4, Block{2, 2}), 5);
  EXPECT_EQ(DeviceIdOf(4, Block{0, 4}), 6);
}

TEST(DeviceIdsTest, Pod64LevelBases) {
  EXPECT_EQ(DeviceIdOf(64, Block{63, 1}), 63);
  EXPECT_EQ(DeviceIdOf(64, Block{0, 2}), 64);
  EXPECT_EQ(DeviceIdOf(64, Block{62, 2}), 95);
  EXPECT_EQ(DeviceIdOf(64, Block{0, 4}), 96);
  EXPECT_EQ(DeviceIdOf(64, Block{0, 8}), 112);
  EXPECT_EQ(DeviceIdOf(64, Block{0, 16}), 120);
  EXPECT_EQ(DeviceIdOf(64, Block{0, 32}), 124);
  EXPECT_EQ(DeviceIdOf(64, Block{0, 64}), 126);
  EXPECT_EQ(*BlockOfDeviceId(64, 126), (Block{0, 64}));
}

TEST(DeviceIdsTest, SingleIpuPod) {
  EXPECT_EQ(NumDeviceIds(1), 1);
  EXPECT_EQ(DeviceIdOf(1, Block{0, 1}), 0);
  EXPECT_EQ(*BlockOfDeviceId(1, 0), (Block{0, 1}));
}

TEST(DeviceIdsTest, RoundTripsEveryBlockOfEveryPod) {
  for (int pod = 1; pod <= kMaxPodIpus; pod *= 2) {
    int expected_id = 0;
    for (int size = 1; size <= pod; size *= 2) {
      for (int start = 0; start < pod; start += size) {
        const Block block{start, size};
        const int id = DeviceIdOf(pod, block);
        ASSERT_EQ(id, expected_id++) << "pod " << pod << " block " << start << "+" << size;
        absl::StatusOr<Block> back = BlockOfDeviceId(pod, id);
        ASSERT_TRUE(back.ok()) << back.status();
        ASSERT_EQ(*back, block);
      }
    }
    EXPECT_EQ(expected_id, NumDeviceIds(pod));
  }
}

TEST(DeviceIdsTest, BadIdsAreInvalidArgument) {
  EXPECT_EQ(BlockOfDeviceId(16, -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockOfDeviceId(16, 31).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockOfDeviceId(4, 7).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockOfDeviceId(12, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(BlockOfDeviceId(16, 31).status().message().find("0 to 30"), std::string::npos);
}

TEST(DeviceIdsTest, BlockContainsAndOverlaps) {
  const Block quad{4, 4};
  EXPECT_TRUE(quad.Contains(4));
  EXPECT_TRUE(quad.Contains(7));
  EXPECT_FALSE(quad.Contains(8));
  EXPECT_FALSE(quad.Contains(3));
  EXPECT_TRUE(quad.Overlaps(Block{0, 8}));
  EXPECT_TRUE(quad.Overlaps(Block{6, 2}));
  EXPECT_FALSE(quad.Overlaps(Block{8, 8}));
  EXPECT_FALSE(quad.Overlaps(Block{0, 4}));
}

}  // namespace
}  // namespace ipupod::device
