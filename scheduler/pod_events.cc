#include "scheduler/pod_events.h"

namespace ipupod::scheduler {

absl::string_view FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kIpuReset:
      return "ipu-reset";
    case FaultKind::kLinkReset:
      return "link-reset";
    case FaultKind::kPartitionReset:
      return "partition-reset";
    case FaultKind::kFullReset:
      return "full-reset";
    case FaultKind::kUnrecoverable:
      return "unrecoverable";
  }
  return "unknown";
}

}  // namespace ipupod::scheduler
