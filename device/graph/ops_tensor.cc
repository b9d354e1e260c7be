// Shape and data-movement ops: Identity, Dropout, Cast, Shape, Reshape,
// Flatten, Transpose, Squeeze, Unsqueeze, Concat, Split, Slice, Gather,
// Expand, Constant, ConstantOfShape, Range, NonZero (constant input only). These are what
// torch.onnx emits around attention reshapes; with static shapes most fold to constants.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "device/graph/op_common.h"
#include "device/graph/ops.h"
#include "device/graph/run_context.h"
#include "device/kernels/data_movement.h"
#include "device/kernels/interrupt.h"
#include "device/kernels/shape_util.h"

namespace ipupod::graph {
namespace {

using kernels::ShapeString;

absl::StatusOr<std::vector<TensorType>> WithShape(const OpContext& c, Shape shape) {
  return std::vector<TensorType>{{c.dtype(0), std::move(shape)}};
}

// ---- Identity, Dropout ----

// Dropout's mode: from opset 12 the constant inputs ratio (default 0.5)
// and training_mode (default false) say it; before, the attribute ratio
// (default 0.5) and the run: it drops in training passes only
// (RunContext::training), the identity in inference, as ONNX runtimes do.
// Ratio 0 is the identity in either mode (Swin's attention exports
// F.dropout(p=0.0) in training mode).
struct DropoutMode {
  float ratio = 0.5f;
  std::optional<bool> training;  // unset: the run decides (before opset 12)
};

absl::StatusOr<DropoutMode> DropoutModeOf(const OpContext& c) {
  DropoutMode m;
  if (c.opset >= 12) {
    if (c.has(1)) {
      IPUPOD_ASSIGN_OR_RETURN(m.ratio, c.ConstantScalar(1, "ratio"));
    }
    m.training = false;
    if (c.has(2)) {
      IPUPOD_ASSIGN_OR_RETURN(const Tensor* mode, c.Constant(2, "training_mode"));
      if (mode->num_elements() != 1)
        return absl::InvalidArgumentError("input 2 (training_mode) must hold one element");
      m.training = mode->IntAt(0) != 0;
    }
  } else {
    if (c.has(1) || c.has(2))
      return absl::InvalidArgumentError("before opset 12, Dropout takes one input");
    IPUPOD_ASSIGN_OR_RETURN(m.ratio, c.Float("ratio", 0.5f));
  }
  if (!(m.ratio >= 0.0f && m.ratio <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ratio ", m.ratio, " is outside [0, 1]; give a drop probability"));
  }
  return m;
}

absl::StatusOr<std::vector<TensorType>> InferDropout(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(DropoutMode m, DropoutModeOf(c));
  if (m.ratio > 0.0f && m.training.value_or(true)) {
    IPUPOD_RETURN_IF_ERROR(
        RequireDType("training-mode Dropout's data", c.dtype(0), {DType::kFloat32}));
  }
  std::vector<TensorType> out = {c.type(0)};
  // The mask is bool from opset 10; before that it has the data's type.
  if (c.node.outputs.size() > 1)
    out.push_back({c.opset >= 10 ? DType::kBool : c.dtype(0), c.shape(0)});
  return out;
}

absl::Status FillMask(Tensor& t, const std::vector<uint8_t>* keep) {
  return VisitDType(t.dtype(), [&](auto tag) -> absl::Status {
    using T = decltype(tag);
    T* out = t.mutable_data<T>();
    for (int64_t i = 0; i < t.num_elements(); ++i)
      out[i] = static_cast<T>(keep == nullptr || (*keep)[i] != 0 ? 1 : 0);
    return absl::OkStatus();
  });
}

int64_t DropoutFlops(const OpContext& c, absl::Span<const TensorType> out) {
  auto m = DropoutModeOf(c);
  if (!m.ok() || m->ratio == 0.0f || !m->training.value_or(true)) return 0;
  return 2 * NumElementsOf(out[0]);  // a compare and a multiply per element
}

absl::Status RunDropout(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(DropoutPlan plan, DropoutPlanOf(c));
  if (!plan.drops) {
    IPUPOD_RETURN_IF_ERROR(RunCopy(c, out));
    if (out.size() > 1) IPUPOD_RETURN_IF_ERROR(FillMask(out[1], nullptr));
    return absl::OkStatus();
  }
  const Tensor& in = *c.values[0];
  IPUPOD_ASSIGN_OR_RETURN(std::vector<uint8_t> keep, DropoutKeepMask(c, plan, in.num_elements()));
  const float* x = in.data<float>();
  float* y = out[0].mutable_data<float>();
  for (int64_t i = 0; i < in.num_elements(); ++i) y[i] = keep[i] != 0 ? x[i] * plan.scale : 0.0f;
  if (out.size() > 1) IPUPOD_RETURN_IF_ERROR(FillMask(out[1], &keep));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DropoutPlan> DropoutPlanOf(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(DropoutMode m, DropoutModeOf(c));
  const RunContext* run = CurrentRunContext();
  const bool training = m.training.has_value() ? *m.training : run != nullptr && run->training;
  DropoutPlan plan;
  plan.drops = training && m.ratio > 0.0f;
  plan.ratio = m.ratio;
  // torch: x * (1 / (1 - p)) with the factor rounded to float; p = 1 zeroes.
  plan.scale =
      m.ratio < 1.0f ? 1.0f / static_cast<float>(1.0 - static_cast<double>(m.ratio)) : 0.0f;
  return plan;
}

absl::StatusOr<std::vector<uint8_t>> DropoutKeepMask(const OpContext& c, const DropoutPlan& plan,
                                                     int64_t count) {
  IPUPOD_ASSIGN_OR_RETURN(std::vector<uint32_t> bits, RandomBits(c.node.name, count));
  // Kept iff a 24-bit uniform u satisfies u / 2^24 >= ratio: P(keep) = 1 - ratio to 2^-24.
  const auto threshold =
      static_cast<uint32_t>(std::ceil(static_cast<double>(plan.ratio) * 16777216.0));
  std::vector<uint8_t> keep(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) keep[i] = (bits[i] >> 8) >= threshold ? 1 : 0;
  return keep;
}

namespace {

// ---- Cast ----

template <typename To, typename From>
To Convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From{0};
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    // Saturate instead of the undefined out-of-range conversion; NaN -> 0.
    if (std::isnan(v)) return 0;
    if (v >= static_cast<From>(std::numeric_limits<To>::max()))
      return std::numeric_limits<To>::max();
    if (v <= static_cast<From>(std::numeric_limits<To>::min()))
      return std::numeric_limits<To>::min();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

absl::StatusOr<std::vector<TensorType>> InferCast(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t to, c.RequiredInt("to"));
  IPUPOD_ASSIGN_OR_RETURN(DType dtype, DTypeFromOnnxCode(to));
  return std::vector<TensorType>{{dtype, c.shape(0)}};
}

// Between dtypes other than float16.
absl::Status CastInto(const Tensor& in, Tensor& out) {
  return VisitDType(in.dtype(), [&](auto from_tag) -> absl::Status {
    using From = decltype(from_tag);
    return VisitDType(out.dtype(), [&](auto to_tag) -> absl::Status {
      using To = decltype(to_tag);
      const From* src = in.data<From>();
      To* dst = out.mutable_data<To>();
      kernels::ForEachChunk(in.num_elements(), 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) dst[i] = Convert<To>(src[i]);
      });
      return absl::OkStatus();
    });
  });
}

// float16 goes through float32: widened exactly on the way in, rounded to
// nearest even on the way out.
absl::Status RunCast(const OpContext& c, absl::Span<Tensor> out) {
  const Tensor* in = c.values[0];
  Tensor widened;
  if (in->dtype() == DType::kFloat16) {
    IPUPOD_ASSIGN_OR_RETURN(widened, in->WidenedToFloat32());
    in = &widened;
  }
  if (out[0].dtype() != DType::kFloat16) return CastInto(*in, out[0]);
  if (in->dtype() == DType::kFloat32) {
    IPUPOD_ASSIGN_OR_RETURN(out[0], in->ConvertedTo(DType::kFloat16));
    return absl::OkStatus();
  }
  IPUPOD_ASSIGN_OR_RETURN(Tensor wide, Tensor::CreateForOverwrite(DType::kFloat32, in->shape()));
  IPUPOD_RETURN_IF_ERROR(CastInto(*in, wide));
  IPUPOD_ASSIGN_OR_RETURN(out[0], wide.ConvertedTo(DType::kFloat16));
  return absl::OkStatus();
}

// ---- Shape (start/end attributes from opset 15) ----

absl::StatusOr<std::pair<int64_t, int64_t>> ShapeRange(const OpContext& c) {
  const int64_t r = c.rank(0);
  IPUPOD_ASSIGN_OR_RETURN(int64_t start, c.Int("start", 0));
  IPUPOD_ASSIGN_OR_RETURN(int64_t end, c.Int("end", r));
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, start, r);
  return std::make_pair(start, end);
}

absl::StatusOr<std::vector<TensorType>> InferShape(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(auto range, ShapeRange(c));
  return std::vector<TensorType>{{DType::kInt64, {range.second - range.first}}};
}

absl::Status RunShape(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(auto range, ShapeRange(c));
  int64_t* dst = out[0].mutable_data<int64_t>();
  for (int64_t i = range.first; i < range.second; ++i) dst[i - range.first] = c.shape(0)[i];
  return absl::OkStatus();
}

// ---- Reshape ----

absl::StatusOr<Shape> ReshapeTarget(const Shape& in, const std::vector<int64_t>& spec,
                                    bool allowzero) {
  Shape out(spec.size());
  int64_t infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == 0 && !allowzero) {
      if (i >= in.size()) return absl::InvalidArgumentError("shape copies a dim the input lacks");
      d = in[i];
    }
    if (d == -1) {
      if (infer_at >= 0) return absl::InvalidArgumentError("shape has more than one -1");
      infer_at = static_cast<int64_t>(i);
      continue;
    }
    if (d < 0 || d > kernels::kElementsMax) {
      return absl::InvalidArgumentError(absl::StrCat("shape has dim ", d));
    }
    out[i] = d;
    if (d != 0 && known > kernels::kElementsMax / d) {  // the product would overflow
      return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", ShapeString(in), " to ",
                                                     ShapeString(spec), ": too many elements"));
    }
    known *= d;
  }
  IPUPOD_ASSIGN_OR_RETURN(int64_t total, kernels::NumElements(in));
  if (infer_at >= 0) {
    if (known == 0 || total % known != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot reshape ", ShapeString(in), " to ", ShapeString(spec)));
    }
    out[infer_at] = total / known;
  }
  IPUPOD_ASSIGN_OR_RETURN(int64_t n, kernels::NumElements(out));
  if (n != total) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", ShapeString(in), " (", total,
                                                   " elements) to ", ShapeString(spec)));
  }
  return out;
}

absl::StatusOr<std::vector<TensorType>> InferReshape(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> spec, c.ConstantInts(1, "shape"));
  IPUPOD_ASSIGN_OR_RETURN(int64_t allowzero, c.Int("allowzero", 0));
  IPUPOD_ASSIGN_OR_RETURN(Shape out, ReshapeTarget(c.shape(0), spec, allowzero != 0));
  return WithShape(c, std::move(out));
}

// ---- Flatten ----

absl::StatusOr<std::vector<TensorType>> InferFlatten(const OpContext& c) {
  const int64_t r = c.rank(0);
  IPUPOD_ASSIGN_OR_RETURN(int64_t axis, c.Int("axis", 1));
  if (axis < -r || axis > r) {
    return absl::InvalidArgumentError(absl::StrCat("axis ", axis, " is out of range for rank ", r));
  }
  if (axis < 0) axis += r;
  const Shape& s = c.shape(0);
  const int64_t outer =
      std::accumulate(s.begin(), s.begin() + axis, int64_t{1}, std::multiplies<>());
  const int64_t inner = std::accumulate(s.begin() + axis, s.end(), int64_t{1}, std::multiplies<>());
  return WithShape(c, {outer, inner});
}

// ---- Transpose ----

absl::StatusOr<std::vector<int64_t>> Perm(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(auto perm, c.Ints("perm"));
  if (perm.has_value()) return *perm;
  std::vector<int64_t> reversed(static_cast<size_t>(c.rank(0)));
  std::iota(reversed.rbegin(), reversed.rend(), 0);
  return reversed;
}

absl::StatusOr<std::vector<TensorType>> InferTranspose(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> perm, Perm(c));
  IPUPOD_ASSIGN_OR_RETURN(Shape out, kernels::TransposedShape(c.shape(0), perm));
  return WithShape(c, std::move(out));
}

absl::Status RunTranspose(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> perm, Perm(c));
  const Tensor& in = *c.values[0];
  return kernels::Transpose(in.raw_data(), in.shape(), perm, DTypeSize(in.dtype()),
                            out[0].mutable_raw_data());
}

// ---- Squeeze / Unsqueeze: axes attribute before opset 13, input after ----

absl::StatusOr<std::optional<std::vector<int64_t>>> AxesOperand(const OpContext& c) {
  if (c.opset < 13) return c.Ints("axes");
  if (c.HasAttr("axes")) {
    return absl::InvalidArgumentError("from opset 13, axes is an input, not an attribute");
  }
  if (!c.has(1)) return std::optional<std::vector<int64_t>>();
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> axes, c.ConstantInts(1, "axes"));
  return std::optional(std::move(axes));
}

absl::StatusOr<std::vector<TensorType>> InferSqueeze(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(auto axes, AxesOperand(c));
  const Shape& in = c.shape(0);
  std::vector<bool> drop(in.size(), false);
  if (!axes.has_value()) {
    for (size_t i = 0; i < in.size(); ++i) drop[i] = in[i] == 1;
  }
  for (int64_t a : axes.value_or(std::vector<int64_t>{})) {
    IPUPOD_ASSIGN_OR_RETURN(int64_t axis, kernels::NormalizeAxis(a, c.rank(0)));
    if (in[axis] != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot squeeze axis ", a, " of ", ShapeString(in), ": size is not 1"));
    }
    drop[axis] = true;
  }
  Shape out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!drop[i]) out.push_back(in[i]);
  }
  return WithShape(c, std::move(out));
}

absl::StatusOr<std::vector<TensorType>> InferUnsqueeze(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(auto axes, AxesOperand(c));
  if (!axes.has_value()) return absl::InvalidArgumentError("axes are required");
  const int64_t out_rank = c.rank(0) + static_cast<int64_t>(axes->size());
  std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
  for (int64_t a : *axes) {
    IPUPOD_ASSIGN_OR_RETURN(int64_t axis, kernels::NormalizeAxis(a, out_rank));
    if (inserted[axis]) return absl::InvalidArgumentError("axes repeat an axis");
    inserted[axis] = true;
  }
  Shape out;
  size_t next = 0;
  for (int64_t i = 0; i < out_rank; ++i) out.push_back(inserted[i] ? 1 : c.shape(0)[next++]);
  return WithShape(c, std::move(out));
}

// ---- Concat ----

absl::StatusOr<std::vector<TensorType>> InferConcat(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t a, c.RequiredInt("axis"));
  IPUPOD_ASSIGN_OR_RETURN(int64_t axis, kernels::NormalizeAxis(a, c.rank(0)));
  Shape out = c.shape(0);
  for (size_t i = 1; i < c.types.size(); ++i) {
    if (!c.has(i)) return absl::InvalidArgumentError("Concat inputs cannot be omitted");
    const Shape& s = c.shape(i);
    bool ok = c.dtype(i) == c.dtype(0) && s.size() == out.size();
    for (size_t d = 0; ok && d < s.size(); ++d) ok = d == size_t(axis) || s[d] == out[d];
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("input ", i, " ", TypeString(c.type(i)),
                                                     " does not concatenate with ",
                                                     TypeString(c.type(0)), " on axis ", a));
    }
    out[axis] += s[axis];
  }
  return WithShape(c, std::move(out));
}

absl::Status RunConcat(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t axis, c.RequiredInt("axis"));
  IPUPOD_ASSIGN_OR_RETURN(axis, kernels::NormalizeAxis(axis, c.rank(0)));
  std::vector<const void*> ptrs;
  std::vector<kernels::Dims> shapes;
  for (const Tensor* t : c.values) {
    ptrs.push_back(t->raw_data());
    shapes.push_back(t->shape());
  }
  return kernels::Concat(ptrs, shapes, axis, DTypeSize(c.dtype(0)), out[0].mutable_raw_data());
}

// ---- Split: sizes attribute before opset 13, optional input after ----

struct SplitPlan {
  int64_t axis;
  std::vector<int64_t> sizes;
};

absl::StatusOr<SplitPlan> PlanSplit(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t a, c.Int("axis", 0));
  SplitPlan p;
  IPUPOD_ASSIGN_OR_RETURN(p.axis, kernels::NormalizeAxis(a, c.rank(0)));
  const int64_t dim = c.shape(0)[p.axis];
  const int64_t n = static_cast<int64_t>(c.node.outputs.size());
  std::optional<std::vector<int64_t>> sizes;
  if (c.opset < 13) {
    IPUPOD_ASSIGN_OR_RETURN(sizes, c.Ints("split"));
  } else if (c.HasAttr("split")) {
    return absl::InvalidArgumentError("from opset 13, split is an input, not an attribute");
  } else if (c.has(1)) {
    IPUPOD_ASSIGN_OR_RETURN(sizes, c.ConstantInts(1, "split"));
  }
  if (!sizes.has_value()) {
    if (dim % n != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("axis of size ", dim, " does not split evenly into ", n));
    }
    sizes = std::vector<int64_t>(static_cast<size_t>(n), dim / n);
  }
  int64_t total = 0;
  for (int64_t s : *sizes) total += s < 0 ? -1 : s;
  if (static_cast<int64_t>(sizes->size()) != n || total != dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "split sizes ", ShapeString(*sizes), " do not cover ", n, " outputs of axis size ", dim));
  }
  p.sizes = std::move(*sizes);
  return p;
}

absl::StatusOr<std::vector<TensorType>> InferSplit(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(SplitPlan p, PlanSplit(c));
  std::vector<TensorType> out;
  for (int64_t s : p.sizes) {
    TensorType t = c.type(0);
    t.shape[p.axis] = s;
    out.push_back(std::move(t));
  }
  return out;
}

absl::Status RunSplit(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(SplitPlan p, PlanSplit(c));
  const Tensor& in = *c.values[0];
  int64_t start = 0;
  for (size_t k = 0; k < out.size(); ++k) {
    std::vector<kernels::SliceAxis> axes;
    for (int64_t d = 0; d < in.rank(); ++d) axes.push_back({0, 1, in.shape()[d]});
    axes[p.axis] = {start, 1, p.sizes[k]};
    start += p.sizes[k];
    IPUPOD_RETURN_IF_ERROR(kernels::Slice(in.raw_data(), in.shape(), axes, DTypeSize(in.dtype()),
                                          out[k].mutable_raw_data()));
  }
  return absl::OkStatus();
}

// ---- Slice: attributes before opset 10, inputs after ----

struct SliceSpec {
  std::vector<int64_t> starts, ends, axes, steps;
};

absl::StatusOr<SliceSpec> ReadSliceSpec(const OpContext& c) {
  SliceSpec s;
  if (c.opset < 10) {
    IPUPOD_ASSIGN_OR_RETURN(auto starts, c.Ints("starts"));
    IPUPOD_ASSIGN_OR_RETURN(auto ends, c.Ints("ends"));
    IPUPOD_ASSIGN_OR_RETURN(auto axes, c.Ints("axes"));
    if (!starts || !ends) return absl::InvalidArgumentError("starts and ends are required");
    s.starts = *starts;
    s.ends = *ends;
    if (axes) s.axes = *axes;
  } else {
    if (c.HasAttr("starts") || c.HasAttr("ends") || c.HasAttr("axes")) {
      return absl::InvalidArgumentError("from opset 10, Slice takes starts/ends/axes as inputs");
    }
    IPUPOD_ASSIGN_OR_RETURN(s.starts, c.ConstantInts(1, "starts"));
    IPUPOD_ASSIGN_OR_RETURN(s.ends, c.ConstantInts(2, "ends"));
    if (c.has(3)) {
      IPUPOD_ASSIGN_OR_RETURN(s.axes, c.ConstantInts(3, "axes"));
    }
    if (c.has(4)) {
      IPUPOD_ASSIGN_OR_RETURN(s.steps, c.ConstantInts(4, "steps"));
    }
  }
  if (s.axes.empty()) {
    for (size_t i = 0; i < s.starts.size(); ++i) s.axes.push_back(static_cast<int64_t>(i));
  }
  if (s.steps.empty()) s.steps.assign(s.starts.size(), 1);
  if (s.ends.size() != s.starts.size() || s.axes.size() != s.starts.size() ||
      s.steps.size() != s.starts.size()) {
    return absl::InvalidArgumentError("starts, ends, axes and steps differ in length");
  }
  return s;
}

absl::StatusOr<std::vector<kernels::SliceAxis>> ResolveSlice(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(SliceSpec s, ReadSliceSpec(c));
  const Shape& in = c.shape(0);
  std::vector<kernels::SliceAxis> axes;
  for (int64_t d : in) axes.push_back({0, 1, d});
  std::vector<bool> seen(in.size(), false);
  for (size_t i = 0; i < s.axes.size(); ++i) {
    IPUPOD_ASSIGN_OR_RETURN(int64_t axis, kernels::NormalizeAxis(s.axes[i], c.rank(0)));
    if (seen[axis]) return absl::InvalidArgumentError("axes repeat an axis");
    seen[axis] = true;
    IPUPOD_ASSIGN_OR_RETURN(
        axes[axis], kernels::ResolveSliceAxis(s.starts[i], s.ends[i], s.steps[i], in[axis]));
  }
  return axes;
}

absl::StatusOr<std::vector<TensorType>> InferSlice(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(auto axes, ResolveSlice(c));
  Shape out;
  for (const auto& a : axes) out.push_back(a.count);
  return WithShape(c, std::move(out));
}

absl::Status RunSlice(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(auto axes, ResolveSlice(c));
  const Tensor& in = *c.values[0];
  return kernels::Slice(in.raw_data(), in.shape(), axes, DTypeSize(in.dtype()),
                        out[0].mutable_raw_data());
}

// ---- Gather ----

absl::StatusOr<std::vector<TensorType>> InferGather(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(RequireDType("indices", c.dtype(1), {DType::kInt64, DType::kInt32}));
  IPUPOD_ASSIGN_OR_RETURN(int64_t a, c.Int("axis", 0));
  IPUPOD_ASSIGN_OR_RETURN(int64_t axis, kernels::NormalizeAxis(a, c.rank(0)));
  const Shape& data = c.shape(0);
  Shape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), c.shape(1).begin(), c.shape(1).end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  return WithShape(c, std::move(out));
}

absl::Status RunGather(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t axis, c.Int("axis", 0));
  const Tensor& data = *c.values[0];
  const Tensor& idx = *c.values[1];
  const size_t size = DTypeSize(data.dtype());
  if (idx.dtype() == DType::kInt32) {
    return kernels::Gather(data.raw_data(), data.shape(), axis, ViewOf<int32_t>(idx), size,
                           out[0].mutable_raw_data());
  }
  return kernels::Gather(data.raw_data(), data.shape(), axis, ViewOf<int64_t>(idx), size,
                         out[0].mutable_raw_data());
}

// ---- Expand ----

absl::StatusOr<std::vector<TensorType>> InferExpand(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> shape, c.ConstantInts(1, "shape"));
  IPUPOD_ASSIGN_OR_RETURN(Shape out, kernels::BroadcastShapes(c.shape(0), shape));
  return WithShape(c, std::move(out));
}

absl::Status RunExpand(const OpContext& c, absl::Span<Tensor> out) {
  const Tensor& in = *c.values[0];
  return kernels::Expand(in.raw_data(), in.shape(), out[0].shape(), DTypeSize(in.dtype()),
                         out[0].mutable_raw_data());
}

// ---- Pad (opset 11+: pads and constant_value are inputs; constant mode) ----

struct PadSpec {
  std::vector<int64_t> begin, end;
  float value = 0.0f;
};

absl::StatusOr<PadSpec> PadSpecOf(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(std::string mode, c.String("mode", "constant"));
  if (mode != "constant") {
    return absl::InvalidArgumentError(absl::StrCat(
        "mode '", mode, "' is not supported; only 'constant' (torch's F.pad default) is"));
  }
  IPUPOD_RETURN_IF_ERROR(
      RequireDType("data", c.dtype(0), {DType::kFloat32, DType::kInt64, DType::kInt32}));
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> pads, c.ConstantInts(1, "pads"));
  const size_t rank = static_cast<size_t>(c.rank(0));
  if (pads.size() != 2 * rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("pads has ", pads.size(), " entries; expected 2 x rank = ", 2 * rank));
  }
  PadSpec spec;
  spec.begin.assign(pads.begin(), pads.begin() + rank);
  spec.end.assign(pads.begin() + rank, pads.end());
  for (int64_t p : pads) {
    if (p < 0) {
      return absl::InvalidArgumentError(
          "negative pads (cropping) are not supported; slice the input instead");
    }
  }
  if (c.has(2)) {
    IPUPOD_ASSIGN_OR_RETURN(spec.value, c.ConstantScalar(2, "constant_value"));
  }
  return spec;
}

absl::StatusOr<std::vector<TensorType>> InferPad(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(PadSpec spec, PadSpecOf(c));
  Shape out = c.shape(0);
  for (size_t d = 0; d < out.size(); ++d) out[d] += spec.begin[d] + spec.end[d];
  return WithShape(c, std::move(out));
}

template <typename T>
void Fill(Tensor& t, T value) {
  T* p = t.mutable_data<T>();
  std::fill(p, p + t.num_elements(), value);
}

absl::Status RunPad(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(PadSpec spec, PadSpecOf(c));
  const Tensor& in = *c.values[0];
  switch (in.dtype()) {
    case DType::kFloat32:
      Fill<float>(out[0], spec.value);
      break;
    case DType::kInt64:
      Fill<int64_t>(out[0], static_cast<int64_t>(spec.value));
      break;
    default:
      Fill<int32_t>(out[0], static_cast<int32_t>(spec.value));
      break;
  }
  return kernels::CopyIntoRegion(in.raw_data(), in.shape(), spec.begin, out[0].shape(),
                                 DTypeSize(in.dtype()), out[0].mutable_raw_data());
}

// ---- ScatterND (no reduction) ----

absl::StatusOr<std::vector<TensorType>> InferScatterND(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(RequireDType("indices", c.dtype(1), {DType::kInt64}));
  IPUPOD_ASSIGN_OR_RETURN(std::string reduction, c.String("reduction", "none"));
  if (reduction != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("reduction '", reduction, "' is not supported; only 'none'"));
  }
  if (c.dtype(2) != c.dtype(0)) {
    return absl::InvalidArgumentError("updates must have the data's type");
  }
  const Shape& data = c.shape(0);
  const Shape& indices = c.shape(1);
  if (indices.empty() || indices.back() < 1 || indices.back() > c.rank(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("indices must end in a dim of 1 to ", c.rank(0), " (the data's rank)"));
  }
  Shape want(indices.begin(), indices.end() - 1);
  want.insert(want.end(), data.begin() + indices.back(), data.end());
  if (c.shape(2) != want) {
    return absl::InvalidArgumentError(absl::StrCat("updates [", absl::StrJoin(c.shape(2), ","),
                                                   "] must be [", absl::StrJoin(want, ","), "]"));
  }
  return std::vector<TensorType>{c.type(0)};
}

absl::Status RunScatterND(const OpContext& c, absl::Span<Tensor> out) {
  const Tensor& data = *c.values[0];
  return kernels::ScatterND(data.raw_data(), data.shape(), ViewOf<int64_t>(*c.values[1]),
                            c.values[2]->raw_data(), DTypeSize(data.dtype()),
                            out[0].mutable_raw_data());
}

// ---- Constant, ConstantOfShape, Range ----

absl::StatusOr<Tensor> ConstantValue(const OpContext& c) {
  // Annotations (a checkpoint, PopART's __outline: device/graph/ops.h) are not values.
  std::vector<std::pair<std::string, const AttributeValue*>> values;
  for (const auto& [name, value] : c.node.attributes) {
    if (!IsPlanningAttribute(c.node.op_type, name) && !IsPopartBuilderAttribute(name)) {
      values.emplace_back(name, &value);
    }
  }
  if (values.size() != 1) return absl::InvalidArgumentError("needs exactly one value attribute");
  const std::string& name = values[0].first;
  const AttributeValue& value = *values[0].second;
  if (const auto* t = std::get_if<Tensor>(&value); t && name == "value") return *t;
  if (const auto* f = std::get_if<float>(&value); f && name == "value_float")
    return Tensor::Scalar(*f);
  if (const auto* i = std::get_if<int64_t>(&value); i && name == "value_int")
    return Tensor::Scalar(*i);
  if (const auto* fs = std::get_if<std::vector<float>>(&value); fs && name == "value_floats") {
    return Tensor::FromValues<float>({static_cast<int64_t>(fs->size())}, *fs);
  }
  if (const auto* is = std::get_if<std::vector<int64_t>>(&value); is && name == "value_ints") {
    return Tensor::FromValues<int64_t>({static_cast<int64_t>(is->size())}, *is);
  }
  return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' has the wrong type"));
}

absl::StatusOr<std::vector<TensorType>> InferConstant(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(Tensor t, ConstantValue(c));
  return std::vector<TensorType>{{t.dtype(), t.shape()}};
}

absl::Status RunConstant(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(out[0], ConstantValue(c));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> FillValue(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(const Tensor* value, c.TensorAttr("value"));
  if (value == nullptr) return Tensor::Scalar(0.0f);
  if (value->num_elements() != 1) return absl::InvalidArgumentError("value must hold one element");
  return *value;
}

absl::StatusOr<std::vector<TensorType>> InferConstantOfShape(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> shape, c.ConstantInts(0, "shape"));
  IPUPOD_ASSIGN_OR_RETURN(Tensor value, FillValue(c));
  IPUPOD_RETURN_IF_ERROR(CheckedNumElements(value.dtype(), shape).status());
  return std::vector<TensorType>{{value.dtype(), shape}};
}

absl::Status RunConstantOfShape(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(Tensor value, FillValue(c));
  const size_t size = DTypeSize(value.dtype());
  char* dst = static_cast<char*>(out[0].mutable_raw_data());
  // A few bytes of shape fill up to what IPU memory holds: interruptible.
  kernels::ForEachChunk(out[0].num_elements(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) std::memcpy(dst + i * size, value.raw_data(), size);
  });
  return absl::OkStatus();
}

double AsDouble(const Tensor& t) {
  return t.dtype() == DType::kFloat32 ? t.data<float>()[0] : static_cast<double>(t.IntAt(0));
}

absl::StatusOr<int64_t> RangeCount(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(
      RequireDType("start", c.dtype(0), {DType::kFloat32, DType::kInt64, DType::kInt32}));
  double v[3];
  for (size_t i = 0; i < 3; ++i) {
    if (c.dtype(i) != c.dtype(0)) return absl::InvalidArgumentError("inputs differ in dtype");
    IPUPOD_ASSIGN_OR_RETURN(const Tensor* t, c.Constant(i, i == 0   ? "start"
                                                           : i == 1 ? "limit"
                                                                    : "delta"));
    if (t->num_elements() != 1) return absl::InvalidArgumentError("inputs must be scalars");
    v[i] = AsDouble(*t);
  }
  if (v[2] == 0) return absl::InvalidArgumentError("delta is 0");
  const double n = std::ceil((v[1] - v[0]) / v[2]);
  if (!(n < 1e12)) return absl::InvalidArgumentError("range is too long");
  return n > 0 ? static_cast<int64_t>(n) : 0;
}

absl::StatusOr<std::vector<TensorType>> InferRange(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t n, RangeCount(c));
  return std::vector<TensorType>{{c.dtype(0), {n}}};
}

absl::Status RunRange(const OpContext& c, absl::Span<Tensor> out) {
  return VisitDType(c.dtype(0), [&](auto tag) -> absl::Status {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      const T start = c.values[0]->data<T>()[0];
      const T delta = c.values[2]->data<T>()[0];
      T* dst = out[0].mutable_data<T>();
      kernels::ForEachChunk(out[0].num_elements(), 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) dst[i] = static_cast<T>(start + i * delta);
      });
    }
    return absl::OkStatus();
  });
}

// ---- NonZero: data-dependent shape, so only its constant form is supported
// (torch's opset-9 arange exports one) ----

absl::StatusOr<int64_t> NonZeroCount(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(const Tensor* t,
                          c.Constant(0, "input; its output shape depends on the data"));
  int64_t count = 0;
  IPUPOD_RETURN_IF_ERROR(VisitDType(t->dtype(), [&](auto tag) -> absl::Status {
    using T = decltype(tag);
    for (T v : t->values<T>()) count += v != T{0} ? 1 : 0;
    return absl::OkStatus();
  }));
  return count;
}

absl::StatusOr<std::vector<TensorType>> InferNonZero(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t count, NonZeroCount(c));
  return std::vector<TensorType>{{DType::kInt64, {c.rank(0), count}}};
}

absl::Status RunNonZero(const OpContext& c, absl::Span<Tensor> out) {
  const Tensor& t = *c.values[0];
  const std::vector<int64_t> strides = kernels::RowMajorStrides(t.shape());
  const int64_t count = out[0].shape()[1];
  int64_t* dst = out[0].mutable_data<int64_t>();
  int64_t k = 0;
  return VisitDType(t.dtype(), [&](auto tag) -> absl::Status {
    using T = decltype(tag);
    const auto values = t.values<T>();
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      if (values[i] == T{0}) continue;
      for (size_t d = 0; d < strides.size(); ++d)
        dst[d * count + k] = (i / strides[d]) % t.shape()[d];
      ++k;
    }
    return absl::OkStatus();
  });
}

// Data movement: no FLOPs.
OpDef Def(std::string op, int min_in, int max_in, InferFn infer, RunFn run,
          std::vector<std::string> attrs = {}) {
  return MakeOpDef(std::move(op), min_in, max_in, infer, run, NoFlops, std::move(attrs));
}

}  // namespace

void RegisterTensorOps(std::vector<OpDef>& defs) {
  defs.push_back(Def("Identity", 1, 1, InferIdentity, RunCopy));
  defs.push_back(Def("Dropout", 1, 3, InferDropout, RunDropout, {"ratio", "seed"}));
  defs.back().max_outputs = 2;
  defs.back().flops = DropoutFlops;
  defs.back().never_fold = true;  // a training-mode Dropout draws a new mask every run
  defs.push_back(Def("Cast", 1, 1, InferCast, RunCast, {"to"}));
  defs.push_back(Def("Shape", 1, 1, InferShape, RunShape, {"start", "end"}));
  defs.back().fold_from_types = true;
  defs.push_back(Def("Reshape", 2, 2, InferReshape, RunCopy, {"allowzero"}));
  defs.back().since_opset = 5;
  defs.push_back(Def("Flatten", 1, 1, InferFlatten, RunCopy, {"axis"}));
  defs.push_back(Def("Transpose", 1, 1, InferTranspose, RunTranspose, {"perm"}));
  defs.push_back(Def("Squeeze", 1, 2, InferSqueeze, RunCopy, {"axes"}));
  defs.push_back(Def("Unsqueeze", 1, 2, InferUnsqueeze, RunCopy, {"axes"}));
  defs.push_back(Def("Concat", 1, 1 << 16, InferConcat, RunConcat, {"axis"}));
  defs.push_back(Def("Split", 1, 2, InferSplit, RunSplit, {"axis", "split"}));
  defs.back().max_outputs = 1 << 16;
  defs.push_back(Def("Slice", 1, 5, InferSlice, RunSlice, {"starts", "ends", "axes"}));
  defs.push_back(Def("Gather", 2, 2, InferGather, RunGather, {"axis"}));
  defs.push_back(Def("Expand", 2, 2, InferExpand, RunExpand));
  defs.back().since_opset = 8;
  defs.push_back(Def("Pad", 2, 3, InferPad, RunPad, {"mode"}));
  defs.back().since_opset = 11;
  defs.push_back(Def("ScatterND", 3, 3, InferScatterND, RunScatterND, {"reduction"}));
  defs.back().since_opset = 11;
  defs.push_back(Def("Constant", 0, 0, InferConstant, RunConstant,
                     {"value", "value_float", "value_floats", "value_int", "value_ints"}));
  defs.push_back(Def("ConstantOfShape", 1, 1, InferConstantOfShape, RunConstantOfShape, {"value"}));
  defs.back().since_opset = 9;
  defs.push_back(Def("NonZero", 1, 1, InferNonZero, RunNonZero));
  defs.back().since_opset = 9;
  defs.push_back(Def("Range", 3, 3, InferRange, RunRange));
  defs.back().since_opset = 11;
}

}  // namespace ipupod::graph
