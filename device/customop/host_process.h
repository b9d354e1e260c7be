// File: device/customop/host_process.h
//
// HostProcess: ipupodd's handle on one `ipupod-custom-op-host` (device/customop/host.h) running
// one library: it starts the process, reads its op table, makes calls with a deadline
// and, when the process misbehaves, kills it and says exactly what happened. The process
// gets an empty environment, /dev/null for stdin, stdout and stderr, its end of a Unix
// socketpair as fd 3 and no other descriptor (posix_spawn with closefrom), its own
// session, default signal handling, and its limits on the command line (it applies them
// before it loads the library).
//
// Every failure of a call ends the process (SIGKILL, then reaped): a process that
// crashed, hung or sent something malformed is never spoken to again. Messages name the
// op and the function: "custom op com.acme::Cube crashed (signal 11, SIGSEGV) in its
// compute function", "... did not return from its compute function within 10s; its
// host process was killed", "... exceeded its CPU time (SIGXCPU) ...", "... returned a
// malformed reply ...".
//
// Thread safety: not thread-safe; device/customop/custom_op_library.h serialises calls.
// Ownership: owns the process; the destructor kills and reaps it (never blocks longer
// than the kernel takes to deliver SIGKILL).
// Errors: Start - UNAVAILABLE when the process cannot be started (posix_spawn failed: the
// host binary is missing or not executable), FAILED_PRECONDITION when the library does
// not load (the host's reason: dlopen's error, no entry point, a table that fails the
// ABI's checks), INTERNAL when the host dies or says nothing intelligible before its
// Hello. Call - INTERNAL for every way the process can fail a call (above).
#ifndef IPUPOD_CUSTOMOP_HOST_PROCESS_H_
#define IPUPOD_CUSTOMOP_HOST_PROCESS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "device/customop/protocol.h"
#include <sys/types.h>

namespace ipupod::customop {

struct HostLimits {
  std::string host_binary;  // the ipupod-custom-op-host to run
  // RLIMIT_AS of the host (its libraries, code and operands included); 0: none.
  int64_t address_space_bytes = int64_t{4} << 30;
  // Wall-clock bound of one call, and of the start (loading the library).
  absl::Duration call_timeout = absl::Seconds(60);
  absl::Duration start_timeout = absl::Seconds(30);
  // CPU seconds one call may use (all its threads); 0: none.
  int64_t cpu_seconds_per_call = 0;
};

// What a host's end says about how it ended: "crashed (signal 11, SIGSEGV)",
// "exceeded its CPU time (signal 24, SIGXCPU)", "exited with status 4", from a
// waitpid status.
std::string DescribeExit(int wait_status);

// How a call's messages name it: who ("custom op com.acme::Cube"), and where it was
// ("in its compute function", "from its compute function").
struct CallSite {
  std::string who;
  std::string in;
  std::string from;
};

class HostProcess {
 public:
  static absl::StatusOr<std::unique_ptr<HostProcess>> Start(const std::string& library,
                                                            const HostLimits& limits);
  ~HostProcess();
  HostProcess(const HostProcess&) = delete;
  HostProcess& operator=(const HostProcess&) = delete;

  const LibraryInfo& info() const { return info_; }
  pid_t pid() const { return pid_; }
  // False once a call failed (the process is gone).
  bool alive() const { return pid_ > 0; }

  // Sends `request` (a protocol payload) and returns the reply's payload, at most
  // `reply_bytes_max` long; `site` names the call in messages. REQUIRES: alive().
  absl::StatusOr<std::string> Call(absl::string_view request, uint64_t reply_bytes_max,
                                   const CallSite& site);
  // Ends the process now (SIGKILL, reaped); alive() is false afterwards.
  void Kill();

 private:
  enum class Io { kOk, kTimeout, kClosed };

  HostProcess(pid_t pid, int socket, int pidfd, HostLimits limits)
      : pid_(pid), socket_(socket), pidfd_(pidfd), limits_(std::move(limits)) {}
  Io Write(absl::string_view bytes, absl::Time deadline);
  Io Read(char* out, size_t n, absl::Time deadline);
  // The reply frame, or the failure (the process is killed then).
  absl::StatusOr<std::string> ReadFrame(uint64_t bytes_max, absl::Time deadline,
                                        absl::Duration timeout, const CallSite& site);
  // After the socket closed: how the process ended (waiting a moment for it).
  std::string ExitReason();
  // Kills the process; INTERNAL "<who> <message>".
  absl::Status Failed(const CallSite& site, absl::string_view message);

  pid_t pid_;
  int socket_;
  int pidfd_;  // -1 when the kernel has no pidfd_open
  const HostLimits limits_;
  LibraryInfo info_;
};

}  // namespace ipupod::customop

#endif  // IPUPOD_CUSTOMOP_HOST_PROCESS_H_
