// File: device/pod_config.h
//
// Which pod the server simulates: a preset name (POD4, POD16, POD64) or any
// power-of-two IPU count from 1 to kMaxPodIpus. Every IPU is a GC200.
#ifndef IPUPOD_DEVICE_POD_CONFIG_H_
#define IPUPOD_DEVICE_POD_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/hardware.h"

namespace ipupod::device {

struct PodConfig {
  std::string name = "POD16";
  int num_ipus = 16;
  const IpuSpec* ipu = &kGc200;
};

// "POD4" / "POD16" / "POD64" (case-insensitive), or "POD<n>" for any
// power-of-two n up to 256. INVALID_ARGUMENT naming the valid choices.
absl::StatusOr<PodConfig> PodFromName(absl::string_view name);
// A pod of `num_ipus` IPUs, named "POD<n>". INVALID_ARGUMENT unless a power
// of two in 1..256 (the message names the nearest valid sizes).
absl::StatusOr<PodConfig> PodFromSize(int64_t num_ipus);

}  // namespace ipupod::device

#endif  // IPUPOD_DEVICE_POD_CONFIG_H_
