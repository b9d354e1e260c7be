// PopTorch's own ops (poptorch.nop, ipu_print_tensor, dynamic_slice,
// dynamic_update, ctc_beam_search_decoder), carried through ONNX in domain
// ai.graphcore as PopART names them and imported with op type
// "ai.graphcore.<Op>" (onnx_import.h):
//
//   Nop(x) -> x                      an identity the compiler keeps
//   IpuPrint(x) -> x                 title (string): the value goes to the run's log
//   DynamicSlice(x, index) -> y      axes, sizes (ints): y = x[index[k] : index[k] + sizes[k]]
//                                    along axes[k]; index is a runtime int tensor with one
//                                    element per axis
//   DynamicUpdate(x, index, u) -> y  axes, sizes: y = x with that region replaced by u
//   CtcBeamSearchDecoder(log_probs, lengths) -> (label_probs, label_lengths, decoded_labels)
//                                    blank (0), beam_width (100), top_paths (1): log_probs
//                                    float [T, B, C], lengths int [B] (each in [0, T]);
//                                    per sequence b its top_paths best labellings by CTC
//                                    prefix beam search (device/kernels/ctc.h): label_probs float
//                                    [B, P] their log probabilities (-inf for paths that do
//                                    not exist), label_lengths int32 [B, P], decoded_labels
//                                    int32 [B, P, T] the labels, 0 after each path's end.
//                                    PopART's outputs are uint32: int32 here. Inference only:
//                                    it has no gradient (device/training/autodiff.h).
//
// A runtime start out of range (negative, or start + size past the axis)
// is refused with INVALID_ARGUMENT naming the start and the range allowed:
// PopTorch's documentation does not say what happens then, and a silent
// clamp would hide an indexing bug (docs/differences.md).
// Nop and IpuPrint never fold on a constant input (keeping them is their
// point), and
// with print_gradient its backward rule prints the gradient as
// "<title>_gradient" (device/training/grad_tensor.cc).
#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "device/graph/onnx_import.h"
#include "device/graph/op_common.h"
#include "device/graph/ops.h"
#include "device/graph/run_context.h"
#include "device/kernels/ctc.h"
#include "device/kernels/data_movement.h"
#include "device/kernels/shape_util.h"

namespace ipupod::graph {
namespace {

// ---- IpuPrint ----

// At most this many elements are printed; a longer tensor ends in "...".
constexpr int64_t kPrintElementsMax = 1000;

template <typename T>
std::string ElementText(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_floating_point_v<T>) {
    return absl::StrCat(v);
  } else {
    return absl::StrCat(static_cast<int64_t>(v));
  }
}

absl::Status RunIpuPrint(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_RETURN_IF_ERROR(RunCopy(c, out));
  IPUPOD_ASSIGN_OR_RETURN(std::string line, PrintLine(c, *c.values[0]));
  AppendToRunLog(std::move(line));
  return absl::OkStatus();
}

}  // namespace

// "title: float32[2, 3] [1, 2, 3, 4, 5, 6]" (row-major, flat).
absl::StatusOr<std::string> PrintLine(const OpContext& c, const Tensor& t) {
  IPUPOD_ASSIGN_OR_RETURN(std::string title, c.String("title", ""));
  std::vector<std::string> values;
  IPUPOD_RETURN_IF_ERROR(VisitDType(t.dtype(), [&](auto tag) -> absl::Status {
    using T = decltype(tag);
    const int64_t n = std::min(t.num_elements(), kPrintElementsMax);
    for (int64_t i = 0; i < n; ++i) values.push_back(ElementText<T>(t.data<T>()[i]));
    return absl::OkStatus();
  }));
  if (t.num_elements() > kPrintElementsMax) values.push_back("...");
  return absl::StrCat(title.empty() ? c.node.name : title, ": ", DTypeName(t.dtype()),
                      kernels::ShapeString(t.shape()), " [", absl::StrJoin(values, ", "), "]");
}

namespace {

// ---- DynamicSlice, DynamicUpdate ----

struct DynamicRegion {
  std::vector<int64_t> axes;   // normalised, distinct
  std::vector<int64_t> sizes;  // per axis, 1..dim
};

absl::StatusOr<DynamicRegion> RegionOf(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(auto axes, c.Ints("axes"));
  IPUPOD_ASSIGN_OR_RETURN(auto sizes, c.Ints("sizes"));
  if (!axes || !sizes || axes->empty() || axes->size() != sizes->size()) {
    return absl::InvalidArgumentError(
        "attributes 'axes' and 'sizes' are required, non-empty and of one length");
  }
  const Shape& shape = c.shape(0);
  DynamicRegion r;
  for (size_t k = 0; k < axes->size(); ++k) {
    IPUPOD_ASSIGN_OR_RETURN(int64_t axis, kernels::NormalizeAxis((*axes)[k], c.rank(0)));
    if (std::count(r.axes.begin(), r.axes.end(), axis) > 0)
      return absl::InvalidArgumentError(absl::StrCat("'axes' repeats axis ", axis));
    const int64_t size = (*sizes)[k];
    if (size < 1 || size > shape[axis]) {
      return absl::InvalidArgumentError(
          absl::StrCat("slice size ", size, " on axis ", axis, " must be in [1, ", shape[axis],
                       "] (the axis of ", kernels::ShapeString(shape), ")"));
    }
    r.axes.push_back(axis);
    r.sizes.push_back(size);
  }
  IPUPOD_RETURN_IF_ERROR(
      RequireDType("index (input 1)", c.dtype(1), {DType::kInt64, DType::kInt32}));
  if (NumElementsOf(c.type(1)) != static_cast<int64_t>(r.axes.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("index (input 1) is ", kernels::ShapeString(c.shape(1)), " but needs one ",
                     "start per axis (", r.axes.size(), ")"));
  }
  return r;
}

Shape SlicedShape(const Shape& shape, const DynamicRegion& r) {
  Shape out = shape;
  for (size_t k = 0; k < r.axes.size(); ++k) out[r.axes[k]] = r.sizes[k];
  return out;
}

// The region at the runtime index, one SliceAxis per dim of input 0.
absl::StatusOr<std::vector<kernels::SliceAxis>> ResolveRegion(const OpContext& c,
                                                              const DynamicRegion& r) {
  const Shape& shape = c.shape(0);
  const Tensor& index = *c.values[1];
  std::vector<kernels::SliceAxis> out;
  for (int64_t d : shape) out.push_back({0, 1, d});
  for (size_t k = 0; k < r.axes.size(); ++k) {
    const int64_t start = index.IntAt(static_cast<int64_t>(k));
    const int64_t last = shape[r.axes[k]] - r.sizes[k];
    if (start < 0 || start > last) {
      return absl::InvalidArgumentError(
          absl::StrCat("start ", start, " on axis ", r.axes[k], " is out of range: a slice of ",
                       r.sizes[k], " of an axis of ", shape[r.axes[k]], " starts in [0, ", last,
                       "]; ipupod refuses an out-of-range start rather than clamp it"));
    }
    out[r.axes[k]] = {start, 1, r.sizes[k]};
  }
  return out;
}

absl::StatusOr<std::vector<TensorType>> InferDynamicSlice(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(DynamicRegion r, RegionOf(c));
  return std::vector<TensorType>{{c.dtype(0), SlicedShape(c.shape(0), r)}};
}

absl::Status RunDynamicSlice(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(DynamicRegion r, RegionOf(c));
  IPUPOD_ASSIGN_OR_RETURN(auto axes, ResolveRegion(c, r));
  const Tensor& in = *c.values[0];
  return kernels::Slice(in.raw_data(), in.shape(), axes, DTypeSize(in.dtype()),
                        out[0].mutable_raw_data());
}

absl::StatusOr<std::vector<TensorType>> InferDynamicUpdate(const OpContext& c) {
  IPUPOD_ASSIGN_OR_RETURN(DynamicRegion r, RegionOf(c));
  const Shape want = SlicedShape(c.shape(0), r);
  if (c.dtype(2) != c.dtype(0) || c.shape(2) != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "update (input 2) is ", DTypeName(c.dtype(2)), kernels::ShapeString(c.shape(2)),
        " but the region it replaces is ", DTypeName(c.dtype(0)), kernels::ShapeString(want)));
  }
  return std::vector<TensorType>{c.type(0)};
}

absl::Status RunDynamicUpdate(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(DynamicRegion r, RegionOf(c));
  IPUPOD_ASSIGN_OR_RETURN(auto axes, ResolveRegion(c, r));
  IPUPOD_RETURN_IF_ERROR(RunCopy(c, out));
  std::vector<int64_t> begin;
  for (const kernels::SliceAxis& a : axes) begin.push_back(a.start);
  const Tensor& update = *c.values[2];
  return kernels::CopyIntoRegion(update.raw_data(), update.shape(), begin, out[0].shape(),
                                 DTypeSize(update.dtype()), out[0].mutable_raw_data());
}

// ---- CtcBeamSearchDecoder ----

absl::StatusOr<kernels::CtcBeamSearchOptions> CtcOptions(const OpContext& c) {
  kernels::CtcBeamSearchOptions o;
  IPUPOD_ASSIGN_OR_RETURN(o.blank, c.Int("blank", 0));
  IPUPOD_ASSIGN_OR_RETURN(o.beam_width, c.Int("beam_width", 100));
  IPUPOD_ASSIGN_OR_RETURN(o.top_paths, c.Int("top_paths", 1));
  return o;
}

absl::StatusOr<std::vector<TensorType>> InferCtcBeamSearch(const OpContext& c) {
  if (c.rank(0) != 3 || !tensor::IsFloat(c.dtype(0))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "log_probs (input 0) is ", DTypeName(c.dtype(0)), kernels::ShapeString(c.shape(0)),
        " but must be float [input_length, batch_size, num_classes]"));
  }
  const int64_t time = c.shape(0)[0], batch = c.shape(0)[1];
  IPUPOD_RETURN_IF_ERROR(
      RequireDType("lengths (input 1)", c.dtype(1), {DType::kInt32, DType::kInt64}));
  if (c.shape(1) != Shape{batch}) {
    return absl::InvalidArgumentError(absl::StrCat("lengths (input 1) is ",
                                                   kernels::ShapeString(c.shape(1)),
                                                   " but must be [batch_size] = [", batch, "]"));
  }
  IPUPOD_ASSIGN_OR_RETURN(kernels::CtcBeamSearchOptions o, CtcOptions(c));
  IPUPOD_RETURN_IF_ERROR(kernels::CheckCtcBeamSearchOptions(o, c.shape(0)[2]));
  std::vector<TensorType> out = {{c.dtype(0), {batch, o.top_paths}},
                                 {DType::kInt32, {batch, o.top_paths}},
                                 {DType::kInt32, {batch, o.top_paths, time}}};
  out.resize(std::min(out.size(), c.node.outputs.size()));  // ONNX may omit trailing outputs
  return out;
}

// Writes sequence b's paths into the outputs the node has (see the header).
void WriteCtcPaths(const std::vector<kernels::CtcPath>& paths, int64_t b, int64_t top_paths,
                   int64_t time, absl::Span<Tensor> out) {
  for (int64_t p = 0; p < top_paths; ++p) {
    const int64_t row = b * top_paths + p;
    const bool found = p < static_cast<int64_t>(paths.size());
    const std::vector<int64_t> none;
    const std::vector<int64_t>& path = found ? paths[p].labels : none;
    out[0].mutable_data<float>()[row] =
        found ? static_cast<float>(paths[p].log_prob) : -std::numeric_limits<float>::infinity();
    if (out.size() > 1) out[1].mutable_data<int32_t>()[row] = static_cast<int32_t>(path.size());
    if (out.size() < 3) continue;
    int32_t* labels = out[2].mutable_data<int32_t>() + row * time;  // zero-filled
    for (size_t k = 0; k < path.size(); ++k) labels[k] = static_cast<int32_t>(path[k]);
  }
}

absl::Status RunCtcBeamSearch(const OpContext& c, absl::Span<Tensor> out) {
  IPUPOD_ASSIGN_OR_RETURN(kernels::CtcBeamSearchOptions o, CtcOptions(c));
  const Shape& shape = c.shape(0);
  const int64_t time = shape[0], batch = shape[1], classes = shape[2];
  const Tensor& lengths = *c.values[1];
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t length = lengths.IntAt(b);
    if (length < 0 || length > time) {
      return absl::InvalidArgumentError(absl::StrCat("length ", length, " of sequence ", b,
                                                     " is outside [0, ", time,
                                                     "] (the input_length of log_probs)"));
    }
    IPUPOD_ASSIGN_OR_RETURN(std::vector<kernels::CtcPath> paths,
                            kernels::CtcBeamSearch(c.values[0]->data<float>() + b * classes, length,
                                                   classes, batch * classes, o));
    WriteCtcPaths(paths, b, o.top_paths, time, out);
  }
  return absl::OkStatus();
}

// Every step extends every beam by every class.
int64_t CtcFlops(const OpContext& c, absl::Span<const TensorType> outputs) {
  const Shape& shape = c.shape(0);
  const int64_t beam = c.Int("beam_width", 100).value_or(100);
  return 4 * shape[0] * shape[1] * shape[2] * beam;
}

OpDef Graphcore(std::string op, int min_in, int max_in, InferFn infer, RunFn run,
                std::vector<std::string> attrs) {
  return MakeOpDef(absl::StrCat(kGraphcoreDomain, ".", op), min_in, max_in, infer, run, NoFlops,
                   std::move(attrs));
}

}  // namespace

void RegisterPoptorchOps(std::vector<OpDef>& defs) {
  defs.push_back(Graphcore("Nop", 1, 1, InferIdentity, RunCopy, {}));
  defs.back().never_fold = true;  // PopART never eliminates it either (while it is used)
  defs.push_back(
      Graphcore("IpuPrint", 1, 1, InferIdentity, RunIpuPrint, {"title", "print_gradient"}));
  defs.back().never_fold = true;  // printing is its point
  defs.push_back(Graphcore("DynamicSlice", 2, 2, InferDynamicSlice, RunDynamicSlice,
                           {"axes", "sizes", "noOverlap"}));
  defs.push_back(Graphcore("DynamicUpdate", 3, 3, InferDynamicUpdate, RunDynamicUpdate,
                           {"axes", "sizes", "noOverlap"}));
  defs.push_back(Graphcore("CtcBeamSearchDecoder", 2, 2, InferCtcBeamSearch, RunCtcBeamSearch,
                           {"blank", "beam_width", "top_paths"}));
  defs.back().flops = CtcFlops;
  defs.back().min_outputs = 1;  // a model may use only the probabilities
  defs.back().max_outputs = 3;
}

}  // namespace ipupod::graph
