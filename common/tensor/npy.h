// File: common/tensor/npy.h
//
// NumPy .npy reading and writing for tensor::Tensor: how inputs, outputs and
// reference data travel between Python (np.save) and ipupod. (.npz files are
// zip archives of .npy members; their reader will sit on top of ParseNpy.)
//
// Reading is strict: format versions 1.0, 2.0 and 3.0; the header must be
// the exact dict numpy writes ({'descr': ..., 'fortran_order': ..., 'shape':
// (...)}), C order only, little-endian dtypes '<f4' (float32), '<i8'
// (int64), '<i4' (int32) and '|b1' (bool, bytes 0/1), and the data must
// fill the file exactly - no missing or trailing bytes.
// Header dicts over 1 MiB are refused (numpy writes a few hundred bytes).
// Writing produces format 1.0 (2.0 if the header needs it), header padded to
// a multiple of 64 bytes, as numpy does.
//
// Thread safety: pure functions.
// Errors: INVALID_ARGUMENT for any malformed or unsupported file (message
// says which part); NOT_FOUND if a file to read does not exist; INTERNAL for
// I/O failures.
#ifndef IPUPOD_TENSOR_NPY_H_
#define IPUPOD_TENSOR_NPY_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor/tensor.h"

namespace ipupod::tensor {

absl::StatusOr<Tensor> ParseNpy(absl::string_view bytes);

// What a .npy header declares, for readers that stream the data (the .npz
// reader inflates it straight into the tensor).
struct NpyLayout {
  DType dtype = DType::kFloat32;
  Shape shape;
  size_t data_offset = 0;  // bytes of magic, version, header length and header
  size_t data_bytes = 0;   // element count x dtype size (within kTensorBytesMax)
};
// data_offset from the first bytes of a file: 10 suffice for format 1.0, 12
// for 2.0 and 3.0.
absl::StatusOr<size_t> NpyHeaderSize(absl::string_view prefix);
// The layout from the first NpyHeaderSize bytes (more may follow).
absl::StatusOr<NpyLayout> ParseNpyHeader(absl::string_view bytes);
absl::StatusOr<Tensor> ReadNpyFile(absl::string_view path);

std::string SerializeNpy(const Tensor& tensor);
absl::Status WriteNpyFile(absl::string_view path, const Tensor& tensor);

}  // namespace ipupod::tensor

#endif  // IPUPOD_TENSOR_NPY_H_
