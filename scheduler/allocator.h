// File: scheduler/allocator.h
//
// Block placement over IPU masks: pure functions, no state. A mask has one
// bit per IPU of the pod (bit i = IPU i). A "region" is the aligned block a
// request may draw from: the whole pod for the free pool, or a partition's
// block. Every block returned is aligned (start % size == 0) and inside the
// region.
//
// Policy (docs/scheduling.md):
//   * FindFreeBlock is best fit: among free candidates it prefers the one whose
//     enclosing 2n block has the most IPUs unavailable, so small grants fill
//     fragments first and large blocks stay whole. Ties go to the lowest start.
//   * ReservationFor picks, for a waiter that cannot be granted now, the block
//     it will get first: the eligible block with the fewest IPUs in use, away
//     from earlier reservations when possible. Ties go to the lowest start.
//
// IpuMask is a fixed set of kMaxPodIpus bits with the part of std::bitset's
// interface the scheduler uses, kept in four machine words with every
// operation inline: the queue walk does a few dozen mask operations per
// waiter it considers, and std::bitset's shifts and counts were most of its
// time.
//
// Thread safety: pure functions; an IpuMask is a plain value.
#ifndef IPUPOD_SCHEDULER_ALLOCATOR_H_
#define IPUPOD_SCHEDULER_ALLOCATOR_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "device/device_ids.h"
#include "device/hardware.h"

namespace ipupod::scheduler {

class IpuMask {
 public:
  static constexpr int kWordBits = 64;
  static constexpr int kWords = device::kMaxPodIpus / kWordBits;

  constexpr IpuMask() = default;

  // REQUIRES: 0 <= ipu < kMaxPodIpus.
  bool test(int ipu) const { return (words_[ipu / kWordBits] >> (ipu % kWordBits)) & 1; }
  IpuMask& set(int ipu, bool value = true) {
    const uint64_t bit = uint64_t{1} << (ipu % kWordBits);
    words_[ipu / kWordBits] =
        value ? (words_[ipu / kWordBits] | bit) : (words_[ipu / kWordBits] & ~bit);
    return *this;
  }
  IpuMask& reset(int ipu) { return set(ipu, false); }
  size_t count() const {
    size_t n = 0;
    for (uint64_t w : words_) n += PopCount(w);
    return n;
  }
  bool any() const {
    uint64_t bits = 0;
    for (uint64_t w : words_) bits |= w;
    return bits != 0;
  }
  bool none() const { return !any(); }
  // Bits 64*i .. 64*i+63.
  uint64_t word(int i) const { return words_[i]; }
  void set_word(int i, uint64_t bits) { words_[i] = bits; }

  IpuMask operator~() const {
    IpuMask r;
    for (int i = 0; i < kWords; ++i) r.words_[i] = ~words_[i];
    return r;
  }
  IpuMask& operator&=(const IpuMask& o) {
    for (int i = 0; i < kWords; ++i) words_[i] &= o.words_[i];
    return *this;
  }
  IpuMask& operator|=(const IpuMask& o) {
    for (int i = 0; i < kWords; ++i) words_[i] |= o.words_[i];
    return *this;
  }
  IpuMask& operator^=(const IpuMask& o) {
    for (int i = 0; i < kWords; ++i) words_[i] ^= o.words_[i];
    return *this;
  }
  friend IpuMask operator&(IpuMask a, const IpuMask& b) { return a &= b; }
  friend IpuMask operator|(IpuMask a, const IpuMask& b) { return a |= b; }
  friend IpuMask operator^(IpuMask a, const IpuMask& b) { return a ^= b; }
  friend bool operator==(const IpuMask& a, const IpuMask& b) {
    uint64_t differ = 0;
    for (int i = 0; i < kWords; ++i) differ |= a.words_[i] ^ b.words_[i];
    return differ == 0;
  }

 private:
  // Portable (no popcnt instruction is assumed of the build's target).
  static size_t PopCount(uint64_t x) {
    x = x - ((x >> 1) & 0x5555555555555555ULL);
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
    return static_cast<size_t>((x * 0x0101010101010101ULL) >> 56);
  }

  std::array<uint64_t, kWords> words_{};
};
static_assert(device::kMaxPodIpus % IpuMask::kWordBits == 0);

// Whether `block` is aligned (its size a power of two, its start a multiple
// of it) and lies inside `region`. Every block the functions below return
// satisfies it (checked with IPUPOD_DCHECK, common/check.h, as are their
// REQUIRES on `region` and `size`).
bool IsAlignedIn(const device::Block& block, const device::Block& region);

// The bits of `block`. REQUIRES: block inside 0..kMaxPodIpus.
IpuMask MaskOf(const device::Block& block);
// The set bits as IPU ids, ascending.
std::vector<int> IpusOf(const IpuMask& mask);
// "3", "4-7", "0-3,8" (ranges of consecutive ids); "" for an empty mask.
std::string FormatIpus(const IpuMask& mask);

// An aligned block of `size` IPUs inside `region` whose IPUs are all in
// `usable` and none in `reserved`; nullopt when there is none.
// Best fit: prefer the candidate whose enclosing 2*size block has the most
// IPUs that are not (usable and unreserved); ties to the lowest start.
// REQUIRES: region aligned; size a power of two.
std::optional<device::Block> FindFreeBlock(const IpuMask& usable, const IpuMask& reserved,
                                           const device::Block& region, int size);

// The block a waiter that cannot be granted should reserve: an aligned block
// of `size` inside `region`, all of whose IPUs are in `eligible` (the IPUs the
// request may ever use: its pool minus failed IPUs). Among the candidates that
// do not overlap `reserved` (or, if there are none, among all of them) it
// picks the one with the fewest IPUs in `in_use`; ties to the lowest start.
// nullopt when every candidate holds an ineligible IPU.
std::optional<device::Block> ReservationFor(const IpuMask& eligible, const IpuMask& in_use,
                                            const IpuMask& reserved, const device::Block& region,
                                            int size);

// When each IPU of the pod is expected to be free (PlanContext::free_at).
using FreeTimes = std::array<absl::Time, device::kMaxPodIpus>;

struct Reservation {
  device::Block block;
  absl::Time start;  // when all its IPUs are expected free (InfiniteFuture: not known)
};

// ReservationFor with expected free times: among the candidates that do not
// overlap `reserved` (or, if there are none, among all of them) it picks the
// one expected to be free soonest (the latest `free_at` of its IPUs), then
// the one with the fewest IPUs in `in_use`, then the lowest start. With no
// known times it chooses exactly as ReservationFor.
std::optional<Reservation> SoonestReservation(const IpuMask& eligible, const IpuMask& in_use,
                                              const IpuMask& reserved, const FreeTimes& free_at,
                                              const device::Block& region, int size);

}  // namespace ipupod::scheduler

#endif  // IPUPOD_SCHEDULER_ALLOCATOR_H_
