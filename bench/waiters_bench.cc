// 500 concurrent waiters on one ipupodd: the server's threads and resident
// memory with the queue full, beside the same server idle (the reference,
// measured in the same run), and how fast the queue drains once IPUs free up.
//
// The server runs as a child process (so /proc tells its threads and RSS);
// waiters are callback-API client reactors in this process (no thread each).
//   build/bench/waiters_bench [WAITERS]      default 500
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "client/client.h"
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ipupod::bench {
namespace {

namespace v1 = ::ipupod::v1;
using Clock = std::chrono::steady_clock;

struct ProcStatus {
  long threads = 0;
  long rss_kib = 0;
};

ProcStatus ReadProcStatus(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  ProcStatus s;
  std::string key;
  while (in >> key) {
    if (key == "Threads:") in >> s.threads;
    if (key == "VmRSS:") in >> s.rss_kib;
    in.ignore(1 << 20, '\n');
  }
  return s;
}

// Starts ipupodd on an ephemeral port; returns its pid and address.
pid_t StartServer(const std::string& state_dir, std::string* address) {
  int out[2];
  if (pipe(out) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    execl(IPUPOD_SERVER_BINARY, IPUPOD_SERVER_BINARY, "--listen", "127.0.0.1:0", "--state-dir",
          state_dir.c_str(), "--log-level", "warn", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string line;
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
  std::smatch m;
  static const std::regex kReady(R"(listening on (127\.0\.0\.1:\d+))");
  if (!std::regex_search(line, m, kReady)) return -1;
  *address = m[1].str();
  return pid;
}

// One waiter: an Attach stream with wait; releases its grant at once.
class Waiter : public grpc::ClientReadReactor<v1::AttachEvent> {
 public:
  Waiter(v1::SessionService::Stub* stub, std::atomic<int>* queued, std::atomic<int>* granted,
         std::atomic<int>* done)
      : queued_(queued), granted_(granted), done_(done) {
    context_.AddMetadata("x-ipupod-user", "waiter");
    request_.set_num_ipus(1);
    request_.set_wait(true);
    stub->async()->Attach(&context_, &request_, this);
    StartRead(&event_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (event_.has_queued() && !counted_queued_) {
      counted_queued_ = true;
      queued_->fetch_add(1);
    }
    if (event_.has_granted()) {
      granted_->fetch_add(1);
      context_.TryCancel();  // release at once: the next waiter gets the IPU
      return;
    }
    StartRead(&event_);
  }
  void OnDone(const grpc::Status&) override { done_->fetch_add(1); }

 private:
  grpc::ClientContext context_;
  v1::AttachRequest request_;
  v1::AttachEvent event_;
  bool counted_queued_ = false;
  std::atomic<int>* queued_;
  std::atomic<int>* granted_;
  std::atomic<int>* done_;
};

bool WaitUntil(const std::atomic<int>& counter, int target, std::chrono::seconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (counter.load() < target) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

int Run(int waiters) {
  auto state_dir = std::filesystem::temp_directory_path() / "ipupod-waiters-bench";
  std::filesystem::remove_all(state_dir);
  std::string address;
  pid_t pid = StartServer(state_dir.string(), &address);
  if (pid < 0) {
    std::fprintf(stderr, "ipupodd did not start\n");
    return 1;
  }
  client::ClientOptions options;
  options.server = address;
  options.user = "holder";
  auto client = std::move(client::Client::Connect(options)).value();
  (void)client->GetPodInfo();  // warm the server's first-call paths
  ProcStatus idle = ReadProcStatus(pid);

  v1::AttachRequest all;
  all.set_num_ipus(16);
  auto holder = client->StartAttach(all);
  if (!holder->WaitForGrant(nullptr).ok()) return 1;

  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = v1::SessionService::NewStub(channel);
  std::atomic<int> queued{0}, granted{0}, done{0};
  std::vector<std::unique_ptr<Waiter>> list;
  auto t0 = Clock::now();
  for (int i = 0; i < waiters; ++i) {
    list.push_back(std::make_unique<Waiter>(stub.get(), &queued, &granted, &done));
  }
  bool all_queued = WaitUntil(queued, waiters, std::chrono::seconds(60));
  double queue_s = std::chrono::duration<double>(Clock::now() - t0).count();
  ProcStatus loaded = ReadProcStatus(pid);
  auto q0 = Clock::now();
  auto queue = client->ListQueue();
  double list_ms = std::chrono::duration<double, std::milli>(Clock::now() - q0).count();

  auto r0 = Clock::now();
  (void)holder->Release();
  bool all_granted = WaitUntil(done, waiters, std::chrono::seconds(120));
  double drain_s = std::chrono::duration<double>(Clock::now() - r0).count();

  std::printf("waiters_bench: %d waiters for 1 IPU each while one session holds all 16\n", waiters);
  std::printf("%-34s %14s %14s\n", "figure", "500 waiting", "idle (ref)");
  std::printf("%-34s %14ld %14ld\n", "server threads", loaded.threads, idle.threads);
  std::printf("%-34s %14.1f %14.1f\n", "server RSS (MiB)", loaded.rss_kib / 1024.0,
              idle.rss_kib / 1024.0);
  std::printf("%-34s %14.1f\n", "server RSS per waiter (KiB)",
              double(loaded.rss_kib - idle.rss_kib) / waiters);
  std::printf("%-34s %14.3f\n", "time to queue all (s)", queue_s);
  std::printf("%-34s %14.2f  (%d entries)\n", "ipupod queue with all waiting (ms)", list_ms,
              queue.ok() ? queue->entries_size() : -1);
  std::printf("%-34s %14.3f  (%.0f grants/s)\n", "drain: all granted+released (s)", drain_s,
              waiters / drain_s);
  std::printf("all queued: %s, all granted: %s (%d)\n", all_queued ? "yes" : "NO",
              all_granted ? "yes" : "NO", granted.load());

  // A reactor may only be destroyed after its OnDone; leak the stragglers.
  if (done.load() == waiters) list.clear();
  for (auto& w : list) (void)w.release();
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  std::filesystem::remove_all(state_dir);
  return all_queued && all_granted ? 0 : 1;
}

}  // namespace
}  // namespace ipupod::bench

int main(int argc, char** argv) {
  int waiters = argc > 1 ? std::atoi(argv[1]) : 500;
  if (waiters < 1 || waiters > 100000) {
    std::fprintf(stderr, "usage: waiters_bench [WAITERS 1..100000]\n");
    return 2;
  }
  return ipupod::bench::Run(waiters);
}
