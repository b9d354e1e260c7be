// File: server/execution/memory_budget.h
//
// MemoryBudget: the host memory the server lets loaded programs hold, all
// sessions together (ServerConfig::load_memory_mb). The simulated IPUs'
// memory is bounded per IPU by the scheduler; this bounds the host that
// backs them, which is smaller than a large pod's device memory.
//
// A Load reserves its program's host bytes (runtime::HostMemoryBytes of
// the executable's report) before it imports the model; the Charge it gets
// returns the bytes when the last reference to it goes, so whoever holds
// the program (LoadedState) holds its charge. A report that understates its
// model is refused by the import (compiler::CheckReportCoversModel), so what
// is charged covers what the program holds.
//
// Thread safety: every method may be called concurrently; a Charge may be
// released on any thread. Every Charge must be gone before the budget is
// destroyed (PodServer declares the budget before what holds charges).
// Errors: Reserve - RESOURCE_EXHAUSTED saying what was asked, what is held,
// the budget and how to raise it; nothing is reserved then.
#ifndef IPUPOD_EXECUTION_MEMORY_BUDGET_H_
#define IPUPOD_EXECUTION_MEMORY_BUDGET_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace ipupod::execution {

class MemoryBudget {
 public:
  class Charge {
   public:
    ~Charge();
    Charge(const Charge&) = delete;
    Charge& operator=(const Charge&) = delete;
    int64_t bytes() const { return bytes_; }

   private:
    friend class MemoryBudget;
    Charge(MemoryBudget* budget, int64_t bytes) : budget_(budget), bytes_(bytes) {}
    MemoryBudget* const budget_;
    const int64_t bytes_;
  };

  // REQUIRES: max_bytes > 0.
  explicit MemoryBudget(int64_t max_bytes) : max_bytes_(max_bytes) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Reserves `bytes` (>= 0) for `what` ("executable 3f2a... for session s-7").
  absl::StatusOr<std::shared_ptr<const Charge>> Reserve(int64_t bytes, absl::string_view what);

  int64_t max_bytes() const { return max_bytes_; }
  int64_t used_bytes() const;

 private:
  void Release(int64_t bytes);

  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  int64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// The default budget (load_memory_mb 0): half of this host's physical
// memory, at least 1 GiB.
int64_t DefaultLoadMemoryBytes();

}  // namespace ipupod::execution

#endif  // IPUPOD_EXECUTION_MEMORY_BUDGET_H_
