// Training-step throughput through ipupodd, beside its reference measured in
// the same run on the same machine:
//
//   training    MLP 784-1024-1024-10 returning (logits, cross-entropy loss),
//               SGD lr 0.01, micro-batch 128, 8 device iterations per Run
//               (8 weight updates), 1 IPU: samples/s through the server
//               (client library -> gRPC -> ExecutionService -> runtime) vs
//               PyTorch CPU training the same model from the same seeded
//               weights on the same data (bench/torch_reference.py train:
//               zero_grad, forward, backward, SGD step at batch 128) with the
//               same number of threads (--threads: the server's
//               compute_threads and torch.set_num_threads).      goal >= 1.0x
//
// Both sides do 24 warm-up updates and then --steps x 8 timed updates over
// the same 8 batches, so the losses at update 1 and at the last update are
// printed side by side as a sanity check (they should agree closely and
// decrease). The server runs in this process on loopback, so client and
// server share the machine's cores. PyTorch runs as a child (Debian's
// /usr/bin/python3); if it is missing the reference is reported as
// unavailable rather than guessed.
//
//   build/bench/training_bench [--steps N] [--threads T]
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "common/status_macros.h"
#include "compiler/compile.h"
#include "graph/npy.h"
#include "kernels/threads.h"

namespace ipupod::bench {
namespace {

namespace fs = std::filesystem;

constexpr int kDeviceIterations = 8;
constexpr int kWarmupRuns = 3;  // 24 updates, as torch_reference.py train --warmup 24

struct Flags {
  int steps = 40;    // timed Runs (x 8 updates each)
  int threads = 0;   // 0: every CPU
};

absl::Status BenchTraining(Pod& pod, const fs::path& work, const Flags& flags) {
  bool ok = false;
  RunTorchReference(absl::StrCat("export-train ", work.string(), " --batches ", kDeviceIterations),
                    &ok);
  if (!ok) {
    return absl::UnavailableError("torch_reference.py export-train failed (is python3-torch installed?)");
  }
  compiler::CompileOptions options;
  options.for_inference = false;
  options.training.optimizer = "sgd";
  options.training.optimizer_attrs = {{"lr", 0.01}};
  IPUPOD_ASSIGN_OR_RETURN(
      Loaded loaded,
      CompileAndLoad(pod, work / "mlp_train.onnx",
                     absl::StrCat("device_iterations=", kDeviceIterations), options));
  IPUPOD_ASSIGN_OR_RETURN(graph::Tensor x, graph::ReadNpyFile((work / "train_x.npy").string()));
  IPUPOD_ASSIGN_OR_RETURN(graph::Tensor labels,
                          graph::ReadNpyFile((work / "train_labels.npy").string()));
  const int64_t samples = static_cast<int64_t>(loaded.program.run_shape().samples_per_step());
  if (x.shape().empty() || x.shape()[0] != samples || labels.shape().empty() ||
      labels.shape()[0] != samples) {
    return absl::InternalError(absl::StrCat("the exported data does not hold one step of ", samples,
                                            " samples"));
  }
  const runtime::NamedTensors inputs = {{"x", x}, {"labels", labels}};

  float first_loss = 0;
  for (int i = 0; i < kWarmupRuns; ++i) {
    IPUPOD_ASSIGN_OR_RETURN(client::RunResult result, pod.client->Run(loaded.session, inputs));
    if (i == 0 && result.stats.losses_size() > 0) first_loss = result.stats.losses(0);
  }
  double server_wall = 0, simulated = 0;
  float last_loss = 0;
  uint64_t updates = 0;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < flags.steps; ++i) {
    IPUPOD_ASSIGN_OR_RETURN(client::RunResult result, pod.client->Run(loaded.session, inputs));
    server_wall += result.stats.wall_seconds();
    simulated += result.stats.simulated_seconds();
    if (result.stats.losses_size() > 0) {
      last_loss = result.stats.losses(result.stats.losses_size() - 1);
    }
    updates = result.stats.step();
  }
  const double elapsed = Seconds(start);
  const double ours = static_cast<double>(samples) * flags.steps / elapsed;
  (void)loaded.call->Release();

  const int total_updates = (kWarmupRuns + flags.steps) * kDeviceIterations;
  const std::string reference = RunTorchReference(
      absl::StrCat("train ", work.string(), " --steps ", flags.steps * kDeviceIterations,
                   " --warmup ", kWarmupRuns * kDeviceIterations, " --threads ", flags.threads),
      &ok);
  std::printf(
      "\n## training: MLP 784-1024-1024-10 + cross-entropy, SGD lr 0.01, batch 128 x %d device "
      "iterations, %d threads\n",
      kDeviceIterations, flags.threads);
  std::printf("| figure | value |\n|---|---|\n");
  std::printf("| ipupodd samples/s (client library, wall; %d Runs, %d updates) | %.0f |\n",
              flags.steps, flags.steps * kDeviceIterations, ours);
  std::printf("| of which server compute (RunStats.wall) | %.1f%% of the wall time |\n",
              100.0 * server_wall / elapsed);
  std::printf("| simulated device samples/s (GC200 model) | %.0f |\n",
              static_cast<double>(samples) * flags.steps / simulated);
  std::printf("| ipupodd weight updates after the run (RunStats.step) | %llu (expected %d) |\n",
              static_cast<unsigned long long>(updates), total_updates);
  if (!ok) {
    std::printf("| PyTorch CPU samples/s | unavailable (torch_reference.py failed) |\n");
    std::printf("| loss, update 1 -> %d (ipupodd) | %.4f -> %.4f (%s) |\n", total_updates,
                first_loss, last_loss, last_loss < first_loss ? "decreases" : "DOES NOT DECREASE");
    return absl::OkStatus();
  }
  const nlohmann::json torch = nlohmann::json::parse(reference);
  const double torch_rate = torch.at("samples_per_s").get<double>();
  std::printf("| PyTorch CPU samples/s (reference, same run; torch %s) | %.0f |\n",
              torch.at("torch").get<std::string>().c_str(), torch_rate);
  std::printf("| ratio ipupodd / PyTorch (goal >= 1.0) | %.2fx |\n", ours / torch_rate);
  std::printf("| loss, update 1 -> %d, ipupodd | %.4f -> %.4f (%s) |\n", total_updates,
              first_loss, last_loss, last_loss < first_loss ? "decreases" : "DOES NOT DECREASE");
  std::printf("| loss, update 1 -> %d, PyTorch (reference) | %.4f -> %.4f |\n", total_updates,
              torch.at("first_loss").get<double>(), torch.at("last_loss").get<double>());
  return absl::OkStatus();
}

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--steps") flags.steps = value;
    if (flag == "--threads") flags.threads = value;
  }
  if (flags.steps <= 0) flags.steps = 1;
  if (flags.threads <= 0) flags.threads = kernels::MaxBlasThreads();
  return flags;
}

int Main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  if (absl::Status s = kernels::SetBlasThreads(flags.threads); !s.ok()) {
    std::fprintf(stderr, "training_bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  const fs::path work = fs::temp_directory_path() / absl::StrCat("ipupod-train-bench-", getpid());
  fs::create_directories(work);
  absl::StatusOr<Pod> pod = StartPod(work, flags.threads);
  absl::Status status = pod.status();
  if (status.ok()) status = BenchTraining(*pod, work, flags);
  fs::remove_all(work);
  if (!status.ok()) {
    std::fprintf(stderr, "training_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ipupod::bench

int main(int argc, char** argv) { return ipupod::bench::Main(argc, argv); }
