// File: tools/replay/selection.h
//
// Which jobs of a trace a replay feeds to the scheduler: those of the chosen
// virtual clusters (all by default) submitted in [from, to) (the whole trace
// by default), one GPU = one IPU. Of those, the jobs the pod can never run
// as asked are dropped and counted: more IPUs than the pod has, or a count
// that is not a power of two (grants are aligned power-of-two blocks; the
// replay does not round up, so it never charges a job IPUs it did not ask
// for). The kept jobs come back in submission order, ties in file order.
//
// Errors: INVALID_ARGUMENT for a cluster the trace does not hold (naming
// close matches and the clusters there are), `from` not before `to`, or a
// selection left with no job to replay (saying how many were in the window
// and why they were dropped).
//
// Thread safety: pure functions.
#ifndef IPUPOD_REPLAY_SELECTION_H_
#define IPUPOD_REPLAY_SELECTION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tools/replay/trace.h"

namespace ipupod::replay {

struct SelectionOptions {
  std::vector<std::string> clusters;  // empty = every cluster
  std::optional<absl::Time> from;     // inclusive; none = the trace's start
  std::optional<absl::Time> to;       // exclusive; none = the trace's end
  int pod_ipus = 64;
};

struct Dropped {
  int64_t too_large = 0;         // more IPUs than the pod
  int64_t not_power_of_two = 0;  // 0, 3, 12, 24, ... IPUs
  int64_t total() const { return too_large + not_power_of_two; }
};

struct Selection {
  std::vector<TraceJob> jobs;  // kept, in submission order
  Dropped dropped;
  int64_t in_window = 0;              // jobs of the clusters in the window, kept or dropped
  std::vector<std::string> clusters;  // of the kept jobs, sorted
};

absl::StatusOr<Selection> Select(const std::vector<TraceJob>& trace,
                                 const SelectionOptions& options);

}  // namespace ipupod::replay

#endif  // IPUPOD_REPLAY_SELECTION_H_
