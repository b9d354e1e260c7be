// File: client/cli/signal_watcher.h
//
// Receives SIGINT, SIGTERM, SIGHUP and SIGCHLD on a dedicated thread, so no
// work ever runs inside a signal handler. The constructor blocks those
// signals in the calling thread; threads created afterwards inherit the
// mask, so construct the watcher before any other thread (in particular
// before the gRPC channel) and those threads keep them blocked; the watcher
// takes them with sigtimedwait.
//
// Threads that exist before main() cannot be covered by the mask: OpenBLAS
// (linked for `ipupod compile`) starts its worker pool from a library
// constructor. A signal the kernel delivers to such a thread runs a tiny
// async-signal-safe handler that writes (signal, sent-by-a-process) to a
// self-pipe the watcher drains, so the signal is never lost and never
// takes its default action (killing the CLI half-way through a release).
// The pipe is made once per process and never closed; use one watcher at a
// time (each CLI command makes one).
//
// Events are recorded and handed out by Wait(); an optional interrupt
// handler runs on the watcher thread for each SIGINT/SIGTERM/SIGHUP (used to
// cancel a queued attach at once, from outside the waiting thread).
//
// Thread safety: all methods are thread-safe. The destructor stops the
// thread (bounded: it polls every 100 ms) and leaves the signals blocked, so
// a second Ctrl-C during shutdown cannot kill the process half-way.
#ifndef IPUPOD_CLIENT_CLI_SIGNAL_WATCHER_H_
#define IPUPOD_CLIENT_CLI_SIGNAL_WATCHER_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ipupod::cli {

class SignalWatcher {
 public:
  struct Events {
    int interrupt_signal = 0;          // last SIGINT/SIGTERM/SIGHUP, 0 if none
    bool interrupt_from_user = false;  // sent with kill(2), not by the terminal
    bool child = false;                // a SIGCHLD arrived
    bool any() const { return interrupt_signal != 0 || child; }
  };
  // (signal, sent by a process rather than the terminal)
  using InterruptHandler = std::function<void(int, bool)>;

  SignalWatcher();
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Replaces the handler (empty = none). It runs on the watcher thread,
  // outside the watcher's lock, and must not block.
  void SetInterruptHandler(InterruptHandler handler);

  // Waits up to `timeout` for an event; returns (and clears) the events seen
  // since the previous call.
  Events Wait(absl::Duration timeout);

  // True once any interrupt signal was received (never cleared).
  bool Interrupted() const;

 private:
  void Loop();
  void Record(int signal, bool from_user);
  bool HasEvents() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // Signalled when an event is recorded. (A CondVar, not absl::Condition:
  // Debian's libabsl evaluates Conditions where TSan cannot see the lock.)
  absl::CondVar changed_;
  Events events_ ABSL_GUARDED_BY(mu_);
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  InterruptHandler handler_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
  int forward_fd_ = -1;  // the process's self-pipe (read end): handler writes, Loop reads
};

}  // namespace ipupod::cli

#endif  // IPUPOD_CLIENT_CLI_SIGNAL_WATCHER_H_
