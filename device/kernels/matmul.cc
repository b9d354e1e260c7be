#include "device/kernels/matmul.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/kernels/data_movement.h"
#include "device/kernels/interrupt.h"
#include "device/kernels/shape_util.h"
#include "device/kernels/threads.h"
#include <cblas.h>

namespace ipupod::kernels {
namespace {

// numpy.matmul operands after 1-D promotion: [batch..., rows, cols].
struct MatOperands {
  std::vector<int64_t> a, b;
  bool drop_m = false;  // a was 1-D
  bool drop_n = false;  // b was 1-D
};

MatOperands Promote(Dims a, Dims b) {
  MatOperands m{std::vector<int64_t>(a.begin(), a.end()), std::vector<int64_t>(b.begin(), b.end())};
  if (m.a.size() == 1) {
    m.a.insert(m.a.begin(), 1);
    m.drop_m = true;
  }
  if (m.b.size() == 1) {
    m.b.push_back(1);
    m.drop_n = true;
  }
  return m;
}

absl::Status CheckBlasDim(int64_t d) {
  if (d > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("matrix dim ", d, " exceeds BLAS's int range"));
  }
  return absl::OkStatus();
}

// Multiply-adds of one sgemm call at most, before the product is split
// into row blocks (about 0.1 s of one core), and the fewest rows a block has.
constexpr int64_t kSgemmChunkMacs = int64_t{1} << 31;
constexpr int64_t kSgemmChunkRowsMin = 16;

// C[M,N] = alpha * op(A) * op(B) + beta * C, row-major, leading dims given.
void Sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // BLAS leaves C alone for K = 0 only when beta == 1
    for (int64_t i = 0; i < m * n; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  ApplyDefaultBlasThreadsOnce();
  // A product over kSgemmChunkMacs goes in row blocks, each an interrupt
  // point (device/kernels/interrupt.h): one sgemm can be seconds of compute. Only
  // such products are split, so every smaller one stays one call and its
  // results bit-identical to before (OpenBLAS may round a row block's last
  // bits differently from the whole; docs/design.md).
  const int64_t row_macs = n * k;
  const int64_t rows = m * row_macs <= kSgemmChunkMacs
                           ? m
                           : std::max<int64_t>(kSgemmChunkRowsMin, kSgemmChunkMacs / row_macs);
  for (int64_t i = 0; i < m; i += rows) {
    const int64_t count = std::min(rows, m - i);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                static_cast<int>(count), static_cast<int>(n), static_cast<int>(k), alpha,
                ta ? a + i : a + i * lda, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
                c + i * n, static_cast<int>(n));
    if (InterruptPoint(count * row_macs)) return;
  }
}

// Element offset of each batch entry of an operand with batch dims `batch`
// broadcast into `out_batch`.
std::vector<int64_t> BatchOffsets(Dims batch, Dims out_batch, int64_t matrix_size) {
  std::vector<int64_t> offsets;
  const int64_t count = NumElementsUnchecked(out_batch);
  const std::vector<int64_t> strides = RowMajorStrides(batch);
  std::vector<int64_t> index(out_batch.size(), 0);
  const size_t lead = out_batch.size() - batch.size();
  for (int64_t i = 0; i < count; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < batch.size(); ++d) {
      off += (batch[d] == 1 ? 0 : index[d + lead]) * strides[d];
    }
    offsets.push_back(off * matrix_size);
    for (size_t d = out_batch.size(); d-- > 0;) {  // odometer
      if (++index[d] < out_batch[d]) break;
      index[d] = 0;
    }
  }
  return offsets;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> MatMulShape(Dims a, Dims b) {
  if (a.empty() || b.empty()) {
    return absl::InvalidArgumentError("matmul operands must have rank >= 1");
  }
  const MatOperands m = Promote(a, b);
  const int64_t k_a = m.a.back();
  const int64_t k_b = m.b[m.b.size() - 2];
  if (k_a != k_b) {
    return absl::InvalidArgumentError(absl::StrCat("matmul of ", ShapeString(a), " and ",
                                                   ShapeString(b), ": inner dims ", k_a, " and ",
                                                   k_b, " differ"));
  }
  IPUPOD_ASSIGN_OR_RETURN(
      std::vector<int64_t> out,
      BroadcastShapes(Dims(m.a).subspan(0, m.a.size() - 2), Dims(m.b).subspan(0, m.b.size() - 2)));
  if (!m.drop_m) out.push_back(m.a[m.a.size() - 2]);
  if (!m.drop_n) out.push_back(m.b.back());
  return out;
}

absl::Status MatMul(View<float> a, View<float> b, MutableView<float> out) {
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> want, MatMulShape(a.shape, b.shape));
  IPUPOD_RETURN_IF_ERROR(CheckShape("matmul output", out.shape, want));
  const MatOperands p = Promote(a.shape, b.shape);
  const int64_t m = p.a[p.a.size() - 2], k = p.a.back(), n = p.b.back();
  for (int64_t d : {m, k, n}) IPUPOD_RETURN_IF_ERROR(CheckBlasDim(d));
  const Dims a_batch = Dims(p.a).subspan(0, p.a.size() - 2);
  const Dims b_batch = Dims(p.b).subspan(0, p.b.size() - 2);
  const int64_t a_count = NumElementsUnchecked(a_batch);
  if (NumElementsUnchecked(b_batch) == 1) {
    // [batch..., M, K] x [K, N]: the batch folds into M, one sgemm.
    IPUPOD_RETURN_IF_ERROR(CheckBlasDim(a_count * m));
    Sgemm(false, false, a_count * m, n, k, 1.0f, a.data, k, b.data, n, 0.0f, out.data);
    return absl::OkStatus();
  }
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> out_batch, BroadcastShapes(a_batch, b_batch));
  const std::vector<int64_t> a_off = BatchOffsets(a_batch, out_batch, m * k);
  const std::vector<int64_t> b_off = BatchOffsets(b_batch, out_batch, k * n);
  for (size_t i = 0; i < a_off.size(); ++i) {
    Sgemm(false, false, m, n, k, 1.0f, a.data + a_off[i], k, b.data + b_off[i], n, 0.0f,
          out.data + static_cast<int64_t>(i) * m * n);
    if (InterruptPoint(m * n * k)) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> GemmShape(Dims a, Dims b, const GemmOptions& options) {
  if (a.size() != 2 || b.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm operands must be 2-D, got ", ShapeString(a), " and ", ShapeString(b)));
  }
  const int64_t m = options.trans_a ? a[1] : a[0];
  const int64_t k_a = options.trans_a ? a[0] : a[1];
  const int64_t k_b = options.trans_b ? b[1] : b[0];
  const int64_t n = options.trans_b ? b[0] : b[1];
  if (k_a != k_b) {
    return absl::InvalidArgumentError(absl::StrCat("gemm of ", ShapeString(a), " and ",
                                                   ShapeString(b), ": inner dims ", k_a, " and ",
                                                   k_b, " differ"));
  }
  return std::vector<int64_t>{m, n};
}

absl::Status Gemm(View<float> a, View<float> b, View<float> c, const GemmOptions& options,
                  MutableView<float> out) {
  IPUPOD_ASSIGN_OR_RETURN(std::vector<int64_t> want, GemmShape(a.shape, b.shape, options));
  IPUPOD_RETURN_IF_ERROR(CheckShape("gemm output", out.shape, want));
  const int64_t m = want[0], n = want[1];
  const int64_t k = options.trans_a ? a.shape[0] : a.shape[1];
  for (int64_t d : {m, k, n}) IPUPOD_RETURN_IF_ERROR(CheckBlasDim(d));
  float beta = 0.0f;
  if (c.data == out.data && c.data != nullptr) {
    IPUPOD_RETURN_IF_ERROR(CheckShape("gemm C accumulated in place", c.shape, want));
    beta = options.beta;
  } else if (c.data != nullptr && options.beta != 0.0f) {
    // torch's addmm does the same: C is copied into the result, then sgemm
    // accumulates onto it with beta.
    IPUPOD_RETURN_IF_ERROR(Expand(c.data, c.shape, out.shape, sizeof(float), out.data));
    beta = options.beta;
  }
  Sgemm(options.trans_a, options.trans_b, m, n, k, options.alpha, a.data, a.shape[1], b.data,
        b.shape[1], beta, out.data);
  return absl::OkStatus();
}

}  // namespace ipupod::kernels
