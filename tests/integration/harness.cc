#include "tests/integration/harness.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace ipupod::testing {
namespace {

using Clock = std::chrono::steady_clock;

int MillisLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

// Reads what is available on `fd` into `buffer`; false at EOF.
bool ReadSome(int fd, std::string& buffer) {
  char chunk[4096];
  ssize_t n = read(fd, chunk, sizeof chunk);
  if (n > 0) {
    buffer.append(chunk, static_cast<size_t>(n));
    return true;
  }
  return n < 0 && (errno == EAGAIN || errno == EINTR);
}

std::vector<std::string> MergedEnvironment(const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [key, value] : extra) env[key] = value;
  std::vector<std::string> out;
  for (const auto& [key, value] : env) out.push_back(key + "=" + value);
  return out;
}

}  // namespace

std::string BuildDir() {
  const char* dir = std::getenv("IPUPOD_BUILD_DIR");
  if (dir == nullptr) throw std::runtime_error("IPUPOD_BUILD_DIR is not set (run through ctest)");
  return dir;
}
std::string ServerBinary() { return BuildDir() + "/server/ipupodd"; }
std::string CliBinary() { return BuildDir() + "/client/ipupod"; }

Process Process::Start(const std::vector<std::string>& argv,
                       const std::map<std::string, std::string>& env) {
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe failed");
  }
  std::vector<std::string> env_strings = MergedEnvironment(env);
  std::vector<char*> c_argv, c_env;
  for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  for (const auto& e : env_strings) c_env.push_back(const_cast<char*>(e.c_str()));
  c_env.push_back(nullptr);

  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    // A test that dies without its destructors (a sanitizer's halt, a crash)
    // takes its children along: an orphaned server would hold the test's
    // output pipe open and keep ctest waiting until its timeout.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    setpgid(0, 0);       // own process group: signals to the test do not reach it
    sigset_t none;       // the child starts as a service manager would start it:
    sigemptyset(&none);  // nothing blocked, whatever this thread blocked
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, STDIN_FILENO);
    execve(c_argv[0], c_argv.data(), c_env.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
  fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  Process p;
  p.pid_ = pid;
  p.out_fd_ = out_pipe[0];
  p.err_fd_ = err_pipe[0];
  return p;
}

std::string Process::DescribeThreads() const {
  std::ostringstream out;
  out << "threads of pid " << pid_ << " (name, wait channel, signals pending/blocked/caught):\n";
  std::error_code error;
  const std::string tasks = "/proc/" + std::to_string(pid_) + "/task";
  for (const auto& task : std::filesystem::directory_iterator(tasks, error)) {
    const std::string dir = task.path().string();
    std::string name = ReadTextFile(dir + "/comm");
    if (!name.empty() && name.back() == '\n') name.pop_back();
    out << "  " << task.path().filename().string() << " " << name << " "
        << ReadTextFile(dir + "/wchan");
    std::istringstream status(ReadTextFile(dir + "/status"));
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("SigPnd", 0) == 0 || line.rfind("ShdPnd", 0) == 0 ||
          line.rfind("SigBlk", 0) == 0 || line.rfind("SigCgt", 0) == 0) {
        out << " " << line;
      }
    }
    out << "\n";
  }
  if (error) out << "  (cannot list " << tasks << ": " << error.message() << ")\n";
  return out.str();
}

Process::Process(Process&& other) noexcept { *this = std::move(other); }

Process& Process::operator=(Process&& other) noexcept {
  std::swap(pid_, other.pid_);
  std::swap(out_fd_, other.out_fd_);
  std::swap(err_fd_, other.err_fd_);
  std::swap(out_, other.out_);
  std::swap(err_, other.err_);
  std::swap(out_consumed_, other.out_consumed_);
  std::swap(err_scanned_, other.err_scanned_);
  std::swap(exit_code_, other.exit_code_);
  return *this;
}

Process::~Process() {
  if (pid_ > 0 && !exit_code_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (out_fd_ >= 0) close(out_fd_);
  if (err_fd_ >= 0) close(err_fd_);
}

void Process::Drain(int timeout_ms) {
  std::vector<pollfd> fds;
  if (out_fd_ >= 0) fds.push_back({out_fd_, POLLIN, 0});
  if (err_fd_ >= 0) fds.push_back({err_fd_, POLLIN, 0});
  if (fds.empty()) return;
  if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  for (const pollfd& p : fds) {
    if ((p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    int& fd = p.fd == out_fd_ ? out_fd_ : err_fd_;
    std::string& buffer = p.fd == out_fd_ ? out_ : err_;
    if (!ReadSome(fd, buffer)) {
      close(fd);
      fd = -1;
    }
  }
}

std::optional<std::string> Process::ReadStdoutLine(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (true) {
    auto nl = out_.find('\n', out_consumed_);
    if (nl != std::string::npos) {
      std::string line = out_.substr(out_consumed_, nl - out_consumed_);
      out_consumed_ = nl + 1;
      return line;
    }
    if (out_fd_ < 0 || MillisLeft(deadline) == 0) return std::nullopt;
    Drain(std::min(MillisLeft(deadline), 50));
  }
}

std::optional<nlohmann::json> Process::ReadStdoutJson(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  std::string text;
  while (auto line = ReadStdoutLine(std::chrono::milliseconds(MillisLeft(deadline)))) {
    text += *line + "\n";
    auto doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_discarded()) return doc;
  }
  return std::nullopt;
}

bool Process::WaitForStderr(const std::string& needle, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (true) {
    if (err_.find(needle, err_scanned_) != std::string::npos) return true;
    if (err_fd_ < 0 || MillisLeft(deadline) == 0) return false;
    Drain(std::min(MillisLeft(deadline), 50));
  }
}

void Process::Signal(int sig) {
  if (pid_ > 0 && !exit_code_) kill(pid_, sig);
}

bool Process::Running() {
  if (exit_code_) return false;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return false;
  }
  return true;
}

std::optional<int> Process::Wait(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (Running()) {
    if (MillisLeft(deadline) == 0) return std::nullopt;
    Drain(std::min(MillisLeft(deadline), 20));
  }
  while (out_fd_ >= 0 || err_fd_ >= 0) Drain(100);
  return exit_code_;
}

ServerUnderTest::ServerUnderTest(std::vector<std::string> extra_args, std::string config_json)
    : extra_args_(std::move(extra_args)) {
  if (!config_json.empty()) {
    config_path_ = state_.path() + "/server-config.json";
    std::ofstream(config_path_) << config_json;
  }
  if (!StartProcess(0)) {
    throw std::runtime_error("ipupodd did not start: " + process_->stderr_text());
  }
}

ServerUnderTest::~ServerUnderTest() {
  if (process_) {
    process_->Signal(SIGTERM);
    if (!process_->Wait(std::chrono::seconds(10))) process_->Signal(SIGKILL);
  }
}

namespace {

// The "http://HOST:PORT" (or https) the ready line ends with, "" if none.
std::string MetricsUrlOf(const std::string& line) {
  size_t at = line.find("; http://");
  if (at == std::string::npos) at = line.find("; https://");
  if (at == std::string::npos) return "";
  const std::string rest = line.substr(at + 2);
  return rest.substr(0, rest.find(' '));
}

}  // namespace

std::string ServerUnderTest::metrics_url() const {
  std::lock_guard<std::mutex> lock(metrics_mu_);
  return metrics_url_;
}

bool ServerUnderTest::StartProcess(int port) {
  std::vector<std::string> argv = {ServerBinary(), "--listen", "127.0.0.1:" + std::to_string(port),
                                   "--state-dir", state_.path() + "/state"};
  if (!config_path_.empty()) {
    argv.push_back("--config");
    argv.push_back(config_path_);
  }
  // A restart keeps the gRPC port, and with it ipupodd would take the fixed
  // default metrics port: parallel tests must not collide on it.
  const bool metrics_chosen =
      std::find(extra_args_.begin(), extra_args_.end(), "--metrics-listen") != extra_args_.end() ||
      ReadTextFile(config_path_).find("\"metrics_listen\"") != std::string::npos;
  if (!metrics_chosen) {
    argv.push_back("--metrics-listen");
    argv.push_back("127.0.0.1:0");
  }
  argv.insert(argv.end(), extra_args_.begin(), extra_args_.end());
  process_.emplace(Process::Start(argv, env_));
  auto line = process_->ReadStdoutLine(std::chrono::seconds(20));
  // No <regex>: gcc's -Wmaybe-uninitialized fires inside it under ASan.
  const std::string prefix = "listening on 127.0.0.1:";
  size_t at = line ? line->find(prefix) : std::string::npos;
  if (at == std::string::npos) {
    process_->Wait(std::chrono::seconds(5));
    return false;
  }
  port_ = std::atoi(line->c_str() + at + prefix.size());
  {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    metrics_url_ = MetricsUrlOf(*line);
  }
  return port_ > 0;
}

void ServerUnderTest::Kill(int sig) {
  process_->Signal(sig);
  if (sig == SIGKILL || sig == SIGTERM) process_->Wait(std::chrono::seconds(10));
}

bool ServerUnderTest::Restart() { return StartProcess(port_); }

void ServerUnderTest::KillAndRestart() {
  Kill(SIGKILL);
  if (!Restart()) throw std::runtime_error("restart failed: " + process_->stderr_text());
}

nlohmann::json CliResult::json() const {
  return nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
}

CliResult RunLongCli(const std::string& server, const std::string& user,
                     const std::vector<std::string>& args, std::chrono::seconds limit) {
  Process p = StartCli(server, user, args);
  CliResult result;
  result.exit_code = p.Wait(limit).value_or(-1);
  result.out = p.stdout_text();
  result.err = p.stderr_text();
  return result;
}

CliResult RunCli(const std::string& server, const std::string& user,
                 const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& env) {
  Process p = StartCli(server, user, args, env);
  CliResult result;
  auto code = p.Wait(std::chrono::seconds(30));
  result.exit_code = code.value_or(-1);
  result.out = p.stdout_text();
  result.err = p.stderr_text();
  return result;
}

Process StartCli(const std::string& server, const std::string& user,
                 const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv = {CliBinary(), "--server", server, "--user", user};
  argv.insert(argv.end(), args.begin(), args.end());
  return Process::Start(argv, env);
}

}  // namespace ipupod::testing
