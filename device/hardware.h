// File: device/hardware.h
//
// The one place that states what a simulated IPU is. Every memory check and
// every simulated-time estimate in ipupod reads these figures; nothing else
// may hard-code a hardware number. Values: Graphcore GC200 (Mk2, "ipu2"), see
// ../shared/reference/ipu-stack.md section 2.
#ifndef IPUPOD_DEVICE_HARDWARE_H_
#define IPUPOD_DEVICE_HARDWARE_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace ipupod::device {

struct IpuSpec {
  absl::string_view name;
  absl::string_view arch;
  uint32_t tiles;
  uint32_t threads_per_tile;
  uint64_t memory_bytes;  // in-processor SRAM
  double fp16_flops;      // peak, FLOP/s
  double fp32_flops;      // peak, FLOP/s
  uint32_t clock_mhz;
  uint32_t ipu_links;
  double ipu_link_bytes_per_s;   // per link
  double host_link_bytes_per_s;  // PCIe Gen4 x16
};

// GC200: 1472 tiles, 900 MB (decimal, as Graphcore states it), 250 TFLOPS
// FP16.16, 62.5 TFLOPS FP32, 1330 MHz (M2000), 10 IPU-Links of 32 GB/s
// (320 GB/s in all), 64 GB/s host link.
inline constexpr IpuSpec kGc200{
    .name = "GC200",
    .arch = "ipu2",
    .tiles = 1472,
    .threads_per_tile = 6,
    .memory_bytes = 900'000'000ULL,
    .fp16_flops = 250e12,
    .fp32_flops = 62.5e12,
    .clock_mhz = 1330,
    .ipu_links = 10,
    .ipu_link_bytes_per_s = 32e9,
    .host_link_bytes_per_s = 64e9,
};

static_assert(kGc200.fp16_flops == 4 * kGc200.fp32_flops, "GC200 FP16 is 4x FP32");
static_assert(kGc200.ipu_links * kGc200.ipu_link_bytes_per_s == 320e9, "320 GB/s of IPU-Links");

// Largest pod the server models (4 POD64 IPU-Link domains).
inline constexpr int kMaxPodIpus = 256;

}  // namespace ipupod::device

#endif  // IPUPOD_DEVICE_HARDWARE_H_
