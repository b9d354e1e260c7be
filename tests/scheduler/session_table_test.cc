#include "scheduler/session_table.h"

#include <string>

#include <gtest/gtest.h>

namespace ipupod::scheduler {
namespace {

using device::Block;

Session S(const std::string& id, const std::string& ticket, Block block) {
  Session s;
  s.id = id;
  s.ticket = ticket;
  s.user = "alice";
  s.block = block;
  return s;
}

TEST(SessionTableTest, AddRecordsHoldersAndTickets) {
  SessionTable table(16);
  EXPECT_TRUE(table.empty());
  table.Add(S("s1", "t1", Block{0, 4}));
  table.Add(S("s2", "t2", Block{8, 2}));
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(table.HolderOf(3), "s1");
  EXPECT_EQ(table.HolderOf(9), "s2");
  EXPECT_EQ(table.HolderOf(4), "");
  EXPECT_EQ(table.SessionOf(4), nullptr);
  ASSERT_NE(table.SessionOf(8), nullptr);
  EXPECT_EQ(table.SessionOf(8)->id, "s2");
  EXPECT_EQ(FormatIpus(table.Held()), "0-3,8-9");
  ASSERT_NE(table.IdOfTicket("t2"), nullptr);
  EXPECT_EQ(*table.IdOfTicket("t2"), "s2");
  EXPECT_EQ(table.IdOfTicket("t9"), nullptr);
  EXPECT_EQ(table.Find("s9"), nullptr);
  EXPECT_EQ(table.CheckInvariants(), absl::OkStatus());
}

TEST(SessionTableTest, RemoveFreesTheIpusAndTheTicket) {
  SessionTable table(16);
  table.Add(S("s1", "t1", Block{0, 4}));
  std::optional<Session> removed = table.Remove("s1");
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(removed->ticket, "t1");
  EXPECT_FALSE(table.Remove("s1").has_value());
  EXPECT_TRUE(table.Held().none());
  EXPECT_EQ(table.HolderOf(0), "");
  EXPECT_EQ(table.IdOfTicket("t1"), nullptr);
  EXPECT_EQ(table.CheckInvariants(), absl::OkStatus());
  // The IPUs may be granted again.
  table.Add(S("s2", "t2", Block{0, 8}));
  EXPECT_EQ(table.CheckInvariants(), absl::OkStatus());
}

TEST(SessionTableTest, ForEachMayChangeFieldsOutsideTheInvariants) {
  SessionTable table(16);
  table.Add(S("s1", "t1", Block{0, 1}));
  table.Add(S("s2", "t2", Block{1, 1}));
  table.ForEach([](Session& s) { s.needs_load = true; });
  EXPECT_TRUE(table.Find("s1")->needs_load && table.Find("s2")->needs_load);
  EXPECT_EQ(table.CheckInvariants(), absl::OkStatus());
}

// The REQUIRES of the header, broken through Find, are caught.
TEST(SessionTableTest, InvariantsCatchABlockChangedInPlace) {
  SessionTable table(16);
  table.Add(S("s1", "t1", Block{0, 4}));
  table.Add(S("s2", "t2", Block{4, 4}));
  table.Find("s2")->block = Block{0, 8};  // now over s1's IPUs
  absl::Status broken = table.CheckInvariants();
  EXPECT_EQ(broken.code(), absl::StatusCode::kInternal);
  EXPECT_NE(broken.message().find("IPU 0 is in sessions"), absl::string_view::npos) << broken;
  table.Find("s2")->block = Block{6, 4};  // misaligned
  EXPECT_NE(table.CheckInvariants().message().find("misaligned"), absl::string_view::npos);
  table.Find("s2")->block = Block{8, 4};  // aligned, but not the IPUs recorded held
  EXPECT_NE(table.CheckInvariants().message().find("recorded held"), absl::string_view::npos);
  table.Find("s2")->block = Block{4, 4};
  table.Find("s2")->ticket = "t9";
  EXPECT_NE(table.CheckInvariants().message().find("does not name it"), absl::string_view::npos);
}

TEST(SessionTableDeathTest, AddingASecondHolderOfAnIpuAborts) {
  SessionTable table(16);
  table.Add(S("s1", "t1", Block{0, 4}));
  EXPECT_DEATH(table.Add(S("s2", "t2", Block{0, 2})), "would share IPUs 0-1");
  EXPECT_DEATH(table.Add(S("s1", "t3", Block{8, 2})), "session s1 exists");
  EXPECT_DEATH(table.Add(S("s3", "t1", Block{8, 2})), "ticket t1 is taken");
  EXPECT_DEATH(table.Add(S("s4", "t4", Block{14, 4})), "block 14\\+4");
}

}  // namespace
}  // namespace ipupod::scheduler
