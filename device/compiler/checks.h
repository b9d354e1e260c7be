// File: device/compiler/checks.h
//
// The run-shape rules a compile enforces, as PopTorch does:
//  * IPUs: ipus_per_replica x replication_factor must be a power of two
//    (V-IPU partitions are). IPUs, not stages, count: an IPU the placement
//    leaves idle still counts, and two stages sharing an IPU (PopART
//    annotations) count once. With auto_round_num_ipus the count rounds up to
//    the next power of two and the extra IPUs are reserved but idle
//    (PopTorch autoRoundNumIPUs). The total may not exceed the largest pod
//    ipupod models, device::kMaxPodIpus (256). PopTorch itself stops at 64
//    IPUs per process; ipupod allows the whole pod because its partitions
//    span it.
//  * Pipelined inference over S stages needs device_iterations >= S (each
//    stage needs a micro-batch to work on); pipelined training needs
//    gradient_accumulation_steps >= 2S - 1 (forward and backward stages).
//    Sharded and phased execution (no micro-batches overlap) have no such
//    rule.
//  * Output mode every_n:N needs N to divide device_iterations.
//
//  * Loading: a session holds exactly the IPUs an executable reserves
//    (CheckSessionIpus).
//
// Thread safety: pure functions.
// Errors: INVALID_ARGUMENT naming the numbers and how to fix them
// (CheckSessionIpus: FAILED_PRECONDITION, the session is what must change).
#ifndef IPUPOD_COMPILER_CHECKS_H_
#define IPUPOD_COMPILER_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/compiler/ipu_config.h"

namespace ipupod::compiler {

enum class ExecutionStrategy {
  kPipelined,  // PopTorch's default: stages work on different micro-batches at once
  kSharded,    // one stage at a time (optimum-graphcore's choice for inference)
  // PopTorch's phased strategies (device/compiler/phase_plan.h): the graph's
  // execution phases run one after another, each phase's stages in parallel
  // on their IPUs; serial: one group of IPUs runs every phase; parallel:
  // even phases on even IPUs, odd phases on odd IPUs, alternating.
  kSerialPhased,
  kParallelPhased,
};

// "pipelined", "sharded", "serial_phased", "parallel_phased".
absl::string_view ExecutionStrategyName(ExecutionStrategy strategy);
absl::StatusOr<ExecutionStrategy> ParseExecutionStrategy(absl::string_view name);
bool IsPhased(ExecutionStrategy strategy);

// PopTorch's poptorch.Liveness: what of a phase stays on the IPU after it
// (device/compiler/phase_plan.h says what each moves to streaming memory).
enum class Liveness {
  kAlwaysLive,
  kOffChipAfterFwd,
  kOffChipAfterFwdNoOverlap,
  kOffChipAfterEachPhase,
};

// "always_live", "off_chip_after_fwd", "off_chip_after_fwd_no_overlap",
// "off_chip_after_each_phase".
absl::string_view LivenessName(Liveness liveness);
absl::StatusOr<Liveness> ParseLiveness(absl::string_view name);

// The strategy a compile of this mode uses: the config's execution_strategy,
// else sharded for inference with sharded_execution_for_inference, else
// pipelined; and its tensors_liveness. INVALID_ARGUMENT for unknown names.
absl::StatusOr<ExecutionStrategy> ConfiguredStrategy(const IpuConfig& config, bool for_inference);
absl::StatusOr<Liveness> ConfiguredLiveness(const IpuConfig& config);

struct IpuCount {
  int64_t ipus_per_replica = 1;
  int64_t replication_factor = 1;
  int64_t needed = 1;    // ipus_per_replica x replication_factor
  int64_t reserved = 1;  // needed, rounded up to a power of two with auto-round
  int64_t idle() const { return reserved - needed; }
  bool operator==(const IpuCount& other) const = default;
};

bool IsPowerOfTwo(int64_t n);
// REQUIRES: 1 <= n <= 2^62.
int64_t NextPowerOfTwo(int64_t n);

absl::StatusOr<IpuCount> CheckIpuCount(int64_t ipus_per_replica, int64_t replication_factor,
                                       bool auto_round_num_ipus);

// Whether an executable of `count` may load on `session_ipus` IPUs (session
// `session`, named in the error): exactly the reserved count, or the needed
// count rounded up to a power of two, which is what an auto-rounded attach
// grants. FAILED_PRECONDITION naming both counts and the attach that fits.
absl::Status CheckSessionIpus(const IpuCount& count, int64_t session_ipus,
                              absl::string_view session);

absl::Status CheckPipelineDepth(int64_t num_stages, const ModeConfig& mode,
                                ExecutionStrategy strategy);

absl::Status CheckOutputMode(const ModeConfig& mode);

}  // namespace ipupod::compiler

#endif  // IPUPOD_COMPILER_CHECKS_H_
