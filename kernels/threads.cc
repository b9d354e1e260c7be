#include "kernels/threads.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/sync.h"
#include <cblas.h>

namespace ipupod::kernels {
namespace {

absl::Mutex& ThreadsMutex() {
  static absl::Mutex* mu = new absl::Mutex();
  return *mu;
}

// Set once SetBlasThreads() or the default has reached OpenBLAS; read
// lock-free on the sgemm path.
std::atomic<bool> g_configured{false};
std::atomic<int> g_threads{kDefaultBlasThreads};

void Apply(int threads) ABSL_EXCLUSIVE_LOCKS_REQUIRED(ThreadsMutex()) {
  openblas_set_num_threads(threads);
  g_threads.store(threads, std::memory_order_relaxed);
  g_configured.store(true, std::memory_order_release);
}

}  // namespace

int MaxBlasThreads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

absl::Status SetBlasThreads(int threads) {
  const int max = MaxBlasThreads();
  if (threads < 1 || threads > max) {
    return absl::InvalidArgumentError(absl::StrCat("BLAS thread count ", threads,
                                                   " is outside [1, ", max, "] (the host's CPUs)"));
  }
  sync::MutexLock lock(&ThreadsMutex());
  Apply(threads);
  return absl::OkStatus();
}

int BlasThreads() { return g_threads.load(std::memory_order_relaxed); }

void ApplyDefaultBlasThreadsOnce() {
  if (g_configured.load(std::memory_order_acquire)) return;
  sync::MutexLock lock(&ThreadsMutex());
  if (!g_configured.load(std::memory_order_relaxed)) Apply(kDefaultBlasThreads);
}

}  // namespace ipupod::kernels
