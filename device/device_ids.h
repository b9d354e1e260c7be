// File: device/device_ids.h
//
// Device ids as `gc-info -l` numbers them on a reconfigurable partition: for a
// pod of N IPUs (a power of two) there are 2N-1 ids, level by level. Ids 0..N-1
// are the single IPUs, then the aligned pairs, then quads, ..., and the last id
// is the whole pod. For N = 16: 0-15 singles, 16-23 pairs, 24-27 quads, 28-29
// eights, 30 all sixteen.
//
// A "block" is a power-of-two run of IPUs starting at a multiple of its size.
// Thread safety: pure functions.
#ifndef IPUPOD_DEVICE_DEVICE_IDS_H_
#define IPUPOD_DEVICE_DEVICE_IDS_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"

namespace ipupod::device {

struct Block {
  int start = 0;  // first IPU
  int size = 0;   // number of IPUs, a power of two; start % size == 0
  friend bool operator==(const Block&, const Block&) = default;
  bool Contains(int ipu) const { return ipu >= start && ipu < start + size; }
  bool Overlaps(const Block& o) const { return start < o.start + o.size && o.start < start + size; }
};

bool IsPowerOfTwo(int64_t n);
// Smallest power of two >= n (n >= 1). REQUIRES: n <= 2^30.
int RoundUpToPowerOfTwo(int n);
// Largest power of two <= n (n >= 1).
int RoundDownToPowerOfTwo(int n);

// The gc-info id of `block` in a pod of `pod_size` IPUs.
// REQUIRES: pod_size is a power of two and block is aligned inside it.
int DeviceIdOf(int pod_size, const Block& block);

// The block a device id names; INVALID_ARGUMENT for ids outside 0..2N-2.
absl::StatusOr<Block> BlockOfDeviceId(int pod_size, int device_id);

// The number of ids a pod of pod_size IPUs has (2N-1).
int NumDeviceIds(int pod_size);

}  // namespace ipupod::device

#endif  // IPUPOD_DEVICE_DEVICE_IDS_H_
