#include "server/stream_ticker.h"

#include <vector>

#include "common/sync.h"

namespace ipupod::server {

StreamTicker::StreamTicker(absl::Duration period) : period_(period), thread_([this] { Run(); }) {}

StreamTicker::~StreamTicker() { Stop(); }

void StreamTicker::Add(const std::shared_ptr<Tickable>& stream) {
  sync::MutexLock lock(&mu_);
  if (!stop_) streams_[stream.get()] = stream;
}

void StreamTicker::Remove(const Tickable* stream) {
  sync::MutexLock lock(&mu_);
  streams_.erase(stream);
}

size_t StreamTicker::size() const {
  sync::MutexLock lock(&mu_);
  return streams_.size();
}

void StreamTicker::Stop() {
  {
    sync::MutexLock lock(&mu_);
    stop_ = true;
    streams_.clear();
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void StreamTicker::Run() {
  while (true) {
    std::vector<std::shared_ptr<Tickable>> live;
    {
      sync::MutexLock lock(&mu_);
      // Bounded wait: wakes every period, or at once on Stop().
      sync::AwaitWithTimeout(&mu_, absl::Condition(&stop_), period_);
      if (stop_) return;
      for (auto it = streams_.begin(); it != streams_.end();) {
        std::shared_ptr<Tickable> stream = it->second.lock();
        if (stream) {
          live.push_back(std::move(stream));
          ++it;
        } else {
          streams_.erase(it++);
        }
      }
    }
    absl::Time now = absl::Now();
    for (const auto& stream : live) stream->Tick(now);
  }
}

}  // namespace ipupod::server
