#include "scheduler/allocator.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace ipupod::scheduler {
namespace {

using device::Block;

// The aligned block of twice the size that holds `block`, or the block itself
// when it is already the whole region (nothing encloses it there).
Block EnclosingBlock(const Block& block, const Block& region) {
  if (block.size >= region.size) return block;
  const int size = block.size * 2;
  return Block{block.start - block.start % size, size};
}

bool AllIn(const IpuMask& mask, const IpuMask& block) { return (block & ~mask).none(); }

}  // namespace

IpuMask MaskOf(const Block& block) {
  IpuMask mask;
  for (int i = block.start; i < block.start + block.size && i < device::kMaxPodIpus; ++i) {
    mask.set(i);
  }
  return mask;
}

std::vector<int> IpusOf(const IpuMask& mask) {
  std::vector<int> ipus;
  for (int i = 0; i < device::kMaxPodIpus; ++i) {
    if (mask.test(i)) ipus.push_back(i);
  }
  return ipus;
}

std::string FormatIpus(const IpuMask& mask) {
  std::string out;
  for (int i = 0; i < device::kMaxPodIpus; ++i) {
    if (!mask.test(i)) continue;
    int last = i;
    while (last + 1 < device::kMaxPodIpus && mask.test(last + 1)) ++last;
    absl::StrAppend(&out, out.empty() ? "" : ",", i);
    if (last > i) absl::StrAppend(&out, "-", last);
    i = last;
  }
  return out;
}

std::optional<Block> FindFreeBlock(const IpuMask& usable, const IpuMask& reserved,
                                   const Block& region, int size) {
  if (size < 1 || size > region.size) return std::nullopt;
  const IpuMask available = usable & ~reserved;
  std::optional<Block> best;
  size_t best_score = 0;
  for (int start = region.start; start < region.start + region.size; start += size) {
    const Block candidate{start, size};
    if (!AllIn(available, MaskOf(candidate))) continue;
    const size_t score = (MaskOf(EnclosingBlock(candidate, region)) & ~available).count();
    if (!best || score > best_score) {
      best = candidate;
      best_score = score;
    }
  }
  return best;
}

std::optional<Reservation> SoonestReservation(const IpuMask& eligible, const IpuMask& in_use,
                                              const IpuMask& reserved, const FreeTimes& free_at,
                                              const Block& region, int size) {
  if (size < 1 || size > region.size) return std::nullopt;
  std::optional<Reservation> best;
  bool best_overlaps = true;
  size_t best_used = std::numeric_limits<size_t>::max();
  for (int start = region.start; start < region.start + region.size; start += size) {
    const Block candidate{start, size};
    const IpuMask bits = MaskOf(candidate);
    if (!AllIn(eligible, bits)) continue;
    absl::Time free = absl::InfinitePast();
    for (int i = start; i < start + size; ++i) free = std::max(free, free_at[i]);
    const bool overlaps = (bits & reserved).any();
    const size_t used = (bits & in_use).count();
    // Free of earlier reservations first, then soonest free, then fewest in
    // use, then lowest start.
    const bool better = !best || (best_overlaps && !overlaps) ||
                        (overlaps == best_overlaps &&
                         (free < best->start || (free == best->start && used < best_used)));
    if (better) {
      best = Reservation{candidate, free};
      best_overlaps = overlaps;
      best_used = used;
    }
  }
  return best;
}

std::optional<Block> ReservationFor(const IpuMask& eligible, const IpuMask& in_use,
                                    const IpuMask& reserved, const Block& region, int size) {
  FreeTimes unknown;
  unknown.fill(absl::InfiniteFuture());  // no times: fewest in use decides
  std::optional<Reservation> r =
      SoonestReservation(eligible, in_use, reserved, unknown, region, size);
  if (!r) return std::nullopt;
  return r->block;
}

}  // namespace ipupod::scheduler
