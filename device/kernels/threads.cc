#include "device/kernels/threads.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/sync.h"
#include <cblas.h>

// Exported by libopenblas (0.3.21, Debian 12) without a header: re-reading
// OPENBLAS_* from the environment, and stopping and starting the worker pool
// (what its own fork handler does).
extern "C" {
void openblas_read_env(void);
int blas_thread_init(void);
int blas_thread_shutdown_(void);
}

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

int ShortenBlasIdleSpin() {
  static const int in_force = [] {
    if (const char* set = std::getenv("OPENBLAS_THREAD_TIMEOUT"); set != nullptr) {
      return std::atoi(set);
    }
    sync::MutexLock lock(&ThreadsMutex());
    ::setenv("OPENBLAS_THREAD_TIMEOUT", std::to_string(kBlasIdleSpinLog2).c_str(), 1);
    openblas_read_env();
    blas_thread_shutdown_();
    blas_thread_init();
    return kBlasIdleSpinLog2;
  }();
  return in_force;
}

}  // namespace ipupod::kernels
