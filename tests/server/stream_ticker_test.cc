#include "server/stream_ticker.h"

#include <atomic>
#include <memory>
#include <thread>

#include "gtest/gtest.h"

namespace ipupod::server {
namespace {

class Counter : public Tickable {
 public:
  void Tick(absl::Time) override { ++ticks; }
  std::atomic<int> ticks{0};
};

bool Eventually(const std::function<bool()>& done) {
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return done();
}

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
  StreamTicker ticker(absl::Milliseconds(1));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        auto c = std::make_shared<Counter>();
        ticker.Add(c);
        if (i % 2) ticker.Remove(c.get());
      }
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace ipupod::server
