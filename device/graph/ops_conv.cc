// Convolutional ops: Conv, MaxPool, AveragePool, GlobalAveragePool (fp32,
// 1 to 3 spatial axes), on device/kernels/conv.h. The attributes resolve to one
// explicit geometry here - auto_pad, ceil_mode and the defaults - so the
// kernels and the backward rules (device/training/grad_conv.cc) see numbers only.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "device/graph/ops.h"
#include "device/kernels/conv.h"

namespace ipupod::graph {
namespace {

// Spatial attribute `name` (one entry per spatial axis), or `fallback` for each.
absl::StatusOr<std::vector<int64_t>> SpatialInts(const OpContext& c, absl::string_view name,
                                                 size_t n, int64_t fallback, int64_t minimum) {
  IPUPOD_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> v, c.Ints(name));
  if (!v.has_value()) return std::vector<int64_t>(n, fallback);
  if (v->size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' has ", v->size(),
                                                   " entries; the input has ", n, " spatial axes"));
  }
  for (int64_t x : *v) {
    if (x < minimum) {
      return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' is [",
                                                     absl::StrJoin(*v, ","),
                                                     "]; each entry must be at least ", minimum));
    }
  }
  return *v;
}

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pad_begin, pad_end;
};

// pads or auto_pad (SAME_UPPER/SAME_LOWER: out = ceil(in / stride); VALID: none).
absl::Status ResolvePads(const OpContext& c, const Shape& in_spatial, Window& w) {
  const size_t n = in_spatial.size();
  IPUPOD_ASSIGN_OR_RETURN(std::string auto_pad, c.String("auto_pad", "NOTSET"));
  IPUPOD_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> pads, c.Ints("pads"));
  w.pad_begin.assign(n, 0);
  w.pad_end.assign(n, 0);
  if (auto_pad == "NOTSET") {
    if (!pads.has_value()) return absl::OkStatus();
    if (pads->size() != 2 * n) {
      return absl::InvalidArgumentError(absl::StrCat("attribute 'pads' has ", pads->size(),
                                                     " entries; expected ", 2 * n,
                                                     " (the beginning and the end of each axis)"));
    }
    for (size_t i = 0; i < n; ++i) {
      w.pad_begin[i] = (*pads)[i];
      w.pad_end[i] = (*pads)[n + i];
      if (w.pad_begin[i] < 0 || w.pad_end[i] < 0) {
        return absl::InvalidArgumentError("attribute 'pads' has a negative entry");
      }
    }
    return absl::OkStatus();
  }
  if (pads.has_value()) {
    return absl::InvalidArgumentError("attributes 'pads' and 'auto_pad' cannot both be given");
  }
  if (auto_pad == "VALID") return absl::OkStatus();
  if (auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'auto_pad' is '", auto_pad,
                     "'; expected NOTSET, SAME_UPPER, SAME_LOWER or VALID"));
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t out = (in_spatial[i] + w.strides[i] - 1) / w.strides[i];
    const int64_t span = (w.kernel[i] - 1) * w.dilations[i] + 1;
    const int64_t total = std::max<int64_t>(0, (out - 1) * w.strides[i] + span - in_spatial[i]);
    const int64_t small = total / 2;
    w.pad_begin[i] = auto_pad == "SAME_UPPER" ? small : total - small;
    w.pad_end[i] = total - w.pad_begin[i];
  }
  return absl::OkStatus();
}

absl::StatusOr<Window> WindowOf(const OpContext& c, const Shape& in_spatial,
                                std::vector<int64_t> kernel) {
  const size_t n = in_spatial.size();
  Window w;
  w.kernel = std::move(kernel);
  IPUPOD_ASSIGN_OR_RETURN(w.strides, SpatialInts(c, "strides", n, 1, 1));
  IPUPOD_ASSIGN_OR_RETURN(w.dilations, SpatialInts(c, "dilations", n, 1, 1));
  IPUPOD_RETURN_IF_ERROR(ResolvePads(c, in_spatial, w));
  return w;
}

absl::StatusOr<std::vector<int64_t>> OutputSizes(const Shape& in_spatial, const Window& w) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < in_spatial.size(); ++i) {
    const int64_t o = kernels::ConvOutputSize(in_spatial[i], w.kernel[i], w.strides[i],
                                              w.dilations[i], w.pad_begin[i], w.pad_end[i]);
    if (o < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("spatial axis ", i, " of size ", in_spatial[i], " (padded by ",
                       w.pad_begin[i], "+", w.pad_end[i], ") is smaller than the kernel window ",
                       (w.kernel[i] - 1) * w.dilations[i] + 1));
    }
    out.push_back(o);
  }
  return out;
}

absl::Status RequireSpatialInput(const OpContext& c, size_t i, absl::string_view what) {
  IPUPOD_RETURN_IF_ERROR(RequireDType(what, c.dtype(i), {DType::kFloat32}));
  if (c.rank(i) < 3 || c.rank(i) > 5) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has shape [", absl::StrJoin(c.shape(i), ","),
                     "]; expected [N, C, D1] to [N, C, D1, D2, D3] (1 to 3 spatial axes)"));
  }
  return absl::OkStatus();
}

Shape SpatialOf(const Shape& s) { return Shape(s.begin() + 2, s.end()); }

Shape Concat(int64_t a, int64_t b, const std::vector<int64_t>& rest) {
  Shape out = {a, b};
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

// ---- Conv ----

absl::StatusOr<std::vector<TensorType>> InferConv(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(kernels::ConvGeometry g, ConvGeometryOf(c));
  return std::vector<TensorType>{{DType::kFloat32, Concat(g.batch, g.out_channels, g.out_spatial)}};
}

absl::Status RunConv(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(kernels::ConvGeometry g, ConvGeometryOf(c));
  const float* bias = c.has(2) ? c.values[2]->data<float>() : nullptr;
  return kernels::ConvForward(g, c.values[0]->data<float>(), c.values[1]->data<float>(), bias,
                              out[0].mutable_data<float>());
}

int64_t ConvFlops(const OpContext& c, absl::Span<const TensorType> out) {
  absl::StatusOr<kernels::ConvGeometry> g = ConvGeometryOf(c);
  if (!g.ok()) return 0;
  return 2 * g->MultiplyAdds() + (c.has(2) ? NumElementsOf(out[0]) : 0);
}

// ---- MaxPool, AveragePool, GlobalAveragePool ----

absl::StatusOr<std::vector<TensorType>> InferPool(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(kernels::PoolGeometry g, PoolGeometryOf(c));
  return std::vector<TensorType>{{DType::kFloat32, Concat(g.batch, g.channels, g.out_spatial)}};
}

absl::Status RunPool(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(kernels::PoolGeometry g, PoolGeometryOf(c));
  return kernels::PoolForward(g, c.values[0]->data<float>(), out[0].mutable_data<float>());
}

int64_t PoolFlops(const OpContext& c, absl::Span<const TensorType> out) {
  absl::StatusOr<kernels::PoolGeometry> g = PoolGeometryOf(c);
  if (!g.ok()) return 0;
  int64_t window = 1;
  for (int64_t k : g->kernel) window *= k;
  return NumElementsOf(out[0]) * window;
}

// ceil_mode: the last window may start past the input's end but not past its
// beginning padding (torch's rule); the end padding grows to fit it.
absl::Status ApplyCeilMode(const Shape& in_spatial, kernels::PoolGeometry& g) {
  for (size_t i = 0; i < in_spatial.size(); ++i) {
    const int64_t span = (g.kernel[i] - 1) * g.dilations[i] + 1;
    const int64_t room = in_spatial[i] + g.pad_begin[i] + g.pad_end[i] - span;
    if (room < 0) continue;  // OutputSizes reports it
    int64_t out = (room + g.strides[i] - 1) / g.strides[i] + 1;
    if ((out - 1) * g.strides[i] >= in_spatial[i] + g.pad_begin[i]) --out;
    const int64_t extra = (out - 1) * g.strides[i] + span - (room + span);
    if (extra <= 0) continue;
    if (g.kind == kernels::PoolKind::kAverageIncludePad) {
      return absl::InvalidArgumentError(
          "ceil_mode with count_include_pad=1, where the last window runs past the padded "
          "input, is not supported; set count_include_pad=0 or ceil_mode=0");
    }
    g.pad_end[i] += extra;
  }
  return absl::OkStatus();
}

absl::StatusOr<kernels::PoolKind> PoolKindOf(const OpContext& c) {
  if (c.node.op_type == "MaxPool") return kernels::PoolKind::kMax;
  IPUPOD_ASSIGN_OR_RETURN(int64_t include, c.Int("count_include_pad", 0));
  return include != 0 ? kernels::PoolKind::kAverageIncludePad
                      : kernels::PoolKind::kAverageExcludePad;
}

OpDef Def(std::string op, int min_in, int max_in, InferFn infer, RunFn run, FlopsFn flops,
          std::vector<std::string> attrs) {
  return WritesEveryOutput(
      MakeOpDef(std::move(op), min_in, max_in, infer, run, flops, std::move(attrs)));
}

}  // namespace

absl::StatusOr<kernels::ConvGeometry> ConvGeometryOf(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(RequireSpatialInput(c, 0, "input X"));
  IPUPOD_RETURN_IF_ERROR(RequireDType("weight W", c.dtype(1), {DType::kFloat32}));
  const Shape& x = c.shape(0);
  const Shape& w = c.shape(1);
  kernels::ConvGeometry g;
  g.batch = x[0];
  g.in_channels = x[1];
  g.in_spatial = SpatialOf(x);
  IPUPOD_ASSIGN_OR_RETURN(g.groups, c.Int("group", 1));
  if (w.size() != x.size() || g.groups < 1 || g.in_channels % g.groups != 0 ||
      w[1] * g.groups != g.in_channels || w[0] % g.groups != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight W [", absl::StrJoin(w, ","), "] does not fit input X [",
                     absl::StrJoin(x, ","), "] with group ", g.groups,
                     ": expected [M, C / group, kernel...] with M a multiple of "
                     "group"));
  }
  g.out_channels = w[0];
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> kernel,
                          SpatialInts(c, "kernel_shape", g.in_spatial.size(), 1, 1));
  if (c.HasAttr("kernel_shape") && kernel != SpatialOf(w)) {
    return absl::InvalidArgumentError("attribute 'kernel_shape' differs from the weight's shape");
  }
  IPUPOD_ASSIGN_OR_RETURN(Window win, WindowOf(c, g.in_spatial, SpatialOf(w)));
  if (c.has(2) && (c.rank(2) != 1 || c.shape(2)[0] != g.out_channels)) {
    return absl::InvalidArgumentError(absl::StrCat("bias B must be [", g.out_channels, "]"));
  }
  IPUPOD_ASSIGN_OR_RETURN(g.out_spatial, OutputSizes(g.in_spatial, win));
  g.kernel = std::move(win.kernel);
  g.strides = std::move(win.strides);
  g.dilations = std::move(win.dilations);
  g.pad_begin = std::move(win.pad_begin);
  g.pad_end = std::move(win.pad_end);
  if (g.ImageMultiplyAdds() > static_cast<double>(kernels::kConvImageMultiplyAddsMax)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the convolution takes %.3g multiply-adds per image, more than the %.3g one image's "
        "convolution may take (one uninterruptible call, device/kernels/conv.h); use a smaller "
        "kernel, "
        "fewer channels or a smaller image",
        g.ImageMultiplyAdds(), static_cast<double>(kernels::kConvImageMultiplyAddsMax)));
  }
  return g;
}

absl::StatusOr<kernels::PoolGeometry> PoolGeometryOf(const OpContext& c) {
  IPUPOD_RETURN_IF_ERROR(RequireSpatialInput(c, 0, "input X"));
  const Shape& x = c.shape(0);
  kernels::PoolGeometry g;
  g.batch = x[0];
  g.channels = x[1];
  g.in_spatial = SpatialOf(x);
  const size_t n = g.in_spatial.size();
  if (c.node.op_type == "GlobalAveragePool") {
    g.kind = kernels::PoolKind::kAverageExcludePad;
    g.kernel = g.in_spatial;
    g.strides = g.dilations = g.out_spatial = std::vector<int64_t>(n, 1);
    g.pad_begin = g.pad_end = std::vector<int64_t>(n, 0);
    return g;
  }
  IPUPOD_ASSIGN_OR_RETURN(g.kind, PoolKindOf(c));
  IPUPOD_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> kernel, c.Ints("kernel_shape"));
  if (!kernel.has_value())
    return absl::InvalidArgumentError("attribute 'kernel_shape' is required");
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> k, SpatialInts(c, "kernel_shape", n, 1, 1));
  IPUPOD_ASSIGN_OR_RETURN(Window win, WindowOf(c, g.in_spatial, std::move(k)));
  g.kernel = std::move(win.kernel);
  g.strides = std::move(win.strides);
  g.dilations = std::move(win.dilations);
  g.pad_begin = std::move(win.pad_begin);
  g.pad_end = std::move(win.pad_end);
  IPUPOD_ASSIGN_OR_RETURN(int64_t ceil_mode, c.Int("ceil_mode", 0));
  if (ceil_mode != 0) IPUPOD_RETURN_IF_ERROR(ApplyCeilMode(g.in_spatial, g));
  if (g.kind != kernels::PoolKind::kMax &&
      std::any_of(g.dilations.begin(), g.dilations.end(), [](int64_t d) { return d != 1; })) {
    return absl::InvalidArgumentError("AveragePool has no dilations before opset 19");
  }
  IPUPOD_ASSIGN_OR_RETURN(int64_t storage_order, c.Int("storage_order", 0));
  if (storage_order != 0) {
    return absl::InvalidArgumentError("attribute 'storage_order' must be 0 (row major)");
  }
  Window sizes{g.kernel, g.strides, g.dilations, g.pad_begin, g.pad_end};
  IPUPOD_ASSIGN_OR_RETURN(g.out_spatial, OutputSizes(g.in_spatial, sizes));
  return g;
}

void RegisterConvOps(std::vector<OpDef>& defs) {
  const std::vector<std::string> window = {"auto_pad", "kernel_shape", "pads", "strides"};
  std::vector<std::string> conv = window;
  conv.insert(conv.end(), {"dilations", "group"});
  defs.push_back(Def("Conv", 2, 3, InferConv, RunConv, ConvFlops, conv));
  std::vector<std::string> max_pool = window;
  max_pool.insert(max_pool.end(), {"ceil_mode", "dilations", "storage_order"});
  defs.push_back(Def("MaxPool", 1, 1, InferPool, RunPool, PoolFlops, max_pool));
  defs.back().since_opset = 8;
  std::vector<std::string> avg_pool = window;
  avg_pool.insert(avg_pool.end(), {"ceil_mode", "count_include_pad"});
  defs.push_back(Def("AveragePool", 1, 1, InferPool, RunPool, PoolFlops, avg_pool));
  defs.back().since_opset = 7;
  defs.push_back(Def("GlobalAveragePool", 1, 1, InferPool, RunPool, PoolFlops, {}));
}

}  // namespace ipupod::graph
