// File: tools/bench/server_process.h
//
// What the queue benchmarks (waiters_bench, jobs_bench) share: ipupodd run
// as a child process on an ephemeral loopback port (so /proc tells its
// resident memory and threads), and the real `ipupod` CLI run as a process
// and timed from spawn to exit with its stdout drained through a pipe, as a
// user running it in a terminal or into `less` would pay for it.
//
// Thread safety: none needed; each benchmark drives these from one thread.
// Errors: StartServerProcess returns nullopt (saying why on stderr) when the
// server does not start; TimeCli reports a failed command through `ok`.
#ifndef IPUPOD_BENCH_SERVER_PROCESS_H_
#define IPUPOD_BENCH_SERVER_PROCESS_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <sys/types.h>

namespace ipupod::bench {

// From /proc/PID/status and /proc/PID/stat: threads, resident set, CPU time.
struct ProcStatus {
  long threads = 0;
  long rss_kib = 0;
  double cpu_seconds = 0;  // user + system, from /proc/PID/stat
};
ProcStatus ReadProcStatus(pid_t pid);

// A running ipupodd; the destructor stops it (SIGTERM, then waits).
class ServerProcess {
 public:
  ServerProcess(pid_t pid, std::string address) : pid_(pid), address_(std::move(address)) {}
  ~ServerProcess();
  ServerProcess(ServerProcess&& other) noexcept
      : pid_(std::exchange(other.pid_, -1)), address_(std::move(other.address_)) {}
  ServerProcess& operator=(ServerProcess&& other) noexcept;  // stops this one first

  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }

 private:
  void Stop();

  pid_t pid_;
  std::string address_;
};

// Starts IPUPOD_SERVER_BINARY on 127.0.0.1:0 with `state_dir`, --log-level
// warn and `extra_args` (e.g. {"--config", path}); waits for its
// "listening on" line.
std::optional<ServerProcess> StartServerProcess(const std::string& state_dir,
                                                const std::vector<std::string>& extra_args);
// The same with another build's ipupodd (cli_run_bench --baseline).
std::optional<ServerProcess> StartServerProcess(const std::string& binary,
                                                const std::string& state_dir,
                                                const std::vector<std::string>& extra_args);

// Runs IPUPOD_CLI_BINARY with `args` (the server and user as --server and
// --user first) and returns the wall time from spawn to exit in ms; its
// stdout is read through a pipe and counted in `stdout_bytes`, its stderr
// goes to /dev/null. `ok` is false when it cannot start or exits non-zero.
double TimeCli(const std::string& server, const std::string& user,
               const std::vector<std::string>& args, bool* ok, size_t* stdout_bytes);

// The median of `values`. REQUIRES: not empty.
double Median(std::vector<double> values);

}  // namespace ipupod::bench

#endif  // IPUPOD_BENCH_SERVER_PROCESS_H_
