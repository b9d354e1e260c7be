#include "server/execution/loaded_programs.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "common/sync.h"

namespace ipupod::execution {

absl::Status SessionSlot::Acquire(absl::string_view session, absl::Duration wait) {
  sync::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + wait;
  // A CondVar loop, not Mutex::Await: sync.h can annotate only this for TSan.
  while (busy_) {
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrFormat(
          "session %s is busy with another load, weight transfer or run (waited %s); retry "
          "when it has finished",
          session, absl::FormatDuration(wait)));
    }
    sync::WaitWithDeadline(&released_, &mu_, deadline);
  }
  busy_ = true;
  return absl::OkStatus();
}

void SessionSlot::Release() {
  sync::MutexLock lock(&mu_);
  busy_ = false;
  released_.Signal();
}

LoadedState SessionSlot::state() const {
  sync::MutexLock lock(&mu_);
  return state_;
}

void SessionSlot::set_state(LoadedState state) {
  std::shared_ptr<runtime::Program> old;  // freed after the unlock
  sync::MutexLock lock(&mu_);
  old = std::move(state_.program);
  state_ = std::move(state);
}

uint64_t SessionSlot::CountRun() {
  sync::MutexLock lock(&mu_);
  return ++state_.runs;
}

absl::StatusOr<std::shared_ptr<SessionSlot>> LoadedPrograms::Acquire(absl::string_view session) {
  std::shared_ptr<SessionSlot> slot;
  {
    sync::MutexLock lock(&mu_);
    std::shared_ptr<SessionSlot>& entry = slots_[session];
    if (entry == nullptr) entry = std::make_shared<SessionSlot>();
    slot = entry;
  }
  absl::Status taken = slot->Acquire(session, operation_wait_);
  if (!taken.ok()) return taken;
  return slot;
}

void LoadedPrograms::Drop(absl::string_view session) {
  std::shared_ptr<SessionSlot> dropped;  // a Program may be large: free it unlocked
  sync::MutexLock lock(&mu_);
  auto it = slots_.find(session);
  if (it == slots_.end()) return;
  dropped = std::move(it->second);
  slots_.erase(it);
}

void LoadedPrograms::DropIfUnloaded(absl::string_view session, const SessionSlot* slot) {
  sync::MutexLock lock(&mu_);
  auto it = slots_.find(session);
  if (it == slots_.end() || it->second.get() != slot) return;
  if (it->second->state().program != nullptr) return;
  slots_.erase(it);
}

size_t LoadedPrograms::size() const {
  sync::MutexLock lock(&mu_);
  return slots_.size();
}

}  // namespace ipupod::execution
