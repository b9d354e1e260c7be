// File: server/execution/execution_counters.h
//
// ExecutionCounters: what the operations on sessions' IPUs have moved and
// run since the server started - loads, runs (steps), weight and tensor bytes,
// simulated device time and host wall time - as relaxed atomics that the
// callers bump and the metrics read (server/metrics/pod_metrics.h). No metrics
// library here: lower layers only count.
//
// Who counts: SessionExecution counts its loads and runs (inputs, outputs,
// times) for every caller; weights move outside it (the gRPC service streams
// them, the batch runner copies them), so those callers count weights.
//
// Thread safety: every member may be read and bumped from any thread; a
// snapshot of several members is not one instant (each is monotonic).
#ifndef IPUPOD_EXECUTION_EXECUTION_COUNTERS_H_
#define IPUPOD_EXECUTION_EXECUTION_COUNTERS_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "common/tensor/tensor_files.h"

namespace ipupod::execution {

struct ExecutionCounters {
  std::atomic<int64_t> loads{0};
  std::atomic<int64_t> runs{0};                  // steps run (one RunStep each)
  std::atomic<int64_t> weight_bytes_written{0};  // host to IPUs: weights, checkpoints restored
  std::atomic<int64_t> weight_bytes_read{0};     // IPUs to host: weights, checkpoints
  std::atomic<int64_t> input_bytes{0};           // runs' inputs
  std::atomic<int64_t> output_bytes{0};          // runs' outputs
  std::atomic<int64_t> device_nanos{0};          // simulated IPU time of the runs
  std::atomic<int64_t> wall_nanos{0};            // host time the runs computed

  static void Add(std::atomic<int64_t>& counter, int64_t n) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }
  static void AddSeconds(std::atomic<int64_t>& counter, double seconds) {
    if (seconds > 0) Add(counter, absl::ToInt64Nanoseconds(absl::Seconds(seconds)));
  }
  static double Seconds(const std::atomic<int64_t>& nanos) {
    return static_cast<double>(nanos.load(std::memory_order_relaxed)) * 1e-9;
  }
};

// The bytes of the tensors' values.
int64_t TensorBytes(const tensor::NamedTensors& tensors);
int64_t TensorBytes(const std::vector<tensor::TensorRef>& tensors);

}  // namespace ipupod::execution

#endif  // IPUPOD_EXECUTION_EXECUTION_COUNTERS_H_
