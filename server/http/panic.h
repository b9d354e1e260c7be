// File: server/http/panic.h
//
// What the HTTP listener does when libmicrohttpd panics. libmicrohttpd calls
// its panic function (MHD_set_panic_func, process-wide) on "serious internal
// consistency issues" - a mutex that fails to lock, a connection count that
// does not add up - and says that returning from it "is never safe"; its
// default prints and calls abort(). A client's bytes do not lead there (they
// are parsed into errors, 4xx answers and closed connections), but if it
// ever happens the pod's gRPC API, its sessions and their loaded programs
// must not go down with the HTTP listener. So OnPanic:
//   - logs the place and reason (critical) and flushes the log;
//   - marks the process: Panicked() is true from then on, and every listener
//     answers 503 to every request without touching its own state (so
//     /healthz fails and a supervisor can restart the server when it
//     chooses) and Stop() no longer joins libmicrohttpd's threads;
//   - on a thread that is inside the owner's call into libmicrohttpd
//     (OwnerCall: starting or stopping a daemon, which no client drives),
//     aborts: parking that thread would hang the server's start or
//     shutdown;
//   - on any other thread (libmicrohttpd's own), parks it for the rest of
//     the process's life: it never returns into the corrupted state, and
//     whatever locks it holds stay held by a thread that does nothing.
//
// Thread safety: all functions may be called from any thread.
#ifndef IPUPOD_HTTP_PANIC_H_
#define IPUPOD_HTTP_PANIC_H_

#include "absl/time/time.h"

namespace ipupod::http::internal {

// Installs OnPanic as libmicrohttpd's panic function. Idempotent; call
// before the first daemon starts (HttpListener::Start does).
void InstallPanicHandler();

// Whether libmicrohttpd has panicked in this process.
bool Panicked();

// libmicrohttpd's MHD_PanicCallback (see above). Never returns.
[[noreturn]] void OnPanic(void* cls, const char* file, unsigned int line, const char* reason);

// Marks the calling thread as inside the owner's call into libmicrohttpd
// for its scope (MHD_start_daemon, MHD_stop_daemon).
class OwnerCall {
 public:
  OwnerCall();
  ~OwnerCall();
  OwnerCall(const OwnerCall&) = delete;
  OwnerCall& operator=(const OwnerCall&) = delete;
};

// Handlers in flight, over every listener of the process: a listener that
// sees Panicked() waits (bounded) for them to leave before its Stop()
// returns without joining libmicrohttpd's threads. EnterDispatch before
// reading Panicked(), LeaveDispatch when the request is answered.
void EnterDispatch();
void LeaveDispatch();
// True once no handler is in flight, false when `timeout` passed first.
bool AwaitNoDispatch(absl::Duration timeout);

}  // namespace ipupod::http::internal

#endif  // IPUPOD_HTTP_PANIC_H_
