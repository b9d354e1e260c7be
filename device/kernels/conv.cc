#include "device/kernels/conv.h"

#include <algorithm>
#include <exception>
#include <new>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/sync.h"
#include "device/kernels/interrupt.h"
#include "dnnl.hpp"

namespace ipupod::kernels {
namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using DnnlDims = memory::dims;
using Args = std::unordered_map<int, memory>;

const dnnl::engine& Engine() {
  static const dnnl::engine* const engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// Plain row-major layouts by spatial rank (1-3).
memory::format_tag DataTag(size_t spatial) {
  static constexpr memory::format_tag kTags[] = {memory::format_tag::ncw, memory::format_tag::nchw,
                                                 memory::format_tag::ncdhw};
  return kTags[spatial - 1];
}
memory::format_tag WeightTag(size_t spatial, bool grouped) {
  static constexpr memory::format_tag kPlain[] = {memory::format_tag::oiw, memory::format_tag::oihw,
                                                  memory::format_tag::oidhw};
  static constexpr memory::format_tag kGrouped[] = {
      memory::format_tag::goiw, memory::format_tag::goihw, memory::format_tag::goidhw};
  return grouped ? kGrouped[spatial - 1] : kPlain[spatial - 1];
}

memory::desc Plain(DnnlDims dims, memory::format_tag tag) {
  return memory::desc(dims, memory::data_type::f32, tag);
}

DnnlDims Concat(std::initializer_list<int64_t> head, const std::vector<int64_t>& tail) {
  DnnlDims out(head);
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

// oneDNN counts dilation from 0 (no dilation), ONNX from 1.
DnnlDims DnnlDilations(const std::vector<int64_t>& dilations) {
  DnnlDims out;
  for (int64_t d : dilations) out.push_back(d - 1);
  return out;
}

memory Wrap(const memory::desc& md, const float* data) {
  return memory(md, Engine(), const_cast<float*>(data));  // oneDNN only reads inputs
}

void Execute(const dnnl::primitive& p, const Args& args) {
  dnnl::stream stream(Engine());
  p.execute(stream, args);
  stream.wait();
}

// Runs `body`, turning oneDNN's exceptions into statuses (the third-party edge).
template <typename Body>
absl::Status Guard(const char* what, Body&& body) {
  try {
    body();
    return absl::OkStatus();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": out of host memory"));
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_out_of_memory) {
      return absl::ResourceExhaustedError(absl::StrCat(what, ": out of host memory (oneDNN)"));
    }
    return absl::InternalError(absl::StrCat(what, ": oneDNN failed: ", e.what()));
  }
}

absl::Status CheckConv(const ConvGeometry& g) {
  const size_t n = g.in_spatial.size();
  if (n < 1 || n > 3 || g.kernel.size() != n || g.strides.size() != n || g.dilations.size() != n ||
      g.pad_begin.size() != n || g.pad_end.size() != n || g.out_spatial.size() != n ||
      g.groups < 1 || g.in_channels % g.groups != 0 || g.out_channels % g.groups != 0) {
    return absl::InvalidArgumentError("inconsistent convolution geometry");
  }
  for (size_t i = 0; i < n; ++i) {
    if (g.out_spatial[i] != ConvOutputSize(g.in_spatial[i], g.kernel[i], g.strides[i],
                                           g.dilations[i], g.pad_begin[i], g.pad_end[i])) {
      return absl::InvalidArgumentError("convolution output size does not match its geometry");
    }
  }
  return absl::OkStatus();
}

struct ConvDescs {
  memory::desc src, weights, bias, dst;
};

ConvDescs DescsOf(const ConvGeometry& g) {
  const size_t n = g.in_spatial.size();
  const bool grouped = g.groups > 1;
  DnnlDims w =
      grouped ? Concat({g.groups, g.out_channels / g.groups, g.in_channels / g.groups}, g.kernel)
              : Concat({g.out_channels, g.in_channels}, g.kernel);
  return {Plain(Concat({g.batch, g.in_channels}, g.in_spatial), DataTag(n)),
          Plain(w, WeightTag(n, grouped)), Plain({g.out_channels}, memory::format_tag::x),
          Plain(Concat({g.batch, g.out_channels}, g.out_spatial), DataTag(n))};
}

dnnl::convolution_forward::primitive_desc ForwardPd(const ConvGeometry& g, const ConvDescs& d,
                                                    bool with_bias, prop_kind kind,
                                                    const dnnl::primitive_attr& attr = {}) {
  const memory::desc none;
  dnnl::convolution_forward::desc desc(kind, algorithm::convolution_direct, d.src, d.weights,
                                       with_bias ? d.bias : none, d.dst, g.strides,
                                       DnnlDilations(g.dilations), g.pad_begin, g.pad_end);
  return dnnl::convolution_forward::primitive_desc(desc, attr, Engine());
}

// The forward convolution of one geometry, created once and run by any
// thread: its scratchpad is the caller's (user mode), since oneDNN's own
// belongs to the thread that created the primitive. 2-D convolutions run on
// nChw16c blocks, as torch runs them: measured on ResNet-18
// (tools/bench/vision_bench), oneDNN's direct AVX-512 kernel there takes 1148 ms
// where gemm on the plain layout takes 1656 (64 images), reorders included
// 1536; the layout oneDNN picks by itself (NHWC, brgconv) was slower.
struct ForwardPlan {
  ConvDescs plain;
  memory::desc src, weights, dst;  // what the primitive runs on
  memory::desc scratchpad;
  dnnl::convolution_forward primitive;
};

std::string PlanKey(const ConvGeometry& g, bool with_bias) {
  return absl::StrCat(g.batch, ";", g.in_channels, ";", g.out_channels, ";", g.groups, ";",
                      absl::StrJoin(g.in_spatial, ","), ";", absl::StrJoin(g.kernel, ","), ";",
                      absl::StrJoin(g.strides, ","), ";", absl::StrJoin(g.dilations, ","), ";",
                      absl::StrJoin(g.pad_begin, ","), ";", absl::StrJoin(g.pad_end, ","), ";",
                      with_bias);
}

// 2-D activations with a multiple of 16 channels in oneDNN's nChw16c blocks
// (its direct AVX-512 kernels), the rest plain.
memory::desc RunLayout(const memory::desc& plain, int64_t channels, size_t spatial) {
  if (spatial != 2 || channels % 16 != 0) return plain;
  return memory::desc(plain.dims(), memory::data_type::f32, memory::format_tag::nChw16c);
}

std::shared_ptr<const ForwardPlan> MakePlan(const ConvGeometry& g, bool with_bias) {
  const ConvDescs plain = DescsOf(g);
  const size_t n = g.in_spatial.size();
  const ConvDescs run = {
      RunLayout(plain.src, g.in_channels, n),
      memory::desc(plain.weights.dims(), memory::data_type::f32, memory::format_tag::any),
      plain.bias, RunLayout(plain.dst, g.out_channels, n)};
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  auto pd = ForwardPd(g, run, with_bias, prop_kind::forward_inference, attr);
  return std::make_shared<const ForwardPlan>(ForwardPlan{plain, pd.src_desc(), pd.weights_desc(),
                                                         pd.dst_desc(), pd.scratchpad_desc(),
                                                         dnnl::convolution_forward(pd)});
}

// `plain` in the layout `wanted`: itself, or a reordered copy.
memory InLayout(memory plain, const memory::desc& wanted, dnnl::stream& stream) {
  if (plain.get_desc() == wanted) return plain;
  memory out(wanted, Engine());
  dnnl::reorder(plain, out).execute(stream, plain, out);
  return out;
}

// Plans by geometry: a model's convolutions repeat every step. Bounded; when
// full it starts again (a model has tens of distinct convolutions).
class PlanCache {
 public:
  static constexpr size_t kMaxPlans = 512;

  std::shared_ptr<const ForwardPlan> Get(const ConvGeometry& g, bool with_bias) {
    const std::string key = PlanKey(g, with_bias);
    {
      sync::MutexLock lock(&mu_);
      auto it = plans_.find(key);
      if (it != plans_.end()) return it->second;
    }
    std::shared_ptr<const ForwardPlan> plan = MakePlan(g, with_bias);  // outside the lock
    sync::MutexLock lock(&mu_);
    if (plans_.size() >= kMaxPlans) plans_.clear();
    return plans_.emplace(key, std::move(plan)).first->second;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const ForwardPlan>> plans_ ABSL_GUARDED_BY(mu_);
};

PlanCache& Plans() {
  static PlanCache* const cache = new PlanCache();
  return *cache;
}

}  // namespace

int64_t ConvOutputSize(int64_t in, int64_t kernel, int64_t stride, int64_t dilation,
                       int64_t pad_begin, int64_t pad_end) {
  const int64_t span = in + pad_begin + pad_end - dilation * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

int64_t ConvGeometry::MultiplyAdds() const {
  int64_t window = in_channels / groups;
  for (int64_t k : kernel) window *= k;
  int64_t outputs = batch * out_channels;
  for (int64_t o : out_spatial) outputs *= o;
  return outputs * window;
}

double ConvGeometry::ImageMultiplyAdds() const {
  double window = static_cast<double>(in_channels / groups);
  for (int64_t k : kernel) window *= static_cast<double>(k);
  double outputs = static_cast<double>(out_channels);
  for (int64_t o : out_spatial) outputs *= static_cast<double>(o);
  return outputs * window;
}

namespace {

absl::Status ConvForwardOnce(const ConvGeometry& g, const float* x, const float* w, const float* b,
                             float* y) {
  return Guard("Conv", [&] {
    const std::shared_ptr<const ForwardPlan> plan = Plans().Get(g, b != nullptr);
    const ConvDescs& d = plan->plain;
    dnnl::stream stream(Engine());
    memory dst_plain = Wrap(d.dst, y);
    memory dst = plan->dst == d.dst ? dst_plain : memory(plan->dst, Engine());
    Args args = {{DNNL_ARG_SRC, InLayout(Wrap(d.src, x), plan->src, stream)},
                 {DNNL_ARG_WEIGHTS, InLayout(Wrap(d.weights, w), plan->weights, stream)},
                 {DNNL_ARG_DST, dst},
                 {DNNL_ARG_SCRATCHPAD, memory(plan->scratchpad, Engine())}};
    if (b != nullptr) args.emplace(DNNL_ARG_BIAS, Wrap(d.bias, b));
    plan->primitive.execute(stream, args);
    if (plan->dst != d.dst) dnnl::reorder(dst, dst_plain).execute(stream, dst, dst_plain);
    stream.wait();
  });
}

int64_t Product(const std::vector<int64_t>& dims) {
  int64_t p = 1;
  for (int64_t d : dims) p *= d;
  return p;
}

}  // namespace

// Chunks of whole images, each at most kConvChunkMultiplyAdds (at least one
// image), with an interrupt point after each.
absl::Status ConvForward(const ConvGeometry& g, const float* x, const float* w, const float* b,
                         float* y) {
  if (absl::Status ok = CheckConv(g); !ok.ok()) return ok;
  const double image = g.ImageMultiplyAdds();
  if (g.batch <= 1 || image * static_cast<double>(g.batch) <= kConvChunkMultiplyAdds) {
    return ConvForwardOnce(g, x, w, b, y);
  }
  const int64_t per = std::max<int64_t>(
      1, static_cast<int64_t>(static_cast<double>(kConvChunkMultiplyAdds) / std::max(image, 1.0)));
  const int64_t x_image = g.in_channels * Product(g.in_spatial);
  const int64_t y_image = g.out_channels * Product(g.out_spatial);
  absl::Status status;
  ForEachChunk(g.batch, per, static_cast<int64_t>(image), [&](int64_t begin, int64_t end) {
    if (!status.ok()) return;
    ConvGeometry chunk = g;
    chunk.batch = end - begin;
    status = ConvForwardOnce(chunk, x + begin * x_image, w, b, y + begin * y_image);
  });
  return status;
}

absl::Status ConvBackwardData(const ConvGeometry& g, const float* dy, const float* w, float* dx) {
  if (absl::Status ok = CheckConv(g); !ok.ok()) return ok;
  return Guard("Conv backward (data)", [&] {
    const ConvDescs d = DescsOf(g);
    auto hint = ForwardPd(g, d, false, prop_kind::forward_training);
    dnnl::convolution_backward_data::desc desc(algorithm::convolution_direct, d.src, d.weights,
                                               d.dst, g.strides, DnnlDilations(g.dilations),
                                               g.pad_begin, g.pad_end);
    dnnl::convolution_backward_data::primitive_desc pd(desc, Engine(), hint);
    Execute(dnnl::convolution_backward_data(pd), {{DNNL_ARG_DIFF_DST, Wrap(d.dst, dy)},
                                                  {DNNL_ARG_WEIGHTS, Wrap(d.weights, w)},
                                                  {DNNL_ARG_DIFF_SRC, Wrap(d.src, dx)}});
  });
}

absl::Status ConvBackwardWeights(const ConvGeometry& g, const float* x, const float* dy, float* dw,
                                 float* db) {
  if (absl::Status ok = CheckConv(g); !ok.ok()) return ok;
  return Guard("Conv backward (weights)", [&] {
    const ConvDescs d = DescsOf(g);
    const memory::desc none;
    auto hint = ForwardPd(g, d, db != nullptr, prop_kind::forward_training);
    dnnl::convolution_backward_weights::desc desc(
        algorithm::convolution_direct, d.src, d.weights, db != nullptr ? d.bias : none, d.dst,
        g.strides, DnnlDilations(g.dilations), g.pad_begin, g.pad_end);
    dnnl::convolution_backward_weights::primitive_desc pd(desc, Engine(), hint);
    Args args = {{DNNL_ARG_SRC, Wrap(d.src, x)},
                 {DNNL_ARG_DIFF_DST, Wrap(d.dst, dy)},
                 {DNNL_ARG_DIFF_WEIGHTS, Wrap(d.weights, dw)}};
    if (db != nullptr) args.emplace(DNNL_ARG_DIFF_BIAS, Wrap(d.bias, db));
    Execute(dnnl::convolution_backward_weights(pd), args);
  });
}

// ---------------------------------------------------------------- pooling

namespace {

absl::Status CheckPool(const PoolGeometry& g) {
  const size_t n = g.in_spatial.size();
  if (n < 1 || n > 3 || g.kernel.size() != n || g.strides.size() != n || g.dilations.size() != n ||
      g.pad_begin.size() != n || g.pad_end.size() != n || g.out_spatial.size() != n) {
    return absl::InvalidArgumentError("inconsistent pooling geometry");
  }
  for (size_t i = 0; i < n; ++i) {
    if (g.kind != PoolKind::kMax && g.dilations[i] != 1) {
      return absl::InvalidArgumentError("average pooling has no dilations");
    }
    if (g.out_spatial[i] != ConvOutputSize(g.in_spatial[i], g.kernel[i], g.strides[i],
                                           g.dilations[i], g.pad_begin[i], g.pad_end[i])) {
      return absl::InvalidArgumentError("pooling output size does not match its geometry");
    }
  }
  return absl::OkStatus();
}

algorithm PoolAlgorithm(PoolKind kind) {
  switch (kind) {
    case PoolKind::kMax:
      return algorithm::pooling_max;
    case PoolKind::kAverageIncludePad:
      return algorithm::pooling_avg_include_padding;
    case PoolKind::kAverageExcludePad:
      return algorithm::pooling_avg_exclude_padding;
  }
  return algorithm::pooling_max;
}

struct PoolDescs {
  memory::desc src, dst;
};

PoolDescs DescsOf(const PoolGeometry& g) {
  const memory::format_tag tag = DataTag(g.in_spatial.size());
  return {Plain(Concat({g.batch, g.channels}, g.in_spatial), tag),
          Plain(Concat({g.batch, g.channels}, g.out_spatial), tag)};
}

dnnl::pooling_v2_forward::primitive_desc PoolForwardPd(const PoolGeometry& g, const PoolDescs& d,
                                                       prop_kind kind) {
  dnnl::pooling_v2_forward::desc desc(kind, PoolAlgorithm(g.kind), d.src, d.dst, g.strides,
                                      g.kernel, DnnlDilations(g.dilations), g.pad_begin, g.pad_end);
  return dnnl::pooling_v2_forward::primitive_desc(desc, Engine());
}

}  // namespace

absl::Status PoolForward(const PoolGeometry& g, const float* x, float* y) {
  if (absl::Status ok = CheckPool(g); !ok.ok()) return ok;
  return Guard("pooling", [&] {
    const PoolDescs d = DescsOf(g);
    auto pd = PoolForwardPd(g, d, prop_kind::forward_inference);
    Execute(dnnl::pooling_v2_forward(pd),
            {{DNNL_ARG_SRC, Wrap(d.src, x)}, {DNNL_ARG_DST, Wrap(d.dst, y)}});
  });
}

absl::Status PoolBackward(const PoolGeometry& g, const float* x, const float* dy, float* dx) {
  if (absl::Status ok = CheckPool(g); !ok.ok()) return ok;
  return Guard("pooling backward", [&] {
    const PoolDescs d = DescsOf(g);
    auto hint = PoolForwardPd(g, d, prop_kind::forward_training);
    Args backward = {{DNNL_ARG_DIFF_DST, Wrap(d.dst, dy)}, {DNNL_ARG_DIFF_SRC, Wrap(d.src, dx)}};
    if (g.kind == PoolKind::kMax) {  // the maxima's positions: the forward pass again
      memory workspace(hint.workspace_desc(), Engine());
      memory y(d.dst, Engine());
      Execute(dnnl::pooling_v2_forward(hint),
              {{DNNL_ARG_SRC, Wrap(d.src, x)}, {DNNL_ARG_DST, y}, {DNNL_ARG_WORKSPACE, workspace}});
      backward.emplace(DNNL_ARG_WORKSPACE, workspace);
    }
    dnnl::pooling_v2_backward::desc desc(PoolAlgorithm(g.kind), d.src, d.dst, g.strides, g.kernel,
                                         DnnlDilations(g.dilations), g.pad_begin, g.pad_end);
    dnnl::pooling_v2_backward::primitive_desc pd(desc, Engine(), hint);
    Execute(dnnl::pooling_v2_backward(pd), backward);
  });
}

}  // namespace ipupod::kernels
