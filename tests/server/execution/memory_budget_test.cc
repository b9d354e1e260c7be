#include "server/execution/memory_budget.h"

#include <memory>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ipupod::execution {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(MemoryBudgetTest, ChargesAreReturnedWhenTheLastHolderLetsGo) {
  MemoryBudget budget(100);
  auto a = budget.Reserve(60, "a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(budget.used_bytes(), 60);
  auto b = budget.Reserve(41, "executable b for session s-2");
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(b.status().message(),
              AllOf(HasSubstr("executable b for session s-2"), HasSubstr("needs 41 B"),
                    HasSubstr("hold 60 B"), HasSubstr("--load-memory-mb")));
  EXPECT_EQ(budget.used_bytes(), 60);  // a refusal reserves nothing
  std::shared_ptr<const MemoryBudget::Charge> copy = *a;
  a->reset();
  EXPECT_EQ(budget.used_bytes(), 60);
  copy.reset();
  EXPECT_EQ(budget.used_bytes(), 0);
  EXPECT_TRUE(budget.Reserve(100, "all").ok());
  EXPECT_EQ(budget.Reserve(-1, "negative").status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(MemoryBudgetTest, ConcurrentReservationsNeverOvercommit) {
  MemoryBudget budget(1000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&budget] {
      for (int i = 0; i < 2000; ++i) {
        auto charge = budget.Reserve(300, "x");
        if (charge.ok()) {
          EXPECT_LE(budget.used_bytes(), 1000);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(budget.used_bytes(), 0);
}

TEST(MemoryBudgetTest, TheDefaultIsHalfThisHostsMemoryAndAtLeastOneGiB) {
  EXPECT_GE(DefaultLoadMemoryBytes(), int64_t{1} << 30);
}

}  // namespace
}  // namespace ipupod::execution
