// CallLimit: admits up to its bound, refuses the next one with
// RESOURCE_EXHAUSTED naming the bound, and admits again once a call left.
#include "server/call_limit.h"

#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ipupod::server {
namespace {

using ::testing::HasSubstr;

TEST(CallLimitTest, AdmitsUpToTheBoundThenRefusesUntilOneLeaves) {
  CallLimit limit(2, 2);
  std::optional<absl::StatusOr<CallLimit::Ticket>> a(limit.Enter("Run", "alice"));
  absl::StatusOr<CallLimit::Ticket> b = limit.Enter("Load", "bob");
  ASSERT_TRUE(a->ok());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(limit.in_flight(), 2);
  absl::StatusOr<CallLimit::Ticket> c = limit.Enter("Run", "carol");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(c.status().message(), HasSubstr("maximum of 2 execution calls at once"));
  EXPECT_THAT(c.status().message(), HasSubstr("ipupodd --max-execution-threads 2"));
  EXPECT_EQ(limit.in_flight(), 2) << "a refused call holds nothing";
  a.reset();
  EXPECT_EQ(limit.in_flight(), 1);
  EXPECT_TRUE(limit.Enter("Run", "carol").ok());
  EXPECT_EQ(limit.in_flight(), 1) << "a ticket that went out of scope left";
}

TEST(CallLimitTest, ABoundOfOneServesCallsOneAfterAnother) {
  CallLimit limit(1, 1);
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<CallLimit::Ticket> t = limit.Enter("Run", "alice");
    ASSERT_TRUE(t.ok()) << i;
  }
  EXPECT_EQ(limit.in_flight(), 0);
}

TEST(CallLimitTest, AMovedTicketLeavesOnce) {
  CallLimit limit(1, 1);
  {
    absl::StatusOr<CallLimit::Ticket> t = limit.Enter("Run", "alice");
    ASSERT_TRUE(t.ok());
    CallLimit::Ticket moved(std::move(*t));
    EXPECT_EQ(limit.in_flight(), 1);
  }
  EXPECT_EQ(limit.in_flight(), 0);
}

// Issue 11: one user's calls stop at the per-user share; another user is
// still admitted, and the share frees as that user's calls leave.
TEST(CallLimitTest, OneUserStopsAtTheirShareAndOthersAreStillAdmitted) {
  CallLimit limit(4, 2);
  std::vector<CallLimit::Ticket> held;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<CallLimit::Ticket> t = limit.Enter("UploadExecutable", "mallory");
    ASSERT_TRUE(t.ok()) << i;
    held.push_back(*std::move(t));
  }
  absl::StatusOr<CallLimit::Ticket> third = limit.Enter("UploadExecutable", "mallory");
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.status().message(),
              HasSubstr("user mallory already has 2 execution calls in flight, the most one user "
                        "may have (ipupodd --max-execution-threads-per-user 2); retry when one of "
                        "yours has finished"));
  EXPECT_EQ(limit.in_flight(), 2);
  EXPECT_EQ(limit.in_flight("mallory"), 2);
  absl::StatusOr<CallLimit::Ticket> alice = limit.Enter("Run", "alice");
  EXPECT_TRUE(alice.ok());
  EXPECT_EQ(limit.in_flight("alice"), 1);
  held.pop_back();
  EXPECT_TRUE(limit.Enter("Run", "mallory").ok());
  held.clear();
  EXPECT_EQ(limit.in_flight("mallory"), 0);
  EXPECT_EQ(limit.in_flight(), 1);
}

}  // namespace
}  // namespace ipupod::server
