#include "tools/bench/server_process.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <utility>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace ipupod::bench {

ProcStatus ReadProcStatus(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  ProcStatus s;
  std::string key;
  while (in >> key) {
    if (key == "Threads:") in >> s.threads;
    if (key == "VmRSS:") in >> s.rss_kib;
    in.ignore(1 << 20, '\n');
  }
  // Fields 14 and 15 (utime, stime, in clock ticks), after the ")" that
  // ends the command name.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t end = line.rfind(')');
  if (end != std::string::npos) {
    std::istringstream fields(line.substr(end + 2));
    std::string field;
    double ticks = 0;
    for (int i = 3; i <= 15 && fields >> field; ++i) {
      if (i >= 14) ticks += std::stod(field);
    }
    s.cpu_seconds = ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  return s;
}

ServerProcess::~ServerProcess() { Stop(); }

ServerProcess& ServerProcess::operator=(ServerProcess&& other) noexcept {
  if (this != &other) {
    Stop();
    pid_ = std::exchange(other.pid_, -1);
    address_ = std::move(other.address_);
  }
  return *this;
}

void ServerProcess::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

namespace {

// argv for execv/posix_spawn: pointers into `args`, null-terminated.
std::vector<char*> Argv(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return argv;
}

}  // namespace

std::optional<ServerProcess> StartServerProcess(const std::string& state_dir,
                                                const std::vector<std::string>& extra_args) {
  return StartServerProcess(IPUPOD_SERVER_BINARY, state_dir, extra_args);
}

std::optional<ServerProcess> StartServerProcess(const std::string& binary,
                                                const std::string& state_dir,
                                                const std::vector<std::string>& extra_args) {
  std::vector<std::string> args = {binary,    "--listen",    "127.0.0.1:0", "--state-dir",
                                   state_dir, "--log-level", "warn"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  int out[2];
  if (pipe(out) != 0) return std::nullopt;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    std::vector<char*> argv = Argv(args);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(out[1]);
  std::string line;
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
  close(out[0]);
  std::smatch m;
  static const std::regex kReady(R"(listening on (127\.0\.0\.1:\d+))");
  if (pid < 0 || !std::regex_search(line, m, kReady)) {
    std::fprintf(stderr, "%s did not start: %s\n", binary.c_str(), line.c_str());
    if (pid > 0) {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
    return std::nullopt;
  }
  return std::optional<ServerProcess>(std::in_place, pid, m[1].str());
}

double TimeCli(const std::string& server, const std::string& user,
               const std::vector<std::string>& args, bool* ok, size_t* stdout_bytes) {
  std::vector<std::string> all = {IPUPOD_CLI_BINARY, "--server", server, "--user", user};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv = Argv(all);
  int out[2];
  *ok = false;
  *stdout_bytes = 0;
  if (pipe(out) != 0) return 0;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, IPUPOD_CLI_BINARY, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  char buffer[65536];
  ssize_t n;
  while ((n = read(out[0], buffer, sizeof buffer)) > 0) *stdout_bytes += static_cast<size_t>(n);
  close(out[0]);
  int status = 0;
  if (spawned == 0) waitpid(pid, &status, 0);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  *ok = spawned == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return ms;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace ipupod::bench
