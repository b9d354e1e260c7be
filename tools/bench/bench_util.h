// File: tools/bench/bench_util.h
//
// Helpers shared by the model benchmarks (execution_bench, training_bench):
// an ipupodd server started in the benchmark's process on loopback with a
// client attached to it, compile + attach + upload + load of an ONNX model,
// and running tools/bench/torch_reference.py (Debian's /usr/bin/python3) for the
// PyTorch references measured in the same run.
//
// Thread safety: none needed; each benchmark drives these from one thread.
#ifndef IPUPOD_BENCH_BENCH_UTIL_H_
#define IPUPOD_BENCH_BENCH_UTIL_H_

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/client.h"
#include "device/compiler/compile.h"
#include "server/server.h"
#include "tools/bench/server_process.h"

namespace ipupod::bench {

using Clock = std::chrono::steady_clock;

// Seconds elapsed since `since`.
double Seconds(Clock::time_point since);

// Runs `command` through the shell and returns its stdout; `ok` is false
// when it cannot start or exits non-zero.
std::string RunCommand(const std::string& command, bool* ok);

// Runs `/usr/bin/python3 tools/bench/torch_reference.py ARGS` (ARGS as given,
// space-separated) and returns its stdout; `ok` as in RunCommand.
std::string RunTorchReference(absl::string_view args, bool* ok);

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path);

// ---- rounds: ipupodd and its reference alternate, medians are compared,
// so a burst of load from elsewhere on a shared machine moves one round,
// not the result.

// Median (tools/bench/server_process.h).
// "1.12x, 1.34x, ...": ours[i] / reference[i] for every round both have.
std::string RoundRatios(const std::vector<double>& ours, const std::vector<double>& reference);

// The in-process server (state under `work`/state) and a client attached
// to it as user "bench". `compute_threads` is the server's BLAS thread count
// (ServerConfig::compute_threads; 0 = every CPU): the server applies it at
// start, process-wide, so it is the thread count every run uses.
struct Pod {
  std::filesystem::path state_dir;
  std::unique_ptr<server::PodServer> server;
  std::unique_ptr<client::Client> client;
};
absl::StatusOr<Pod> StartPod(const std::filesystem::path& work, int compute_threads);

// A compiled program loaded on freshly attached IPUs; `call` holds them.
struct Loaded {
  std::unique_ptr<client::AttachCall> call;
  std::string session;
  v1::LoadedProgram program;
};

// Compiles `onnx` with `config_update` (IPUConfig.update_from_string
// syntax) and `options`, attaches as many IPUs as it reserves, uploads and
// loads it.
absl::StatusOr<Loaded> CompileAndLoad(Pod& pod, const std::filesystem::path& onnx,
                                      absl::string_view config_update,
                                      const compiler::CompileOptions& options = {});

// The flags every model benchmark takes: --steps N (timed Runs per round),
// --rounds R (ipupodd / reference alternations), --threads T (0: every CPU).
struct RoundFlags {
  int steps = 1;
  int rounds = 1;
  int threads = 0;
};

// Reads --steps, --rounds and --threads over `defaults` (values below 1 become 1; threads
// below 1 every CPU); any other "--flag N" pair goes to `other`.
RoundFlags ParseRoundFlags(int argc, char** argv, RoundFlags defaults,
                           const std::function<void(const std::string&, int)>& other = {});

// A model benchmark's whole run: sets the BLAS threads, starts the pod in a fresh temporary
// directory named after `name`, runs `body`, removes the directory. The process exit code:
// 0, 1 when `body` failed, 2 for a bad thread count (each reported on stderr as `name: ...`).
int RunModelBench(const char* name, int threads,
                  const std::function<absl::Status(Pod&, const std::filesystem::path&)>& body);

}  // namespace ipupod::bench

#endif  // IPUPOD_BENCH_BENCH_UTIL_H_
