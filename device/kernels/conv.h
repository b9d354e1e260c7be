// File: device/kernels/conv.h
//
// Convolution and pooling over x [N, C, D1 (, D2 (, D3))] in plain row-major
// layout (ONNX Conv, MaxPool, AveragePool; torch nn.Conv1d/2d/3d and the
// pooling layers), forward and backward, on oneDNN (Debian's libdnnl, the
// library torch itself uses for CPU convolutions).
//
// Conventions are ONNX's: weights [M, C / group, K1, ...]; explicit padding
// at the beginning and end of each spatial axis (auto_pad is resolved by the
// caller, device/graph/ops_conv.cc); dilations of 1 mean none; every output size is
//   out = floor((in + pad_begin + pad_end - dilation * (k - 1) - 1) / stride) + 1
// (pooling's ceil_mode is the caller's: it pads the end so that the floor
// gives the ceiling, and average pooling then excludes that padding as torch
// does).
//
// One oneDNN call cannot be interrupted (device/kernels/interrupt.h), so a forward
// convolution of more than kConvChunkMultiplyAdds runs in chunks of images
// with an interrupt point between them, and shape inference refuses a
// convolution of more than kConvImageMultiplyAddsMax per image (one image is
// the smallest chunk): about a second of this machine's compute, 60 times
// the largest convolution of the torchvision models.
//
// Thread safety: pure functions; each call runs on the calling thread and
// oneDNN's OpenMP workers.
// Errors: INVALID_ARGUMENT if a geometry is inconsistent (the callers check
// first, so this is a bug guard); RESOURCE_EXHAUSTED if oneDNN cannot get
// memory; INTERNAL for any other oneDNN failure (its message included).
#ifndef IPUPOD_KERNELS_CONV_H_
#define IPUPOD_KERNELS_CONV_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace ipupod::kernels {

inline constexpr int64_t kConvChunkMultiplyAdds = int64_t{1} << 31;
inline constexpr int64_t kConvImageMultiplyAddsMax = int64_t{1} << 36;

// One convolution: every vector has one entry per spatial axis (1 to 3).
struct ConvGeometry {
  int64_t batch = 1;
  int64_t in_channels = 1;
  int64_t out_channels = 1;
  int64_t groups = 1;
  std::vector<int64_t> in_spatial;
  std::vector<int64_t> kernel;
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pad_begin;
  std::vector<int64_t> pad_end;
  std::vector<int64_t> out_spatial;  // as the file comment's formula gives

  int64_t spatial_rank() const { return static_cast<int64_t>(in_spatial.size()); }
  // Multiply-adds of one forward pass (FLOPs are twice this).
  int64_t MultiplyAdds() const;
  // Of one image, in double: exact enough to compare with a bound, and no
  // overflow for any geometry.
  double ImageMultiplyAdds() const;
};

// The output size of one axis (the file comment's formula); < 1 when the
// padded input is smaller than the dilated window.
int64_t ConvOutputSize(int64_t in, int64_t kernel, int64_t stride, int64_t dilation,
                       int64_t pad_begin, int64_t pad_end);

// y [N, M, O...] = conv(x [N, C, I...], w [M, C/g, K...]) + b [M] (b may be null).
absl::Status ConvForward(const ConvGeometry& g, const float* x, const float* w, const float* b,
                         float* y);
// dx [N, C, I...] from dy [N, M, O...] and w.
absl::Status ConvBackwardData(const ConvGeometry& g, const float* dy, const float* w, float* dx);
// dw [M, C/g, K...] and db [M] (may be null) from x and dy.
absl::Status ConvBackwardWeights(const ConvGeometry& g, const float* x, const float* dy, float* dw,
                                 float* db);

enum class PoolKind {
  kMax,
  kAverageIncludePad,  // count_include_pad = 1: every window divides by its full size
  kAverageExcludePad,  // count_include_pad = 0: padding is not counted
};

// One pooling: channels pool independently; `dilations` must be 1 for
// average pooling (ONNX has none before opset 19).
struct PoolGeometry {
  PoolKind kind = PoolKind::kMax;
  int64_t batch = 1;
  int64_t channels = 1;
  std::vector<int64_t> in_spatial;
  std::vector<int64_t> kernel;
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pad_begin;
  std::vector<int64_t> pad_end;
  std::vector<int64_t> out_spatial;

  int64_t spatial_rank() const { return static_cast<int64_t>(in_spatial.size()); }
};

// y [N, C, O...] = pool(x [N, C, I...]).
absl::Status PoolForward(const PoolGeometry& g, const float* x, float* y);
// dx [N, C, I...] from dy (and, for max pooling, x: the maxima are found
// again, so nothing from the forward pass is kept).
absl::Status PoolBackward(const PoolGeometry& g, const float* x, const float* dy, float* dx);

}  // namespace ipupod::kernels

#endif  // IPUPOD_KERNELS_CONV_H_
