#include "device/device_ids.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace ipupod::device {
namespace {

int Log2(int power_of_two) {
  int level = 0;
  while ((1 << level) < power_of_two) ++level;
  return level;
}

// The first id of the level whose blocks have 2^level IPUs: N + N/2 + ... .
int LevelBase(int pod_size, int level) {
  int base = 0;
  for (int l = 0; l < level; ++l) base += pod_size >> l;
  return base;
}

}  // namespace

bool IsPowerOfTwo(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

int RoundUpToPowerOfTwo(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

int RoundDownToPowerOfTwo(int n) {
  int p = 1;
  while (p <= n / 2) p <<= 1;
  return p;
}

int DeviceIdOf(int pod_size, const Block& block) {
  return LevelBase(pod_size, Log2(block.size)) + block.start / block.size;
}

absl::StatusOr<Block> BlockOfDeviceId(int pod_size, int device_id) {
  if (!IsPowerOfTwo(pod_size)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pod size %d is not a power of two", pod_size));
  }
  if (device_id < 0 || device_id >= NumDeviceIds(pod_size)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("device id %d does not exist; a pod of %d IPUs has ids 0 to %d", device_id,
                        pod_size, NumDeviceIds(pod_size) - 1));
  }
  int base = 0;
  for (int size = 1;; size <<= 1) {
    const int count = pod_size / size;
    if (device_id < base + count) return Block{(device_id - base) * size, size};
    base += count;
  }
}

int NumDeviceIds(int pod_size) { return 2 * pod_size - 1; }

}  // namespace ipupod::device
