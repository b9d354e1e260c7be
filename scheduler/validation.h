// File: scheduler/validation.h
//
// Checks of user input that the Scheduler refuses before touching any state:
// names and IPU counts. Each error is INVALID_ARGUMENT and says the rule.
//
// Thread safety: pure functions.
#ifndef IPUPOD_SCHEDULER_VALIDATION_H_
#define IPUPOD_SCHEDULER_VALIDATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ipupod::scheduler {

// 1..max_length characters of [A-Za-z0-9._-], the first a letter or digit.
// `what` names the field in the message ("partition name").
absl::Status ValidateName(absl::string_view what, absl::string_view name, int max_length);

// An attach count against its pool of `pool_size` IPUs, described by
// `pool_name` ("the pod (POD16)", "partition p1"). Returns the block size to
// grant: `n` itself, or with `auto_round` the next power of two.
absl::StatusOr<int> CheckAttachSize(int64_t n, int pool_size, absl::string_view pool_name,
                                    bool auto_round);

// A partition size: a power of two from 1 to the pod size.
absl::Status CheckPartitionSize(int64_t size, int pod_size, absl::string_view pod_name);

}  // namespace ipupod::scheduler

#endif  // IPUPOD_SCHEDULER_VALIDATION_H_
