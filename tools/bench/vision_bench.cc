// Convolutional inference and the matrix-product library, each figure beside
// its reference measured in the same run on the same machine:
//
//   resnet18  torchvision's ResNet-18 (random weights), batch 16 of 224x224
//             images, 1 IPU: samples/s through the server (client library ->
//             gRPC -> ExecutionService -> oneDNN convolutions) vs PyTorch CPU
//             running the same model (tools/bench/torch_reference.py infer-resnet)
//             on the same threads. Rounds alternate; medians are compared.
//                                                            goal >= 1.0x
//   matmul    the MLP's fully connected layers at batch 128 (784x1024,
//             1024x1024, 1024x10, with bias): GFLOP/s of OpenBLAS sgemm
//             (device/kernels/matmul.h, what ipupod uses), of oneDNN's matmul
//             primitive with the weights in its own prepacked layout and the
//             bias fused, and of torch's F.linear. Decides whether matrix
//             products move to oneDNN (README, "Dependencies").
//
//   build/tools/bench/vision_bench [--steps N] [--rounds R] [--threads T]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "common/status_macros.h"
#include "common/tensor/npy.h"
#include "device/kernels/matmul.h"
#include "device/kernels/threads.h"
#include "dnnl.hpp"
#include "tools/bench/bench_util.h"
#include <unistd.h>

namespace ipupod::bench {
namespace {

namespace fs = std::filesystem;

// --steps: timed Runs (batches of 16) per round; --rounds: ipupodd / PyTorch alternations.
using Flags = RoundFlags;
constexpr Flags kDefaults = {.steps = 4, .rounds = 3, .threads = 0};

// ---- resnet18

absl::Status BenchResnet(Pod& pod, const fs::path& work, const Flags& flags) {
  bool ok = false;
  RunTorchReference(absl::StrCat("export-resnet ", work.string(), " --batch 16"), &ok);
  if (!ok) return absl::UnavailableError("torch_reference.py export-resnet failed");
  IPUPOD_ASSIGN_OR_RETURN(Loaded loaded, CompileAndLoad(pod, work / "resnet18.onnx", ""));
  IPUPOD_ASSIGN_OR_RETURN(tensor::Tensor x,
                          tensor::ReadNpyFile((work / "resnet_input.npy").string()));
  const tensor::NamedTensors inputs = {{loaded.program.inputs(0).name(), x}};
  IPUPOD_RETURN_IF_ERROR(pod.client->Run(loaded.session, inputs).status());  // warm-up
  std::vector<double> ours, torch;
  double wall = 0, server_wall = 0;
  for (int r = 0; r < flags.rounds; ++r) {
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < flags.steps; ++i) {
      IPUPOD_ASSIGN_OR_RETURN(client::RunResult result, pod.client->Run(loaded.session, inputs));
      server_wall += result.stats.wall_seconds();
    }
    const double seconds = Seconds(start);
    wall += seconds;
    ours.push_back(16.0 * flags.steps / seconds);
    const std::string reference =
        RunTorchReference(absl::StrCat("infer-resnet ", work.string(), " --batch 16 --steps ",
                                       flags.steps, " --threads ", flags.threads),
                          &ok);
    if (ok) torch.push_back(nlohmann::json::parse(reference).at("samples_per_s").get<double>());
  }
  (void)loaded.call->Release();
  std::printf("\n## ResNet-18 inference, batch 16 x 224x224, %d threads, %d rounds of %d Runs\n",
              flags.threads, flags.rounds, flags.steps);
  std::printf("| figure | value |\n|---|---|\n");
  std::printf("| ipupodd samples/s (client library, wall; median) | %.1f |\n", Median(ours));
  std::printf("| of which server compute (RunStats.wall) | %.1f%% of the wall time |\n",
              100.0 * server_wall / wall);
  if (torch.size() != ours.size()) {
    std::printf("| PyTorch CPU samples/s | unavailable (torch_reference.py failed) |\n");
    return absl::OkStatus();
  }
  std::printf("| PyTorch CPU samples/s (reference, same run; median) | %.1f |\n", Median(torch));
  std::printf("| ratio of the medians ipupodd / PyTorch (goal >= 1.0) | %.2fx |\n",
              Median(ours) / Median(torch));
  std::printf("| ratio round by round | %s |\n", RoundRatios(ours, torch).c_str());
  return absl::OkStatus();
}

// ---- matmul

struct Shape3 {
  int64_t m, k, n;
};
constexpr Shape3 kShapes[] = {{128, 784, 1024}, {128, 1024, 1024}, {128, 1024, 10}};

double Gflops(const Shape3& s, int steps, double seconds) {
  return 2.0 * s.m * s.k * s.n * steps / seconds / 1e9;
}

double OpenBlasGflops(const Shape3& s, int steps) {
  std::vector<float> a(s.m * s.k, 0.5f), w(s.n * s.k, 0.25f), b(s.n, 1.0f), y(s.m * s.n);
  const kernels::GemmOptions options{.trans_a = false, .trans_b = true};
  auto once = [&] {
    (void)kernels::Gemm({a.data(), {s.m, s.k}}, {w.data(), {s.n, s.k}}, {b.data(), {s.n}}, options,
                        {y.data(), {s.m, s.n}});
  };
  for (int i = 0; i < 5; ++i) once();
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < steps; ++i) once();
  return Gflops(s, steps, Seconds(start));
}

// oneDNN's matmul with the weights reordered once into the layout the
// primitive prefers (what prepacking would keep) and the bias fused.
double OneDnnGflops(const Shape3& s, int steps) {
  using dnnl::memory;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const auto f32 = memory::data_type::f32;
  memory::desc a_md({s.m, s.k}, f32, memory::format_tag::ab);
  memory::desc w_plain({s.k, s.n}, f32, memory::format_tag::ba);  // [n, k] row-major
  memory::desc w_any({s.k, s.n}, f32, memory::format_tag::any);
  memory::desc b_md({1, s.n}, f32, memory::format_tag::ab);
  memory::desc y_md({s.m, s.n}, f32, memory::format_tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, w_any, b_md, y_md), engine);
  std::vector<float> a(s.m * s.k, 0.5f), w(s.n * s.k, 0.25f), b(s.n, 1.0f), y(s.m * s.n);
  memory a_mem(a_md, engine, a.data()), w_src(w_plain, engine, w.data());
  memory b_mem(b_md, engine, b.data()), y_mem(y_md, engine, y.data());
  memory w_packed(pd.weights_desc(), engine);
  dnnl::reorder(w_src, w_packed).execute(stream, w_src, w_packed);
  dnnl::matmul matmul(pd);
  auto once = [&] {
    matmul.execute(stream, {{DNNL_ARG_SRC, a_mem},
                            {DNNL_ARG_WEIGHTS, w_packed},
                            {DNNL_ARG_BIAS, b_mem},
                            {DNNL_ARG_DST, y_mem}});
    stream.wait();
  };
  for (int i = 0; i < 5; ++i) once();
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < steps; ++i) once();
  return Gflops(s, steps, Seconds(start));
}

void BenchMatmul(const Flags& flags) {
  const int steps = 50 * flags.steps;
  bool ok = false;
  const std::string reference =
      RunTorchReference(absl::StrCat("matmul --steps ", steps, " --threads ", flags.threads), &ok);
  nlohmann::json torch = ok ? nlohmann::json::parse(reference).at("gflops") : nlohmann::json();
  std::printf("\n## fully connected layers, batch 128, %d threads, %d products each (GFLOP/s)\n",
              flags.threads, steps);
  std::printf(
      "| m x k x n | OpenBLAS sgemm (ipupod) | oneDNN matmul, prepacked | PyTorch "
      "F.linear (reference) |\n|---|---|---|---|\n");
  for (const Shape3& s : kShapes) {
    const std::string key = absl::StrCat(s.m, "x", s.k, "x", s.n);
    const double blas = OpenBlasGflops(s, steps);
    const double dnnl = OneDnnGflops(s, steps);
    std::printf(
        "| %s | %.1f | %.1f | %s |\n", key.c_str(), blas, dnnl,
        torch.contains(key) ? absl::StrCat(torch[key].get<double>()).c_str() : "unavailable");
  }
}

int Main(int argc, char** argv) {
  const Flags flags = ParseRoundFlags(argc, argv, kDefaults);
  return RunModelBench("vision_bench", flags.threads, [&](Pod& pod, const fs::path& work) {
    IPUPOD_RETURN_IF_ERROR(BenchResnet(pod, work, flags));
    BenchMatmul(flags);
    return absl::OkStatus();
  });
}

}  // namespace
}  // namespace ipupod::bench

int main(int argc, char** argv) { return ipupod::bench::Main(argc, argv); }
