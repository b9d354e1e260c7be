#include "scheduler/allocator.h"

#include <gtest/gtest.h>

#include "common/check.h"

namespace ipupod::scheduler {
namespace {

using device::Block;

const Block kPod16{0, 16};

IpuMask Mask(std::initializer_list<int> ipus) {
  IpuMask mask;
  for (int i : ipus) mask.set(i);
  return mask;
}

// Usable = the pod minus `busy`.
IpuMask FreeExcept(std::initializer_list<int> busy, const Block& pod = kPod16) {
  return MaskOf(pod) & ~Mask(busy);
}

TEST(AllocatorTest, MaskHelpers) {
  EXPECT_EQ(MaskOf(Block{4, 4}), Mask({4, 5, 6, 7}));
  EXPECT_EQ(IpusOf(Mask({1, 9})), (std::vector<int>{1, 9}));
  EXPECT_EQ(FormatIpus(Mask({0, 1, 2, 3, 8, 10, 11})), "0-3,8,10-11");
  EXPECT_EQ(FormatIpus(IpuMask()), "");
  EXPECT_EQ(FormatIpus(MaskOf(Block{0, 256})), "0-255");
}

TEST(AllocatorTest, EmptyPodGivesLowestAlignedBlock) {
  for (int size = 1; size <= 16; size *= 2) {
    EXPECT_EQ(FindFreeBlock(MaskOf(kPod16), {}, kPod16, size), (Block{0, size}));
  }
}

TEST(AllocatorTest, BlocksAreAligned) {
  // IPUs 1..4 free: a pair must be 2-3, never 1-2 or 3-4.
  EXPECT_EQ(FindFreeBlock(Mask({1, 2, 3, 4}), {}, kPod16, 2), (Block{2, 2}));
  // 2..5 free: no aligned quad.
  EXPECT_EQ(FindFreeBlock(Mask({2, 3, 4, 5}), {}, kPod16, 4), std::nullopt);
}

TEST(AllocatorTest, BestFitFillsFragmentsFirst) {
  // IPU 4 in use: a single goes next to it (5), keeping 0-3 whole.
  EXPECT_EQ(FindFreeBlock(FreeExcept({4}), {}, kPod16, 1), (Block{5, 1}));
  // 8-9 in use: a pair goes to 10-11 (its quad already has 2 in use).
  EXPECT_EQ(FindFreeBlock(FreeExcept({8, 9}), {}, kPod16, 2), (Block{10, 2}));
  // A quad with half its eight in use beats an empty eight.
  EXPECT_EQ(FindFreeBlock(FreeExcept({12, 13, 14, 15}), {}, kPod16, 4), (Block{8, 4}));
}

TEST(AllocatorTest, BestFitPrefersTheFullestEnclosingBlock) {
  // 0 in use (pair 0-1 has 1 in use); 6-7's pair... candidates for 1 IPU:
  // 1 (pair 0-1: 1 unavailable) and 5 (pair 4-5: 1 unavailable) tie -> 1.
  EXPECT_EQ(FindFreeBlock(FreeExcept({0, 4}), {}, kPod16, 1), (Block{1, 1}));
}

TEST(AllocatorTest, TiesGoToTheLowestStart) {
  EXPECT_EQ(FindFreeBlock(FreeExcept({0, 1, 4, 5}), {}, kPod16, 2), (Block{2, 2}));
}

TEST(AllocatorTest, StaysInsideTheRegion) {
  const Block partition{8, 4};
  EXPECT_EQ(FindFreeBlock(MaskOf(kPod16), {}, partition, 2), (Block{8, 2}));
  EXPECT_EQ(FindFreeBlock(MaskOf(kPod16), {}, partition, 4), (Block{8, 4}));
  EXPECT_EQ(FindFreeBlock(MaskOf(kPod16), {}, partition, 8), std::nullopt);  // larger than region
  EXPECT_EQ(FindFreeBlock(FreeExcept({8, 9, 10, 11}), {}, partition, 1), std::nullopt);
}

TEST(AllocatorTest, AvoidsReservedIpus) {
  EXPECT_EQ(FindFreeBlock(MaskOf(kPod16), MaskOf(Block{0, 8}), kPod16, 2), (Block{8, 2}));
  EXPECT_EQ(FindFreeBlock(MaskOf(kPod16), Mask({0}), kPod16, 16), std::nullopt);
  EXPECT_EQ(FindFreeBlock(IpuMask(), {}, kPod16, 1), std::nullopt);
  EXPECT_EQ(FindFreeBlock(MaskOf(kPod16), {}, kPod16, 0), std::nullopt);
}

TEST(AllocatorTest, ReservationTakesTheBlockWithFewestInUse) {
  const IpuMask eligible = MaskOf(kPod16);
  // 0-7: 8 in use; 8-15: 4 in use -> reserve 8-15.
  const IpuMask in_use = MaskOf(Block{0, 8}) | MaskOf(Block{8, 4});
  EXPECT_EQ(ReservationFor(eligible, in_use, {}, kPod16, 8), (Block{8, 8}));
}

TEST(AllocatorTest, ReservationTiesGoToTheLowestStart) {
  const IpuMask in_use = Mask({0, 1, 8, 9});
  EXPECT_EQ(ReservationFor(MaskOf(kPod16), in_use, {}, kPod16, 8), (Block{0, 8}));
}

TEST(AllocatorTest, ReservationSkipsFailedIpus) {
  const IpuMask eligible = MaskOf(kPod16) & ~Mask({12});
  const IpuMask in_use = MaskOf(Block{0, 8});
  // 8-15 has fewer in use but holds failed IPU 12.
  EXPECT_EQ(ReservationFor(eligible, in_use, {}, kPod16, 8), (Block{0, 8}));
  EXPECT_EQ(ReservationFor(eligible, in_use, {}, kPod16, 16), std::nullopt);
}

TEST(AllocatorTest, ReservationAvoidsEarlierReservationsWhenItCan) {
  const IpuMask in_use = Mask({4, 5, 6, 7, 8});
  const IpuMask reserved = MaskOf(Block{0, 4});
  // Fewest in use would be 0-3 (0) but it is reserved; 12-15 is free of both.
  EXPECT_EQ(ReservationFor(MaskOf(kPod16), in_use, reserved, kPod16, 4), (Block{12, 4}));
  // When every candidate overlaps a reservation, overlap is allowed.
  EXPECT_EQ(ReservationFor(MaskOf(kPod16), in_use, MaskOf(kPod16), kPod16, 4), (Block{0, 4}));
}

TEST(AllocatorTest, ReservationStaysInsideTheRegion) {
  const Block partition{4, 4};
  EXPECT_EQ(ReservationFor(MaskOf(kPod16), Mask({4, 6}), {}, partition, 2), (Block{4, 2}));
  EXPECT_EQ(ReservationFor(MaskOf(kPod16), Mask({4}), {}, partition, 2), (Block{6, 2}));
  EXPECT_EQ(ReservationFor(MaskOf(kPod16), {}, {}, partition, 8), std::nullopt);
}

TEST(AllocatorTest, IsAlignedInTellsAlignedBlocksInsideTheRegion) {
  EXPECT_TRUE(IsAlignedIn(Block{4, 4}, kPod16));
  EXPECT_TRUE(IsAlignedIn(Block{0, 16}, kPod16));
  EXPECT_FALSE(IsAlignedIn(Block{2, 4}, kPod16));   // misaligned
  EXPECT_FALSE(IsAlignedIn(Block{0, 3}, kPod16));   // not a power of two
  EXPECT_FALSE(IsAlignedIn(Block{16, 4}, kPod16));  // outside
  EXPECT_FALSE(IsAlignedIn(Block{0, 8}, Block{8, 8}));
  EXPECT_FALSE(IsAlignedIn(Block{0, 0}, kPod16));
}

#if IPUPOD_DCHECK_IS_ON
// The REQUIRES are checked in debug and sanitizer builds.
TEST(AllocatorDeathTest, AMisalignedRegionIsAProgrammerError) {
  EXPECT_DEATH(FindFreeBlock(MaskOf(kPod16), {}, Block{2, 4}, 2), "not an aligned block");
  EXPECT_DEATH(ReservationFor(MaskOf(kPod16), {}, {}, kPod16, 3), "block size 3");
}
#endif

}  // namespace
}  // namespace ipupod::scheduler
