#include "common/tensor/tensor.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include <sys/mman.h>

namespace ipupod::tensor {

namespace internal {

void* AllocatePopulated(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}

void FreePopulated(void* p, size_t bytes) { ::munmap(p, bytes); }

}  // namespace internal

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kInt64:
      return "int64";
    case DType::kInt32:
      return "int32";
    case DType::kBool:
      return "bool";
    case DType::kFloat16:
      return "float16";
  }
  return "unknown";
}

absl::StatusOr<DType> ParseDTypeName(absl::string_view name) {
  for (DType dtype :
       {DType::kFloat32, DType::kInt64, DType::kInt32, DType::kBool, DType::kFloat16}) {
    if (DTypeName(dtype) == name) return dtype;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "dtype \"%s\" is not supported; use float32, float16, int64, int32 or bool", name));
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kInt32:
      return 4;
    case DType::kBool:
      return 1;
    case DType::kFloat16:
      return 2;
  }
  return 0;
}

absl::StatusOr<int64_t> CheckedNumElements(DType dtype, absl::Span<const int64_t> shape) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t n, NumElements(shape));
  if (n > kTensorBytesMax / static_cast<int64_t>(DTypeSize(dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat(DTypeName(dtype), ShapeString(shape), " exceeds the 4 GiB tensor limit"));
  }
  return n;
}

Tensor::Tensor() : Tensor(DType::kFloat32, Shape{0}, 0) {}

Tensor::Tensor(DType dtype, Shape shape, int64_t num_elements)
    : dtype_(dtype),
      shape_(std::move(shape)),
      num_elements_(num_elements),
      bytes_(static_cast<size_t>(num_elements) * DTypeSize(dtype)) {}

absl::StatusOr<Tensor> Tensor::Create(DType dtype, Shape shape) {
  IPUPOD_ASSIGN_OR_RETURN(Tensor t, CreateForOverwrite(dtype, std::move(shape)));
  if (!t.bytes_.empty()) std::memset(t.bytes_.data(), 0, t.bytes_.size());
  return t;
}

absl::StatusOr<Tensor> Tensor::CreateForOverwrite(DType dtype, Shape shape) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t n, CheckedNumElements(dtype, shape));
  return Tensor(dtype, std::move(shape), n);
}

absl::StatusOr<Tensor> Tensor::FromBytes(DType dtype, Shape shape, absl::string_view bytes) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t n, CheckedNumElements(dtype, shape));
  const size_t want = static_cast<size_t>(n) * DTypeSize(dtype);
  if (bytes.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(DTypeName(dtype), ShapeString(shape), " needs ",
                                                   want, " bytes, got ", bytes.size()));
  }
  if (dtype == DType::kBool) {
    for (char c : bytes) {
      if (c != 0 && c != 1) {
        return absl::InvalidArgumentError("bool tensor holds a byte other than 0 or 1");
      }
    }
  }
  Tensor t(dtype, std::move(shape), n);
  if (want > 0) std::memcpy(t.bytes_.data(), bytes.data(), want);
  return t;
}

absl::Status Tensor::Reshape(Shape shape) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t n, NumElements(shape));
  if (n != num_elements_) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reshape ", ShapeString(shape_), " to ", ShapeString(shape)));
  }
  shape_ = std::move(shape);
  return absl::OkStatus();
}

int64_t Tensor::IntAt(int64_t i) const {
  switch (dtype_) {
    case DType::kInt64:
      return data<int64_t>()[i];
    case DType::kInt32:
      return data<int32_t>()[i];
    case DType::kBool:
      return data<bool>()[i] ? 1 : 0;
    case DType::kFloat32:
    case DType::kFloat16:
      break;
  }
  CheckDType(DType::kInt64);
  return 0;
}

std::string Tensor::DebugString() const {
  std::string out = absl::StrCat(DTypeName(dtype_), ShapeString(shape_), " {");
  const int64_t shown = std::min<int64_t>(num_elements_, 8);
  for (int64_t i = 0; i < shown; ++i) {
    if (i > 0) out += ", ";
    if (dtype_ == DType::kFloat32) {
      absl::StrAppend(&out, data<float>()[i]);
    } else if (dtype_ == DType::kFloat16) {
      absl::StrAppend(&out, ToFloat32(data<Float16>()[i]));
    } else {
      absl::StrAppend(&out, IntAt(i));
    }
  }
  if (shown < num_elements_) out += ", ...";
  return out + "}";
}

bool Tensor::operator==(const Tensor& other) const {
  return dtype_ == other.dtype_ && shape_ == other.shape_ && bytes_ == other.bytes_;
}

absl::StatusOr<Tensor> Tensor::WidenedToFloat32() const {
  if (dtype_ != DType::kFloat16) return *this;
  return ConvertedTo(DType::kFloat32);
}

absl::StatusOr<Tensor> Tensor::ConvertedTo(DType dtype) const {
  if (!IsFloat(dtype_) || !IsFloat(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot convert ", DTypeName(dtype_), " to ",
                                                   DTypeName(dtype), " (float types only)"));
  }
  if (dtype == dtype_) return *this;
  IPUPOD_ASSIGN_OR_RETURN(Tensor out, CreateForOverwrite(dtype, shape_));
  if (dtype == DType::kFloat32) {
    WidenToFloat32(values<Float16>(), out.mutable_data<float>());
  } else {
    NarrowToFloat16(values<float>(), out.mutable_data<Float16>());
  }
  return out;
}

void Tensor::CheckDType(DType want) const {
  if (want == dtype_) return;
  // A caller bug, not a data error: fail loudly rather than reinterpret bytes.
  std::fprintf(stderr, "tensor::Tensor: accessed %s tensor as %s\n",
               std::string(DTypeName(dtype_)).c_str(), std::string(DTypeName(want)).c_str());
  std::abort();
}

}  // namespace ipupod::tensor
