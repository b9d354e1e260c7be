#include "sharing/priority.h"

#include <algorithm>
#include <cmath>

namespace ipupod::sharing {

double FairShareFactor(double usage_fraction, double shares_fraction) {
  if (usage_fraction <= 0) return 1.0;
  if (shares_fraction <= 0) return 0.0;  // an account without shares (removed on reload)
  return std::exp2(-usage_fraction / shares_fraction);
}

Factors ComputeFactors(const PriorityWeights& weights, const PriorityInputs& in) {
  Factors f;
  if (weights.age_max > absl::ZeroDuration()) {
    f.age = std::clamp(absl::FDivDuration(in.waited, weights.age_max), 0.0, 1.0);
  }
  f.fair_share = FairShareFactor(in.usage_fraction, in.shares_fraction);
  f.size = in.pod_ipus > 0 ? std::clamp(static_cast<double>(in.ipus) / in.pod_ipus, 0.0, 1.0) : 0;
  f.qos = in.max_qos_priority > 0 ? std::clamp(in.qos_priority / in.max_qos_priority, 0.0, 1.0) : 0;
  return f;
}

double Priority(const PriorityWeights& weights, const Factors& f) {
  return weights.age * f.age + weights.fair_share * f.fair_share + weights.size * f.size +
         weights.qos * f.qos;
}

}  // namespace ipupod::sharing
