// The C++ client's side of tools/bench/python_client_bench.py: one small inference
// step (client::Client::Run, which sends it as one RunInline call) timed step by step
// against a running ipupodd, so the Python client's figure has its C++
// reference measured on the same server, model and machine in the same run.
//
//   build/tools/bench/step_bench ADDRESS MODEL.ipx STEPS
//
// Attaches 1 IPU as user "bench-cpp", uploads and loads MODEL.ipx (one
// float32 input "x" of shape [1, 10]), runs 20 warm-up steps, then STEPS
// timed ones, and prints one line: "step_us median=M p90=P mean=A steps=N".
// Exit 1 with the error on stderr when anything fails.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "client/client.h"
#include "common/tensor/tensor.h"

namespace ipupod::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kWarmUpSteps = 20;

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "step_bench: %s: %s\n", what.c_str(), std::string(status.message()).c_str());
  return 1;
}

void Print(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  double mean = 0;
  for (double v : us) mean += v / static_cast<double>(us.size());
  std::printf("step_us median=%.1f p90=%.1f mean=%.1f steps=%zu\n", us[us.size() / 2],
              us[us.size() * 9 / 10], mean, us.size());
}

int Run(const std::string& address, const std::string& ipx, int steps) {
  client::ClientOptions options;
  options.server = address;
  options.user = "bench-cpp";
  auto c = client::Client::Connect(options);
  if (!c.ok()) return Fail("connect", c.status());
  v1::AttachRequest request;
  request.set_num_ipus(1);
  std::unique_ptr<client::AttachCall> call = (*c)->StartAttach(request);
  absl::StatusOr<v1::SessionInfo> session = call->WaitForGrant(nullptr);
  if (!session.ok()) return Fail("attach", session.status());
  absl::StatusOr<v1::ExecutableRef> ref = (*c)->UploadExecutableFile(ipx);
  if (!ref.ok()) return Fail("upload", ref.status());
  absl::StatusOr<v1::LoadedProgram> loaded = (*c)->Load(session->session(), ref->sha256());
  if (!loaded.ok()) return Fail("load", loaded.status());
  absl::StatusOr<tensor::Tensor> x =
      tensor::Tensor::FromValues<float>({1, 10}, std::vector<float>(10, 0.5f));
  if (!x.ok()) return Fail("input", x.status());
  const tensor::NamedTensors inputs = {{"x", *x}};
  std::vector<double> us;
  for (int i = 0; i < kWarmUpSteps + steps; ++i) {
    const Clock::time_point start = Clock::now();
    absl::StatusOr<client::RunResult> result = (*c)->Run(session->session(), inputs);
    if (!result.ok()) return Fail("run", result.status());
    if (i >= kWarmUpSteps) {
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
  }
  Print(std::move(us));
  (void)call->Release();
  return 0;
}

}  // namespace
}  // namespace ipupod::bench

int main(int argc, char** argv) {
  if (argc != 4 || std::atoi(argv[3]) <= 0) {
    std::fprintf(stderr,
                 "usage: step_bench ADDRESS MODEL.ipx STEPS (see tools/bench/step_bench.cc)\n");
    return 2;
  }
  return ipupod::bench::Run(argv[1], argv[2], std::atoi(argv[3]));
}
