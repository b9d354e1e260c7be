// File: device/kernels/matmul.h
//
// Matrix products on OpenBLAS cblas_sgemm (fp32):
//   MatMul: numpy.matmul semantics - 1-D operands are promoted (and the
//           promoted dim dropped from the result), leading batch dims
//           broadcast. A batched operand times a plain matrix (the Linear
//           layer case) becomes a single sgemm.
//   Gemm:   ONNX Gemm, Y = alpha * op(A) * op(B) + beta * C, with op()
//           optional transposition and C unidirectionally broadcast to [M, N].
//
// OpenBLAS's own worker threads are bounded by device/kernels/threads.h.
//
// Thread safety: pure functions; may be called concurrently (OpenBLAS's
// pthread build is thread-safe).
// Errors: INVALID_ARGUMENT on incompatible shapes, an output shape that is
// not the product's, or a dim too large for BLAS's 32-bit int.
#ifndef IPUPOD_KERNELS_MATMUL_H_
#define IPUPOD_KERNELS_MATMUL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/kernels/view.h"

namespace ipupod::kernels {

// Shape of matmul(a, b) under numpy rules.
absl::StatusOr<std::vector<int64_t>> MatMulShape(Dims a, Dims b);

absl::Status MatMul(View<float> a, View<float> b, MutableView<float> out);

struct GemmOptions {
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 1.0f;
};

// Shape [M, N] of Gemm(a, b). Both operands must be 2-D.
absl::StatusOr<std::vector<int64_t>> GemmShape(Dims a, Dims b, const GemmOptions& options);

// `c.data` may be null (no C term), or equal `out.data` with out's shape:
// then the product accumulates onto out in place (out = alpha op(A) op(B) +
// beta out), with no copy - how a fused optimizer step adds -lr * dL/dW
// straight into W.
absl::Status Gemm(View<float> a, View<float> b, View<float> c, const GemmOptions& options,
                  MutableView<float> out);

}  // namespace ipupod::kernels

#endif  // IPUPOD_KERNELS_MATMUL_H_
