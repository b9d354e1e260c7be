// File: scheduler/sharing/priority.h
//
// The multifactor priority of a pending request (docs/scheduling.md has the
// formula with an example). Each factor is in [0, 1]:
//
//   age        = min(1, waited / age_max)
//   fair_share = 2^(-U / S)      U: the account's share of all decayed usage,
//                                S: the account's share of all shares
//                                (Slurm's classic fair-share factor: 1 for an
//                                account that used nothing, 0.5 for one that
//                                used exactly its share, towards 0 beyond)
//   size       = ipus / pod IPUs
//   qos        = the QoS's priority / the largest QoS priority (0 if all are 0)
//
//   priority = W_age*age + W_fs*fair_share + W_size*size + W_qos*qos
//
// Thread safety: pure functions.
#ifndef IPUPOD_SHARING_PRIORITY_H_
#define IPUPOD_SHARING_PRIORITY_H_

#include "absl/time/time.h"
#include "scheduler/sharing/policy.h"

namespace ipupod::sharing {

struct Factors {
  double age = 0;
  double fair_share = 0;
  double size = 0;
  double qos = 0;
};

struct PriorityInputs {
  absl::Duration waited = absl::ZeroDuration();
  double usage_fraction = 0;   // U: account's decayed usage / everyone's (0 if none)
  double shares_fraction = 1;  // S: account's shares / all shares; > 0
  int ipus = 0;
  int pod_ipus = 1;
  double qos_priority = 0;
  double max_qos_priority = 0;
};

// 2^(-U/S); 1 when U is 0. REQUIRES: S > 0.
double FairShareFactor(double usage_fraction, double shares_fraction);
// min(1, waited / age_max), 0 when age_max is not > 0.
double AgeFactor(const PriorityWeights& weights, absl::Duration waited);
Factors ComputeFactors(const PriorityWeights& weights, const PriorityInputs& in);
// The same with the fair-share factor given (FairShareFactor of the inputs'
// fractions): for a caller that prices many requests of one account at once.
Factors ComputeFactors(const PriorityWeights& weights, const PriorityInputs& in, double fair_share);
double Priority(const PriorityWeights& weights, const Factors& factors);

}  // namespace ipupod::sharing

#endif  // IPUPOD_SHARING_PRIORITY_H_
