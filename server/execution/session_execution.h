// File: server/execution/session_execution.h
//
// SessionExecution: the operations on a session's IPUs - load an
// executable, use what is loaded (weights, steps, optimizer variables) -
// with no transport. The gRPC ExecutionService (server/execution_service.h)
// calls it for its clients and the server's job runner calls it for batch
// jobs, so both go through the same ownership checks, fault draws, memory
// charges and compute gate: one execution engine.
//
// One operation on a session:
//   1. the session's slot is taken (server/execution/loaded_programs.h: one
//      operation per session; UNAVAILABLE after waiting);
//   2. Scheduler::BeginSessionOperation: ownership (PERMISSION_DENIED,
//      NOT_FOUND), one random-fault draw, health (ABORTED / DATA_LOSS with
//      kind and recovery action, UNAVAILABLE while resetting), IPUs busy;
//   3. the work: Load, or, on what is loaded (Loaded(): FAILED_PRECONDITION
//      if nothing is, or if the session's IPUs were cleared since the load);
//   4. EndSessionOperation and the slot are given back by the Operation's
//      destructor, on every path.
//
//   IPUPOD_ASSIGN_OR_RETURN(auto op, execution.Begin(caller, session));
//   IPUPOD_ASSIGN_OR_RETURN(LoadedState loaded, op->Loaded());
//   IPUPOD_ASSIGN_OR_RETURN(runtime::StepResult step,
//                           execution.RunStep(*loaded.program, inputs, cancelled));
//
// Load reserves the program's host memory in the load budget
// (server/execution/memory_budget.h) before importing, caps the import's folding
// at that charge, charges device memory through Scheduler::RecordLoad, and
// replaces the session's previous program only once all of that succeeded.
// Executables come from the cache scoped to the caller (NOT_FOUND for
// another user's hash).
//
// Long work is interruptible inside each node (device/kernels/interrupt.h): a
// Load's import and a step stop within one interrupt point's gap (well
// under a second) of the client's cancel (CANCELLED) or of Stop()
// (UNAVAILABLE, the server is shutting down), and a step yields the compute
// gate to waiting steps every ComputeGate::kSliceTime
// (device/runtime/compute_gate.h).
//
// Counts: counters() (server/execution/execution_counters.h) counts every load and
// step made here; callers that move weights count those bytes there.
//
// Thread safety: every method may be called concurrently; operations on one
// session are serialised by its slot. The resources passed at construction
// must outlive this object and every Operation.
#ifndef IPUPOD_EXECUTION_SESSION_EXECUTION_H_
#define IPUPOD_EXECUTION_SESSION_EXECUTION_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/tensor/tensor_files.h"
#include "device/graph/custom_ops.h"
#include "device/runtime/compute_gate.h"
#include "device/runtime/executable_cache.h"
#include "device/runtime/program.h"
#include "scheduler/scheduler.h"
#include "server/execution/execution_counters.h"
#include "server/execution/loaded_programs.h"
#include "server/execution/memory_budget.h"

namespace ipupod::execution {

// Polled while long work runs; true stops it with CANCELLED. Empty: never.
using Cancelled = std::function<bool()>;

// How long a step may wait for its turn to compute (device/runtime/compute_gate.h).
inline constexpr absl::Duration kComputeWait = absl::Minutes(10);

struct ExecutionResources {
  scheduler::Scheduler* scheduler = nullptr;
  runtime::ExecutableCache* cache = nullptr;
  LoadedPrograms* programs = nullptr;
  MemoryBudget* load_memory = nullptr;
  runtime::ComputeGate* compute = nullptr;
  // Resolves custom ops at Load (runtime::LoadOptions::custom_ops); null: models with
  // custom ops do not load. The only resource that may be null.
  const graph::CustomOpResolver* custom_ops = nullptr;
};

class SessionExecution {
 public:
  // One operation on a session (see the file comment); the destructor ends it.
  class Operation {
   public:
    ~Operation();
    Operation(const Operation&) = delete;
    Operation& operator=(const Operation&) = delete;

    const scheduler::SessionView& session() const { return op_.session; }
    uint64_t load_generation() const { return op_.load_generation; }
    SessionSlot& slot() { return *slot_; }
    // What is loaded, if it is still valid.
    absl::StatusOr<LoadedState> Loaded() const;

   private:
    friend class SessionExecution;
    Operation(scheduler::Scheduler* scheduler, std::shared_ptr<SessionSlot> slot,
              scheduler::SessionOperation op)
        : scheduler_(scheduler), slot_(std::move(slot)), op_(std::move(op)) {}

    scheduler::Scheduler* const scheduler_;
    std::shared_ptr<SessionSlot> slot_;
    scheduler::SessionOperation op_;
  };

  // REQUIRES: every resource but custom_ops is set.
  explicit SessionExecution(ExecutionResources resources) : r_(resources) {}
  SessionExecution(const SessionExecution&) = delete;
  SessionExecution& operator=(const SessionExecution&) = delete;

  // Begins one operation on `session` for `caller`.
  absl::StatusOr<std::unique_ptr<Operation>> Begin(const scheduler::Caller& caller,
                                                   absl::string_view session);

  // Loads the caller's cached executable `sha256` (64 lower-case hex digits)
  // on the operation's session and returns what is now loaded.
  // INVALID_ARGUMENT when it needs another IPU count or does not match its
  // report; RESOURCE_EXHAUSTED over the load budget or an IPU's memory;
  // CANCELLED when `cancelled` said so.
  absl::StatusOr<LoadedState> Load(Operation& op, const scheduler::Caller& caller,
                                   absl::string_view sha256, const Cancelled& cancelled);

  // One step of `program` when the compute gate gives this call its turn
  // (waiting at most kComputeWait; CANCELLED when `cancelled` said so).
  absl::StatusOr<runtime::StepResult> RunStep(runtime::Program& program,
                                              const tensor::NamedTensors& inputs,
                                              const Cancelled& cancelled);

  // Every Load and step in flight, and every later one, ends UNAVAILABLE
  // "ipupodd is shutting down" at its next interrupt point. Irreversible.
  void Stop() { stopping_.store(true); }

  runtime::ExecutableCache& cache() const { return *r_.cache; }
  scheduler::Scheduler& scheduler() const { return *r_.scheduler; }
  ExecutionCounters& counters() { return counters_; }
  const ExecutionCounters& counters() const { return counters_; }

 private:
  // What an interrupt point of this object's work checks (`slot`: the step's
  // compute slot to yield, or null for a Load).
  absl::Status Poll(const Cancelled& cancelled, absl::string_view what,
                    runtime::ComputeGate::Slot* slot) const;

  const ExecutionResources r_;
  ExecutionCounters counters_;
  std::atomic<bool> stopping_{false};
};

}  // namespace ipupod::execution

#endif  // IPUPOD_EXECUTION_SESSION_EXECUTION_H_
