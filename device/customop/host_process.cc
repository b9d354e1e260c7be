#include "device/customop/host_process.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/customop/host.h"
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ipupod::customop {
namespace {

// Milliseconds until `deadline` for poll(), at least 0.
int PollMs(absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 60'000));
}

std::string SignalText(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return absl::StrCat("signal ", sig, abbrev != nullptr ? absl::StrCat(", SIG", abbrev) : "");
}

// The argv of the host.
std::vector<std::string> HostArgs(const std::string& library, const HostLimits& limits) {
  return {limits.host_binary,
          "--library",
          library,
          "--address-space-mb",
          absl::StrCat(limits.address_space_bytes >> 20),
          "--cpu-seconds",
          absl::StrCat(limits.cpu_seconds_per_call),
          "--parent",
          absl::StrCat(getpid())};
}

// Starts the host with `child` as its fd 3 and nothing else of ours.
absl::StatusOr<pid_t> Spawn(const std::string& library, const HostLimits& limits, int child) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDWR, 0);
  posix_spawn_file_actions_adddup2(&actions, 0, 1);
  posix_spawn_file_actions_adddup2(&actions, 0, 2);
  posix_spawn_file_actions_adddup2(&actions, child, kHostSocketFd);
  posix_spawn_file_actions_addclosefrom_np(&actions, kHostSocketFd + 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSID);
  std::vector<std::string> args = HostArgs(library, limits);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, limits.host_binary.c_str(), &actions, &attr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot start the custom op host '",
                                               limits.host_binary, "': ", std::strerror(rc)));
  }
  return pid;
}

}  // namespace

std::string DescribeExit(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    if (sig == SIGXCPU) return absl::StrCat("exceeded its CPU time (", SignalText(sig), ")");
    if (sig == SIGKILL) return absl::StrCat("was killed (", SignalText(sig), ")");
    return absl::StrCat("crashed (", SignalText(sig), ")");
  }
  if (WIFEXITED(wait_status)) {
    return absl::StrCat("exited with status ", WEXITSTATUS(wait_status));
  }
  return "ended";
}

absl::StatusOr<std::unique_ptr<HostProcess>> HostProcess::Start(const std::string& library,
                                                                const HostLimits& limits) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return absl::UnavailableError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  // dup2 onto itself would keep close-on-exec: give the child's end a number above 3.
  const int child = fcntl(fds[1], F_DUPFD_CLOEXEC, kHostSocketFd + 1);
  close(fds[1]);
  absl::StatusOr<pid_t> pid =
      child < 0 ? absl::UnavailableError("fcntl(F_DUPFD)") : Spawn(library, limits, child);
  if (child >= 0) close(child);
  if (!pid.ok()) {
    close(fds[0]);
    return pid.status();
  }
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  // A descriptor that polls readable when the process ends (glibc 2.36's wrapper lacks
  // C linkage in C++, hence the system call).
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, *pid, 0));
  std::unique_ptr<HostProcess> host(new HostProcess(*pid, fds[0], pidfd, limits));
  const CallSite site{absl::StrCat("custom op library '", library, "'"), "while loading",
                      "from loading"};
  IPUPOD_ASSIGN_OR_RETURN(std::string hello,
                          host->ReadFrame(kControlFrameBytesMax, absl::Now() + limits.start_timeout,
                                          limits.start_timeout, site));
  std::string load_error;
  absl::StatusOr<LibraryInfo> info = DecodeHello(hello, &load_error);
  if (!info.ok() && !load_error.empty()) {
    host->Kill();
    return absl::FailedPreconditionError(absl::StrCat(site.who, " does not load: ", load_error));
  }
  if (!info.ok()) {
    return host->Failed(site, absl::StrCat("sent a malformed table (", info.status().message(),
                                           "); its host process was killed"));
  }
  host->info_ = *std::move(info);
  return host;
}

HostProcess::~HostProcess() { Kill(); }

void HostProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = 0;
  close(socket_);
  if (pidfd_ >= 0) close(pidfd_);
  socket_ = pidfd_ = -1;
}

absl::Status HostProcess::Failed(const CallSite& site, absl::string_view message) {
  Kill();
  return absl::InternalError(absl::StrCat(site.who, " ", message));
}

HostProcess::Io HostProcess::Write(absl::string_view bytes, absl::Time deadline) {
  while (!bytes.empty()) {
    const ssize_t sent = send(socket_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent > 0) {
      bytes.remove_prefix(static_cast<size_t>(sent));
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return Io::kClosed;
    pollfd fds[2] = {{socket_, POLLOUT, 0}, {pidfd_, POLLIN, 0}};
    const int ready = poll(fds, pidfd_ >= 0 ? 2 : 1, PollMs(deadline));
    if (ready == 0 && absl::Now() >= deadline) return Io::kTimeout;
    if (ready > 0 && pidfd_ >= 0 && (fds[1].revents & POLLIN) != 0) return Io::kClosed;
  }
  return Io::kOk;
}

HostProcess::Io HostProcess::Read(char* out, size_t n, absl::Time deadline) {
  while (n > 0) {
    const ssize_t got = recv(socket_, out, n, 0);
    if (got > 0) {
      out += got;
      n -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return Io::kClosed;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Io::kClosed;
    // The process's exit is not watched here: a crash closes the socket, and what it
    // wrote before it crashed is still read.
    pollfd fds[1] = {{socket_, POLLIN, 0}};
    const int ready = poll(fds, 1, PollMs(deadline));
    if (ready == 0 && absl::Now() >= deadline) return Io::kTimeout;
  }
  return Io::kOk;
}

std::string HostProcess::ExitReason() {
  if (pidfd_ >= 0) {  // a crash closes the socket a moment before the process is reapable
    pollfd fds[1] = {{pidfd_, POLLIN, 0}};
    poll(fds, 1, 2000);
  }
  int status = 0;
  pid_t ended = 0;
  while ((ended = waitpid(pid_, &status, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (ended != pid_) return "closed its connection";  // and lives on: Kill() ends it
  pid_ = 0;                                           // reaped: Kill() only closes the descriptors
  close(socket_);
  if (pidfd_ >= 0) close(pidfd_);
  socket_ = pidfd_ = -1;
  return DescribeExit(status);
}

absl::StatusOr<std::string> HostProcess::ReadFrame(uint64_t bytes_max, absl::Time deadline,
                                                   absl::Duration timeout, const CallSite& site) {
  char header[kFrameHeaderBytes];
  Io io = Read(header, sizeof(header), deadline);
  uint32_t n = 0;
  std::memcpy(&n, header, sizeof(n));
  if (io == Io::kOk && n > bytes_max) {
    return Failed(site,
                  absl::StrCat("sent a reply of ", n, " bytes ", site.from, ", where at most ",
                               bytes_max, " were due; its host process was killed"));
  }
  std::string payload;
  if (io == Io::kOk) {
    payload.resize(n);
    io = Read(payload.data(), n, deadline);
  }
  if (io == Io::kTimeout) {
    return Failed(
        site, absl::StrCat("did not return ", site.from, " within ", absl::FormatDuration(timeout),
                           "; its host process was killed"));
  }
  if (io == Io::kClosed) return Failed(site, absl::StrCat(ExitReason(), " ", site.in));
  return payload;
}

absl::StatusOr<std::string> HostProcess::Call(absl::string_view request, uint64_t reply_bytes_max,
                                              const CallSite& site) {
  if (!alive()) return absl::InternalError(absl::StrCat(site.who, ": its host process is gone"));
  if (request.size() > UINT32_MAX) {
    return absl::ResourceExhaustedError(absl::StrCat(site.who, ": the call's operands are ",
                                                     request.size(),
                                                     " bytes; a custom op takes at most 4 GiB"));
  }
  const absl::Time deadline = absl::Now() + limits_.call_timeout;
  Io io = Write(FrameHeader(request.size()), deadline);
  if (io == Io::kOk) io = Write(request, deadline);
  if (io == Io::kTimeout) {
    return Failed(site, absl::StrCat("did not read its operands ", site.in, " within ",
                                     absl::FormatDuration(limits_.call_timeout),
                                     "; its host process was killed"));
  }
  // A host that died before it read everything still says how it ended.
  if (io == Io::kClosed) return Failed(site, absl::StrCat(ExitReason(), " ", site.in));
  return ReadFrame(reply_bytes_max, deadline, limits_.call_timeout, site);
}

}  // namespace ipupod::customop
