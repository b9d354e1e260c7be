// File: server/shutdown_signals.h
//
// ShutdownSignals: SIGINT and SIGTERM (shut down) and SIGHUP (reload the
// sharing policy) as events ipupodd's main thread waits for, whichever thread
// of the process the kernel delivers them to.
//
// Why a handler and not a blocked mask: a process-directed signal goes to
// any thread that does not block it, and libraries start threads before
// main() can block anything (OpenBLAS makes its worker pool when it is
// loaded), so blocking in main() and sigwait()ing left the signal's default
// action - death - to whichever worker the kernel picked. Instead Install()
// sets a sigaction handler for the whole process; wherever it runs, it only
// writes the signal number to a self-pipe (write(2) is async-signal-safe,
// errno is saved and restored), and Wait() reads the pipe from an ordinary
// thread, which then shuts the server down outside any signal context.
// SA_RESTART keeps interrupted system calls in other threads going.
// Install() also unblocks both signals in the calling thread, in case the
// process was started with them blocked (the mask survives exec).
//
// At most one ShutdownSignals exists at a time (the handler reaches it
// through a process-wide descriptor); destruction restores the previous
// handlers and closes the pipe.
//
// Thread safety: Wait() from one thread at a time; the handler may run on
// any thread at any moment.
// Errors: Install - FAILED_PRECONDITION when one is already installed or the
// pipe or handler cannot be set up (with the system error).
#ifndef IPUPOD_SERVER_SHUTDOWN_SIGNALS_H_
#define IPUPOD_SERVER_SHUTDOWN_SIGNALS_H_

#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include <signal.h>

namespace ipupod::server {

class ShutdownSignals {
 public:
  // Installs the handler for SIGINT, SIGTERM and SIGHUP.
  static absl::StatusOr<std::unique_ptr<ShutdownSignals>> Install();
  ~ShutdownSignals();
  ShutdownSignals(const ShutdownSignals&) = delete;
  ShutdownSignals& operator=(const ShutdownSignals&) = delete;

  // The next signal received (SIGINT, SIGTERM or SIGHUP), or nullopt when none came
  // within `timeout`. A signal that arrived before the call is returned at once.
  std::optional<int> Wait(absl::Duration timeout);

  // "SIGINT", "SIGTERM", "SIGHUP", or "signal N".
  static std::string Name(int sig);

 private:
  ShutdownSignals(int read_fd, int write_fd) : read_fd_(read_fd), write_fd_(write_fd) {}

  const int read_fd_;
  const int write_fd_;
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
  struct sigaction previous_hup_ {};
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_SHUTDOWN_SIGNALS_H_
