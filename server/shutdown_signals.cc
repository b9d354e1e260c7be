#include "server/shutdown_signals.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

namespace ipupod::server {
namespace {

// The write end of the installed ShutdownSignals' pipe, or -1. A lock-free
// atomic is what a signal handler may read.
std::atomic<int> g_signal_pipe{-1};
static_assert(std::atomic<int>::is_always_lock_free);

// Runs on whichever thread the kernel picked: async-signal-safe calls only.
void OnShutdownSignal(int sig) {
  const int saved_errno = errno;
  const int fd = g_signal_pipe.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(sig);
    (void)!::write(fd, &byte, 1);  // a full pipe already holds a pending signal
  }
  errno = saved_errno;
}

absl::Status SystemError(absl::string_view what) {
  return absl::FailedPreconditionError(
      absl::StrCat("cannot ", what, " for SIGINT/SIGTERM: ", std::strerror(errno)));
}

absl::Status SetHandler(int sig, struct sigaction* previous) {
  struct sigaction action {};
  action.sa_handler = OnShutdownSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (::sigaction(sig, &action, previous) != 0) return SystemError("install a handler");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShutdownSignals>> ShutdownSignals::Install() {
  if (g_signal_pipe.load() >= 0) {
    return absl::FailedPreconditionError("shutdown signal handling is already installed");
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return SystemError("create a pipe");
  std::unique_ptr<ShutdownSignals> signals(new ShutdownSignals(fds[0], fds[1]));
  g_signal_pipe.store(fds[1]);
  absl::Status status = SetHandler(SIGINT, &signals->previous_int_);
  if (status.ok()) status = SetHandler(SIGTERM, &signals->previous_term_);
  if (status.ok()) status = SetHandler(SIGHUP, &signals->previous_hup_);
  if (!status.ok()) return status;  // the destructor restores and closes
  // A supervisor may start us with the signals blocked, and a blocked mask is
  // inherited through exec: then the kernel would hand them to some library's
  // thread. Unblocked here, the calling thread (the one that waits) can always
  // take them, and Linux prefers the main thread for a process-directed signal.
  sigset_t ours;
  sigemptyset(&ours);
  sigaddset(&ours, SIGINT);
  sigaddset(&ours, SIGTERM);
  sigaddset(&ours, SIGHUP);
  if (::pthread_sigmask(SIG_UNBLOCK, &ours, nullptr) != 0) return SystemError("unblock");
  return signals;
}

ShutdownSignals::~ShutdownSignals() {
  ::sigaction(SIGINT, &previous_int_, nullptr);
  ::sigaction(SIGTERM, &previous_term_, nullptr);
  ::sigaction(SIGHUP, &previous_hup_, nullptr);
  g_signal_pipe.store(-1);
  ::close(read_fd_);
  ::close(write_fd_);
}

std::optional<int> ShutdownSignals::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    unsigned char byte = 0;
    if (::read(read_fd_, &byte, 1) == 1) return static_cast<int>(byte);
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return std::nullopt;
    const int64_t left_ms = absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
    pollfd p{read_fd_, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));  // EINTR: loop again
  }
}

std::string ShutdownSignals::Name(int sig) {
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGTERM) return "SIGTERM";
  if (sig == SIGHUP) return "SIGHUP";
  return absl::StrCat("signal ", sig);
}

}  // namespace ipupod::server
