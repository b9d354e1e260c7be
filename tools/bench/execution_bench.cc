// Model execution through ipupodd, each figure beside its reference measured
// in the same run on the same machine:
//
//   inference   MLP 784-1024-1024-10, micro-batch 128, device_iterations 1
//               and 8 (two tables), 1 IPU: samples/s through the server (client library
//               -> gRPC -> ExecutionService -> runtime) vs PyTorch CPU
//               running the same model (tools/bench/torch_reference.py) on the
//               same number of cores (intra-op and OpenBLAS threads). The two
//               alternate: --rounds rounds of --steps timed Runs, then a fresh
//               PyTorch process timing as many batches; medians of the rounds
//               are compared and every round's ratio printed. Each round
//               times --steps x 8 micro-batches at either device_iterations,
//               so both tables cover as many samples. Each round times
//               the steps on one Run stream (Client::RunSteps, what `ipupod
//               run` uses) and one Client::Run call per step.  goal >= 1.2x
//   weights     WriteWeights / ReadWeights of a model holding --weights-mib
//               MiB (default 1024) over 4 pipelined IPUs vs a bare gRPC
//               streaming copy of the same bytes in 1 MiB messages
//               (tools/bench/echo_server.h, Bulk) and a memcpy.     goal >= 0.8x
//
// The server runs in this process on loopback (as in attach_bench), so client
// and server share the machine's cores in every row. PyTorch runs as a child
// (Debian's /usr/bin/python3); if it is missing the inference reference is
// reported as unavailable rather than guessed.
//
//   build/tools/bench/execution_bench [--weights-mib M] [--steps N] [--rounds R] [--threads T]
//                               [--device-iterations 1|8] [--weights 0]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/client.h"
#include "common/status_macros.h"
#include "common/tensor/npy.h"
#include "device/compiler/compile.h"
#include "device/kernels/threads.h"
#include "server/server.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/echo_server.h"
#include <unistd.h>

namespace ipupod::bench {
namespace {

namespace fs = std::filesystem;

// --steps: timed Runs per round (x 8 device iterations each); --rounds: ipupodd / PyTorch
// alternations; --weights-mib: the weight-transfer model's size.
struct Flags : RoundFlags {
  int weights_mib = 1024;
  int device_iterations = 0;  // --device-iterations 1 or 8: only that table; 0: both
  bool weights = true;        // --weights 0: skip the weight transfers
};

// ---- inference

// One round of ipupodd inference: `runs` timed Runs.
struct InferenceRound {
  double wall = 0;         // client-side seconds
  double server_wall = 0;  // RunStats.wall summed
  double simulated = 0;    // RunStats.simulated_seconds summed
};

// `runs` timed steps: one Client::Run call each (`stream` false), or all on
// one Run stream through Client::RunSteps (the CLI's path).
absl::StatusOr<InferenceRound> TimeInference(Pod& pod, const Loaded& loaded,
                                             const tensor::NamedTensors& inputs, int runs,
                                             bool stream) {
  InferenceRound round;
  auto count = [&round](const client::RunResult& result) {
    round.server_wall += result.stats.wall_seconds();
    round.simulated += result.stats.simulated_seconds();
  };
  const Clock::time_point start = Clock::now();
  if (stream) {
    const tensor::Tensor& x = inputs[0].second;
    IPUPOD_RETURN_IF_ERROR(pod.client->RunSteps(
        loaded.session, runs,
        [&](int64_t) {
          return std::vector<client::TensorSlice>{
              {inputs[0].first, x.dtype(), x.shape(), x.bytes()}};
        },
        [&](int64_t, client::RunResult result) {
          count(result);
          return absl::OkStatus();
        }));
  } else {
    for (int i = 0; i < runs; ++i) {
      IPUPOD_ASSIGN_OR_RETURN(client::RunResult result, pod.client->Run(loaded.session, inputs));
      count(result);
    }
  }
  round.wall = Seconds(start);
  return round;
}

// The exported micro-batch repeated to fill one Run.
absl::StatusOr<tensor::NamedTensors> InferenceInputs(const Loaded& loaded, const fs::path& work) {
  IPUPOD_ASSIGN_OR_RETURN(tensor::Tensor batch,
                          tensor::ReadNpyFile((work / "mlp_input.npy").string()));
  const int64_t samples = static_cast<int64_t>(loaded.program.run_shape().samples_per_step());
  std::vector<float> values(static_cast<size_t>(samples) * 784);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = batch.values<float>()[i % static_cast<size_t>(batch.num_elements())];
  }
  IPUPOD_ASSIGN_OR_RETURN(tensor::Tensor input,
                          tensor::Tensor::FromValues<float>({samples, 784}, values));
  return tensor::NamedTensors{{loaded.program.inputs(0).name(), input}};
}

// One table: the MLP at `device_iterations`, `runs` Runs per round.
absl::Status BenchInferenceAt(Pod& pod, const fs::path& work, const Flags& flags,
                              int device_iterations) {
  IPUPOD_ASSIGN_OR_RETURN(Loaded loaded, CompileAndLoad(pod, work / "mlp.onnx",
                                                        absl::StrCat("inference_device_iterations=",
                                                                     device_iterations)));
  IPUPOD_ASSIGN_OR_RETURN(const tensor::NamedTensors inputs, InferenceInputs(loaded, work));
  const int runs = flags.steps * 8 / device_iterations;
  const double samples = static_cast<double>(loaded.program.run_shape().samples_per_step()) * runs;
  for (int i = 0; i < 3; ++i)
    IPUPOD_RETURN_IF_ERROR(pod.client->Run(loaded.session, inputs).status());
  // Rounds alternate: one call per step, the steps on one stream, PyTorch.
  std::vector<double> calls, ours, torch;
  double wall = 0, server_wall = 0, simulated = 0;
  bool ok = true;
  for (int r = 0; r < flags.rounds; ++r) {
    IPUPOD_ASSIGN_OR_RETURN(InferenceRound per_call,
                            TimeInference(pod, loaded, inputs, runs, /*stream=*/false));
    calls.push_back(samples / per_call.wall);
    IPUPOD_ASSIGN_OR_RETURN(InferenceRound round,
                            TimeInference(pod, loaded, inputs, runs, /*stream=*/true));
    ours.push_back(samples / round.wall);
    wall += round.wall;
    server_wall += round.server_wall;
    simulated += round.simulated;
    if (!ok) continue;
    const std::string reference =
        RunTorchReference(absl::StrCat("infer ", work.string(), " --steps ", flags.steps * 8,
                                       " --threads ", flags.threads),
                          &ok);
    if (ok) torch.push_back(nlohmann::json::parse(reference).at("samples_per_s").get<double>());
  }
  (void)loaded.call->Release();

  std::printf(
      "\n## inference: MLP 784-1024-1024-10, batch 128 x %d device iterations, %d threads, %d "
      "rounds of %d steps\n",
      device_iterations, flags.threads, flags.rounds, runs);
  std::printf("| figure | value |\n|---|---|\n");
  std::printf(
      "| ipupodd samples/s, steps on one stream (Client::RunSteps, wall; median) | %.0f |\n",
      Median(ours));
  std::printf("| of which server compute (RunStats.wall) | %.1f%% of the wall time |\n",
              100.0 * server_wall / wall);
  std::printf("| ipupodd samples/s, one Client::Run call per step (median) | %.0f |\n",
              Median(calls));
  std::printf("| simulated device samples/s (GC200 model) | %.0f |\n",
              samples * flags.rounds / simulated);
  if (torch.size() != ours.size()) {
    std::printf("| PyTorch CPU samples/s | unavailable (torch_reference.py failed) |\n");
    return absl::OkStatus();
  }
  std::printf("| PyTorch CPU samples/s (reference, same run; median of %d rounds) | %.0f |\n",
              flags.rounds, Median(torch));
  std::printf("| ratio of the medians, one stream / PyTorch (goal >= 1.2) | %.2fx |\n",
              Median(ours) / Median(torch));
  std::printf("| ratio round by round | %s |\n", RoundRatios(ours, torch).c_str());
  std::printf("| ratio of the medians, one call per step / PyTorch | %.2fx (%s) |\n",
              Median(calls) / Median(torch), RoundRatios(calls, torch).c_str());
  return absl::OkStatus();
}

absl::Status BenchInference(Pod& pod, const fs::path& work, const Flags& flags) {
  bool ok = false;
  RunTorchReference(absl::StrCat("export ", work.string()), &ok);
  if (!ok)
    return absl::UnavailableError("torch_reference.py export failed (is python3-torch installed?)");
  for (int device_iterations : {1, 8}) {
    if (flags.device_iterations != 0 && flags.device_iterations != device_iterations) continue;
    IPUPOD_RETURN_IF_ERROR(BenchInferenceAt(pod, work, flags, device_iterations));
  }
  return absl::OkStatus();
}

// ---- weights

double MibPerS(int64_t bytes, double seconds) { return bytes / 1048576.0 / seconds; }

struct BulkFigures {
  double to_server_s = 0, from_server_s = 0, memcpy_s = 0;
};

BulkFigures BenchBareCopy(int64_t bytes) {
  BulkFigures figures;
  EchoServer echo;
  auto stub =
      Bulk::NewStub(grpc::CreateChannel(echo.address(), grpc::InsecureChannelCredentials()));
  const std::string data(static_cast<size_t>(bytes), '\x33');
  Clock::time_point start = Clock::now();
  {
    grpc::ClientContext context;
    Size size;
    auto writer = stub->Sink(&context, &size);
    Blob blob;
    for (size_t offset = 0; offset < data.size(); offset += kBulkChunkBytes) {
      blob.set_data(data.substr(offset, kBulkChunkBytes));
      writer->Write(blob);
    }
    writer->WritesDone();
    writer->Finish();
  }
  figures.to_server_s = Seconds(start);
  start = Clock::now();
  {
    grpc::ClientContext context;
    Size size;
    size.set_bytes(static_cast<uint64_t>(bytes));
    auto reader = stub->Source(&context, size);
    std::string received;
    received.reserve(data.size());
    Blob blob;
    while (reader->Read(&blob)) received.append(blob.data());
    reader->Finish();
  }
  figures.from_server_s = Seconds(start);
  std::vector<char> copy(data.size());
  start = Clock::now();
  std::memcpy(copy.data(), data.data(), data.size());
  figures.memcpy_s = Seconds(start);
  return figures;
}

absl::Status BenchWeights(Pod& pod, const fs::path& work, const Flags& flags) {
  bool ok = false;
  RunTorchReference(absl::StrCat("export-wide ", work.string(), " --mib ", flags.weights_mib), &ok);
  if (!ok) return absl::UnavailableError("torch_reference.py export-wide failed");
  IPUPOD_ASSIGN_OR_RETURN(Loaded loaded,
                          CompileAndLoad(pod, work / "wide.onnx",
                                         "layers_per_ipu=[1 1 1 1],inference_device_iterations=4"));
  IPUPOD_ASSIGN_OR_RETURN(tensor::NamedTensors weights, pod.client->ReadWeights(loaded.session));
  int64_t bytes = 0;
  for (const auto& [name, tensor] : weights) bytes += static_cast<int64_t>(tensor.byte_size());
  Clock::time_point start = Clock::now();
  IPUPOD_RETURN_IF_ERROR(pod.client->WriteWeights(loaded.session, weights).status());
  const double write_s = Seconds(start);
  start = Clock::now();
  IPUPOD_ASSIGN_OR_RETURN(tensor::NamedTensors back, pod.client->ReadWeights(loaded.session));
  const double read_s = Seconds(start);
  (void)loaded.call->Release();
  if (back.size() != weights.size()) return absl::InternalError("ReadWeights lost tensors");
  weights.clear();
  back.clear();

  const BulkFigures bare = BenchBareCopy(bytes);
  std::printf("\n## weights: %.0f MiB in %zu tensors, 4 IPUs, 1 MiB messages\n", bytes / 1048576.0,
              static_cast<size_t>(4));
  std::printf(
      "| direction | ipupodd MiB/s | bare gRPC stream MiB/s (reference) | ratio (goal >= 0.8) |\n");
  std::printf("|---|---|---|---|\n");
  std::printf("| host -> server (WriteWeights vs Sink) | %.0f | %.0f | %.2fx |\n",
              MibPerS(bytes, write_s), MibPerS(bytes, bare.to_server_s),
              bare.to_server_s / write_s);
  std::printf("| server -> host (ReadWeights vs Source) | %.0f | %.0f | %.2fx |\n",
              MibPerS(bytes, read_s), MibPerS(bytes, bare.from_server_s),
              bare.from_server_s / read_s);
  std::printf("| memcpy of the same bytes (floor) | %.0f MiB/s | | |\n",
              MibPerS(bytes, bare.memcpy_s));
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Flags flags;
  static_cast<RoundFlags&>(flags) =
      ParseRoundFlags(argc, argv, {.steps = 16, .rounds = 5, .threads = 0},
                      [&](const std::string& flag, int value) {
                        if (flag == "--weights-mib") flags.weights_mib = value;
                        if (flag == "--device-iterations") flags.device_iterations = value;
                        if (flag == "--weights") flags.weights = value != 0;
                      });
  return RunModelBench("execution_bench", flags.threads, [&](Pod& pod, const fs::path& work) {
    IPUPOD_RETURN_IF_ERROR(BenchInference(pod, work, flags));
    return flags.weights ? BenchWeights(pod, work, flags) : absl::OkStatus();
  });
}

}  // namespace
}  // namespace ipupod::bench

int main(int argc, char** argv) { return ipupod::bench::Main(argc, argv); }
