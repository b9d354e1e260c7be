// File: device/customop/host.h
//
// `ipupod-custom-op-host`, the helper process that runs one custom op library for
// ipupodd (device/customop/host_process.h starts it; docs/operations.md, "Custom op libraries").
// ipupodd never loads a user's library into its own address space: this process does,
// confined as far as an unprivileged process can confine itself before it loads anything:
//   - it dies with its parent (a thread waits on a pidfd of ipupodd and ends the
//     process when ipupodd ends, even mid-call; it exits at once if the parent is already
//     gone), and can gain no privileges (PR_SET_NO_NEW_PRIVS);
//   - its address space is limited (RLIMIT_AS, --address-space-mb), so a huge allocation
//     fails inside the library instead of taking the machine's memory;
//   - each call may use --cpu-seconds CPU seconds (RLIMIT_CPU re-armed before each call:
//     SIGXCPU ends it), beside the wall-clock deadline ipupodd keeps on every call;
//   - no core dumps (RLIMIT_CORE 0: a crash leaves no copy of anyone's tensors on disk);
//   - it starts with an empty environment, /dev/null as stdin, stdout and stderr, and no
//     file descriptor of ipupodd's but its end of the socket (fd 3).
// It then loads the library (dlopen RTLD_NOW: the library's own load-time code runs here,
// before anything below), checks its table (device/customop/custom_op_abi.h), takes away the
// system calls that reach outside the process (device/customop/host_sandbox.h: files, sockets,
// programs, other processes; a host that cannot do so refuses the library), sends the
// table as Hello and serves requests (device/customop/protocol.h) until ipupodd closes the
// socket. Every call into the library is guarded: its outputs are zero-filled buffers
// with a guard band behind each (writing past an output is reported and the process
// exits: its memory can no longer be trusted), an escaping C++ exception is reported, and
// the shapes it returns are checked.
//
// Thread safety: one thread serves one request at a time.
// Errors: RunHost returns the process's exit code: 0 when ipupodd closed the socket or the
// library did not load (Hello said why), 2 for bad arguments, 3 when the parent was gone,
// 4 after the library misbehaved fatally (reported first), 5 for a broken socket.
#ifndef IPUPOD_CUSTOMOP_HOST_H_
#define IPUPOD_CUSTOMOP_HOST_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "device/customop/protocol.h"
#include <sys/types.h>

namespace ipupod::customop {

inline constexpr char kHostBinaryName[] = "ipupod-custom-op-host";
// The host's end of the socket.
inline constexpr int kHostSocketFd = 3;

struct HostOptions {
  std::string library;               // absolute path
  int64_t address_space_bytes = 0;   // 0: no limit
  int64_t cpu_seconds_per_call = 0;  // 0: no limit
  pid_t parent = 0;                  // 0: not checked
};

// --library PATH [--address-space-mb N] [--cpu-seconds N] [--parent PID].
// INVALID_ARGUMENT naming the argument.
absl::StatusOr<HostOptions> ParseHostArgs(int argc, const char* const* argv);

// The library's table as the protocol carries it, or why it is not acceptable (the
// checks of custom_op_abi.h: ABI version, counts, names, versions, required functions,
// duplicate ops). `table` is what IpupodCustomOpLibraryGet returned (may be null).
absl::StatusOr<LibraryInfo> CheckLibraryTable(const void* table);

// Runs the host on fd kHostSocketFd; returns the exit code (see the file comment).
int RunHost(const HostOptions& options);

}  // namespace ipupod::customop

#endif  // IPUPOD_CUSTOMOP_HOST_H_
