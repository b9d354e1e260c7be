// File: tests/integration/harness.h
//
// Drives the real binaries for end-to-end tests: starts `ipupodd` on an
// ephemeral loopback port with its own state directory, runs `ipupod` CLI
// commands to completion, and keeps long-running CLI processes (attach)
// in the background so a test can read their output line by line, signal
// them, or kill them.
//
// Every wait in here has a deadline; a child that outlives its test is
// killed by the destructor. Binaries are found through $IPUPOD_BUILD_DIR
// (set by ctest) as server/ipupodd and client/ipupod.
#ifndef IPUPOD_TESTS_INTEGRATION_HARNESS_H_
#define IPUPOD_TESTS_INTEGRATION_HARNESS_H_

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/eventually.h"
#include "tests/support/python_cases.h"
#include "tests/support/temp_dir.h"
#include <sys/types.h>

namespace ipupod::testing {

std::string BuildDir();
std::string ServerBinary();
std::string CliBinary();

// A fresh, empty directory, removed on destruction (tests/support/temp_dir.h).
using test_support::TempDir;

// A child process with stdout and stderr captured through pipes.
class Process {
 public:
  // Starts argv[0] (a path) with `env` added to the inherited environment.
  static Process Start(const std::vector<std::string>& argv,
                       const std::map<std::string, std::string>& env = {});
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();  // SIGKILLs and reaps a child that is still running

  pid_t pid() const { return pid_; }
  // Reads stdout until a full line arrives or the deadline passes.
  std::optional<std::string> ReadStdoutLine(std::chrono::milliseconds timeout);
  // Reads stdout lines until they form one JSON document, or the deadline.
  std::optional<nlohmann::json> ReadStdoutJson(std::chrono::milliseconds timeout);
  // Reads stderr until a line containing `needle` arrives or the deadline passes.
  bool WaitForStderr(const std::string& needle, std::chrono::milliseconds timeout);
  void Signal(int sig);
  // Waits for exit; returns the exit code (128+signal when killed), or
  // nullopt on timeout. Drains stdout/stderr into stdout()/stderr().
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  bool Running();
  // Each thread of a running child: name, wait channel and its signal masks
  // from /proc, for a failure message when a child does not react to a signal.
  std::string DescribeThreads() const;
  const std::string& stdout_text() const { return out_; }
  const std::string& stderr_text() const { return err_; }

 private:
  Process() = default;
  void Drain(int timeout_ms);
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string out_;
  std::string err_;
  size_t out_consumed_ = 0;
  size_t err_scanned_ = 0;
  std::optional<int> exit_code_;
};

// ipupodd on 127.0.0.1:<ephemeral> with a state directory that outlives
// restarts of the server (Kill + Restart keep it).
class ServerUnderTest {
 public:
  // `extra_args` go to ipupodd (e.g. {"--pod", "POD4"}); `config_json`, when
  // not empty, is written to a file passed with --config.
  explicit ServerUnderTest(std::vector<std::string> extra_args = {}, std::string config_json = "");
  ~ServerUnderTest();

  int port() const { return port_.load(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_.load()); }
  // Its HTTP listener (metrics, health) as its ready line names it,
  // "http://127.0.0.1:PORT" ("" when metrics_listen is "off"). Each start
  // picks a free port for it (--metrics-listen 127.0.0.1:0) unless the
  // test's flags or config choose one.
  std::string metrics_url() const;
  // The temporary directory whose "state" subdirectory is --state-dir.
  const std::string& state_dir() const { return state_.path(); }
  // The --config file ("" without one); rewrite it and Kill(SIGHUP) to reload.
  const std::string& config_path() const { return config_path_; }
  // SIGKILL (no chance to clean up), then start again on the same port and state.
  void KillAndRestart();
  void Kill(int sig);
  // Starts again after Kill; false (with the server's stderr) on failure.
  bool Restart();
  Process& process() { return *process_; }
  // Environment added for the next (re)starts, e.g. a test-only store
  // fault (server/store/write_points.h); extra flags for the next (re)starts.
  void set_env(std::map<std::string, std::string> env) { env_ = std::move(env); }
  void set_extra_args(std::vector<std::string> args) { extra_args_ = std::move(args); }

 private:
  bool StartProcess(int port);
  TempDir state_;
  std::vector<std::string> extra_args_;
  std::map<std::string, std::string> env_;
  std::string config_path_;
  std::optional<Process> process_;
  // Read by client threads while the main thread restarts the server (a
  // restart keeps the port, but writes it again).
  std::atomic<int> port_{0};
  mutable std::mutex metrics_mu_;
  std::string metrics_url_;  // guarded by metrics_mu_
};

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
  // stdout parsed as one JSON document (null when it is not).
  nlohmann::json json() const;
};

// Runs `ipupod --server ADDR --user USER ARGS...` to completion (30 s limit).
// As RunCli for commands that take minutes (compiling and running torch
// models): `limit` instead of 30 s.
CliResult RunLongCli(const std::string& server, const std::string& user,
                     const std::vector<std::string>& args, std::chrono::seconds limit);

// A whole text file ("" if it cannot be read).
using test_support::ReadTextFile;

CliResult RunCli(const std::string& server, const std::string& user,
                 const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& env = {});

// Starts `ipupod --server ADDR --user USER ARGS...` in the background.
Process StartCli(const std::string& server, const std::string& user,
                 const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& env = {});

// Polls `predicate` every 20 ms until true or the deadline passes
// (tests/support/eventually.h).
template <typename Predicate>
bool Eventually(Predicate predicate, std::chrono::milliseconds timeout) {
  return test_support::Eventually(predicate, absl::FromChrono(timeout), absl::Milliseconds(20));
}

}  // namespace ipupod::testing

#endif  // IPUPOD_TESTS_INTEGRATION_HARNESS_H_
