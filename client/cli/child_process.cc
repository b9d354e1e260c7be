#include "client/cli/child_process.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/cli/exit_codes.h"
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

extern char** environ;

namespace ipupod::cli {
namespace {

std::vector<std::string> CurrentEnvironment() {
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    env.emplace_back(*entry);
  }
  return env;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

absl::Status SpawnError(int error, const std::string& command) {
  std::string message = absl::StrCat("cannot run `", command, "`: ", std::strerror(error));
  if (error == ENOENT) {
    return absl::NotFoundError(absl::StrCat(message, " (not found in PATH)"));
  }
  if (error == EACCES || error == EPERM) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

}  // namespace

std::vector<std::string> MergeEnvironment(const std::vector<std::string>& environment,
                                          const ChildProcess::EnvVars& extra) {
  std::vector<std::string> merged;
  for (const std::string& entry : environment) {
    bool replaced = false;
    for (const auto& [name, value] : extra) {
      if (entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 &&
          entry[name.size()] == '=') {
        replaced = true;
      }
    }
    if (!replaced) merged.push_back(entry);
  }
  for (const auto& [name, value] : extra) merged.push_back(absl::StrCat(name, "=", value));
  return merged;
}

absl::StatusOr<ChildProcess> ChildProcess::Spawn(const std::vector<std::string>& argv,
                                                 const EnvVars& extra_env) {
  std::vector<std::string> args = argv;
  std::vector<std::string> env = MergeEnvironment(CurrentEnvironment(), extra_env);
  std::vector<char*> arg_ptrs = Pointers(args);
  std::vector<char*> env_ptrs = Pointers(env);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  // glibc's posix_spawnp reports exec failures (ENOENT, EACCES) here.
  int error = posix_spawnp(&pid, arg_ptrs[0], nullptr, &attr, arg_ptrs.data(), env_ptrs.data());
  posix_spawnattr_destroy(&attr);
  if (error != 0) return SpawnError(error, argv[0]);
  return ChildProcess(pid);
}

std::optional<int> ChildProcess::Poll() {
  if (exit_code_) return exit_code_;
  int wait_status = 0;
  pid_t done = waitpid(pid_, &wait_status, WNOHANG);
  if (done == pid_) {
    exit_code_ = ExitCodeForWaitStatus(wait_status);
  } else if (done < 0 && errno == ECHILD) {
    exit_code_ = kExitOther;  // reaped elsewhere: nothing more to learn
  }
  return exit_code_;
}

void ChildProcess::Signal(int signal) {
  if (!exit_code_) kill(pid_, signal);
}

int ExitCodeForSpawnError(const absl::Status& status) {
  return absl::IsNotFound(status) ? 127 : 126;
}

}  // namespace ipupod::cli
