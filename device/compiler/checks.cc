#include "device/compiler/checks.h"

#include "absl/strings/str_cat.h"
#include "device/hardware.h"

namespace ipupod::compiler {
namespace {

int64_t PreviousPowerOfTwo(int64_t n) {
  int64_t p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

std::string Breakdown(int64_t ipus_per_replica, int64_t replication) {
  return absl::StrCat(ipus_per_replica, ipus_per_replica == 1 ? " IPU" : " IPUs",
                      " per replica x replication factor ", replication);
}

absl::Status NotPowerOfTwo(int64_t ipus_per_replica, int64_t replication, int64_t needed) {
  const int64_t up = NextPowerOfTwo(needed);
  std::string fix;
  if (!IsPowerOfTwo(ipus_per_replica)) {
    const int64_t lo = PreviousPowerOfTwo(ipus_per_replica);
    fix = absl::StrCat("place the model on ", lo, " or ", lo * 2, " IPUs per replica");
  } else {
    const int64_t lo = PreviousPowerOfTwo(replication);
    fix = absl::StrCat("use replication factor ", lo, " or ", lo * 2);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "the model needs ", needed, " IPUs (", Breakdown(ipus_per_replica, replication),
      "), which is not a power of two: ", fix, ", or set auto_round_num_ipus=true to reserve ", up,
      " IPUs (", up - needed, " idle)"));
}

}  // namespace

absl::string_view ExecutionStrategyName(ExecutionStrategy strategy) {
  switch (strategy) {
    case ExecutionStrategy::kPipelined:
      return "pipelined";
    case ExecutionStrategy::kSharded:
      return "sharded";
    case ExecutionStrategy::kSerialPhased:
      return "serial_phased";
    case ExecutionStrategy::kParallelPhased:
      return "parallel_phased";
  }
  return "pipelined";
}

absl::StatusOr<ExecutionStrategy> ParseExecutionStrategy(absl::string_view name) {
  for (ExecutionStrategy s :
       {ExecutionStrategy::kPipelined, ExecutionStrategy::kSharded,
        ExecutionStrategy::kSerialPhased, ExecutionStrategy::kParallelPhased}) {
    if (ExecutionStrategyName(s) == name) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("execution strategy '", name,
                   "' is not one of pipelined, sharded, serial_phased, parallel_phased"));
}

bool IsPhased(ExecutionStrategy strategy) {
  return strategy == ExecutionStrategy::kSerialPhased ||
         strategy == ExecutionStrategy::kParallelPhased;
}

absl::string_view LivenessName(Liveness liveness) {
  switch (liveness) {
    case Liveness::kAlwaysLive:
      return "always_live";
    case Liveness::kOffChipAfterFwd:
      return "off_chip_after_fwd";
    case Liveness::kOffChipAfterFwdNoOverlap:
      return "off_chip_after_fwd_no_overlap";
    case Liveness::kOffChipAfterEachPhase:
      return "off_chip_after_each_phase";
  }
  return "always_live";
}

absl::StatusOr<Liveness> ParseLiveness(absl::string_view name) {
  for (Liveness l : {Liveness::kAlwaysLive, Liveness::kOffChipAfterFwd,
                     Liveness::kOffChipAfterFwdNoOverlap, Liveness::kOffChipAfterEachPhase}) {
    if (LivenessName(l) == name) return l;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "tensors liveness '", name,
      "' is not one of always_live, off_chip_after_fwd, off_chip_after_fwd_no_overlap, "
      "off_chip_after_each_phase"));
}

absl::StatusOr<ExecutionStrategy> ConfiguredStrategy(const IpuConfig& config, bool for_inference) {
  if (config.execution_strategy.has_value()) {
    return ParseExecutionStrategy(*config.execution_strategy);
  }
  if (for_inference && config.sharded_execution_for_inference) return ExecutionStrategy::kSharded;
  return ExecutionStrategy::kPipelined;
}

absl::StatusOr<Liveness> ConfiguredLiveness(const IpuConfig& config) {
  return ParseLiveness(config.tensors_liveness);
}

bool IsPowerOfTwo(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

int64_t NextPowerOfTwo(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

absl::StatusOr<IpuCount> CheckIpuCount(int64_t ipus_per_replica, int64_t replication_factor,
                                       bool auto_round_num_ipus) {
  const int64_t pod = device::kMaxPodIpus;
  if (ipus_per_replica < 1 || replication_factor < 1 || ipus_per_replica > pod ||
      replication_factor > pod || ipus_per_replica * replication_factor > pod) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the model needs ", ipus_per_replica * replication_factor, " IPUs (",
        Breakdown(ipus_per_replica, replication_factor), "), more than the largest pod (", pod,
        " IPUs): use fewer IPUs per replica or a smaller replication factor"));
  }
  IpuCount count{ipus_per_replica, replication_factor, ipus_per_replica * replication_factor,
                 ipus_per_replica * replication_factor};
  if (IsPowerOfTwo(count.needed)) return count;
  if (!auto_round_num_ipus)
    return NotPowerOfTwo(ipus_per_replica, replication_factor, count.needed);
  count.reserved = NextPowerOfTwo(count.needed);  // <= pod: pod is a power of two
  return count;
}

absl::Status CheckSessionIpus(const IpuCount& count, int64_t session_ipus,
                              absl::string_view session) {
  if (count.reserved == session_ipus ||
      (count.needed <= session_ipus && session_ipus == NextPowerOfTwo(count.needed))) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("the executable needs ", count.needed, " IPUs (reserves ", count.reserved,
                   ") but session ", session, " has ", session_ipus, "; attach with ",
                   count.reserved, " IPUs (ipupod attach --ipus ", count.reserved, ")"));
}

absl::Status CheckPipelineDepth(int64_t num_stages, const ModeConfig& mode,
                                ExecutionStrategy strategy) {
  if (strategy != ExecutionStrategy::kPipelined || num_stages <= 1) return absl::OkStatus();
  if (mode.for_inference && mode.device_iterations < num_stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipelined inference over ", num_stages,
                     " stages needs inference_device_iterations >= ", num_stages, " (it is ",
                     mode.device_iterations, "): set inference_device_iterations=", num_stages,
                     " or more, or use sharded execution: sharded_execution_for_inference=true"));
  }
  const int64_t min_accumulation = 2 * num_stages - 1;
  if (!mode.for_inference && mode.gradient_accumulation_steps < min_accumulation) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipelined training over ", num_stages, " stages needs gradient_accumulation_steps >= ",
        min_accumulation, " (it is ", mode.gradient_accumulation_steps,
        "): set gradient_accumulation_steps=", min_accumulation, " or more"));
  }
  return absl::OkStatus();
}

absl::Status CheckOutputMode(const ModeConfig& mode) {
  if (mode.output_mode.kind != OutputMode::Kind::kEveryN) return absl::OkStatus();
  if (mode.device_iterations % mode.output_mode.every_n == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("output mode every_n:", mode.output_mode.every_n, " needs ",
                   mode.for_inference ? "inference_device_iterations" : "device_iterations", " (",
                   mode.device_iterations, ") to be a multiple of ", mode.output_mode.every_n));
}

}  // namespace ipupod::compiler
