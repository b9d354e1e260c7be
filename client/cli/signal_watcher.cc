#include "client/cli/signal_watcher.h"

#include <ctime>

#include "common/sync.h"  // header only: absl::Mutex as TSan sees it
#include <pthread.h>
#include <signal.h>

namespace ipupod::cli {
namespace {

sigset_t WatchedSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGCHLD);
  return set;
}

}  // namespace

SignalWatcher::SignalWatcher() {
  sigset_t set = WatchedSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  thread_ = std::thread([this] { Loop(); });
}

SignalWatcher::~SignalWatcher() {
  {
    sync::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void SignalWatcher::Loop() {
  const sigset_t set = WatchedSignals();
  // The stop flag is checked between bounded waits: sigtimedwait cannot be
  // woken by a condition variable, and a short poll keeps shutdown prompt.
  const timespec poll = {0, 100 * 1000 * 1000};
  while (true) {
    {
      sync::MutexLock lock(&mu_);
      if (stop_) return;
    }
    siginfo_t info{};
    int signal = sigtimedwait(&set, &info, &poll);
    if (signal <= 0) continue;  // timeout or EINTR
    InterruptHandler handler;
    {
      sync::MutexLock lock(&mu_);
      changed_.SignalAll();
      if (signal == SIGCHLD) {
        events_.child = true;
        continue;
      }
      events_.interrupt_signal = signal;
      // si_code > 0 means the kernel sent it (e.g. the terminal's Ctrl-C to
      // the whole foreground process group); <= 0 means kill(2)/sigqueue.
      events_.interrupt_from_user = info.si_code <= 0;
      interrupted_ = true;
      handler = handler_;
    }
    if (handler) handler(signal, info.si_code <= 0);
  }
}

void SignalWatcher::SetInterruptHandler(InterruptHandler handler) {
  sync::MutexLock lock(&mu_);
  handler_ = std::move(handler);
}

bool SignalWatcher::HasEvents() const { return events_.any(); }

SignalWatcher::Events SignalWatcher::Wait(absl::Duration timeout) {
  sync::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + timeout;
  while (!HasEvents()) {
    if (sync::WaitWithDeadline(&changed_, &mu_, deadline)) break;  // timed out
  }
  Events events = events_;
  events_ = Events();
  return events;
}

bool SignalWatcher::Interrupted() const {
  sync::MutexLock lock(&mu_);
  return interrupted_;
}

}  // namespace ipupod::cli
