// File: device/kernels/interrupt.h
//
// Interrupt points inside long kernels. A node of a model can be as long as
// its shapes allow (a reduction over 2^30 elements, a matrix product of
// gigaflops), so checking a deadline or a client's cancel only between nodes
// lets one node ignore both (issue 29). Whoever runs a graph on behalf of a
// caller (a server's compile, load or step) installs a poll for its thread
// with a ScopedInterrupt; the kernels call InterruptPoint(work) in their
// outer loops, and every kInterruptPollWork units of work (about an element
// operation each; far below a millisecond of compute) the poll runs. A poll
// may also block for a while (the compute gate's time slice,
// device/runtime/compute_gate.h) and then let the kernel go on.
//
// When the poll returns an error the interrupt is *stopped*: every later
// InterruptPoint on the thread returns true at once, kernels return early
// leaving their outputs unspecified, and InterruptStatus() returns that
// error until the scope ends. Whoever runs nodes checks InterruptStatus()
// after each one (graph::Interpreter, shape inference's folding) and
// returns it, so no value a stopped kernel wrote is ever used.
//
// Without a ScopedInterrupt (tests, `ipupod compile` on the user's machine)
// InterruptPoint costs one thread-local load and never stops anything.
//
// Thread safety: the state is per thread; the poll runs on the thread that
// installed it (kernels poll only from their calling thread, never from
// BLAS or oneDNN workers), so it must be safe against whatever else it
// reads (an atomic flag, a gRPC context's IsCancelled).
// Errors: whatever the poll returns (DEADLINE_EXCEEDED, CANCELLED,
// UNAVAILABLE at shutdown, ...).
#ifndef IPUPOD_KERNELS_INTERRUPT_H_
#define IPUPOD_KERNELS_INTERRUPT_H_

#include <cstdint>
#include <functional>
#include <utility>

#include "absl/status/status.h"

namespace ipupod::kernels {

// Work between two polls: 2^16 element operations, tens of microseconds.
inline constexpr int64_t kInterruptPollWork = int64_t{1} << 16;

class ScopedInterrupt {
 public:
  // Installs `poll` for this thread until destroyed (nesting restores the
  // outer one). `poll` is called on this thread only.
  explicit ScopedInterrupt(std::function<absl::Status()> poll);
  ScopedInterrupt(const ScopedInterrupt&) = delete;
  ScopedInterrupt& operator=(const ScopedInterrupt&) = delete;
  ~ScopedInterrupt();

  // OK, or the error the poll returned.
  const absl::Status& status() const { return stopped_; }

 private:
  friend bool InterruptPoint(int64_t work);
  friend absl::Status CheckInterrupt();
  bool Poll();

  std::function<absl::Status()> poll_;
  absl::Status stopped_;
  int64_t work_ = 0;
  ScopedInterrupt* previous_;
};

// Counts `work` done on this thread; polls when kInterruptPollWork has
// accumulated. True: stop now (outputs will be discarded).
bool InterruptPoint(int64_t work);

// Polls now (a node boundary) and returns the thread's interrupt status:
// OK when nothing is installed or nothing stopped it.
absl::Status CheckInterrupt();

// The thread's interrupt status without polling.
absl::Status InterruptStatus();

// Calls f(begin, end) over [0, n) in chunks of at most `chunk` (>= 1)
// items, each `work_per_item` work, with an interrupt point after each
// chunk; stops early when interrupted.
template <typename F>
void ForEachChunk(int64_t n, int64_t chunk, int64_t work_per_item, F&& f) {
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t end = n - begin < chunk ? n : begin + chunk;
    f(begin, end);
    if (InterruptPoint((end - begin) * work_per_item)) return;
  }
}

// ForEachChunk in chunks of about kInterruptPollWork work.
template <typename F>
void ForEachChunk(int64_t n, int64_t work_per_item, F&& f) {
  const int64_t per = work_per_item < 1 ? 1 : work_per_item;
  const int64_t chunk = kInterruptPollWork / per < 1 ? 1 : kInterruptPollWork / per;
  ForEachChunk(n, chunk, per, std::forward<F>(f));
}

}  // namespace ipupod::kernels

#endif  // IPUPOD_KERNELS_INTERRUPT_H_
