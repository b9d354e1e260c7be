// Training-step throughput through ipupodd, beside its reference measured in
// the same run on the same machine:
//
//   training    MLP 784-1024-1024-10 returning (logits, cross-entropy loss),
//               SGD lr 0.01, micro-batch 128, 8 device iterations per Run
//               (8 weight updates), 1 IPU: samples/s through the server
//               (client library -> gRPC -> ExecutionService -> runtime) vs
//               PyTorch CPU training the same model from the same seeded
//               weights on the same data (tools/bench/torch_reference.py train:
//               zero_grad, forward, backward, SGD step at batch 128) on the
//               same number of cores (--threads T: the server's
//               compute_threads; torch's intra-op threads and its OpenBLAS
//               pool, see torch_reference.py).                    goal >= 1.0x
//
// The two alternate: --rounds rounds, each --steps timed Runs of ipupodd
// (--steps x 8 updates) followed by a fresh PyTorch process timing as many
// updates after 24 warm-up ones. Medians of the rounds are compared, so a
// burst of load from elsewhere on a shared machine moves one round, not the
// result; every round's ratio is printed too. ipupodd's model does 24
// warm-up updates once. The losses at update 1 and at the end of round 1 are
// printed side by side as a sanity check (they should agree closely and
// decrease). The server runs in this process on loopback, so client and
// server share the machine's cores. PyTorch runs as a child (Debian's
// /usr/bin/python3); if it is missing the reference is reported as
// unavailable rather than guessed.
//
//   build/tools/bench/training_bench [--steps N] [--rounds R] [--threads T]
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/tensor/npy.h"
#include "device/compiler/compile.h"
#include "device/kernels/threads.h"
#include "tools/bench/bench_util.h"
#include <unistd.h>

namespace ipupod::bench {
namespace {

namespace fs = std::filesystem;

constexpr int kDeviceIterations = 8;
constexpr int kWarmupRuns = 3;  // 24 updates, as torch_reference.py train --warmup 24

// --steps: timed Runs per round (x 8 updates each); --rounds: ipupodd / PyTorch alternations.
using Flags = RoundFlags;
constexpr Flags kDefaults = {.steps = 20, .rounds = 5, .threads = 0};

// One round of ipupodd: `runs` timed Runs.
struct OursRound {
  int64_t samples = 0;     // trained in the round
  double wall = 0;         // client-side seconds
  double server_wall = 0;  // RunStats.wall summed
  double simulated = 0;    // RunStats.simulated_seconds summed
  float last_loss = 0;
  uint64_t step = 0;  // RunStats.step after the round

  double samples_per_s() const { return static_cast<double>(samples) / wall; }
};

absl::StatusOr<OursRound> TimeOurs(Pod& pod, const Loaded& loaded,
                                   const tensor::NamedTensors& inputs, int64_t samples, int runs) {
  OursRound round;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < runs; ++i) {
    IPUPOD_ASSIGN_OR_RETURN(client::RunResult result, pod.client->Run(loaded.session, inputs));
    round.server_wall += result.stats.wall_seconds();
    round.simulated += result.stats.simulated_seconds();
    if (result.stats.losses_size() > 0) {
      round.last_loss = result.stats.losses(result.stats.losses_size() - 1);
    }
    round.step = result.stats.step();
  }
  round.wall = Seconds(start);
  round.samples = samples * runs;
  return round;
}

// One PyTorch process timing `flags.steps` x 8 updates; nullopt if it failed.
std::optional<nlohmann::json> TimeTorch(const fs::path& work, const Flags& flags) {
  bool ok = false;
  const std::string out = RunTorchReference(
      absl::StrCat("train ", work.string(), " --steps ", flags.steps * kDeviceIterations,
                   " --warmup ", kWarmupRuns * kDeviceIterations, " --threads ", flags.threads),
      &ok);
  if (!ok) return std::nullopt;
  return nlohmann::json::parse(out);
}

absl::StatusOr<Loaded> LoadTrainingModel(Pod& pod, const fs::path& work) {
  bool ok = false;
  RunTorchReference(absl::StrCat("export-train ", work.string(), " --batches ", kDeviceIterations),
                    &ok);
  if (!ok) {
    return absl::UnavailableError(
        "torch_reference.py export-train failed (is python3-torch installed?)");
  }
  compiler::CompileOptions options;
  options.for_inference = false;
  options.training.optimizer = "sgd";
  options.training.optimizer_attrs = {{"lr", 0.01}};
  return CompileAndLoad(pod, work / "mlp_train.onnx",
                        absl::StrCat("device_iterations=", kDeviceIterations), options);
}

void PrintRounds(const std::vector<OursRound>& ours, const std::vector<nlohmann::json>& torch,
                 const Flags& flags, float first_loss) {
  std::vector<double> our_rates, torch_rates;
  int64_t samples = 0;
  double wall = 0, server_wall = 0, simulated = 0;
  for (const OursRound& r : ours) {
    our_rates.push_back(r.samples_per_s());
    samples += r.samples;
    wall += r.wall;
    server_wall += r.server_wall;
    simulated += r.simulated;
  }
  const int round1_updates = (kWarmupRuns + flags.steps) * kDeviceIterations;
  std::printf(
      "\n## training: MLP 784-1024-1024-10 + cross-entropy, SGD lr 0.01, batch 128 x %d device "
      "iterations, %d threads, %d rounds of %d updates\n",
      kDeviceIterations, flags.threads, flags.rounds, flags.steps * kDeviceIterations);
  std::printf("| figure | value |\n|---|---|\n");
  std::printf("| ipupodd samples/s (client library, wall; median of %d rounds) | %.0f |\n",
              flags.rounds, Median(our_rates));
  std::printf("| of which server compute (RunStats.wall) | %.1f%% of the wall time |\n",
              100.0 * server_wall / wall);
  std::printf("| simulated device samples/s (GC200 model) | %.0f |\n",
              static_cast<double>(samples) / simulated);
  std::printf("| ipupodd weight updates after the run (RunStats.step) | %llu (expected %d) |\n",
              static_cast<unsigned long long>(ours.back().step),
              (kWarmupRuns + flags.steps * flags.rounds) * kDeviceIterations);
  const char* trend = ours[0].last_loss < first_loss ? "decreases" : "DOES NOT DECREASE";
  if (torch.size() != ours.size()) {
    std::printf("| PyTorch CPU samples/s | unavailable (torch_reference.py failed) |\n");
    std::printf("| loss, update 1 -> %d, ipupodd | %.4f -> %.4f (%s) |\n", round1_updates,
                first_loss, ours[0].last_loss, trend);
    return;
  }
  for (const nlohmann::json& t : torch) torch_rates.push_back(t.at("samples_per_s").get<double>());
  std::printf(
      "| PyTorch CPU samples/s (reference, same run; torch %s; median of %d rounds) | %.0f |\n",
      torch[0].at("torch").get<std::string>().c_str(), flags.rounds, Median(torch_rates));
  std::printf("| ratio of the medians ipupodd / PyTorch (goal >= 1.0) | %.2fx |\n",
              Median(our_rates) / Median(torch_rates));
  std::printf("| ratio round by round | %s |\n", RoundRatios(our_rates, torch_rates).c_str());
  std::printf("| loss, update 1 -> %d, ipupodd | %.4f -> %.4f (%s) |\n", round1_updates, first_loss,
              ours[0].last_loss, trend);
  std::printf("| loss, update 1 -> %d, PyTorch (reference) | %.4f -> %.4f |\n", round1_updates,
              torch[0].at("first_loss").get<double>(), torch[0].at("last_loss").get<double>());
}

absl::Status BenchTraining(Pod& pod, const fs::path& work, const Flags& flags) {
  IPUPOD_ASSIGN_OR_RETURN(Loaded loaded, LoadTrainingModel(pod, work));
  IPUPOD_ASSIGN_OR_RETURN(tensor::Tensor x, tensor::ReadNpyFile((work / "train_x.npy").string()));
  IPUPOD_ASSIGN_OR_RETURN(tensor::Tensor labels,
                          tensor::ReadNpyFile((work / "train_labels.npy").string()));
  const int64_t samples = static_cast<int64_t>(loaded.program.run_shape().samples_per_step());
  if (x.shape().empty() || x.shape()[0] != samples || labels.shape().empty() ||
      labels.shape()[0] != samples) {
    return absl::InternalError(
        absl::StrCat("the exported data does not hold one step of ", samples, " samples"));
  }
  const tensor::NamedTensors inputs = {{"x", x}, {"labels", labels}};

  float first_loss = 0;
  for (int i = 0; i < kWarmupRuns; ++i) {
    IPUPOD_ASSIGN_OR_RETURN(client::RunResult result, pod.client->Run(loaded.session, inputs));
    if (i == 0 && result.stats.losses_size() > 0) first_loss = result.stats.losses(0);
  }
  std::vector<OursRound> ours;
  std::vector<nlohmann::json> torch;
  bool torch_ok = true;
  for (int r = 0; r < flags.rounds; ++r) {
    IPUPOD_ASSIGN_OR_RETURN(OursRound round, TimeOurs(pod, loaded, inputs, samples, flags.steps));
    ours.push_back(round);
    if (!torch_ok) continue;
    std::optional<nlohmann::json> reference = TimeTorch(work, flags);
    torch_ok = reference.has_value();
    if (torch_ok) torch.push_back(*std::move(reference));
  }
  (void)loaded.call->Release();
  PrintRounds(ours, torch, flags, first_loss);
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  const Flags flags = ParseRoundFlags(argc, argv, kDefaults);
  return RunModelBench("training_bench", flags.threads, [&](Pod& pod, const fs::path& work) {
    return BenchTraining(pod, work, flags);
  });
}

}  // namespace
}  // namespace ipupod::bench

int main(int argc, char** argv) { return ipupod::bench::Main(argc, argv); }
