#include "device/kernels/interrupt.h"

#include <utility>

namespace ipupod::kernels {
namespace {

thread_local ScopedInterrupt* current = nullptr;

}  // namespace

ScopedInterrupt::ScopedInterrupt(std::function<absl::Status()> poll)
    : poll_(std::move(poll)), previous_(current) {
  current = this;
}

ScopedInterrupt::~ScopedInterrupt() { current = previous_; }

bool ScopedInterrupt::Poll() {
  work_ = 0;
  if (stopped_.ok() && poll_) stopped_ = poll_();
  return !stopped_.ok();
}

bool InterruptPoint(int64_t work) {
  ScopedInterrupt* s = current;
  if (s == nullptr) return false;
  if (!s->stopped_.ok()) return true;
  s->work_ += work;
  return s->work_ >= kInterruptPollWork && s->Poll();
}

absl::Status CheckInterrupt() {
  ScopedInterrupt* s = current;
  if (s == nullptr) return absl::OkStatus();
  s->Poll();
  return s->stopped_;
}

absl::Status InterruptStatus() {
  const ScopedInterrupt* s = current;
  return s == nullptr ? absl::OkStatus() : s->status();
}

}  // namespace ipupod::kernels
