// N concurrent waiters on one ipupodd (issue 17: 10,000 of them): the
// server's threads and resident memory with the queue full, beside the same
// server idle; `ipupod queue` as the real CLI process and its RPC alone,
// beside the CLI listing an empty queue and a bare unary call (GetPodInfo);
// the time to queue them all; and how fast the queue drains once IPUs free
// up (each waiter releases its grant at once). All references are measured
// in the same run.
//
// The server runs as a child process (so /proc tells its threads and RSS),
// configured with max_waiters above N (its default, 4096, would refuse the
// rest; attaches are not under the execution call limits). Waiters are
// callback-API client reactors in this process (no thread each), spread over
// --channels connections (default one per 1000 waiters, as many clients
// would arrive over many connections).
//   build/tools/bench/waiters_bench [--waiters N] [--channels C] [--rounds R]
//   defaults: 10000 waiters, R = 5 (CLI and RPC timings: medians of R)
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "client/client.h"
#include "tools/bench/server_process.h"
#include <unistd.h>

namespace ipupod::bench {
namespace {

namespace v1 = ::ipupod::v1;
using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

struct Flags {
  int waiters = 10000;
  int channels = 0;  // 0: one per 1000 waiters
  int rounds = 5;
};

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

// Waits until `counter` reaches `target`; false once it has not moved for `stall`.
bool WaitUntil(const std::atomic<int>& counter, int target, std::chrono::seconds stall) {
  int seen = counter.load();
  auto deadline = Clock::now() + stall;
  while (seen < target) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (counter.load() != seen) {
      seen = counter.load();
      deadline = Clock::now() + stall;
    }
  }
  return true;
}

// Median wall time of `rounds` runs of the CLI with `args`; `bytes` its stdout.
double CliMs(const std::string& address, const std::vector<std::string>& args, int rounds,
             size_t* bytes, bool* ok) {
  std::vector<double> ms;
  *ok = true;
  for (int i = 0; i < rounds; ++i) {
    bool one_ok = false;
    ms.push_back(TimeCli(address, "bench", args, &one_ok, bytes));
    *ok = *ok && one_ok;
  }
  return Median(ms);
}

// Median of `rounds` ListQueue RPCs; `entries` what the last returned.
double ListQueueMs(client::Client& client, int rounds, int* entries) {
  std::vector<double> ms;
  for (int i = 0; i < rounds; ++i) {
    const Clock::time_point t = Clock::now();
    absl::StatusOr<v1::ListQueueResponse> queue = client.ListQueue();
    ms.push_back(Ms(t));
    *entries = queue.ok() ? queue->entries_size() : -1;
  }
  return Median(ms);
}

double UnaryMs(client::Client& client, int calls) {
  std::vector<double> ms;
  for (int i = 0; i < calls; ++i) {
    const Clock::time_point t = Clock::now();
    (void)client.GetPodInfo();
    ms.push_back(Ms(t));
  }
  return Median(ms);
}

// What one run measured.
struct Figures {
  ProcStatus idle, loaded;
  double unary_ms = 0, cli_empty_ms = 0;
  double rpc_ms = 0, cli_ms = 0, cli_json_ms = 0;
  int rpc_entries = 0;
  size_t cli_bytes = 0, cli_json_bytes = 0, cli_empty_bytes = 0;
  bool cli_ok = true;
  double queue_s = 0, drain_s = 0;
  // CPU seconds spent queueing and draining: the server's and this
  // process's (the waiters' client side).
  double queue_cpu = 0, drain_cpu = 0, client_drain_cpu = 0;
  std::string loadavg;
  bool all_queued = false, all_granted = false;
  int queued = 0, granted = 0, done = 0;
};

// The waiters' connections: distinct channels (a local subchannel pool
// each, so they do not share one HTTP/2 connection).
std::vector<std::unique_ptr<v1::SessionService::Stub>> Stubs(const std::string& address, int n) {
  std::vector<std::unique_ptr<v1::SessionService::Stub>> stubs;
  for (int i = 0; i < n; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("ipupod.bench.channel", i);
    stubs.push_back(v1::SessionService::NewStub(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
  }
  return stubs;
}

void MeasureListing(const Flags& flags, const std::string& address, client::Client& client,
                    Figures& f) {
  bool ok = false;
  f.rpc_ms = ListQueueMs(client, flags.rounds, &f.rpc_entries);
  f.cli_ms = CliMs(address, {"queue"}, flags.rounds, &f.cli_bytes, &ok);
  f.cli_ok = f.cli_ok && ok;
  f.cli_json_ms = CliMs(address, {"--json", "queue"}, flags.rounds, &f.cli_json_bytes, &ok);
  f.cli_ok = f.cli_ok && ok;
}

void Print(const Flags& flags, const Figures& f) {
  const int n = flags.waiters;
  std::printf(
      "waiters_bench: %d waiters for 1 IPU each while one session holds all 16 "
      "(%d channels; medians of %d; load average %s)\n",
      n, flags.channels, flags.rounds, f.loadavg.c_str());
  std::printf("%-40s %14s %14s\n", "figure", "waiting", "reference");
  std::printf("%-40s %14ld %14ld  (idle server)\n", "server threads", f.loaded.threads,
              f.idle.threads);
  std::printf("%-40s %14.1f %14.1f  (idle server)\n", "server RSS (MiB)", f.loaded.rss_kib / 1024.0,
              f.idle.rss_kib / 1024.0);
  std::printf("%-40s %14.2f\n", "server RSS per waiter (KiB)",
              double(f.loaded.rss_kib - f.idle.rss_kib) / n);
  std::printf("%-40s %14.3f %14.3f  (GetPodInfo RPC)\n", "ListQueue RPC (ms)", f.rpc_ms,
              f.unary_ms);
  std::printf("%-40s %14.1f %14.1f  (ipupod queue, empty queue)\n", "ipupod queue process (ms)",
              f.cli_ms, f.cli_empty_ms);
  std::printf("%-40s %14.1f %14.1f  (ipupod queue, empty queue)\n",
              "ipupod --json queue process (ms)", f.cli_json_ms, f.cli_empty_ms);
  std::printf("%-40s %14zu %14zu  (json: %zu)\n", "ipupod queue stdout (bytes)", f.cli_bytes,
              f.cli_empty_bytes, f.cli_json_bytes);
  std::printf("%-40s %14.3f  (server CPU %.3f ms per attach)\n", "time to queue all (s)", f.queue_s,
              1000 * f.queue_cpu / n);
  std::printf("%-40s %14.3f  (%.0f grants/s)\n", "drain: all granted+released (s)", f.drain_s,
              n / f.drain_s);
  std::printf("%-40s %14.3f  (%.0f grants/s of server CPU; client %.3f ms)\n",
              "drain: server CPU per grant (ms)", 1000 * f.drain_cpu / n, n / f.drain_cpu,
              1000 * f.client_drain_cpu / n);
  std::printf("ListQueue entries: %d; queued: %d, granted: %d, ended: %d; CLI exits: %s\n",
              f.rpc_entries, f.queued, f.granted, f.done, f.cli_ok ? "ok" : "FAILED");
}

// The references, with the server idle.
void MeasureIdle(const Flags& flags, const ServerProcess& server, client::Client& client,
                 Figures& f) {
  (void)client.GetPodInfo();  // warm the server's first-call paths
  f.idle = ReadProcStatus(server.pid());
  f.unary_ms = UnaryMs(client, 200);
  bool ok = false;
  f.cli_empty_ms = CliMs(server.address(), {"queue"}, flags.rounds, &f.cli_empty_bytes, &ok);
  f.cli_ok = ok;
}

int Run(const Flags& flags) {
  const auto dir = std::filesystem::temp_directory_path() / "ipupod-waiters-bench";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << "{\"max_waiters\": " << flags.waiters + 16 << "}\n";
  std::optional<ServerProcess> server =
      StartServerProcess((dir / "state").string(), {"--config", (dir / "config.json").string()});
  if (!server) return 1;
  client::ClientOptions options;
  options.server = server->address();
  options.user = "holder";
  auto client = std::move(client::Client::Connect(options)).value();
  Figures f;
  std::getline(std::ifstream("/proc/loadavg"), f.loadavg);
  f.loadavg = f.loadavg.substr(0, f.loadavg.find(' ', f.loadavg.find(' ') + 1));
  MeasureIdle(flags, *server, *client, f);

  v1::AttachRequest all;
  all.set_num_ipus(16);
  auto holder = client->StartAttach(all);
  if (!holder->WaitForGrant(nullptr).ok()) return 1;

  auto stubs = Stubs(server->address(), flags.channels);
  std::atomic<int> queued{0}, granted{0}, done{0};
  std::vector<std::unique_ptr<Waiter>> list;
  const double before_queue = ReadProcStatus(server->pid()).cpu_seconds;
  auto t0 = Clock::now();
  for (int i = 0; i < flags.waiters; ++i) {
    list.push_back(
        std::make_unique<Waiter>(stubs[i % stubs.size()].get(), &queued, &granted, &done));
  }
  f.all_queued = WaitUntil(queued, flags.waiters, std::chrono::seconds(30));
  f.queue_s = Ms(t0) / 1000;
  f.loaded = ReadProcStatus(server->pid());
  f.queue_cpu = f.loaded.cpu_seconds - before_queue;
  MeasureListing(flags, server->address(), *client, f);

  const double server_cpu = ReadProcStatus(server->pid()).cpu_seconds;
  const double client_cpu = ReadProcStatus(getpid()).cpu_seconds;
  auto r0 = Clock::now();
  (void)holder->Release();
  f.all_granted = WaitUntil(done, flags.waiters, std::chrono::seconds(30));
  f.drain_s = Ms(r0) / 1000;
  f.drain_cpu = ReadProcStatus(server->pid()).cpu_seconds - server_cpu;
  f.client_drain_cpu = ReadProcStatus(getpid()).cpu_seconds - client_cpu;
  f.queued = queued.load();
  f.granted = granted.load();
  f.done = done.load();
  Print(flags, f);

  // A reactor may only be destroyed after its OnDone; leak the stragglers.
  if (done.load() == flags.waiters) list.clear();
  for (auto& w : list) (void)w.release();
  server.reset();
  std::filesystem::remove_all(dir);
  return f.all_queued && f.all_granted && f.cli_ok ? 0 : 1;
}

}  // namespace
}  // namespace ipupod::bench

int main(int argc, char** argv) {
  ipupod::bench::Flags flags;
  bool bad = argc % 2 == 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const int value = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--waiters") == 0) {
      flags.waiters = value;
    } else if (std::strcmp(argv[i], "--channels") == 0) {
      flags.channels = value;
    } else if (std::strcmp(argv[i], "--rounds") == 0) {
      flags.rounds = value;
    } else {
      bad = true;
    }
  }
  if (flags.channels == 0) flags.channels = (flags.waiters + 999) / 1000;
  if (bad || flags.waiters < 1 || flags.waiters > 100000 || flags.channels < 1 ||
      flags.rounds < 1) {
    std::fprintf(
        stderr, "usage: waiters_bench [--waiters N 1..100000] [--channels C>=1] [--rounds R>=1]\n");
    return 2;
  }
  return ipupod::bench::Run(flags);
}
