#include "kernels/threads.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/matmul.h"

namespace ipupod::kernels {
namespace {

TEST(ThreadsTest, DefaultIsBoundedAndSettable) {
  EXPECT_EQ(BlasThreads(), kDefaultBlasThreads);
  ASSERT_TRUE(SetBlasThreads(1).ok());
  EXPECT_EQ(BlasThreads(), 1);
  ASSERT_TRUE(SetBlasThreads(MaxBlasThreads()).ok());
  EXPECT_EQ(BlasThreads(), MaxBlasThreads());
  // sgemm still works with the new count.
  const std::vector<float> a = {1, 2, 3, 4};
  std::vector<float> out(4);
  ASSERT_TRUE(MatMul(View<float>{a.data(), std::vector<int64_t>{2, 2}},
                     View<float>{a.data(), std::vector<int64_t>{2, 2}},
                     MutableView<float>{out.data(), std::vector<int64_t>{2, 2}})
                  .ok());
  EXPECT_EQ(out[3], 22);
}

TEST(ThreadsTest, RejectsOutOfRangeCounts) {
  EXPECT_EQ(SetBlasThreads(0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SetBlasThreads(MaxBlasThreads() + 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SetBlasThreads(-3).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ThreadsTest, ConcurrentSettersAndMatmulsStayConsistent) {
  const std::vector<float> a = {1, 2, 3, 4};
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> out(4);
      bool good = SetBlasThreads(1).ok();
      for (int i = 0; i < 20; ++i) {
        good = good &&
               MatMul(View<float>{a.data(), std::vector<int64_t>{2, 2}},
                      View<float>{a.data(), std::vector<int64_t>{2, 2}},
                      MutableView<float>{out.data(), std::vector<int64_t>{2, 2}})
                   .ok() &&
               out[3] == 22 && BlasThreads() == 1;
      }
      ok[t] = good ? 1 : 0;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, std::vector<int>(4, 1));
}

}  // namespace
}  // namespace ipupod::kernels
