// File: common/tensor/tensor.h
//
// tensor::Tensor: a dense, contiguous, row-major host tensor with a static
// shape - the value type of model weights, constants, graph inputs and
// outputs, and every intermediate the Interpreter computes. It owns its
// storage (value semantics: copies are deep, moves are cheap).
//
// Supported element types (DType): float32, float16 (common/tensor/float16.h's
// Float16: IEEE binary16 bits), int64, int32 and bool (one byte per element,
// always 0 or 1). Storage is at least 16-byte aligned.
//
// Thread safety: a const Tensor may be read from many threads; mutation
// needs exclusive access.
// Errors: INVALID_ARGUMENT for a negative dim, a byte count that does not
// match the shape, a tensor larger than kTensorBytesMax, or (ParseDTypeName)
// a dtype name other than the five.
#ifndef IPUPOD_TENSOR_TENSOR_H_
#define IPUPOD_TENSOR_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tensor/float16.h"
#include "common/tensor/shape.h"

namespace ipupod::tensor {

// kFloat16 comes last so the values of the others never change.
enum class DType : uint8_t { kFloat32, kInt64, kInt32, kBool, kFloat16 };

// "float32", "int64", "int32", "bool", "float16".
absl::string_view DTypeName(DType dtype);
// The inverse of DTypeName: the one parser of dtype names (the wire, the
// .ipx JSON). INVALID_ARGUMENT listing the five for anything else.
absl::StatusOr<DType> ParseDTypeName(absl::string_view name);
size_t DTypeSize(DType dtype);
// float32 or float16.
inline bool IsFloat(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kFloat16; }

template <typename T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<T, int64_t>) return DType::kInt64;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kInt32;
  if constexpr (std::is_same_v<T, bool>) return DType::kBool;
  if constexpr (std::is_same_v<T, Float16>) return DType::kFloat16;
}

// The largest tensor any model may hold or produce: 4 GiB.
inline constexpr int64_t kTensorBytesMax = int64_t{4} << 30;

// Element count of `shape` with the same checks Tensor::Create applies
// (non-negative dims, bytes within kTensorBytesMax).
absl::StatusOr<int64_t> CheckedNumElements(DType dtype, absl::Span<const int64_t> shape);

namespace internal {

// Blocks this large or larger are mapped with their pages populated in one
// call (AllocatePopulated) instead of faulted in one 4 KiB page at a time as
// they are first written: on a virtual machine each fault costs microseconds,
// and a 48 MB data set read by `ipupod run` took 12,000 of them.
inline constexpr size_t kPopulatedBytesMin = size_t{4} << 20;
// mmap(MAP_POPULATE) of `bytes` / munmap; throws std::bad_alloc as
// std::allocator does when the system has no memory.
void* AllocatePopulated(size_t bytes);
void FreePopulated(void* p, size_t bytes);

// std::allocator whose default construct() leaves elements uninitialised:
// Tensor zero-fills explicitly, and only where its contract says so. Large
// blocks come populated (kPopulatedBytesMin).
template <typename T>
struct NoInitAllocator : std::allocator<T> {
  NoInitAllocator() = default;
  template <typename U>
  NoInitAllocator(const NoInitAllocator<U>&) noexcept {}  // NOLINT: rebinding converts

  T* allocate(size_t n) {
    if (n * sizeof(T) >= kPopulatedBytesMin)
      return static_cast<T*>(AllocatePopulated(n * sizeof(T)));
    return std::allocator<T>::allocate(n);
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) >= kPopulatedBytesMin) return FreePopulated(p, n * sizeof(T));
    std::allocator<T>::deallocate(p, n);
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) {
      ::new (static_cast<void*>(p)) U;
    } else {
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
  }
};

}  // namespace internal

class Tensor {
 public:
  // An empty float32 tensor of shape [0].
  Tensor();

  // Zero-filled tensor.
  static absl::StatusOr<Tensor> Create(DType dtype, Shape shape);
  // A tensor whose elements are unspecified, for a kernel that writes every
  // one of them (a GEMM with beta 0): skips Create's zero fill, which costs
  // as much as the writes. REQUIRES: the caller writes all elements before
  // anything reads them (bools only 0 or 1).
  static absl::StatusOr<Tensor> CreateForOverwrite(DType dtype, Shape shape);
  // Copies `bytes` (little-endian elements; bools must be 0 or 1).
  static absl::StatusOr<Tensor> FromBytes(DType dtype, Shape shape, absl::string_view bytes);
  // Copies `values`, whose count must match the shape.
  template <typename T>
  static absl::StatusOr<Tensor> FromValues(Shape shape, absl::Span<const T> values);
  // A rank-0 tensor.
  template <typename T>
  static Tensor Scalar(T value);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t num_elements() const { return num_elements_; }
  size_t byte_size() const { return bytes_.size(); }

  // Typed element access. REQUIRES: DTypeOf<T>() == dtype() (aborts otherwise).
  template <typename T>
  const T* data() const {
    CheckDType(DTypeOf<T>());
    return reinterpret_cast<const T*>(bytes_.data());
  }
  template <typename T>
  T* mutable_data() {
    CheckDType(DTypeOf<T>());
    return reinterpret_cast<T*>(bytes_.data());
  }
  template <typename T>
  absl::Span<const T> values() const {
    return absl::Span<const T>(data<T>(), static_cast<size_t>(num_elements_));
  }

  const void* raw_data() const { return bytes_.data(); }
  void* mutable_raw_data() { return bytes_.data(); }
  absl::string_view bytes() const {
    return absl::string_view(reinterpret_cast<const char*>(bytes_.data()), bytes_.size());
  }

  // Same elements under a new shape with the same element count.
  absl::Status Reshape(Shape shape);

  // Reads element i as int64 (any integer or bool dtype) - for shape
  // arithmetic on small constant tensors. REQUIRES: i < num_elements().
  int64_t IntAt(int64_t i) const;

  // "float32[2, 3]" plus up to 8 leading values.
  std::string DebugString() const;

  bool operator==(const Tensor& other) const;

  // A float32 copy of a float16 tensor (exact), or a copy of anything else.
  absl::StatusOr<Tensor> WidenedToFloat32() const;
  // `dtype`'s copy of a float32 or float16 tensor: float32 -> float16 rounds
  // to nearest even (common/tensor/float16.h). REQUIRES: IsFloat(dtype()), IsFloat(dtype).
  absl::StatusOr<Tensor> ConvertedTo(DType dtype) const;

 private:
  Tensor(DType dtype, Shape shape, int64_t num_elements);
  void CheckDType(DType want) const;

  DType dtype_;
  Shape shape_;
  int64_t num_elements_;
  std::vector<std::byte, internal::NoInitAllocator<std::byte>> bytes_;
};

template <typename T>
absl::StatusOr<Tensor> Tensor::FromValues(Shape shape, absl::Span<const T> values) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, int64_t> ||
                    std::is_same_v<T, int32_t> || std::is_same_v<T, bool> ||
                    std::is_same_v<T, Float16>,
                "unsupported element type");
  return FromBytes(
      DTypeOf<T>(), std::move(shape),
      absl::string_view(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T)));
}

template <typename T>
Tensor Tensor::Scalar(T value) {
  Tensor t(DTypeOf<T>(), Shape{}, 1);
  std::memcpy(t.bytes_.data(), &value, sizeof(T));
  return t;
}

}  // namespace ipupod::tensor

#endif  // IPUPOD_TENSOR_TENSOR_H_
