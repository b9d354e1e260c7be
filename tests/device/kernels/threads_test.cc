#include "device/kernels/threads.h"

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "device/kernels/matmul.h"

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

double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// After ShortenBlasIdleSpin, OpenBLAS's workers sleep right after a job: a
// process that computed on two threads and then waits uses (almost) no CPU
// while it waits. Before, each worker spun for 2^28 cycles (about 0.1 s).
TEST(ThreadsTest, IdleBlasWorkersSleepRightAfterAJob) {
  ASSERT_EQ(std::getenv("OPENBLAS_THREAD_TIMEOUT"), nullptr) << "the test sets it itself";
  EXPECT_EQ(ShortenBlasIdleSpin(), kBlasIdleSpinLog2);
  EXPECT_EQ(ShortenBlasIdleSpin(), kBlasIdleSpinLog2);  // once; later calls do nothing
  if (MaxBlasThreads() < 2) GTEST_SKIP() << "one CPU: OpenBLAS has no workers";
  ASSERT_TRUE(SetBlasThreads(2).ok());
  const int64_t n = 384;  // large enough for OpenBLAS to split it
  std::vector<float> a(static_cast<size_t>(n * n), 0.5f), out(a.size());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(MatMul(View<float>{a.data(), std::vector<int64_t>{n, n}},
                       View<float>{a.data(), std::vector<int64_t>{n, n}},
                       MutableView<float>{out.data(), std::vector<int64_t>{n, n}})
                    .ok());
  }
  EXPECT_EQ(out[0], 0.25f * static_cast<float>(n));  // results unchanged
  const double before = ProcessCpuSeconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LT(ProcessCpuSeconds() - before, 0.03) << "an idle worker kept spinning";
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
