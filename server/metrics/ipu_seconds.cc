#include "server/metrics/ipu_seconds.h"

#include <algorithm>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "common/sync.h"

namespace ipupod::metrics {

IpuSeconds::Series& IpuSeconds::SeriesLocked(const std::string& user, const std::string& account) {
  auto it = series_.find(Key(user, account));
  if (it != series_.end()) return it->second;
  // Past the cap, one more series: "other".
  if (pairs_max_ > 0 && series_.size() >= pairs_max_) {
    return series_[Key(std::string(kOtherLabel), std::string(kOtherLabel))];
  }
  return series_[Key(user, account)];
}

void IpuSeconds::OnSessionEnded(const std::string& user, const std::string& account,
                                double ipu_seconds) {
  sync::MutexLock lock(&mu_);
  SeriesLocked(user, account).ended += std::max(0.0, ipu_seconds);
}

std::vector<IpuSeconds::Sample> IpuSeconds::Values(
    const std::vector<scheduler::SessionView>& running, absl::Time now) {
  sync::MutexLock lock(&mu_);
  absl::flat_hash_map<const Series*, double> so_far;
  for (const scheduler::SessionView& s : running) {
    const double held = absl::ToDoubleSeconds(now - absl::FromUnixMillis(s.attached_unix_ms));
    so_far[&SeriesLocked(s.user, s.account)] +=
        static_cast<double>(s.ipus.size()) * std::max(0.0, held);
  }
  std::vector<Sample> samples;
  samples.reserve(series_.size());
  for (auto& [key, series] : series_) {
    const auto it = so_far.find(&series);
    const double value = series.ended + (it == so_far.end() ? 0.0 : it->second);
    series.reported = std::max(series.reported, value);
    samples.push_back(Sample{key.first, key.second, series.reported});
  }
  std::sort(samples.begin(), samples.end(), [](const Sample& a, const Sample& b) {
    return std::tie(a.user, a.account) < std::tie(b.user, b.account);
  });
  return samples;
}

}  // namespace ipupod::metrics
