// File: server/execution/loaded_programs.h
//
// LoadedPrograms: what each session has loaded on its IPUs (a
// runtime::Program, its load generation, its run count), and the
// serialisation of each session's execution operations.
//
// One SessionSlot per session. An operation Acquire()s the slot for its
// whole duration, so operations of one session run one at a time; a second
// operation waits up to `operation_wait` and then fails with UNAVAILABLE
// ("session S is busy with another load, weight transfer or run; retry when
// it has finished"). Operations of different sessions run in parallel.
//
// Slots are created on demand and dropped when the scheduler reports the
// session ended (Drop, from SchedulerOptions::on_session_ended) or when an
// operation finds the session does not exist (DropIfUnloaded; session ids
// are never reused, so a NOT_FOUND session never comes back). An operation
// still running on a dropped slot finishes on it; its program is freed when
// the operation lets go of the slot.
//
// Thread safety: every method is safe to call concurrently. Lock order:
// LoadedPrograms::mu_, then SessionSlot::mu_ (a leaf); neither is held while
// waiting for a busy slot or while a Program runs or is freed.
// Errors: Acquire - UNAVAILABLE when the slot stays busy past the wait.
#ifndef IPUPOD_EXECUTION_LOADED_PROGRAMS_H_
#define IPUPOD_EXECUTION_LOADED_PROGRAMS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "device/runtime/program.h"
#include "server/execution/memory_budget.h"

namespace ipupod::execution {

// What a session has loaded. A null program: nothing.
struct LoadedState {
  std::shared_ptr<runtime::Program> program;
  // The program's host memory in the server's load budget; returned when
  // the last copy of this state goes (with the program).
  std::shared_ptr<const MemoryBudget::Charge> host_memory;
  int64_t executable_size_bytes = 0;
  uint64_t load_generation = 0;  // the scheduler's, from RecordLoad
  uint64_t runs = 0;             // completed since the load
  double simulated_load_seconds = 0;
};

class SessionSlot {
 public:
  SessionSlot() = default;
  SessionSlot(const SessionSlot&) = delete;
  SessionSlot& operator=(const SessionSlot&) = delete;

  // Waits up to `wait` for the slot to be free and takes it.
  absl::Status Acquire(absl::string_view session, absl::Duration wait);
  // REQUIRES: taken by the caller's Acquire.
  void Release();

  // A copy (the Program is shared); set by Load.
  LoadedState state() const;
  void set_state(LoadedState state);
  // Counts a completed run; returns its 1-based index since the load.
  uint64_t CountRun();

 private:
  mutable absl::Mutex mu_;
  absl::CondVar released_;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  LoadedState state_ ABSL_GUARDED_BY(mu_);
};

class LoadedPrograms {
 public:
  explicit LoadedPrograms(absl::Duration operation_wait) : operation_wait_(operation_wait) {}
  LoadedPrograms(const LoadedPrograms&) = delete;
  LoadedPrograms& operator=(const LoadedPrograms&) = delete;

  // The session's slot, taken for one operation (see the file comment).
  absl::StatusOr<std::shared_ptr<SessionSlot>> Acquire(absl::string_view session);
  // The session ended: forget its slot and (once no operation holds it) its
  // program.
  void Drop(absl::string_view session);
  // Drops the session's slot if it is `slot` and holds no program.
  void DropIfUnloaded(absl::string_view session, const SessionSlot* slot);
  size_t size() const;

 private:
  const absl::Duration operation_wait_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<SessionSlot>> slots_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ipupod::execution

#endif  // IPUPOD_EXECUTION_LOADED_PROGRAMS_H_
