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
  CallLimit limit(2);
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
  CallLimit limit(1);
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<CallLimit::Ticket> t = limit.Enter("Run", "alice");
    ASSERT_TRUE(t.ok()) << i;
  }
  EXPECT_EQ(limit.in_flight(), 0);
}

TEST(CallLimitTest, AMovedTicketLeavesOnce) {
  CallLimit limit(1);
  {
    absl::StatusOr<CallLimit::Ticket> t = limit.Enter("Run", "alice");
    ASSERT_TRUE(t.ok());
    CallLimit::Ticket moved(std::move(*t));
    EXPECT_EQ(limit.in_flight(), 1);
  }
  EXPECT_EQ(limit.in_flight(), 0);
}

}  // namespace
}  // namespace ipupod::server
