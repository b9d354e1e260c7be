// File: client/cli/child_process.h
//
// A command run by `ipupod attach -- COMMAND`: spawned with posix_spawnp (no
// unsafe work between fork and exec in this multi-threaded process), with
// every signal unblocked and SIGINT/SIGTERM/SIGHUP/SIGCHLD/SIGPIPE at their
// default actions, in the caller's process group (so the terminal's Ctrl-C
// reaches it directly), and with extra environment variables.
//
// Errors of Spawn: NOT_FOUND when the command is not in PATH, PERMISSION_DENIED
// when it is not executable, INTERNAL otherwise; ExitCodeForSpawnError maps
// them to the shell's 127 / 126.
//
// Thread safety: one thread at a time. The child is not reaped or killed by
// the destructor (the caller decides; see client/cli/attach.cc).
#ifndef IPUPOD_CLIENT_CLI_CHILD_PROCESS_H_
#define IPUPOD_CLIENT_CLI_CHILD_PROCESS_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include <sys/types.h>

namespace ipupod::cli {

class ChildProcess {
 public:
  using EnvVars = std::vector<std::pair<std::string, std::string>>;

  // REQUIRES: !argv.empty(). `extra_env` overrides inherited variables.
  static absl::StatusOr<ChildProcess> Spawn(const std::vector<std::string>& argv,
                                            const EnvVars& extra_env);

  pid_t pid() const { return pid_; }
  // Non-blocking: the exit code (128 + signal if killed) once it exited.
  std::optional<int> Poll();
  // Sends `signal` unless the child was already reaped.
  void Signal(int signal);

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  std::optional<int> exit_code_;
};

// 127 for NOT_FOUND, 126 otherwise (as shells report commands they cannot run).
int ExitCodeForSpawnError(const absl::Status& status);

// `environment` (NAME=value strings) with `extra` set, replacing same names.
std::vector<std::string> MergeEnvironment(const std::vector<std::string>& environment,
                                          const ChildProcess::EnvVars& extra);

}  // namespace ipupod::cli

#endif  // IPUPOD_CLIENT_CLI_CHILD_PROCESS_H_
