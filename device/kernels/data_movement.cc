#include "device/kernels/data_movement.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/kernels/interrupt.h"
#include "device/kernels/shape_util.h"
#include "device/kernels/strided_loop.h"

namespace ipupod::kernels {
namespace {

using internal::MakeStridedPlan;
using internal::RunStrided;
using internal::StridedPlan;

template <typename Word>
void StridedCopyAs(const StridedPlan<1>& plan, const void* in, void* out) {
  const Word* src = static_cast<const Word*>(in);
  Word* dst = static_cast<Word*>(out);
  RunStrided(plan, [&](const auto& base, const auto& step, int64_t o, int64_t n) {
    const Word* s = src + base[0];
    Word* d = dst + o;
    if (step[0] == 1) {
      std::memcpy(d, s, static_cast<size_t>(n) * sizeof(Word));
    } else if (step[0] == 0) {
      std::fill(d, d + n, *s);
    } else {
      for (int64_t i = 0; i < n; ++i) d[i] = s[i * step[0]];
    }
  });
}

// Copies through `plan` treating elements as opaque words of elem_size bytes.
absl::Status StridedCopy(const StridedPlan<1>& plan, size_t elem_size, const void* in, void* out) {
  switch (elem_size) {
    case 1:
      StridedCopyAs<uint8_t>(plan, in, out);
      return absl::OkStatus();
    case 2:
      StridedCopyAs<uint16_t>(plan, in, out);
      return absl::OkStatus();
    case 4:
      StridedCopyAs<uint32_t>(plan, in, out);
      return absl::OkStatus();
    case 8:
      StridedCopyAs<uint64_t>(plan, in, out);
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("element size ", elem_size, " is not 1, 2, 4 or 8"));
  }
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> TransposedShape(Dims in, absl::Span<const int64_t> perm) {
  const size_t rank = in.size();
  std::vector<bool> seen(rank, false);
  std::vector<int64_t> out;
  if (perm.size() != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("perm has ", perm.size(), " entries for a rank-", rank, " tensor"));
  }
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(rank) || seen[p]) {
      return absl::InvalidArgumentError(
          absl::StrCat("perm ", ShapeString(perm), " is not a permutation of [0, ", rank, ")"));
    }
    seen[p] = true;
    out.push_back(in[p]);
  }
  return out;
}

absl::Status Transpose(const void* in, Dims in_shape, absl::Span<const int64_t> perm,
                       size_t elem_size, void* out) {
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> out_shape, TransposedShape(in_shape, perm));
  const std::vector<int64_t> in_strides = RowMajorStrides(in_shape);
  std::vector<int64_t> strides;
  for (int64_t p : perm) strides.push_back(in_strides[p]);
  return StridedCopy(MakeStridedPlan<1>(out_shape, {strides}), elem_size, in, out);
}

absl::Status Expand(const void* in, Dims in_shape, Dims out_shape, size_t elem_size, void* out) {
  if (!BroadcastsTo(in_shape, out_shape)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape ", ShapeString(in_shape), " does not broadcast to ", ShapeString(out_shape)));
  }
  return StridedCopy(
      MakeStridedPlan<1>(out_shape, {internal::BroadcastStrides(in_shape, out_shape)}), elem_size,
      in, out);
}

absl::StatusOr<SliceAxis> ResolveSliceAxis(int64_t start, int64_t end, int64_t step, int64_t dim) {
  if (step == 0) return absl::InvalidArgumentError("slice step is 0");
  SliceAxis axis;
  axis.step = step;
  if (dim == 0) return axis;
  // ONNX: negative bounds count from the end; then start clamps to [0, dim]
  // (forward) or [0, dim-1] (backward) and end to [0, dim] or [-1, dim-1].
  // max() first keeps INT64_MIN sentinels from overflowing.
  if (start < 0) start = std::max<int64_t>(start, -dim - 1) + dim;
  if (end < 0) end = std::max<int64_t>(end, -dim - 1) + dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    axis.count = end > start ? (end - start - 1) / step + 1 : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    const int64_t magnitude = step == INT64_MIN ? INT64_MAX : -step;
    axis.count = start > end ? (start - end - 1) / magnitude + 1 : 0;
  }
  axis.start = axis.count > 0 ? start : 0;
  return axis;
}

absl::Status Slice(const void* in, Dims in_shape, absl::Span<const SliceAxis> axes,
                   size_t elem_size, void* out) {
  if (axes.size() != in_shape.size()) {
    return absl::InvalidArgumentError("slice needs one SliceAxis per input dim");
  }
  const std::vector<int64_t> in_strides = RowMajorStrides(in_shape);
  StridedPlan<1> plan;
  std::vector<int64_t> out_shape;
  std::vector<int64_t> strides;
  int64_t base = 0;
  for (size_t d = 0; d < axes.size(); ++d) {
    const SliceAxis& a = axes[d];
    const int64_t last = a.start + (a.count - 1) * a.step;
    if (a.count < 0 || (a.count > 0 && (a.start < 0 || a.start >= in_shape[d] || last < 0 ||
                                        last >= in_shape[d]))) {
      return absl::InvalidArgumentError(
          absl::StrCat("slice of axis ", d, " leaves [0, ", in_shape[d], ")"));
    }
    out_shape.push_back(a.count);
    strides.push_back(a.count > 1 ? in_strides[d] * a.step : 0);
    base += a.count > 0 ? a.start * in_strides[d] : 0;
  }
  plan = MakeStridedPlan<1>(out_shape, {strides});
  plan.base[0] = base;
  return StridedCopy(plan, elem_size, in, out);
}

absl::Status CopyIntoRegion(const void* in, Dims in_shape, absl::Span<const int64_t> pad_begin,
                            Dims out_shape, size_t elem_size, void* out) {
  const size_t rank = in_shape.size();
  bool fits = out_shape.size() == rank && pad_begin.size() == rank;
  for (size_t d = 0; fits && d < rank; ++d) {
    fits = pad_begin[d] >= 0 && in_shape[d] + pad_begin[d] <= out_shape[d];
  }
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat("a ", ShapeString(in_shape),
                                                   " region does not fit in ",
                                                   ShapeString(out_shape), " at its offset"));
  }
  IPUPOD_ASSIGN_OR_RETURN(const int64_t elements, NumElements(in_shape));
  if (elements == 0) return absl::OkStatus();
  const std::vector<int64_t> out_strides = RowMajorStrides(out_shape);
  const int64_t row = rank == 0 ? 1 : in_shape[rank - 1];
  const int64_t rows = elements / row;
  std::vector<int64_t> index(rank == 0 ? 0 : rank - 1, 0);  // over all axes but the last
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  for (int64_t r = 0; r < rows; ++r) {
    if (InterruptPoint(row)) break;  // the output is discarded (device/kernels/interrupt.h)
    int64_t offset = rank == 0 ? 0 : pad_begin[rank - 1];
    for (size_t d = 0; d < index.size(); ++d) offset += (index[d] + pad_begin[d]) * out_strides[d];
    std::memcpy(dst + offset * elem_size, src + r * row * elem_size, row * elem_size);
    for (size_t d = index.size(); d-- > 0;) {  // odometer
      if (++index[d] < in_shape[d]) break;
      index[d] = 0;
    }
  }
  return absl::OkStatus();
}

absl::Status Concat(absl::Span<const void* const> inputs, absl::Span<const Dims> shapes,
                    int64_t axis, size_t elem_size, void* out) {
  if (inputs.empty() || inputs.size() != shapes.size()) {
    return absl::InvalidArgumentError("concat needs one shape per input and at least one input");
  }
  const Dims first = shapes[0];
  if (axis < 0 || axis >= static_cast<int64_t>(first.size())) {
    return absl::InvalidArgumentError(absl::StrCat("concat axis ", axis, " out of range"));
  }
  for (Dims s : shapes) {
    bool ok = s.size() == first.size();
    for (size_t d = 0; ok && d < s.size(); ++d) ok = d == size_t(axis) || s[d] == first[d];
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("concat inputs ", ShapeString(first), " and ",
                                                     ShapeString(s), " differ off axis ", axis));
    }
  }
  const int64_t outer = NumElementsUnchecked(first.subspan(0, axis));
  const int64_t inner = NumElementsUnchecked(first.subspan(axis + 1)) * elem_size;
  char* dst = static_cast<char*>(out);
  for (int64_t o = 0; o < outer; ++o) {
    if (InterruptPoint(static_cast<int64_t>(inputs.size()) + inner)) break;  // discarded
    for (size_t k = 0; k < inputs.size(); ++k) {
      const size_t chunk = static_cast<size_t>(shapes[k][axis] * inner);
      std::memcpy(dst, static_cast<const char*>(inputs[k]) + o * chunk, chunk);
      dst += chunk;
    }
  }
  return absl::OkStatus();
}

template <typename Index>
absl::Status Gather(const void* data, Dims data_shape, int64_t axis, View<Index> indices,
                    size_t elem_size, void* out) {
  IPUPOD_ASSIGN_OR_RETURN(axis, NormalizeAxis(axis, static_cast<int64_t>(data_shape.size())));
  const int64_t dim = data_shape[axis];
  const int64_t count = NumElementsUnchecked(indices.shape);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t idx = indices.data[i];
    if (idx < -dim || idx >= dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("gather index ", idx, " is out of range for axis ", axis, " of size ", dim));
    }
  }
  const int64_t outer = NumElementsUnchecked(data_shape.subspan(0, axis));
  const size_t inner = NumElementsUnchecked(data_shape.subspan(axis + 1)) * elem_size;
  const char* src = static_cast<const char*>(data);
  char* dst = static_cast<char*>(out);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < count; ++i) {
      if (InterruptPoint(static_cast<int64_t>(inner))) return absl::OkStatus();  // discarded
      const int64_t idx = indices.data[i] < 0 ? indices.data[i] + dim : indices.data[i];
      std::memcpy(dst, src + (o * dim + idx) * inner, inner);
      dst += inner;
    }
  }
  return absl::OkStatus();
}

template absl::Status Gather<int64_t>(const void*, Dims, int64_t, View<int64_t>, size_t, void*);
template absl::Status Gather<int32_t>(const void*, Dims, int64_t, View<int32_t>, size_t, void*);

absl::Status ScatterND(const void* data, Dims data_shape, View<int64_t> indices,
                       const void* updates, size_t elem_size, void* out) {
  const size_t rank = data_shape.size();
  if (indices.shape.empty() || indices.shape.back() < 1 ||
      static_cast<size_t>(indices.shape.back()) > rank) {
    return absl::InvalidArgumentError(absl::StrCat("ScatterND indices ", ShapeString(indices.shape),
                                                   " must end in a dim of 1 to ", rank));
  }
  const size_t k = static_cast<size_t>(indices.shape.back());
  IPUPOD_ASSIGN_OR_RETURN(const int64_t total, NumElements(data_shape));
  IPUPOD_ASSIGN_OR_RETURN(const int64_t index_values, NumElements(indices.shape));
  const std::vector<int64_t> strides = RowMajorStrides(data_shape);
  const int64_t slice = k == rank ? 1 : strides[k - 1];
  const int64_t tuples = index_values / static_cast<int64_t>(k);
  std::vector<int64_t> offsets(static_cast<size_t>(tuples));
  for (int64_t t = 0; t < tuples; ++t) {  // check every index before writing anything
    int64_t offset = 0;
    for (size_t d = 0; d < k; ++d) {
      int64_t i = indices.data[t * static_cast<int64_t>(k) + static_cast<int64_t>(d)];
      if (i < 0) i += data_shape[d];
      if (i < 0 || i >= data_shape[d]) {
        return absl::InvalidArgumentError(absl::StrCat("ScatterND index ", i, " is outside dim ", d,
                                                       " of ", ShapeString(data_shape)));
      }
      offset += i * strides[d];
    }
    offsets[static_cast<size_t>(t)] = offset;
  }
  std::memcpy(out, data, static_cast<size_t>(total) * elem_size);
  for (int64_t t = 0; t < tuples; ++t) {
    std::memcpy(static_cast<char*>(out) + offsets[static_cast<size_t>(t)] * elem_size,
                static_cast<const char*>(updates) + t * slice * elem_size,
                static_cast<size_t>(slice) * elem_size);
  }
  return absl::OkStatus();
}

}  // namespace ipupod::kernels
