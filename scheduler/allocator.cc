#include "scheduler/allocator.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace ipupod::scheduler {
namespace {

using device::Block;

constexpr int kWordBits = IpuMask::kWordBits;
constexpr int kWords = IpuMask::kWords;
constexpr uint64_t kAllOnes = ~uint64_t{0};

// Calls f(ipu) for every set bit of `mask`, ascending.
template <typename F>
void ForEachIpu(const IpuMask& mask, F f) {
  for (int w = 0; w < kWords; ++w) {
    for (uint64_t bits = mask.word(w); bits != 0; bits &= bits - 1) {
      f(w * kWordBits + std::countr_zero(bits));
    }
  }
}

// The bits of one word at multiples of `size` (<= 64): where aligned blocks start.
uint64_t AlignedStartsInWord(int size) {
  uint64_t starts = 0;
  for (int i = 0; i < kWordBits; i += size) starts |= uint64_t{1} << i;
  return starts;
}

// Bit i set: the aligned block of `size` at i lies inside `region` and
// entirely in `mask`. A block of at most a word never crosses one, so each
// word is folded on its own (bit i becomes "bits i..i+2w-1 all set" at each
// doubling); larger blocks are whole words.
// REQUIRES: size a power of two, at most kMaxPodIpus.
IpuMask WholeBlockStarts(const IpuMask& mask, const Block& region, int size) {
  const IpuMask in = mask & MaskOf(region);
  IpuMask starts;
  if (size <= kWordBits) {
    const uint64_t aligned = AlignedStartsInWord(size);
    for (int w = 0; w < kWords; ++w) {
      uint64_t bits = in.word(w);
      for (int width = 1; width < size && bits != 0; width *= 2) bits &= bits >> width;
      starts.set_word(w, bits & aligned);
    }
    return starts;
  }
  const int words = size / kWordBits;
  for (int w = 0; w < kWords; w += words) {
    bool whole = true;
    for (int k = 0; k < words; ++k) whole = whole && in.word(w + k) == kAllOnes;
    if (whole) starts.set(w * kWordBits);
  }
  return starts;
}

// The REQUIRES of FindFreeBlock and SoonestReservation, past their early
// return for a size that cannot fit.
void DcheckRequest(const Block& region, int size) {
  IPUPOD_DCHECK(IsAlignedIn(region, Block{0, device::kMaxPodIpus}))
      << "region " << region.start << "+" << region.size << " is not an aligned block of the pod";
  IPUPOD_DCHECK(device::IsPowerOfTwo(size)) << "block size " << size;
}

void DcheckResult(const Block& block, const Block& region) {
  IPUPOD_DCHECK(IsAlignedIn(block, region))
      << "placed block " << block.start << "+" << block.size << " outside its region "
      << region.start << "+" << region.size << " or misaligned";
}

}  // namespace

bool IsAlignedIn(const Block& block, const Block& region) {
  return block.size >= 1 && device::IsPowerOfTwo(block.size) && block.start >= 0 &&
         block.start % block.size == 0 && block.start >= region.start &&
         block.start + block.size <= region.start + region.size;
}

IpuMask MaskOf(const Block& block) {
  IpuMask mask;
  const int end = std::min(block.start + block.size, device::kMaxPodIpus);
  for (int w = 0; w < kWords; ++w) {
    const int lo = std::max(block.start, w * kWordBits);
    const int hi = std::min(end, (w + 1) * kWordBits);
    if (lo >= hi) continue;
    const uint64_t bits = hi - lo == kWordBits ? kAllOnes : (uint64_t{1} << (hi - lo)) - 1;
    mask.set_word(w, bits << (lo - w * kWordBits));
  }
  return mask;
}

std::vector<int> IpusOf(const IpuMask& mask) {
  std::vector<int> ipus;
  ForEachIpu(mask, [&](int i) { ipus.push_back(i); });
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
  DcheckRequest(region, size);
  const IpuMask available = usable & ~reserved;
  std::optional<Block> best;
  size_t best_score = 0;
  // A candidate is whole, so the unavailable IPUs of its enclosing block of
  // twice the size are those of the other half (none when the candidate is
  // the whole region: nothing encloses it there).
  ForEachIpu(WholeBlockStarts(available, region, size), [&](int start) {
    size_t score = 0;
    if (size < region.size) {
      const int other = start ^ size;
      score = size - (available & MaskOf(Block{other, size})).count();
    }
    if (!best || score > best_score) {
      best = Block{start, size};
      best_score = score;
    }
  });
  if (best) DcheckResult(*best, region);
  return best;
}

std::optional<Reservation> SoonestReservation(const IpuMask& eligible, const IpuMask& in_use,
                                              const IpuMask& reserved, const FreeTimes& free_at,
                                              const Block& region, int size) {
  if (size < 1 || size > region.size) return std::nullopt;
  DcheckRequest(region, size);
  std::optional<Reservation> best;
  bool best_overlaps = true;
  size_t best_used = std::numeric_limits<size_t>::max();
  ForEachIpu(WholeBlockStarts(eligible, region, size), [&](int start) {
    const IpuMask bits = MaskOf(Block{start, size});
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
      best = Reservation{Block{start, size}, free};
      best_overlaps = overlaps;
      best_used = used;
    }
  });
  if (best) DcheckResult(best->block, region);
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
