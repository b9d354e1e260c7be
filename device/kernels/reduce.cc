#include "device/kernels/reduce.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/kernels/data_movement.h"
#include "device/kernels/interrupt.h"
#include "device/kernels/shape_util.h"

namespace ipupod::kernels {
namespace {

// One contiguous row (the LayerNorm-style last-axis case). Four partial
// sums keep the adds pipelined.
double ReduceRow(ReduceOp op, const float* row, int64_t n) {
  if (op == ReduceOp::kMax) {
    float m = -std::numeric_limits<float>::infinity();
    ForEachChunk(n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) m = std::max(m, row[i]);
    });
    return m;
  }
  double s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  // The same sums in the same order, in blocks that are interrupt points.
  const int64_t whole = n - n % 4;
  while (i < whole) {
    const int64_t block_end = std::min(whole, i + kInterruptPollWork);
    for (; i < block_end; i += 4) {
      for (int k = 0; k < 4; ++k) s[k] += row[i + k];
    }
    if (InterruptPoint(kInterruptPollWork)) return 0;
  }
  for (; i < n; ++i) s[0] += row[i];
  const double sum = (s[0] + s[1]) + (s[2] + s[3]);
  return op == ReduceOp::kMean ? sum / static_cast<double>(n) : sum;
}

// The reduction after the reduced axes are one contiguous block:
// in[outer][n][inner] -> out[outer][inner].
void ReduceBlock(ReduceOp op, const float* in, int64_t outer, int64_t n, int64_t inner,
                 float* out) {
  if (inner == 1) {
    ForEachChunk(outer, n, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        out[o] = static_cast<float>(ReduceRow(op, in + o * n, n));
      }
    });
    return;
  }
  std::vector<double> acc(static_cast<size_t>(inner));
  const double init = op == ReduceOp::kMax ? -std::numeric_limits<double>::infinity() : 0.0;
  for (int64_t o = 0; o < outer; ++o) {
    std::fill(acc.begin(), acc.end(), init);
    const float* block = in + o * n * inner;
    for (int64_t r = 0; r < n; ++r) {
      if (InterruptPoint(inner)) return;
      const float* row = block + r * inner;
      if (op == ReduceOp::kMax) {
        for (int64_t i = 0; i < inner; ++i) acc[i] = std::max<double>(acc[i], row[i]);
      } else {
        for (int64_t i = 0; i < inner; ++i) acc[i] += row[i];
      }
    }
    const double scale = op == ReduceOp::kMean ? 1.0 / static_cast<double>(n) : 1.0;
    for (int64_t i = 0; i < inner; ++i) {
      out[o * inner + i] = static_cast<float>(op == ReduceOp::kMean ? acc[i] * scale : acc[i]);
    }
  }
}

bool IsContiguousRun(absl::Span<const int64_t> axes) {
  for (size_t i = 1; i < axes.size(); ++i) {
    if (axes[i] != axes[i - 1] + 1) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> NormalizeReduceAxes(absl::Span<const int64_t> axes,
                                                         int64_t rank) {
  std::vector<int64_t> out;
  if (axes.empty()) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t a : axes) {
    IPUPOD_ASSIGN_OR_RETURN(int64_t n, NormalizeAxis(a, rank));
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) {
    return absl::InvalidArgumentError("reduction axes repeat an axis");
  }
  return out;
}

std::vector<int64_t> ReducedShape(Dims in, absl::Span<const int64_t> axes, bool keepdims) {
  // A mask, not a search per dim: linear in the rank (a search per dim once
  // made a rank-300,000 ReduceSum infer for seconds; issue 29).
  std::vector<bool> reduced_dims(in.size(), false);
  for (int64_t a : axes) {
    if (a >= 0 && static_cast<size_t>(a) < in.size()) reduced_dims[static_cast<size_t>(a)] = true;
  }
  std::vector<int64_t> out;
  for (size_t d = 0; d < in.size(); ++d) {
    const bool reduced = reduced_dims[d];
    if (!reduced) {
      out.push_back(in[d]);
    } else if (keepdims) {
      out.push_back(1);
    }
  }
  return out;
}

absl::Status Reduce(ReduceOp op, View<float> in, absl::Span<const int64_t> axes,
                    MutableView<float> out) {
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> ax, NormalizeReduceAxes(axes, rank));
  const std::vector<int64_t> kept = ReducedShape(in.shape, ax, /*keepdims=*/false);
  if (NumElementsUnchecked(out.shape) != NumElementsUnchecked(kept)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reduction output shape ", ShapeString(out.shape), " does not hold ", ShapeString(kept)));
  }
  if (ax.empty()) {  // rank-0 input: the reduction is the element itself
    std::copy(in.data, in.data + NumElementsUnchecked(in.shape), out.data);
    return absl::OkStatus();
  }
  if (IsContiguousRun(ax)) {
    const int64_t outer = NumElementsUnchecked(in.shape.subspan(0, ax.front()));
    const int64_t n = NumElementsUnchecked(in.shape.subspan(ax.front(), ax.size()));
    const int64_t inner = NumElementsUnchecked(in.shape.subspan(ax.back() + 1));
    ReduceBlock(op, in.data, outer, n, inner, out.data);
    return absl::OkStatus();
  }
  // Scattered axes: move them last, then reduce one trailing block.
  std::vector<int64_t> perm;
  std::vector<int64_t> moved;
  for (int64_t d = 0; d < rank; ++d) {
    if (!std::binary_search(ax.begin(), ax.end(), d)) perm.push_back(d);
  }
  perm.insert(perm.end(), ax.begin(), ax.end());
  for (int64_t p : perm) moved.push_back(in.shape[p]);
  std::vector<float> tmp(static_cast<size_t>(NumElementsUnchecked(in.shape)));
  IPUPOD_RETURN_IF_ERROR(Transpose(in.data, in.shape, perm, sizeof(float), tmp.data()));
  const int64_t n = NumElementsUnchecked(absl::MakeConstSpan(moved).subspan(rank - ax.size()));
  ReduceBlock(op, tmp.data(), NumElementsUnchecked(kept), n, 1, out.data);
  return absl::OkStatus();
}

}  // namespace ipupod::kernels
