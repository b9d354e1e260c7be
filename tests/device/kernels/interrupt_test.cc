// Interrupt points inside kernels (device/kernels/interrupt.h): a poll installed for
// the thread runs every kInterruptPollWork units of work, a failed poll
// stops a long kernel early and sticks until its scope ends, scopes nest, and
// without one nothing is ever interrupted.
#include "device/kernels/interrupt.h"

#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/kernels/elementwise.h"
#include "device/kernels/matmul.h"
#include "device/kernels/reduce.h"
#include "tests/device/kernels/test_util.h"

namespace ipupod::kernels {
namespace {

using testing::In;
using testing::Out;

constexpr int64_t kElements = int64_t{1} << 24;  // 256 polls' worth of work

TEST(InterruptTest, WithoutAScopeNothingIsInterrupted) {
  EXPECT_FALSE(InterruptPoint(int64_t{1} << 40));
  EXPECT_TRUE(CheckInterrupt().ok());
  EXPECT_TRUE(InterruptStatus().ok());
}

TEST(InterruptTest, ALongReductionPollsAsItGoesAndGivesTheSameSum) {
  const std::vector<float> x(static_cast<size_t>(kElements), 1.0f);
  std::vector<float> out(1);
  int polls = 0;
  {
    ScopedInterrupt interrupt([&] {
      ++polls;
      return absl::OkStatus();
    });
    ASSERT_TRUE(Reduce(ReduceOp::kSum, In(x, {kElements}), {}, Out(out, {})).ok());
    EXPECT_TRUE(interrupt.status().ok());
  }
  EXPECT_EQ(out[0], static_cast<float>(kElements));
  EXPECT_GE(polls, kElements / kInterruptPollWork / 2) << "polled inside the one node";
}

TEST(InterruptTest, AFailedPollStopsTheKernelEarlyAndSticks) {
  const std::vector<float> x(static_cast<size_t>(kElements), 1.0f);
  std::vector<float> y(x.size(), 0.0f);
  int polls = 0;
  ScopedInterrupt interrupt([&] {
    return ++polls < 3 ? absl::OkStatus() : absl::CancelledError("the client cancelled the run");
  });
  ASSERT_TRUE(Unary(UnaryOp::kExp, In(x, {kElements}), Out(y, {kElements})).ok());
  EXPECT_EQ(polls, 3) << "stopped at the failed poll";
  EXPECT_EQ(y.back(), 0.0f) << "the rest of the kernel never ran";
  EXPECT_EQ(interrupt.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(InterruptStatus().code(), absl::StatusCode::kCancelled);
  // Sticky: every later point stops at once, without polling again.
  EXPECT_TRUE(InterruptPoint(1));
  EXPECT_EQ(CheckInterrupt().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(polls, 3);
}

TEST(InterruptTest, ALargeMatrixProductIsInterruptedBetweenRowBlocks) {
  // 4096 x 2048 x 512 = 2^32 multiply-adds: over one sgemm call's bound.
  const int64_t m = 4096, k = 2048, n = 512;
  const std::vector<float> a(static_cast<size_t>(m * k), 1.0f), b(static_cast<size_t>(k * n), 1.0f);
  std::vector<float> c(static_cast<size_t>(m * n), 0.0f);
  ScopedInterrupt interrupt([] { return absl::DeadlineExceededError("past the limit"); });
  ASSERT_TRUE(MatMul(In(a, {m, k}), In(b, {k, n}), Out(c, {m, n})).ok());
  EXPECT_EQ(interrupt.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(c.front(), static_cast<float>(k)) << "the first block ran";
  EXPECT_EQ(c.back(), 0.0f) << "the last block never did";
}

TEST(InterruptTest, ScopesNestAndAnEmptyPollNeverStops) {
  ScopedInterrupt outer([] { return absl::UnavailableError("shutting down"); });
  {
    ScopedInterrupt inner(nullptr);  // an update that must not stop half-way
    EXPECT_FALSE(InterruptPoint(int64_t{1} << 30));
    EXPECT_TRUE(CheckInterrupt().ok());
  }
  EXPECT_EQ(CheckInterrupt().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ipupod::kernels
