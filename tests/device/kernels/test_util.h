// File: tests/device/kernels/test_util.h
//
// Helpers for kernel tests: build views over std::vector storage.
#ifndef IPUPOD_TESTS_KERNELS_TEST_UTIL_H_
#define IPUPOD_TESTS_KERNELS_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "device/kernels/view.h"

namespace ipupod::kernels::testing {

template <typename T>
View<T> In(const std::vector<T>& data, const std::vector<int64_t>& shape) {
  return View<T>{data.data(), shape};
}

template <typename T>
MutableView<T> Out(std::vector<T>& data, const std::vector<int64_t>& shape) {
  return MutableView<T>{data.data(), shape};
}

// bool vectors are bit-packed, so bool kernels use this byte-per-element store.
struct BoolBuffer {
  explicit BoolBuffer(std::vector<int> v) : data(new bool[v.size()]), size(v.size()) {
    for (size_t i = 0; i < v.size(); ++i) data[i] = v[i] != 0;
  }
  explicit BoolBuffer(size_t n) : data(new bool[n]()), size(n) {}
  std::vector<int> ToInts() const { return std::vector<int>(data.get(), data.get() + size); }
  std::unique_ptr<bool[]> data;
  size_t size;
};

}  // namespace ipupod::kernels::testing

#endif  // IPUPOD_TESTS_KERNELS_TEST_UTIL_H_
