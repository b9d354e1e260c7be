#include "scheduler/sharing/priority.h"

#include <algorithm>
#include <cmath>

namespace ipupod::sharing {

double FairShareFactor(double usage_fraction, double shares_fraction) {
  if (usage_fraction <= 0) return 1.0;
  if (shares_fraction <= 0) return 0.0;  // an account without shares (removed on reload)
  return std::exp2(-usage_fraction / shares_fraction);
}

double AgeFactor(const PriorityWeights& weights, absl::Duration waited) {
  if (!(weights.age_max > absl::ZeroDuration())) return 0;
  return std::clamp(absl::FDivDuration(waited, weights.age_max), 0.0, 1.0);
}

Factors ComputeFactors(const PriorityWeights& weights, const PriorityInputs& in) {
  return ComputeFactors(weights, in, FairShareFactor(in.usage_fraction, in.shares_fraction));
}

Factors ComputeFactors(const PriorityWeights& weights, const PriorityInputs& in,
                       double fair_share) {
  Factors f;
  f.age = AgeFactor(weights, in.waited);
  f.fair_share = fair_share;
  f.size = in.pod_ipus > 0 ? std::clamp(static_cast<double>(in.ipus) / in.pod_ipus, 0.0, 1.0) : 0;
  f.qos = in.max_qos_priority > 0 ? std::clamp(in.qos_priority / in.max_qos_priority, 0.0, 1.0) : 0;
  return f;
}

double Priority(const PriorityWeights& weights, const Factors& f) {
  return weights.age * f.age + weights.fair_share * f.fair_share + weights.size * f.size +
         weights.qos * f.qos;
}

}  // namespace ipupod::sharing
