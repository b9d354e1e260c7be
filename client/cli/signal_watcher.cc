#include "client/cli/signal_watcher.h"

#include <atomic>
#include <cerrno>
#include <ctime>

#include "common/sync.h"  // header only: absl::Mutex as TSan sees it
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

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

// The self-pipe's write end, for ForwardToWatcher. The pipe lives as long
// as the process: a handler may run on another thread at any moment, so
// closing it could race with (or redirect) that handler's write.
std::atomic<int> g_forward_fd{-1};

// Runs on a thread that did not block the watched signals (one started
// before main). Only async-signal-safe calls: write(2) of two bytes.
void ForwardToWatcher(int signal, siginfo_t* info, void*) {
  const int saved_errno = errno;
  const int fd = g_forward_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const unsigned char record[2] = {static_cast<unsigned char>(signal),
                                     static_cast<unsigned char>(info->si_code <= 0)};
    (void)!write(fd, record, sizeof record);
  }
  errno = saved_errno;
}

// The self-pipe's read end (-1 if it could not be made); made once.
int ForwardPipe() {
  static const int read_fd = [] {
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return -1;
    g_forward_fd.store(fds[1]);
    return fds[0];
  }();
  return read_fd;
}

void InstallForwarders() {
  struct sigaction action {};
  action.sa_sigaction = &ForwardToWatcher;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigfillset(&action.sa_mask);
  for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaction(signal, &action, nullptr);
}

}  // namespace

SignalWatcher::SignalWatcher() {
  sigset_t set = WatchedSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  forward_fd_ = ForwardPipe();
  if (forward_fd_ >= 0) InstallForwarders();
  thread_ = std::thread([this] { Loop(); });
}

SignalWatcher::~SignalWatcher() {
  {
    sync::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
  // The handlers and the pipe stay: a late signal must not kill the process.
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
    unsigned char record[2];
    while (forward_fd_ >= 0 && read(forward_fd_, record, sizeof record) == sizeof record) {
      Record(record[0], record[1] != 0);
    }
    siginfo_t info{};
    int signal = sigtimedwait(&set, &info, &poll);
    if (signal <= 0) continue;  // timeout or EINTR
    // si_code > 0 means the kernel sent it (e.g. the terminal's Ctrl-C to
    // the whole foreground process group); <= 0 means kill(2)/sigqueue.
    Record(signal, info.si_code <= 0);
  }
}

void SignalWatcher::Record(int signal, bool from_user) {
  InterruptHandler handler;
  {
    sync::MutexLock lock(&mu_);
    changed_.SignalAll();
    if (signal == SIGCHLD) {
      events_.child = true;
      return;
    }
    events_.interrupt_signal = signal;
    events_.interrupt_from_user = from_user;
    interrupted_ = true;
    handler = handler_;
  }
  if (handler) handler(signal, from_user);
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
