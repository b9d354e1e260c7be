// File: device/customop/host_sandbox.h
//
// The system calls `ipupod-custom-op-host` (device/customop/host.h) takes away from a custom op
// library once the library is loaded and its table read: a seccomp filter (no privilege
// needed after PR_SET_NO_NEW_PRIVS) that fails these calls with EPERM (EACCES for opening
// files), so a library's code cannot reach past the operands it is given:
//   - opening files (open, openat, openat2, creat, open_by_handle_at): ipupodd's state
//     directory, its blobs and its users' models are files its own user can read;
//   - sockets (socket, socketpair, connect, bind, listen, accept, accept4): the helper
//     talks over the one socket it was started with;
//   - new programs and processes (execve, execveat, fork, vfork, clone3 - ENOSYS, so
//     glibc starts threads with clone - and clone without CLONE_THREAD): threads stay;
//   - other processes (ptrace, process_vm_readv/writev, pidfd_open, pidfd_getfd,
//     pidfd_send_signal, tkill, and kill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo
//     unless aimed at the helper itself): ipupodd runs as the same user, which could
//     otherwise be signalled, traced or read.
// Everything else (memory, threads, time, reading and writing the descriptors it has)
// is allowed: a denylist, so a library keeps working unless it reaches out. What it
// cannot take away is listed in docs/operations.md ("Custom op libraries").
//
// x86-64 and aarch64 only (another architecture gets UNIMPLEMENTED and no filter); a
// call made through another ABI (x32, 32-bit) ends the process.
//
// Thread safety: call once, from the host's only thread that exists before the library
// runs (threads started later inherit the filter; the parent watch, started earlier, is
// given it too: SECCOMP_FILTER_FLAG_TSYNC).
// Errors: UNIMPLEMENTED on an unknown architecture, INTERNAL when the kernel refuses
// the filter (errno's text).
#ifndef IPUPOD_CUSTOMOP_HOST_SANDBOX_H_
#define IPUPOD_CUSTOMOP_HOST_SANDBOX_H_

#include "absl/status/status.h"

namespace ipupod::customop {

absl::Status DenyEscapes();

}  // namespace ipupod::customop

#endif  // IPUPOD_CUSTOMOP_HOST_SANDBOX_H_
