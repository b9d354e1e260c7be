// Batch jobs on one ipupodd (issue 12): the server's resident memory with
// N pending jobs beside the same server idle, submit and `ipupod jobs`
// (ListJobs) latency beside a bare unary call (GetPodInfo) of the same
// server in the same run, and the latency from IPUs becoming free to a
// pending job's first step beside the same for an interactive
// `attach --wait` client that loads and runs one step.
//
// The server runs as a child process (so /proc tells its RSS); the model is
// a 16-16 Linear compiled in this process.
//   build/bench/jobs_bench [JOBS]      default 1000
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "compiler/compile.h"
#include "tensor/tensor_files.h"
#include "tests/graph/onnx_builder.h"
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ipupod::bench {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double Ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

long RssKib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  long rss = 0;
  while (in >> key) {
    if (key == "VmRSS:") in >> rss;
    in.ignore(1 << 20, '\n');
  }
  return rss;
}

pid_t StartServer(const std::string& state_dir, std::string* address) {
  int out[2];
  if (pipe(out) != 0) return -1;
  const pid_t pid = fork();
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
  std::vector<double> unary, submit, list;
};

// N pending jobs behind a holder of every IPU: memory, submit and ListJobs.
bool MeasurePending(int n, pid_t pid, client::Client& holder_client, client::Client& c,
                    const v1::SubmitJobRequest& request, Pending& out) {
  v1::AttachRequest all;
  all.set_num_ipus(16);
  all.set_wait(true);  // behind what the previous round left running
  auto holder = holder_client.StartAttach(all);
  if (!holder->WaitForGrant(nullptr).ok()) return !Fail("the holder got no grant");
  for (int i = 0; i < n; ++i) {
    Clock::time_point t = Clock::now();
    (void)c.GetPodInfo();
    out.unary.push_back(Ms(t));
    t = Clock::now();
    if (auto s = c.SubmitJob(request); !s.ok()) {
      return !Fail(std::string(s.status().message()));
    }
    out.submit.push_back(Ms(t));
  }
  out.loaded_kib = RssKib(pid);
  for (int i = 0; i < 20; ++i) {
    const Clock::time_point t = Clock::now();
    auto listed = c.ListJobs(v1::ListJobsRequest());
    if (!listed.ok() || listed->jobs_size() < n) return !Fail("ListJobs");
    out.list.push_back(Ms(t));
  }
  return true;
}

void Print(int n, long idle_kib, const Pending& p, const std::vector<double>& interactive,
           const std::vector<double>& job) {
  const Latency u = Summarise(p.unary), s = Summarise(p.submit), l = Summarise(p.list);
  const Latency ia = Summarise(interactive), jb = Summarise(job);
  std::printf("jobs_bench: %d pending 1-IPU jobs on a POD16 whose IPUs one session holds\n", n);
  std::printf("%-44s %12s %12s\n", "figure", "jobs", "reference");
  std::printf("%-44s %12.1f %12.1f  (idle server)\n", "server RSS (MiB)", p.loaded_kib / 1024.0,
              idle_kib / 1024.0);
  std::printf("%-44s %12.1f\n", "server RSS per pending job (KiB)",
              static_cast<double>(p.loaded_kib - idle_kib) / n);
  std::printf("%-44s %12.3f %12.3f  (GetPodInfo, p50)\n", "submit latency p50 (ms)", s.p50, u.p50);
  std::printf("%-44s %12.3f %12.3f  (GetPodInfo, p99)\n", "submit latency p99 (ms)", s.p99, u.p99);
  std::printf("%-44s %12.3f %12.3f  (GetPodInfo, p50)\n",
              absl::StrCat("ipupod jobs with ", n, " pending p50 (ms)").c_str(), l.p50, u.p50);
  std::printf("%-44s %12.3f %12.3f  (attach --wait + load + run, p50 of 5)\n",
              "IPUs free -> first step (ms)", jb.p50, ia.p50);
}

int Run(int n) {
  const fs::path dir = fs::temp_directory_path() / "ipupod-jobs-bench";
  fs::remove_all(dir);
  fs::create_directories(dir);
  if (!WriteModel(dir)) return Fail("cannot compile the model");
  std::string address;
  const pid_t pid = StartServer((dir / "state").string(), &address);
  if (pid < 0) return Fail("ipupodd did not start");
  struct StopServer {  // on every way out
    pid_t pid;
    ~StopServer() {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
  } stop{pid};
  client::ClientOptions options;
  options.server = address;
  options.user = "bench";
  auto c = std::move(client::Client::Connect(options)).value();
  options.user = "holder";
  auto holder_client = std::move(client::Client::Connect(options)).value();
  (void)c->GetPodInfo();
  const long idle_kib = RssKib(pid);

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
  Pending pending;
  const bool measured = MeasurePending(n, pid, *holder_client, *c, request, pending);
  if (measured) Print(n, idle_kib, pending, interactive, job);
  fs::remove_all(dir);
  return measured ? 0 : 1;
}

}  // namespace
}  // namespace ipupod::bench

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1000;
  if (n < 1 || n > 20000) {
    std::fprintf(stderr, "usage: jobs_bench [JOBS 1..20000]\n");
    return 2;
  }
  return ipupod::bench::Run(n);
}
