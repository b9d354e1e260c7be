// `ipupod run` through the CLI's default path, beside PyTorch measured in the
// same run on the same cores:
//
//   The MLP 784-1024-1024-10 at batch 128 (tools/bench/torch_reference.py export), compiled
//   by `ipupod compile` with the default options (device_iterations 1), run by the
//   real CLI process (`ipupod run mlp.ipx --inputs x.npz --outputs y.npz`: attach,
//   upload, load, every step, release) against a real ipupodd process started
//   with --compute-threads T. The cost of one step is the difference between a run
//   of --steps-long and one of --steps-short steps divided by the difference in
//   steps, so process start, attach, upload and load cancel out. PyTorch times
//   the same model's forward pass (torch.no_grad) with T threads everywhere.
//   --rounds rounds alternate the two CLI runs (short first, then long first)
//   and a fresh PyTorch process; medians of the rounds are compared.
//                                                   goal: ipupod >= 1.2x PyTorch
//   With --baseline DIR (a directory holding another build's `ipupod` and
//   `ipupodd`, e.g. the commit before a change) every round also times that
//   pair, on its own server, so before and after come from the same run.
//
//   build/tools/bench/cli_run_bench [--threads T] [--rounds R] [--steps-short S] [--steps-long L]
//                             [--baseline DIR]
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tensor/npy.h"
#include "common/tensor/tensor_files.h"
#include "device/kernels/threads.h"
#include "tools/bench/bench_util.h"

namespace ipupod::bench {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kBatch = 128;

struct Flags : RoundFlags {
  int steps_short = 20;
  int steps_long = 120;
  std::string baseline;  // --baseline DIR: DIR/ipupod and DIR/ipupodd
};

// The CLI binary and the server it talks to.
struct Build {
  std::string cli;
  std::optional<ServerProcess> server;
};

// x.npz with `steps` batches: the exported batch repeated.
absl::Status WriteInputs(const tensor::Tensor& batch, int steps, const fs::path& path) {
  std::string bytes;
  for (int i = 0; i < steps; ++i) bytes.append(batch.bytes().data(), batch.bytes().size());
  IPUPOD_ASSIGN_OR_RETURN(
      tensor::Tensor x,
      tensor::Tensor::FromBytes(tensor::DType::kFloat32, {steps * kBatch, 784}, bytes));
  return tensor::WriteTensorFile(path.string(), {{"x", std::move(x)}});
}

// Seconds of one `ipupod run` of `inputs` (the whole CLI process).
absl::StatusOr<double> TimeCliRun(const Build& build, const fs::path& work,
                                  const fs::path& inputs) {
  const std::string command =
      absl::StrCat("IPUPOD_SERVER=", build.server->address(), " IPUPOD_USER=bench ", build.cli,
                   " run ", (work / "mlp.ipx").string(), " --inputs ", inputs.string(),
                   " --outputs ", (work / "y.npz").string(), " >/dev/null 2>&1");
  bool ok = false;
  const Clock::time_point start = Clock::now();
  RunCommand(command, &ok);
  const double seconds = Seconds(start);
  if (!ok) return absl::InternalError(absl::StrCat("failed: ", command));
  return seconds;
}

// One round's per-step cost of `ipupod run`, both runs in the order `long_first` says.
absl::StatusOr<double> CliStepSeconds(const Build& build, const fs::path& work, const Flags& flags,
                                      bool long_first) {
  double t_short = 0, t_long = 0;
  for (int k = 0; k < 2; ++k) {
    const bool is_long = (k == 0) == long_first;
    IPUPOD_ASSIGN_OR_RETURN(
        const double t, TimeCliRun(build, work, work / (is_long ? "x_long.npz" : "x_short.npz")));
    (is_long ? t_long : t_short) = t;
  }
  return (t_long - t_short) / (flags.steps_long - flags.steps_short);
}

absl::StatusOr<Build> StartBuild(const std::string& cli, const std::string& server,
                                 const fs::path& state, const Flags& flags) {
  Build build;
  build.cli = cli;
  build.server = StartServerProcess(server, state.string(),
                                    {"--compute-threads", absl::StrCat(flags.threads)});
  if (!build.server) return absl::UnavailableError(absl::StrCat(server, " did not start"));
  return build;
}

absl::Status Prepare(const fs::path& work, const Flags& flags) {
  bool ok = false;
  RunTorchReference(absl::StrCat("export ", work.string()), &ok);
  if (!ok) return absl::UnavailableError("torch_reference.py export failed (python3-torch?)");
  IPUPOD_ASSIGN_OR_RETURN(tensor::Tensor batch,
                          tensor::ReadNpyFile((work / "mlp_input.npy").string()));
  IPUPOD_RETURN_IF_ERROR(WriteInputs(batch, flags.steps_short, work / "x_short.npz"));
  IPUPOD_RETURN_IF_ERROR(WriteInputs(batch, flags.steps_long, work / "x_long.npz"));
  RunCommand(absl::StrCat(IPUPOD_CLI_BINARY, " compile ", (work / "mlp.onnx").string(), " -o ",
                          (work / "mlp.ipx").string(), " >/dev/null"),
             &ok);
  return ok ? absl::OkStatus() : absl::InternalError("ipupod compile failed");
}

void PrintRow(const char* what, const std::vector<double>& steps,
              const std::vector<double>& torch) {
  std::vector<double> rate, torch_rate;
  for (double s : steps) rate.push_back(1 / s);
  for (double s : torch) torch_rate.push_back(1 / s);
  std::printf("| %s | %.3f | %.2fx | %s |\n", what, Median(steps) * 1e3,
              Median(torch) / Median(steps), RoundRatios(rate, torch_rate).c_str());
}

absl::Status Bench(const fs::path& work, const Flags& flags) {
  IPUPOD_RETURN_IF_ERROR(Prepare(work, flags));
  std::vector<Build> builds;
  IPUPOD_ASSIGN_OR_RETURN(builds.emplace_back(), StartBuild(IPUPOD_CLI_BINARY, IPUPOD_SERVER_BINARY,
                                                            work / "state", flags));
  if (!flags.baseline.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(builds.emplace_back(),
                            StartBuild(flags.baseline + "/ipupod", flags.baseline + "/ipupodd",
                                       work / "state-baseline", flags));
  }
  for (const Build& build : builds) {  // warm-up: the upload, the page cache
    IPUPOD_RETURN_IF_ERROR(TimeCliRun(build, work, work / "x_short.npz").status());
  }
  std::vector<std::vector<double>> ours(builds.size());
  std::vector<double> torch;
  bool ok = false;
  for (int r = 0; r < flags.rounds; ++r) {
    for (size_t b = 0; b < builds.size(); ++b) {
      const size_t which = (b + static_cast<size_t>(r)) % builds.size();  // alternate the order
      IPUPOD_ASSIGN_OR_RETURN(const double step,
                              CliStepSeconds(builds[which], work, flags, r % 2 == 1));
      ours[which].push_back(step);
    }
    const std::string reference =
        RunTorchReference(absl::StrCat("infer ", work.string(), " --steps ", flags.steps_long,
                                       " --threads ", flags.threads),
                          &ok);
    if (!ok) return absl::UnavailableError("torch_reference.py infer failed");
    torch.push_back(kBatch / nlohmann::json::parse(reference).at("samples_per_s").get<double>());
  }
  std::printf(
      "\n## ipupod run (CLI default path): MLP 784-1024-1024-10, batch 128, device_iterations 1, "
      "%d threads, %d rounds of %d and %d steps\n",
      flags.threads, flags.rounds, flags.steps_short, flags.steps_long);
  std::printf("| row | ms per step (median) | throughput vs PyTorch (goal >= 1.2) | rounds |\n");
  std::printf("|---|---|---|---|\n");
  PrintRow("ipupod run, per extra step", ours[0], torch);
  if (builds.size() > 1) PrintRow("ipupod run of --baseline, per extra step", ours[1], torch);
  std::printf("| PyTorch CPU, per step (reference, same run) | %.3f | 1.00x | |\n",
              Median(torch) * 1e3);
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Flags flags;
  static_cast<RoundFlags&>(flags) = ParseRoundFlags(
      argc, argv, {.steps = 1, .rounds = 5, .threads = 0}, [&](const std::string& flag, int value) {
        if (flag == "--steps-short") flags.steps_short = value;
        if (flag == "--steps-long") flags.steps_long = value;
      });
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--baseline") flags.baseline = argv[i + 1];
  }
  if (flags.steps_long <= flags.steps_short || flags.steps_short < 1) {
    std::fprintf(stderr, "cli_run_bench: --steps-long must exceed --steps-short (>= 1)\n");
    return 2;
  }
  if (flags.threads > kernels::MaxBlasThreads()) {
    std::fprintf(stderr, "cli_run_bench: --threads is more than the %d CPUs\n",
                 kernels::MaxBlasThreads());
    return 2;
  }
  const fs::path work = fs::temp_directory_path() / absl::StrCat("ipupod-cli_run_bench-", getpid());
  fs::create_directories(work);
  const absl::Status status = Bench(work, flags);
  fs::remove_all(work);
  if (!status.ok()) {
    std::fprintf(stderr, "cli_run_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ipupod::bench

int main(int argc, char** argv) { return ipupod::bench::Main(argc, argv); }
