// Batch jobs on one ipupodd (issue 12): the server's resident memory with
// N pending jobs beside the same server idle, submit and `ipupod jobs`
// (ListJobs) latency beside a bare unary call (GetPodInfo) of the same
// server in the same run, and the latency from IPUs becoming free to a
// pending job's first step beside the same for an interactive
// `attach --wait` client that loads and runs one step.
//
// With N pending (issue 17: 10,000), also `ipupod jobs` as the real CLI
// process beside the same command with no jobs, and GetJob (`ipupod job
// show`) beside GetPodInfo.
//
// The server runs as a child process (so /proc tells its RSS), configured
// with max_waiters and jobs_max_active_per_user above N (every pending job
// waits in the scheduler's queue; the defaults, 4096 and 2000 per user,
// would refuse the rest); the model is a 16-16
// Linear compiled in this process.
//   build/tools/bench/jobs_bench [--jobs N] [--rounds R]   defaults 1000 and 5; `--jobs 10000`
//   for issue 17 (every submit is a durable write: about a minute on the 2-core machine)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "common/tensor/tensor_files.h"
#include "device/compiler/compile.h"
#include "tests/device/graph/onnx_builder.h"
#include "tools/bench/server_process.h"

namespace ipupod::bench {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double Ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

// A 16-16 Linear, micro-batch 1: y = x W.
bool WriteModel(const fs::path& dir) {
  graph::testing::OnnxBuilder b(14);
  b.Input("x", graph::testing::kFloat, {1, 16});
  b.Floats("W", {16, 16}, std::vector<float>(256, 0.01f));
  b.Node("MatMul", {"x", "W"}, {"y"});
  b.Output("y", graph::testing::kFloat);
  auto e = compiler::Compile(b.Bytes(), compiler::IpuConfig(), {});
  if (!e.ok()) return false;
  auto ipx = compiler::WriteExecutable(*e);
  return ipx.ok() && tensor::WriteFileAtomically((dir / "m.ipx").string(), *ipx).ok() &&
         tensor::WriteTensorFile(
             (dir / "x.npz").string(),
             {{"x", *tensor::Tensor::FromValues<float>({1, 16}, std::vector<float>(16, 1.0f))}})
             .ok();
}

// Says what failed; returns the exit code 1.
int Fail(const std::string& what) {
  std::fprintf(stderr, "jobs_bench: %s\n", what.c_str());
  return 1;
}

struct Latency {
  double p50 = 0, p99 = 0, mean = 0;
};

Latency Summarise(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  Latency l;
  for (double v : ms) l.mean += v / static_cast<double>(ms.size());
  l.p50 = ms[ms.size() / 2];
  l.p99 = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
  return l;
}

// Interactive reference: an `attach --wait` client queued behind a holder
// of every IPU; from the holder's release to its first step done.
double InteractiveFirstStepMs(client::Client& holder_client, client::Client& c,
                              const std::string& sha, const tensor::NamedTensors& x) {
  v1::AttachRequest all;
  all.set_num_ipus(16);
  all.set_wait(true);  // behind what the previous round left running
  auto holder = holder_client.StartAttach(all);
  if (!holder->WaitForGrant(nullptr).ok()) return -1;
  std::atomic<bool> queued{false};
  Clock::time_point released;
  double ms = -1;
  std::thread waiter([&] {
    v1::AttachRequest one;
    one.set_num_ipus(1);
    one.set_wait(true);
    auto call = c.StartAttach(one);
    auto granted = call->WaitForGrant([&](const v1::QueuePosition&) { queued = true; });
    if (!granted.ok() || !c.Load(granted->session(), sha).ok() ||
        !c.Run(granted->session(), x).ok()) {
      return;
    }
    ms = Ms(released);
  });
  while (!queued) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  released = Clock::now();
  (void)holder->Release();
  waiter.join();
  return ms;
}

// The same for a pending job: from the release to its first run recorded.
double JobFirstStepMs(client::Client& holder_client, client::Client& c,
                      const v1::SubmitJobRequest& request) {
  v1::AttachRequest all;
  all.set_num_ipus(16);
  all.set_wait(true);  // behind what the previous round left running
  auto holder = holder_client.StartAttach(all);
  if (!holder->WaitForGrant(nullptr).ok()) return -1;
  auto jobs = c.SubmitJob(request);
  if (!jobs.ok()) return -1;
  const std::string id = (*jobs)[0].id();
  const Clock::time_point released = Clock::now();
  (void)holder->Release();
  for (;;) {
    auto job = c.GetJob(id);
    if (!job.ok()) return -1;
    if (job->runs_done() >= 1) return Ms(released);
    if (Ms(released) > 30000) return -1;
  }
}

// The figures with N pending jobs; filled by MeasurePending.
struct Pending {
  long loaded_kib = 0;
  double submit_all_s = 0;
  std::vector<double> unary, submit, list, get;
  double cli_ms = 0, cli_empty_ms = 0;  // `ipupod jobs`: with the jobs, and before any
  size_t cli_bytes = 0;
  bool cli_ok = false;
};

// Median wall time of `rounds` `ipupod jobs` processes (tools/bench/server_process.h).
double CliJobsMs(const std::string& address, int rounds, size_t* bytes, bool* ok) {
  std::vector<double> ms;
  *ok = true;
  for (int i = 0; i < rounds; ++i) {
    bool one = false;
    ms.push_back(TimeCli(address, "bench", {"jobs"}, &one, bytes));
    *ok = *ok && one;
  }
  return Median(ms);
}

// ListJobs (`ipupod jobs`) and GetJob (`ipupod job show`) with the jobs pending.
bool MeasureListing(int n, int rounds, client::Client& c, const std::string& id, Pending& out) {
  for (int i = 0; i < rounds; ++i) {
    Clock::time_point t = Clock::now();
    auto listed = c.ListJobs(v1::ListJobsRequest());
    if (!listed.ok() || listed->jobs_size() < n) return !Fail("ListJobs");
    out.list.push_back(Ms(t));
    t = Clock::now();
    if (!c.GetJob(id).ok()) return !Fail("GetJob");
    out.get.push_back(Ms(t));
  }
  return true;
}

// N pending jobs behind a holder of every IPU: memory, submit, ListJobs, GetJob, the CLI.
bool MeasurePending(int n, int rounds, const ServerProcess& server, client::Client& holder_client,
                    client::Client& c, const v1::SubmitJobRequest& request, Pending& out) {
  v1::AttachRequest all;
  all.set_num_ipus(16);
  all.set_wait(true);  // behind what the previous round left running
  auto holder = holder_client.StartAttach(all);
  if (!holder->WaitForGrant(nullptr).ok()) return !Fail("the holder got no grant");
  std::string last;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < n; ++i) {
    Clock::time_point t = Clock::now();
    (void)c.GetPodInfo();
    out.unary.push_back(Ms(t));
    t = Clock::now();
    auto s = c.SubmitJob(request);
    if (!s.ok()) return !Fail(std::string(s.status().message()));
    out.submit.push_back(Ms(t));
    last = (*s)[0].id();
  }
  out.submit_all_s = Ms(start) / 1000;
  out.loaded_kib = ReadProcStatus(server.pid()).rss_kib;
  if (!MeasureListing(n, rounds, c, last, out)) return false;
  out.cli_ms = CliJobsMs(server.address(), rounds, &out.cli_bytes, &out.cli_ok);
  return out.cli_ok || !Fail("ipupod jobs failed");
}

void Print(int n, long idle_kib, const Pending& p, const std::vector<double>& interactive,
           const std::vector<double>& job) {
  const Latency u = Summarise(p.unary), s = Summarise(p.submit), l = Summarise(p.list);
  const Latency g = Summarise(p.get), ia = Summarise(interactive), jb = Summarise(job);
  std::printf("jobs_bench: %d pending 1-IPU jobs on a POD16 whose IPUs one session holds\n", n);
  std::printf("%-44s %12s %12s\n", "figure", "jobs", "reference");
  std::printf("%-44s %12.1f %12.1f  (idle server)\n", "server RSS (MiB)", p.loaded_kib / 1024.0,
              idle_kib / 1024.0);
  std::printf("%-44s %12.1f\n", "server RSS per pending job (KiB)",
              static_cast<double>(p.loaded_kib - idle_kib) / n);
  std::printf("%-44s %12.3f\n", "time to submit all (s)", p.submit_all_s);
  std::printf("%-44s %12.3f %12.3f  (GetPodInfo, p50)\n", "submit latency p50 (ms)", s.p50, u.p50);
  std::printf("%-44s %12.3f %12.3f  (GetPodInfo, p99)\n", "submit latency p99 (ms)", s.p99, u.p99);
  std::printf("%-44s %12.3f %12.3f  (GetPodInfo, p50)\n",
              absl::StrCat("ListJobs RPC with ", n, " pending p50 (ms)").c_str(), l.p50, u.p50);
  std::printf("%-44s %12.3f %12.3f  (GetPodInfo, p50)\n", "GetJob RPC (ipupod job show) p50 (ms)",
              g.p50, u.p50);
  std::printf("%-44s %12.1f %12.1f  (ipupod jobs, no jobs)\n", "ipupod jobs process (ms)", p.cli_ms,
              p.cli_empty_ms);
  std::printf("%-44s %12zu\n", "ipupod jobs stdout (bytes)", p.cli_bytes);
  std::printf("%-44s %12.3f %12.3f  (attach --wait + load + run, p50 of 5)\n",
              "IPUs free -> first step (ms)", jb.p50, ia.p50);
}

int Run(int n, int rounds) {
  const fs::path dir = fs::temp_directory_path() / "ipupod-jobs-bench";
  fs::remove_all(dir);
  fs::create_directories(dir);
  if (!WriteModel(dir)) return Fail("cannot compile the model");
  // Every pending job waits in the scheduler's queue: room for all of them.
  std::ofstream(dir / "config.json")
      << "{\"max_waiters\": " << n + 16 << ", \"jobs_max_active_per_user\": " << n + 16 << "}\n";
  std::optional<ServerProcess> server =
      StartServerProcess((dir / "state").string(), {"--config", (dir / "config.json").string()});
  if (!server) return Fail("ipupodd did not start");
  client::ClientOptions options;
  options.server = server->address();
  options.user = "bench";
  auto c = std::move(client::Client::Connect(options)).value();
  options.user = "holder";
  auto holder_client = std::move(client::Client::Connect(options)).value();
  (void)c->GetPodInfo();
  const long idle_kib = ReadProcStatus(server->pid()).rss_kib;
  Pending pending;
  size_t empty_bytes = 0;
  pending.cli_empty_ms = CliJobsMs(server->address(), rounds, &empty_bytes, &pending.cli_ok);

  auto ipx = c->PutBlobFile((dir / "m.ipx").string(), "executable");
  auto data = c->PutBlobFile((dir / "x.npz").string(), "inputs");
  auto ref = c->UploadExecutableFile((dir / "m.ipx").string());
  if (!ipx.ok() || !data.ok() || !ref.ok()) {
    return Fail(absl::StrCat("upload: ", ipx.status().message(), data.status().message(),
                             ref.status().message()));
  }
  v1::SubmitJobRequest request;
  request.mutable_spec()->set_executable_sha256(ipx->sha256());
  request.mutable_spec()->mutable_inputs()->set_sha256(data->sha256());
  request.mutable_spec()->mutable_inputs()->set_format("npz");
  const tensor::NamedTensors x = *tensor::ReadTensorFile((dir / "x.npz").string());
  std::vector<double> interactive, job;
  for (int round = 0; round < 5; ++round) {
    interactive.push_back(InteractiveFirstStepMs(*holder_client, *c, ref->sha256(), x));
    job.push_back(JobFirstStepMs(*holder_client, *c, request));
  }
  const bool measured = MeasurePending(n, rounds, *server, *holder_client, *c, request, pending);
  if (measured) Print(n, idle_kib, pending, interactive, job);
  fs::remove_all(dir);
  return measured ? 0 : 1;
}

}  // namespace
}  // namespace ipupod::bench

int main(int argc, char** argv) {
  int n = 1000, rounds = 5;
  bool bad = argc % 2 == 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--jobs") == 0) {
      n = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--rounds") == 0) {
      rounds = std::atoi(argv[i + 1]);
    } else {
      bad = true;
    }
  }
  if (bad || n < 1 || n > 20000 || rounds < 1) {
    std::fprintf(stderr, "usage: jobs_bench [--jobs N 1..20000] [--rounds R>=1]\n");
    return 2;
  }
  return ipupod::bench::Run(n, rounds);
}
