#include "scheduler/partition_table.h"

#include <string>

#include <gtest/gtest.h>

namespace ipupod::scheduler {
namespace {

using device::Block;

Partition P(const std::string& name, Block block) { return Partition{name, block, "bob", 1}; }

TEST(PartitionTableTest, AddRecordsEachIpusPartition) {
  PartitionTable table(16);
  EXPECT_TRUE(table.empty());
  const Partition& a = table.Add(P("a", Block{0, 8}));
  EXPECT_EQ(a.owner, "bob");
  table.Add(P("b", Block{12, 2}));
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(table.NameOf(7), "a");
  EXPECT_EQ(table.NameOf(13), "b");
  EXPECT_EQ(table.NameOf(8), "");
  EXPECT_EQ(FormatIpus(table.Partitioned()), "0-7,12-13");
  ASSERT_NE(table.Find("b"), nullptr);
  EXPECT_EQ(table.Find("b")->block, (Block{12, 2}));
  EXPECT_EQ(table.at("a").block, (Block{0, 8}));
  EXPECT_EQ(table.Find("c"), nullptr);
  EXPECT_EQ(table.CheckInvariants(), absl::OkStatus());
}

TEST(PartitionTableTest, RemoveReturnsTheIpusToThePool) {
  PartitionTable table(16);
  table.Add(P("a", Block{0, 8}));
  EXPECT_TRUE(table.Remove("a"));
  EXPECT_FALSE(table.Remove("a"));
  EXPECT_TRUE(table.Partitioned().none());
  EXPECT_EQ(table.NameOf(0), "");
  EXPECT_EQ(table.CheckInvariants(), absl::OkStatus());
  table.Add(P("b", Block{0, 16}));
  EXPECT_EQ(table.CheckInvariants(), absl::OkStatus());
}

// The table hands out const partitions; a block changed behind that (as a
// bug would) is caught.
TEST(PartitionTableTest, InvariantsCatchABlockChangedBehindTheTablesBack) {
  PartitionTable table(16);
  table.Add(P("a", Block{0, 4}));
  table.Add(P("b", Block{4, 4}));
  Partition* b = const_cast<Partition*>(table.Find("b"));
  b->block = Block{0, 8};
  absl::Status broken = table.CheckInvariants();
  EXPECT_EQ(broken.code(), absl::StatusCode::kInternal);
  EXPECT_NE(broken.message().find("IPU 0 is in partitions"), absl::string_view::npos) << broken;
  b->block = Block{2, 4};
  EXPECT_NE(table.CheckInvariants().message().find("misaligned"), absl::string_view::npos);
  b->block = Block{8, 4};
  EXPECT_NE(table.CheckInvariants().message().find("is recorded in partition"),
            absl::string_view::npos);
  b->block = Block{4, 4};
  b->name = "c";
  EXPECT_NE(table.CheckInvariants().message().find("stored as b"), absl::string_view::npos);
}

TEST(PartitionTableDeathTest, OverlapsAndUnknownNamesAbort) {
  PartitionTable table(16);
  table.Add(P("a", Block{0, 8}));
  EXPECT_DEATH(table.Add(P("b", Block{4, 4})), "overlaps another on IPUs 4-7");
  EXPECT_DEATH(table.Add(P("a", Block{8, 4})), "partition a exists");
  EXPECT_DEATH(table.Add(P("c", Block{10, 4})), "block 10\\+4");
  EXPECT_DEATH((void)table.at("zzz"), "no partition zzz");
}

}  // namespace
}  // namespace ipupod::scheduler
