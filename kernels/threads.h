// File: kernels/threads.h
//
// The one knob for compute threads in ipupod_kernels. Every kernel runs on
// the caller's thread except sgemm, which OpenBLAS may split across its own
// worker pool; this module bounds how many of those workers sgemm uses
// (OpenBLAS's pthread build may create its idle pool when it is loaded). Until SetBlasThreads() is
// called, the first sgemm applies kDefaultBlasThreads, so a process that
// never configures threads does not fan out over every core.
//
// Thread safety: all functions are thread-safe. Changing the count while
// another thread is inside sgemm is allowed by the API but OpenBLAS only
// guarantees it between calls, so the server should configure it at start-up.
// Errors: INVALID_ARGUMENT for a count outside [1, hardware CPUs].
#ifndef IPUPOD_KERNELS_THREADS_H_
#define IPUPOD_KERNELS_THREADS_H_

#include "absl/status/status.h"

namespace ipupod::kernels {

inline constexpr int kDefaultBlasThreads = 1;

// Largest count SetBlasThreads accepts: the host's CPU count (at least 1).
int MaxBlasThreads();

// Sets OpenBLAS's worker count for all later sgemm calls.
absl::Status SetBlasThreads(int threads);

// The count sgemm will use (kDefaultBlasThreads if never set).
int BlasThreads();

// Applies kDefaultBlasThreads if SetBlasThreads() was never called. Cheap
// after the first call; the matmul kernels call it before each sgemm.
void ApplyDefaultBlasThreadsOnce();

}  // namespace ipupod::kernels

#endif  // IPUPOD_KERNELS_THREADS_H_
