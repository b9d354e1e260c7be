// File: tests/support/tensors.h
//
// Small tensors that tests of several layers build the same way.
//   Iota({2, 3}): float32 [2, 3] holding 0, 1, 2, 3, 4, 5.
//   Wave(n, seed): n values sin(seed + 0.37 k), k = 0..n-1: smooth, varied
//     data in [-1, 1] for models' inputs and weights.
//
// Header-only (tests that use it already link ipupod_tensor).
// Thread safety: pure functions.
// Errors: none (a shape too large to build aborts: a test bug).
#ifndef IPUPOD_TESTS_SUPPORT_TENSORS_H_
#define IPUPOD_TESTS_SUPPORT_TENSORS_H_

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/tensor/tensor.h"

namespace ipupod::test_support {

inline tensor::Tensor Iota(tensor::Shape shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  return *tensor::Tensor::FromValues<float>(std::move(shape), v);
}

inline std::vector<float> Wave(int64_t n, float seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    v[static_cast<size_t>(k)] = std::sin(seed + 0.37f * static_cast<float>(k));
  }
  return v;
}

}  // namespace ipupod::test_support

#endif  // IPUPOD_TESTS_SUPPORT_TENSORS_H_
