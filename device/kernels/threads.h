// File: device/kernels/threads.h
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

// OpenBLAS's idle workers spin in sched_yield for 2^28 cycles (about 0.1 s)
// after each job before they sleep, taking a core from whatever else runs
// there (gRPC's threads, a client on the same machine) between steps. This
// makes them sleep after 2^kBlasIdleSpinLog2 cycles instead, as
// OPENBLAS_THREAD_TIMEOUT does when set before the library loads; OpenBLAS
// reads that variable only then, so this sets it, has OpenBLAS re-read its
// environment and restarts its (idle) worker pool. An
// OPENBLAS_THREAD_TIMEOUT already set is the user's choice and is kept.
// Results are unchanged: only how long an idle worker spins.
// REQUIRES: called once, at process start, before any thread computes
// (ipupodd's RunDaemon); later calls do nothing. Returns the value in force.
inline constexpr int kBlasIdleSpinLog2 = 4;  // OpenBLAS's minimum
int ShortenBlasIdleSpin();

}  // namespace ipupod::kernels

#endif  // IPUPOD_KERNELS_THREADS_H_
