// File: device/kernels/strided_loop.h
//
// Internal to ipupod_kernels: the one loop nest behind every broadcasting or
// strided kernel (elementwise ops, Where, Expand, Transpose, Slice). N input
// operands are read through arbitrary element strides (0 = broadcast,
// negative = reversed) while the output is written contiguously.
//
// Adjacent dims that are contiguous for every operand are merged first, so a
// same-shape Add is a single flat loop and a bias Add is a short odometer
// over long inner runs.
//
// Thread safety: pure functions over caller-owned memory.
#ifndef IPUPOD_KERNELS_STRIDED_LOOP_H_
#define IPUPOD_KERNELS_STRIDED_LOOP_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "device/kernels/interrupt.h"
#include "device/kernels/view.h"

namespace ipupod::kernels::internal {

// The longest run one body call gets: between two calls the loop is an
// interrupt point.
inline constexpr int64_t kStridedChunk = int64_t{1} << 16;

template <size_t N>
struct StridedPlan {
  std::vector<int64_t> dims;                    // output dims after merging
  std::array<std::vector<int64_t>, N> strides;  // per operand, per merged dim
  std::array<int64_t, N> base{};                // starting element offset per operand
};

// Builds a plan for output `out_dims` with explicit operand strides.
// Size-1 dims are dropped and mergeable neighbours combined.
template <size_t N>
StridedPlan<N> MakeStridedPlan(Dims out_dims, const std::array<std::vector<int64_t>, N>& strides) {
  StridedPlan<N> plan;
  for (size_t d = 0; d < out_dims.size(); ++d) {
    if (out_dims[d] == 1) continue;
    const bool merge = [&] {
      if (plan.dims.empty()) return false;
      for (size_t k = 0; k < N; ++k) {
        // Previous merged dim must step exactly over this whole dim.
        if (plan.strides[k].back() != strides[k][d] * out_dims[d]) return false;
      }
      return true;
    }();
    if (merge) {
      plan.dims.back() *= out_dims[d];
      for (size_t k = 0; k < N; ++k) plan.strides[k].back() = strides[k][d];
    } else {
      plan.dims.push_back(out_dims[d]);
      for (size_t k = 0; k < N; ++k) plan.strides[k].push_back(strides[k][d]);
    }
  }
  return plan;
}

// Strides (in elements) that read an operand of shape `in` broadcast to
// `out`. REQUIRES: BroadcastsTo(in, out).
inline std::vector<int64_t> BroadcastStrides(Dims in, Dims out) {
  std::vector<int64_t> strides(out.size(), 0);
  const size_t offset = out.size() - in.size();
  int64_t s = 1;
  for (size_t i = in.size(); i-- > 0;) {
    strides[i + offset] = in[i] == 1 ? 0 : s;
    s *= in[i];
  }
  return strides;
}

// Calls body(base, step, out_offset, count) once per innermost run (or
// chunk of at most kStridedChunk of one; stops early when interrupted): operand
// k's elements are at base[k] + j * step[k] for j in [0, count), and the
// output elements at out_offset + j.
template <size_t N, typename Body>
void RunStrided(const StridedPlan<N>& plan, Body&& body) {
  const size_t rank = plan.dims.size();
  for (int64_t d : plan.dims) {
    if (d == 0) return;
  }
  if (rank == 0) {
    body(plan.base, std::array<int64_t, N>{}, int64_t{0}, int64_t{1});
    return;
  }
  const int64_t inner = plan.dims[rank - 1];
  std::array<int64_t, N> step;
  for (size_t k = 0; k < N; ++k) step[k] = plan.strides[k][rank - 1];
  std::vector<int64_t> index(rank - 1, 0);
  std::array<int64_t, N> offset = plan.base;
  int64_t out_offset = 0;
  while (true) {
    // Long runs go in chunks, each an interrupt point (device/kernels/interrupt.h).
    for (int64_t j = 0; j < inner; j += kStridedChunk) {
      std::array<int64_t, N> at = offset;
      for (size_t k = 0; k < N; ++k) at[k] += j * step[k];
      const int64_t count = std::min(kStridedChunk, inner - j);
      body(at, step, out_offset + j, count);
      if (InterruptPoint(count)) return;
    }
    out_offset += inner;
    // Odometer over the outer dims, innermost first.
    size_t d = rank - 1;
    while (d-- > 0) {
      for (size_t k = 0; k < N; ++k) offset[k] += plan.strides[k][d];
      if (++index[d] < plan.dims[d]) break;
      for (size_t k = 0; k < N; ++k) offset[k] -= plan.strides[k][d] * plan.dims[d];
      index[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) return;
  }
}

}  // namespace ipupod::kernels::internal

#endif  // IPUPOD_KERNELS_STRIDED_LOOP_H_
