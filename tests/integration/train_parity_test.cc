// Training end to end against PyTorch: tests/parity/make_train_run_cases.py
// exports models that return (out, loss), the data and torch's trained
// results; each case is compiled with `ipupod compile --train` and trained
// with `ipupod run --train` on a real ipupodd (POD16). Every update's loss
// (the JSON lines) and every trained weight (--save-weights) must match
// torch at rtol = atol = 1e-4 (the seed's own assert), and for the seed's
// example the model written by --save-model, compiled for inference and
// run, must give torch's trained output at the same tolerance. Cases: the
// seed's Linear(10,10) + MSE (800 SGD updates), a GELU classifier with
// cross-entropy and Adam (200 updates), and four layers pipelined over 4
// IPUs with gradient accumulation 8 x replication 2 against torch's
// large-batch steps, and a BatchNorm model exported in training mode whose
// running statistics (buffers updated in place) must match torch's too; a
// small CNN (two conv blocks with BatchNorm, pooling, a linear head), 100
// updates of SGD with momentum on 1 IPU and of Adam pipelined over 2 IPUs x
// 2 replicas; and param groups from --opt-group: AdamW without weight decay
// on biases and LayerNorm (optimum's grouping), SGD with two learning rates.
// Skips when /usr/bin/python3 has no torch.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "common/tensor/npy.h"
#include "common/tensor/tensor_files.h"
#include "tests/integration/harness.h"
#include "tests/support/python_cases.h"
#include <sys/wait.h>

namespace ipupod::testing {
namespace {

using std::chrono::seconds;

constexpr double kTolerance = 1e-4;  // rtol = atol, as the seed asserts

CliResult LongCli(const std::string& server, const std::vector<std::string>& args) {
  return RunLongCli(server, "alice", args, seconds(600));
}

// Worst |got - want| / (tol + tol |want|) over the elements; must be <= 1.
void ExpectClose(const std::string& what, const float* got, const float* want, int64_t n) {
  double worst_ratio = 0;
  int64_t worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double ratio =
        std::abs(double{got[i]} - want[i]) / (kTolerance + kTolerance * std::abs(want[i]));
    if (!(ratio <= worst_ratio)) {  // also catches NaN
      worst_ratio = ratio;
      worst = i;
    }
  }
  EXPECT_LE(worst_ratio, 1.0) << what << ": element " << worst << " is " << got[worst]
                              << ", torch says " << want[worst];
  std::printf("%s: %lld values, worst at %.3gx the tolerance\n", what.c_str(),
              static_cast<long long>(n), worst_ratio);
}

void ExpectTensorsClose(const std::string& what, const tensor::NamedTensors& got,
                        const tensor::NamedTensors& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, w] : want) {
    auto it = std::find_if(got.begin(), got.end(), [&](const auto& g) { return g.first == name; });
    ASSERT_NE(it, got.end()) << what << ": no '" << name << "'";
    ASSERT_EQ(it->second.shape(), w.shape()) << name;
    ExpectClose(what + " " + name, it->second.data<float>(), w.data<float>(), w.num_elements());
  }
}

// Every update's loss, in order, from the --json lines of `ipupod run`.
std::vector<float> Losses(const std::string& json_lines) {
  std::vector<float> losses;
  std::istringstream lines(json_lines);
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json doc = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (doc.is_object() && doc.contains("losses")) {
      for (float l : doc["losses"]) losses.push_back(l);
    }
  }
  return losses;
}

std::vector<std::string> CompileArgs(const std::string& c) {
  std::vector<std::string> args = {"compile",      c + "model.onnx",      "--train",
                                   "--ipu-config", c + "ipu_config.json", "-o",
                                   c + "model.ipx"};
  if (std::filesystem::exists(c + "module_map.json")) {
    args.insert(args.end(), {"--module-map", c + "module_map.json"});
  }
  std::istringstream extra(ReadTextFile(c + "compile_args.txt"));
  for (std::string line; std::getline(extra, line);) {
    if (!line.empty()) args.push_back(line);
  }
  return args;
}

// The trained model from --save-model, compiled for inference, gives
// torch's trained output.
void CheckSavedModel(const std::string& server, const std::string& c) {
  const std::string check = c + "check.npz";
  auto inputs = tensor::ReadTensorFile(check);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  tensor::NamedTensors in, want;
  for (auto& [name, t] : *inputs) (name == "out" ? want : in).emplace_back(name, t);
  ASSERT_TRUE(tensor::WriteTensorFile(c + "check_in.npz", in).ok());
  CliResult compiled = LongCli(server, {"compile", c + "trained.onnx", "-o", c + "trained.ipx"});
  ASSERT_EQ(compiled.exit_code, 0) << compiled.out << compiled.err;
  CliResult run = LongCli(server, {"run", c + "trained.ipx", "--inputs", c + "check_in.npz",
                                   "--outputs", c + "check_out.npz"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  auto got = tensor::ReadTensorFile(c + "check_out.npz");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->front().first, "out");
  ExpectClose("trained model output", got->front().second.data<float>(),
              want.front().second.data<float>(), want.front().second.num_elements());
}

TEST(TrainParityTest, TrainedThroughServerAndCliMatchesTorch) {
  const test_support::PythonCases python("make_train_run_cases.py");
  if (!python.skip_reason().empty()) GTEST_SKIP() << python.skip_reason();
  ASSERT_TRUE(python.error().empty()) << python.error();
  ServerUnderTest server({"--pod", "POD16"});
  std::istringstream manifest(ReadTextFile(python.dir() + "/manifest.txt"));
  int cases = 0;
  for (std::string name; manifest >> name;) {
    int64_t updates = 0;
    manifest >> updates;
    SCOPED_TRACE(name);
    const std::string c = python.dir() + "/" + name + "/";
    CliResult compiled = LongCli(server.address(), CompileArgs(c));
    ASSERT_EQ(compiled.exit_code, 0) << compiled.out << compiled.err;
    CliResult run = LongCli(
        server.address(), {"--json", "run", c + "model.ipx", "--train", "--inputs", c + "data.npz",
                           "--steps", std::to_string(updates), "--save-weights", c + "trained.npz",
                           "--save-model", c + "trained.onnx"});
    ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
    const std::vector<float> losses = Losses(run.out);
    auto want_losses = tensor::ReadNpyFile(c + "losses.npy");
    ASSERT_TRUE(want_losses.ok()) << want_losses.status();
    ASSERT_EQ(static_cast<int64_t>(losses.size()), updates) << run.out;
    ExpectClose(name + " losses", losses.data(), want_losses->data<float>(), updates);
    auto got = tensor::ReadTensorFile(c + "trained.npz");
    auto want = tensor::ReadTensorFile(c + "expected.npz");
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(want.ok()) << want.status();
    ExpectTensorsClose(name + " weights", *got, *want);
    if (std::filesystem::exists(c + "check.npz")) CheckSavedModel(server.address(), c);
    ++cases;
  }
  EXPECT_EQ(cases, 8);  // every case of make_train_run_cases.py ran
}

}  // namespace
}  // namespace ipupod::testing
