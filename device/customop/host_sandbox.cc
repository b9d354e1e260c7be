#include "device/customop/host_sandbox.h"

#include <cstddef>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ipupod::customop {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
constexpr uint32_t kArch = 0;
#endif

constexpr uint32_t kArgument0 = offsetof(struct seccomp_data, args);  // low half (little-endian)

class Filter {
 public:
  // Fails `nr` with `error`.
  void Deny(long nr, int error = EPERM) {
    Add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1));
    Add(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<uint32_t>(error) & 0xffff)));
  }
  // Allows `nr` when its first argument, masked by `mask` (0: compared whole), is `value`;
  // fails it with EPERM otherwise.
  void DenyUnlessFirstArgument(long nr, uint32_t value, uint32_t mask = 0) {
    Add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 4));
    Add(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kArgument0));
    if (mask != 0) {
      Add(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, mask, 0, 1));
    } else {
      Add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 0, 1));
    }
    Add(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    Add(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM));
  }
  void Add(sock_filter instruction) { program_.push_back(instruction); }
  std::vector<sock_filter>& program() { return program_; }

 private:
  std::vector<sock_filter> program_;
};

void Header(Filter& f) {
  f.Add(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)));
  f.Add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0));
  f.Add(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  f.Add(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
#if defined(__x86_64__)
  f.Add(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));  // the x32 ABI
  f.Add(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
#endif
}

void DenyFiles(Filter& f) {
#ifdef __NR_open
  f.Deny(__NR_open, EACCES);
#endif
#ifdef __NR_creat
  f.Deny(__NR_creat, EACCES);
#endif
  f.Deny(__NR_openat, EACCES);
  f.Deny(__NR_openat2, EACCES);
  f.Deny(__NR_open_by_handle_at, EACCES);
}

void DenySocketsAndPrograms(Filter& f) {
  for (long nr : {__NR_socket, __NR_socketpair, __NR_connect, __NR_bind, __NR_listen, __NR_accept,
                  __NR_accept4, __NR_execve, __NR_execveat}) {
    f.Deny(nr);
  }
#ifdef __NR_fork
  f.Deny(__NR_fork);
  f.Deny(__NR_vfork);
#endif
  f.Deny(__NR_clone3, ENOSYS);  // glibc then starts threads with clone
  f.DenyUnlessFirstArgument(__NR_clone, CLONE_THREAD, CLONE_THREAD);
}

void DenyOtherProcesses(Filter& f, uint32_t self) {
  for (long nr : {__NR_ptrace, __NR_process_vm_readv, __NR_process_vm_writev, __NR_pidfd_open,
                  __NR_pidfd_getfd, __NR_pidfd_send_signal, __NR_tkill}) {
    f.Deny(nr);
  }
  for (long nr : {__NR_kill, __NR_tgkill, __NR_rt_sigqueueinfo, __NR_rt_tgsigqueueinfo}) {
    f.DenyUnlessFirstArgument(nr, self);
  }
}

}  // namespace

absl::Status DenyEscapes() {
  if (kArch == 0) {
    return absl::UnimplementedError("no system call filter for this architecture");
  }
  Filter filter;
  Header(filter);
  DenyFiles(filter);
  DenySocketsAndPrograms(filter);
  DenyOtherProcesses(filter, static_cast<uint32_t>(getpid()));
  filter.Add(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  sock_fprog program{static_cast<unsigned short>(filter.program().size()), filter.program().data()};
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &program) != 0) {
    return absl::InternalError(absl::StrCat("seccomp: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace ipupod::customop
