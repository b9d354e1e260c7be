#include "server/stream_ticker.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/sync.h"
#include "gtest/gtest.h"
#include "tests/support/eventually.h"

namespace ipupod::server {
namespace {

class Counter : public Tickable {
 public:
  void Tick(absl::Time) override { ++ticks; }
  std::atomic<int> ticks{0};
};

using test_support::Eventually;

TEST(StreamTickerTest, TicksRegisteredStreamsUntilRemoved) {
  StreamTicker ticker(absl::Milliseconds(5));
  auto a = std::make_shared<Counter>();
  auto b = std::make_shared<Counter>();
  ticker.Add(a);
  ticker.Add(b);
  ASSERT_TRUE(Eventually([&] { return a->ticks >= 3 && b->ticks >= 3; }));
  ticker.Remove(a.get());
  int frozen = a->ticks;
  ASSERT_TRUE(Eventually([&] { return b->ticks >= frozen + 10; }));
  EXPECT_LE(a->ticks, frozen + 1) << "at most one tick already under way";
}

TEST(StreamTickerTest, DroppedStreamsAreForgottenNotKeptAlive) {
  StreamTicker ticker(absl::Milliseconds(5));
  std::weak_ptr<Counter> weak;
  {
    auto c = std::make_shared<Counter>();
    weak = c;
    ticker.Add(c);
  }
  ASSERT_TRUE(Eventually([&] { return ticker.size() == 0; }));
  EXPECT_TRUE(weak.expired());
}

TEST(StreamTickerTest, StopIsPromptAndIdempotent) {
  StreamTicker ticker(absl::Hours(1));
  absl::Time start = absl::Now();
  ticker.Stop();
  ticker.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ticker.Add(std::make_shared<Counter>());
  EXPECT_EQ(ticker.size(), 0u);
}

TEST(StreamTickerTest, ConcurrentAddRemoveWhileTicking) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 200;
  StreamTicker ticker(absl::Milliseconds(1));
  std::vector<std::vector<std::shared_ptr<Counter>>> kept(kThreads);
  std::vector<std::shared_ptr<Counter>> removed;
  absl::Mutex removed_mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        auto c = std::make_shared<Counter>();
        ticker.Add(c);
        if (i % 2 == 0) {
          kept[t].push_back(c);
          continue;
        }
        ticker.Remove(c.get());
        sync::MutexLock lock(&removed_mu);
        removed.push_back(c);
      }
    });
  }
  for (auto& t : threads) t.join();
  // Every stream still added is registered exactly once, every removed one is gone...
  EXPECT_EQ(ticker.size(), static_cast<size_t>(kThreads * kPerThread / 2));
  std::vector<int> frozen;
  for (const auto& c : removed) frozen.push_back(c->ticks);
  // ...the ticker keeps ticking all of the kept ones...
  ASSERT_TRUE(Eventually([&] {
    for (const auto& per_thread : kept) {
      for (const auto& c : per_thread) {
        if (c->ticks < 3) return false;
      }
    }
    return true;
  }));
  // ...and none of the removed ones (at most one tick was already under way).
  for (size_t i = 0; i < removed.size(); ++i) EXPECT_LE(removed[i]->ticks, frozen[i] + 1) << i;
}

}  // namespace
}  // namespace ipupod::server
