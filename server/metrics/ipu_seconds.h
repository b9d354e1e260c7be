// File: server/metrics/ipu_seconds.h
//
// IpuSeconds: the counter ipupod_ipu_seconds_total{user, account}, counted
// continuously: the IPU-seconds of the sessions that ended (told by the
// scheduler's SessionEndEvent, the very figure their usage records are
// charged) plus, at each scrape, what the sessions still running have used
// so far (their IPUs x the time since their grant). So a long session shows
// up while it runs, not only when it ends.
//
// Monotonic: a running session's part is estimated from its grant time to
// the scrape's clock, and its final charge (its end time) can fall slightly
// below an estimate a scrape already reported; each series therefore
// reports at least what it last reported, and the true value overtakes it.
// The counter starts at zero with each server start, as Prometheus
// counters do.
//
// Bounded: at most `pairs_max` distinct (user, account) pairs get series of
// their own; later pairs are counted under user="other", account="other".
// In open mode anyone can name themselves, so the server caps it (1000);
// with tokens the users are the config's, and pairs_max 0 means no cap.
//
// Thread safety: every method may be called concurrently. OnSessionEnded is
// called with the scheduler's mutex held; it takes only this object's leaf
// mutex.
#ifndef IPUPOD_METRICS_IPU_SECONDS_H_
#define IPUPOD_METRICS_IPU_SECONDS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/scheduler.h"

namespace ipupod::metrics {

inline constexpr absl::string_view kOtherLabel = "other";

class IpuSeconds {
 public:
  struct Sample {
    std::string user;
    std::string account;
    double ipu_seconds = 0;
  };

  explicit IpuSeconds(size_t pairs_max) : pairs_max_(pairs_max) {}
  IpuSeconds(const IpuSeconds&) = delete;
  IpuSeconds& operator=(const IpuSeconds&) = delete;

  void OnSessionEnded(const std::string& user, const std::string& account, double ipu_seconds);
  // Every series' value at `now`, given the sessions running then; sorted by
  // user, then account.
  std::vector<Sample> Values(const std::vector<scheduler::SessionView>& running, absl::Time now);

 private:
  using Key = std::pair<std::string, std::string>;
  struct Series {
    double ended = 0;     // sessions that ended
    double reported = 0;  // the last value a scrape reported
  };
  // The series `user` and `account` count in (creating it within the cap).
  Series& SeriesLocked(const std::string& user, const std::string& account)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t pairs_max_;
  absl::Mutex mu_;
  // Node-based: a scrape keeps pointers to series while it adds others.
  absl::node_hash_map<Key, Series> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ipupod::metrics

#endif  // IPUPOD_METRICS_IPU_SECONDS_H_
