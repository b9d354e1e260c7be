#include "scheduler/reset_book.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ipupod::scheduler {
namespace {

using ::testing::ElementsAre;

PendingReset R(std::vector<int> ipus) {
  PendingReset r;
  r.ipus = std::move(ipus);
  r.sessions = {"s1-1"};
  r.simulated_seconds = 2;
  return r;
}

TEST(ResetBookTest, AddCoversTheResetsIpus) {
  ResetBook book(16);
  EXPECT_TRUE(book.empty());
  const uint64_t a = book.NextId();
  const uint64_t b = book.NextId();
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(b, 2u);
  book.Add(a, R({0, 1, 2, 3}));
  book.Add(b, R({8}));
  EXPECT_EQ(book.size(), 2u);
  EXPECT_EQ(book.CoveringReset(2), a);
  EXPECT_EQ(book.CoveringReset(8), b);
  EXPECT_EQ(book.CoveringReset(4), 0u);
  EXPECT_EQ(FormatIpus(book.Covered()), "0-3,8");
  EXPECT_EQ(FormatIpus(book.CoveredBy(a)), "0-3");
  ASSERT_NE(book.Find(b), nullptr);
  EXPECT_THAT(book.Find(b)->ipus, ElementsAre(8));
  EXPECT_EQ(book.Find(99), nullptr);
  EXPECT_EQ(book.CheckInvariants(), absl::OkStatus());
}

TEST(ResetBookTest, TakeUncoversAndHandsTheResetBack) {
  ResetBook book(16);
  const uint64_t id = book.NextId();
  bool told = false;
  PendingReset r = R({4, 5});
  r.done = [&told](absl::StatusOr<ResetResult>) { told = true; };
  book.Add(id, std::move(r));
  std::optional<PendingReset> taken = book.Take(id);
  ASSERT_TRUE(taken.has_value());
  EXPECT_THAT(taken->ipus, ElementsAre(4, 5));
  EXPECT_EQ(taken->sessions, std::vector<std::string>{"s1-1"});
  ASSERT_TRUE(taken->done);
  taken->done(ResetResult{});
  EXPECT_TRUE(told);
  EXPECT_FALSE(book.Take(id).has_value());  // a second end finds nothing
  EXPECT_TRUE(book.Covered().none());
  EXPECT_EQ(book.CheckInvariants(), absl::OkStatus());
}

// An IPU that fails mid-reset leaves it; repaired and reset anew, the first
// reset's end must not take it back from the second.
TEST(ResetBookTest, AnUncoveredIpuMayJoinANewResetAndStaysItsOwn) {
  ResetBook book(16);
  const uint64_t first = book.NextId();
  book.Add(first, R({0, 1}));
  EXPECT_EQ(book.Uncover(0), first);
  EXPECT_EQ(book.Uncover(0), 0u);
  EXPECT_EQ(FormatIpus(book.CoveredBy(first)), "1");
  EXPECT_EQ(book.CheckInvariants(), absl::OkStatus());
  const uint64_t second = book.NextId();
  book.Add(second, R({0}));
  EXPECT_EQ(book.CheckInvariants(), absl::OkStatus());
  EXPECT_EQ(FormatIpus(book.CoveredBy(first)), "1");
  std::optional<PendingReset> done = book.Take(first);
  ASSERT_TRUE(done.has_value());
  EXPECT_THAT(done->ipus, ElementsAre(0, 1));  // still reports what it started on
  EXPECT_EQ(book.CoveringReset(0), second);
  EXPECT_EQ(book.CoveringReset(1), 0u);
  EXPECT_EQ(book.CheckInvariants(), absl::OkStatus());
}

TEST(ResetBookTest, CloseHandsBackEveryResetAndStaysEmpty) {
  ResetBook book(16);
  book.Add(book.NextId(), R({0}));
  book.Add(book.NextId(), R({2, 3}));
  EXPECT_FALSE(book.closed());
  std::vector<PendingReset> all = book.Close();
  EXPECT_EQ(all.size(), 2u);
  EXPECT_TRUE(book.closed());
  EXPECT_TRUE(book.empty());
  EXPECT_TRUE(book.Covered().none());
  EXPECT_TRUE(book.Close().empty());
  EXPECT_FALSE(book.Take(1).has_value());
  EXPECT_EQ(book.CheckInvariants(), absl::OkStatus());
}

// The book hands out const resets; IPUs changed behind that (as a bug would)
// are caught.
TEST(ResetBookTest, InvariantsCatchIpusChangedBehindTheBooksBack) {
  ResetBook book(16);
  const uint64_t id = book.NextId();
  book.Add(id, R({4, 5}));
  PendingReset* r = const_cast<PendingReset*>(book.Find(id));
  r->ipus = {5};
  absl::Status broken = book.CheckInvariants();
  EXPECT_EQ(broken.code(), absl::StatusCode::kInternal);
  EXPECT_NE(broken.message().find("IPU 4 is covered by reset 1 that does not list it"),
            absl::string_view::npos)
      << broken;
  r->ipus = {5, 4};
  EXPECT_NE(book.CheckInvariants().message().find("out of order"), absl::string_view::npos);
  r->ipus = {4, 5, 16};
  EXPECT_NE(book.CheckInvariants().message().find("IPU 16 outside the pod"),
            absl::string_view::npos);
  r->ipus.clear();
  EXPECT_NE(book.CheckInvariants().message().find("reset 1 has no IPU"), absl::string_view::npos);
  r->ipus = {4, 5};
  EXPECT_EQ(book.CheckInvariants(), absl::OkStatus());
}

TEST(ResetBookDeathTest, BreachesOfAddsRequiresAbort) {
  ResetBook book(16);
  const uint64_t id = book.NextId();
  book.Add(id, R({0, 1}));
  EXPECT_DEATH(book.Add(book.NextId(), R({1, 2})), "IPU 1 is covered by reset 1");
  EXPECT_DEATH(book.Add(id, R({8})), "reset 1 is pending");
  EXPECT_DEATH(book.Add(7, R({8})), "reset id 7 was not handed out");
  EXPECT_DEATH(book.Add(book.NextId(), R({})), "resets no IPU");
  EXPECT_DEATH(book.Add(book.NextId(), R({9, 8})), "IPUs not ascending");
  EXPECT_DEATH(book.Add(book.NextId(), R({16})), "IPU 16 outside the pod");
  EXPECT_DEATH((void)book.CoveringReset(-1), "IPU -1 outside the pod");
  (void)book.Close();
  EXPECT_DEATH(book.Add(book.NextId(), R({8})), "added to a closed book");
}

}  // namespace
}  // namespace ipupod::scheduler
