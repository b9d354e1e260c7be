// File: scheduler/sharing/usage.h
//
// Usage as the scheduler weighs it: IPU-seconds per key (an account, a user,
// a QoS, a QoS and user), decayed with a half-life for the fair-share factor
// (DecayedUsage) and summed over a rolling window for IPU-hour limits
// (WindowUsage). The Scheduler charges running sessions as time passes and
// seeds both from the accounting ledger at start-up.
//
// Memory: one entry per key; Prune drops entries that have decayed below
// a millionth of an IPU-second (decayed) or left the window, so the maps hold
// only keys with recent usage.
//
// Thread safety: none; the Scheduler serialises access under its mutex.
#ifndef IPUPOD_SHARING_USAGE_H_
#define IPUPOD_SHARING_USAGE_H_

#include <deque>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ipupod::sharing {

class DecayedUsage {
 public:
  // REQUIRES: half_life > 0.
  explicit DecayedUsage(absl::Duration half_life) : half_life_(half_life) {}

  // Adds `ipu_seconds` used at `at`. Usage from before the key's last update
  // is decayed from `at` (never grown): charges arrive in time order.
  void Add(absl::string_view key, double ipu_seconds, absl::Time at);
  // The key's usage decayed to `now`; 0 for an unknown key.
  double Value(absl::string_view key, absl::Time now) const;
  // Every key's usage decayed to `now`, summed.
  double Total(absl::Time now) const;
  void Prune(absl::Time now);
  // Keeps the values, decays from now on with the new half-life.
  void set_half_life(absl::Duration half_life) { half_life_ = half_life; }
  size_t size() const { return entries_.size(); }
  // Every key with usage not yet pruned.
  std::vector<std::string> Keys() const;

 private:
  struct Entry {
    double value = 0;
    absl::Time at;
  };
  double Decay(const Entry& e, absl::Time now) const;

  absl::Duration half_life_;
  absl::flat_hash_map<std::string, Entry> entries_;
};

class WindowUsage {
 public:
  // The window is kept as 24 buckets of window/24. REQUIRES: window > 0.
  explicit WindowUsage(absl::Duration window) : window_(window) {}

  void Add(absl::string_view key, double ipu_seconds, absl::Time at);
  // IPU-seconds of the key charged within (now - window, now].
  double Value(absl::string_view key, absl::Time now) const;
  // When enough of the key's usage leaves the window to bring it to at most
  // `target` (now if it already is). Used for "waits until" reasons.
  absl::Time TimeUntilAtMost(absl::string_view key, double target, absl::Time now) const;
  void Prune(absl::Time now);
  size_t size() const { return entries_.size(); }

 private:
  struct Bucket {
    int64_t index = 0;  // floor(time / bucket width)
    double ipu_seconds = 0;
  };
  absl::Duration bucket() const { return window_ / 24; }
  int64_t BucketIndex(absl::Time t) const;

  absl::Duration window_;
  absl::flat_hash_map<std::string, std::deque<Bucket>> entries_;  // oldest first, <= 25
};

}  // namespace ipupod::sharing

#endif  // IPUPOD_SHARING_USAGE_H_
