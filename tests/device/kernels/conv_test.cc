// device/kernels/conv.h against direct loops over the definitions (small sizes, every
// variant: groups, strides, dilations, asymmetric padding, 1-D and 2-D), the
// backward passes against the same loops' adjoints, and ConvForward called
// from several threads at once on shared cached primitives (run under
// ThreadSanitizer with one OpenMP thread per call, see CMakeLists.txt).
#include "device/kernels/conv.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "device/kernels/interrupt.h"

namespace ipupod::kernels {
namespace {

std::vector<float> Values(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<float>(i) * scale);
  return v;
}

int64_t Product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

// 2-D convolution geometry (1-D when h is absent: in_spatial {w}).
ConvGeometry Geometry(std::vector<int64_t> in, std::vector<int64_t> kernel, int64_t groups,
                      std::vector<int64_t> strides, std::vector<int64_t> dilations,
                      std::vector<int64_t> pb, std::vector<int64_t> pe) {
  ConvGeometry g;
  g.batch = 2;
  g.in_channels = 4;
  g.out_channels = 6;
  g.groups = groups;
  g.in_spatial = in;
  g.kernel = kernel;
  g.strides = strides;
  g.dilations = dilations;
  g.pad_begin = pb;
  g.pad_end = pe;
  for (size_t i = 0; i < in.size(); ++i) {
    g.out_spatial.push_back(
        ConvOutputSize(in[i], kernel[i], strides[i], dilations[i], pb[i], pe[i]));
  }
  return g;
}

// Calls visit(y index, x index, w index) for every multiply-add of the
// convolution (x index -1: a padded position). Spatial rank 1 or 2.
void ForEachTap(const ConvGeometry& g,
                const std::function<void(int64_t, int64_t, int64_t)>& visit) {
  const bool two = g.spatial_rank() == 2;
  const int64_t ih = two ? g.in_spatial[0] : 1, iw = g.in_spatial.back();
  const int64_t oh = two ? g.out_spatial[0] : 1, ow = g.out_spatial.back();
  const int64_t kh = two ? g.kernel[0] : 1, kw = g.kernel.back();
  const int64_t sh = two ? g.strides[0] : 1, sw = g.strides.back();
  const int64_t dh = two ? g.dilations[0] : 1, dw = g.dilations.back();
  const int64_t ph = two ? g.pad_begin[0] : 0, pw = g.pad_begin.back();
  const int64_t cg = g.in_channels / g.groups, mg = g.out_channels / g.groups;
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t m = 0; m < g.out_channels; ++m)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x)
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t yy = y * sh - ph + i * dh, xx = x * sw - pw + j * dw;
                const int64_t ci = (m / mg) * cg + c;
                const bool inside = yy >= 0 && yy < ih && xx >= 0 && xx < iw;
                visit(((n * g.out_channels + m) * oh + y) * ow + x,
                      inside ? ((n * g.in_channels + ci) * ih + yy) * iw + xx : -1,
                      ((m * cg + c) * kh + i) * kw + j);
              }
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-4 + 1e-4 * std::abs(want[i])) << "element " << i;
  }
}

struct Case {
  const char* name;
  ConvGeometry g;
};

std::vector<Case> Cases() {
  return {
      {"plain 3x3 pad 1", Geometry({5, 6}, {3, 3}, 1, {1, 1}, {1, 1}, {1, 1}, {1, 1})},
      {"grouped, strided, asymmetric pads",
       Geometry({7, 5}, {3, 2}, 2, {2, 1}, {1, 1}, {1, 0}, {2, 1})},
      {"dilated", Geometry({9, 9}, {3, 3}, 1, {1, 2}, {2, 3}, {2, 0}, {2, 3})},
      {"1-D", Geometry({11}, {4}, 2, {3}, {2}, {1}, {2})},
  };
}

TEST(ConvTest, ForwardAndBackwardMatchTheDefinition) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    const ConvGeometry& g = c.g;
    const int64_t nx = g.batch * g.in_channels * Product(g.in_spatial);
    const int64_t ny = g.batch * g.out_channels * Product(g.out_spatial);
    const int64_t nw = g.out_channels * (g.in_channels / g.groups) * Product(g.kernel);
    const std::vector<float> x = Values(nx, 0.37f), w = Values(nw, 0.91f), b = Values(6, 1.3f);
    const std::vector<float> dy = Values(ny, 0.53f);
    std::vector<double> y(ny), dx(nx), dw(nw), db(6);
    ForEachTap(g, [&](int64_t yi, int64_t xi, int64_t wi) {
      if (xi < 0) return;
      y[yi] += double{x[xi]} * w[wi];
      dx[xi] += double{dy[yi]} * w[wi];
      dw[wi] += double{dy[yi]} * x[xi];
    });
    const int64_t per_channel = ny / g.batch / g.out_channels;
    for (int64_t i = 0; i < ny; ++i) {
      const int64_t m = (i / per_channel) % g.out_channels;
      y[i] += b[m];
      db[m] += dy[i];
    }
    std::vector<float> got_y(ny), got_dx(nx), got_dw(nw), got_db(6);
    ASSERT_TRUE(ConvForward(g, x.data(), w.data(), b.data(), got_y.data()).ok());
    ExpectNear(got_y, y);
    ASSERT_TRUE(ConvBackwardData(g, dy.data(), w.data(), got_dx.data()).ok());
    ExpectNear(got_dx, dx);
    ASSERT_TRUE(ConvBackwardWeights(g, x.data(), dy.data(), got_dw.data(), got_db.data()).ok());
    ExpectNear(got_dw, dw);
    ExpectNear(got_db, db);
  }
}

// A convolution over kConvChunkMultiplyAdds runs in chunks of images with an
// interrupt point between them: stopped after the first chunk, the last
// images are never computed (issue 29: one oneDNN call cannot be stopped).
TEST(ConvTest, ALargeConvolutionStopsBetweenChunksOfImages) {
  ConvGeometry g;
  g.batch = 4;
  g.in_channels = g.out_channels = 64;
  g.in_spatial = g.out_spatial = {128, 128};
  g.kernel = {3, 3};
  g.strides = g.dilations = {1, 1};
  g.pad_begin = g.pad_end = {1, 1};
  ASSERT_GT(g.ImageMultiplyAdds() * 4, static_cast<double>(kConvChunkMultiplyAdds));
  ASSERT_LT(g.ImageMultiplyAdds() * 2, static_cast<double>(kConvChunkMultiplyAdds));
  const int64_t image_x = 64 * 128 * 128, image_y = image_x;
  const std::vector<float> x = Values(4 * image_x, 0.37f), w = Values(64 * 64 * 9, 0.91f);
  std::vector<float> y(static_cast<size_t>(4 * image_y), -7.0f);
  {
    ScopedInterrupt stop([] { return absl::CancelledError("cancelled by the client"); });
    EXPECT_TRUE(ConvForward(g, x.data(), w.data(), nullptr, y.data()).ok());
    EXPECT_EQ(InterruptStatus().code(), absl::StatusCode::kCancelled);
  }
  EXPECT_NE(y[0], -7.0f) << "the first chunk ran";
  EXPECT_EQ(y.back(), -7.0f) << "the last image was never computed";
  std::vector<float> whole(y.size());
  ASSERT_TRUE(ConvForward(g, x.data(), w.data(), nullptr, whole.data()).ok());
  ConvGeometry one = g;
  one.batch = 1;
  std::vector<float> last(static_cast<size_t>(image_y));
  ASSERT_TRUE(ConvForward(one, x.data() + 3 * image_x, w.data(), nullptr, last.data()).ok());
  EXPECT_TRUE(std::equal(last.begin(), last.end(), whole.end() - image_y));
}

TEST(ConvTest, AnInconsistentGeometryIsRefused) {
  ConvGeometry g = Cases()[0].g;
  g.out_spatial[0] += 1;
  std::vector<float> buffer(4096);
  EXPECT_EQ(ConvForward(g, buffer.data(), buffer.data(), nullptr, buffer.data()).code(),
            absl::StatusCode::kInvalidArgument);
  g = Cases()[0].g;
  g.groups = 3;  // 4 channels do not split in 3
  EXPECT_EQ(ConvForward(g, buffer.data(), buffer.data(), nullptr, buffer.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConvTest, MaxPoolBackwardRoutesToTheMaximum) {
  PoolGeometry g;
  g.kind = PoolKind::kMax;
  g.batch = g.channels = 1;
  g.in_spatial = {2, 2};
  g.kernel = {2, 2};
  g.strides = g.dilations = {1, 1};
  g.pad_begin = g.pad_end = {0, 0};
  g.out_spatial = {1, 1};
  const std::vector<float> x = {1, 5, 3, 2}, dy = {7};
  std::vector<float> y(1), dx(4);
  ASSERT_TRUE(PoolForward(g, x.data(), y.data()).ok());
  EXPECT_EQ(y[0], 5);
  ASSERT_TRUE(PoolBackward(g, x.data(), dy.data(), dx.data()).ok());
  EXPECT_EQ(dx, std::vector<float>({0, 7, 0, 0}));
  g.kind = PoolKind::kAverageExcludePad;
  ASSERT_TRUE(PoolBackward(g, x.data(), dy.data(), dx.data()).ok());
  EXPECT_EQ(dx, std::vector<float>({1.75f, 1.75f, 1.75f, 1.75f}));
}

// Cached primitives are shared: every thread's result equals one thread's.
TEST(ConvTest, ConcurrentForwardCallsShareCachedPrimitives) {
  const std::vector<Case> cases = Cases();
  std::vector<std::vector<float>> inputs, weights, want;
  for (const Case& c : cases) {
    const ConvGeometry& g = c.g;
    inputs.push_back(Values(g.batch * g.in_channels * Product(g.in_spatial), 0.37f));
    weights.push_back(
        Values(g.out_channels * (g.in_channels / g.groups) * Product(g.kernel), 0.91f));
    want.emplace_back(g.batch * g.out_channels * Product(g.out_spatial));
    ASSERT_TRUE(
        ConvForward(g, inputs.back().data(), weights.back().data(), nullptr, want.back().data())
            .ok());
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        const size_t k = static_cast<size_t>(t + round) % cases.size();
        std::vector<float> y(want[k].size());
        const bool ok =
            ConvForward(cases[k].g, inputs[k].data(), weights[k].data(), nullptr, y.data()).ok();
        if (!ok || y != want[k]) ++mismatches[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace ipupod::kernels
