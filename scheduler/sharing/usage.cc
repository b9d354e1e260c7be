#include "scheduler/sharing/usage.h"

#include <algorithm>
#include <cmath>

namespace ipupod::sharing {
namespace {

// Below this an entry is forgotten (a millionth of an IPU-second).
constexpr double kNegligible = 1e-6;

}  // namespace

double DecayedUsage::Decay(const Entry& e, absl::Time now) const {
  if (now <= e.at) return e.value;
  return e.value * std::exp2(-absl::FDivDuration(now - e.at, half_life_));
}

void DecayedUsage::Add(absl::string_view key, double ipu_seconds, absl::Time at) {
  Entry& e = entries_[key];
  if (e.at == absl::Time()) e.at = at;
  if (at > e.at) {
    e.value = Decay(e, at);
    e.at = at;
  }
  e.value += ipu_seconds;
}

double DecayedUsage::Value(absl::string_view key, absl::Time now) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? 0.0 : Decay(it->second, now);
}

double DecayedUsage::Total(absl::Time now) const {
  double total = 0;
  for (const auto& [key, e] : entries_) total += Decay(e, now);
  return total;
}

std::vector<std::string> DecayedUsage::Keys() const {
  std::vector<std::string> keys;
  keys.reserve(entries_.size());
  for (const auto& [key, e] : entries_) keys.push_back(key);
  return keys;
}

void DecayedUsage::Prune(absl::Time now) {
  absl::erase_if(entries_, [&](const auto& kv) { return Decay(kv.second, now) < kNegligible; });
}

int64_t WindowUsage::BucketIndex(absl::Time t) const {
  absl::Duration remainder;  // IDivDuration writes it; it must not be null
  return absl::IDivDuration(t - absl::UnixEpoch(), bucket(), &remainder);
}

void WindowUsage::Add(absl::string_view key, double ipu_seconds, absl::Time at) {
  std::deque<Bucket>& buckets = entries_[key];
  const int64_t index = BucketIndex(at);
  if (!buckets.empty() && buckets.back().index >= index) {
    buckets.back().ipu_seconds += ipu_seconds;  // same bucket (or a late charge)
  } else {
    buckets.push_back(Bucket{index, ipu_seconds});
  }
  while (buckets.size() > 25) buckets.pop_front();
}

double WindowUsage::Value(absl::string_view key, absl::Time now) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return 0;
  const int64_t oldest = BucketIndex(now) - 23;  // 24 buckets: this one and 23 before
  double sum = 0;
  for (const Bucket& b : it->second) {
    if (b.index >= oldest) sum += b.ipu_seconds;
  }
  return sum;
}

absl::Time WindowUsage::TimeUntilAtMost(absl::string_view key, double target,
                                        absl::Time now) const {
  double value = Value(key, now);
  if (value <= target) return now;
  auto it = entries_.find(key);
  const int64_t oldest = BucketIndex(now) - 23;
  for (const Bucket& b : it->second) {
    if (b.index < oldest) continue;
    value -= b.ipu_seconds;
    // Bucket b leaves the window when the window's oldest bucket passes it.
    if (value <= target) return absl::UnixEpoch() + bucket() * (b.index + 24);
  }
  return now + window_;
}

void WindowUsage::Prune(absl::Time now) {
  const int64_t oldest = BucketIndex(now) - 23;
  for (auto& [key, buckets] : entries_) {
    while (!buckets.empty() && buckets.front().index < oldest) buckets.pop_front();
  }
  absl::erase_if(entries_, [](const auto& kv) { return kv.second.empty(); });
}

}  // namespace ipupod::sharing
