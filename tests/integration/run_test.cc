// End to end: `ipupod compile` then `ipupod run` against a real ipupodd. The
// outputs are compared with graph::Interpreter run in-process on the same
// model; weights from .npz / .safetensors / .onnx change them; --json lines,
// --save-weights, $IPUPOD_SESSION under `ipupod attach -- ipupod run`, and
// the error paths (bad shapes, a partial step, missing files, device
// errors) with their exit codes.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "common/tensor/tensor_files.h"
#include "device/graph/interpreter.h"
#include "device/graph/onnx_import.h"
#include "tests/device/graph/onnx_builder.h"
#include "tests/integration/harness.h"
#include "tests/support/hostile_files.h"

namespace ipupod::testing {
namespace {

using graph::testing::kFloat;
using graph::testing::OnnxBuilder;
using std::chrono::seconds;

constexpr int64_t kMicroBatch = 2;
constexpr int64_t kStep = 8;  // micro-batch 2 x device iterations 2 x replication 2

std::vector<float> Values(int64_t n, float scale, float phase) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = scale * std::sin(0.37f * i + phase);
  return v;
}

// x[2,8] -> fc1 -> Relu -> fc2 -> y[2,4], weights fc1.w and fc2.w.
std::string MlpModel(float scale) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {kMicroBatch, 8});
  b.Output("y", kFloat, {kMicroBatch, 4});
  b.Floats("fc1.w", {8, 16}, Values(8 * 16, scale, 0.1f));
  b.Floats("fc2.w", {16, 4}, Values(16 * 4, scale, 0.7f));
  b.Node("MatMul", {"x", "fc1.w"}, {"h"}, "/fc1/MatMul");
  b.Node("Relu", {"h"}, {"hr"}, "/act/Relu");
  b.Node("MatMul", {"hr", "fc2.w"}, {"y"}, "/fc2/MatMul");
  return b.Bytes();
}

tensor::Tensor Floats(tensor::Shape shape, const std::vector<float>& values) {
  return *tensor::Tensor::FromValues<float>(std::move(shape), values);
}

// The model run micro-batch by micro-batch in-process.
tensor::Tensor Expected(const std::string& model, const tensor::Tensor& x) {
  auto imported = graph::ImportOnnx(model);
  EXPECT_TRUE(imported.ok()) << imported.status();
  if (!imported.ok()) return tensor::Tensor();
  auto interp = graph::Interpreter::Create(*std::move(imported));
  EXPECT_TRUE(interp.ok()) << interp.status();
  if (!interp.ok()) return tensor::Tensor();
  std::vector<float> out;
  const int64_t samples = x.shape()[0];
  for (int64_t b = 0; b < samples; b += kMicroBatch) {
    std::vector<float> rows(x.values<float>().begin() + b * 8,
                            x.values<float>().begin() + (b + kMicroBatch) * 8);
    auto y = (*interp)->Run({Floats({kMicroBatch, 8}, rows)});
    EXPECT_TRUE(y.ok()) << y.status();
    out.insert(out.end(), (*y)[0].values<float>().begin(), (*y)[0].values<float>().end());
  }
  return Floats({samples, 4}, out);
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  ASSERT_TRUE(out.good()) << path;
}

void ExpectClose(const tensor::Tensor& got, const tensor::Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    ASSERT_NEAR(got.values<float>()[i], want.values<float>()[i],
                1e-6 + 1e-5 * std::abs(want.values<float>()[i]))
        << "element " << i;
  }
}

class RunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Path("mlp.onnx");
    WriteBytes(model_, MlpModel(0.5f));
    CliResult c = Cli({"compile", model_, "-o", Path("mlp.ipx"), "--set",
                       "inference_device_iterations=2,inference_replication_factor=2"});
    ASSERT_EQ(c.exit_code, 0) << c.err;
    x_ = Floats({3 * kStep, 8}, Values(3 * kStep * 8, 1.0f, 0.3f));
    WriteInputs("in.npz", {{"x", x_}});
  }
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }
  void WriteInputs(const std::string& name, const tensor::NamedTensors& tensors) {
    WriteBytes(Path(name), tensor::SerializeNpz(tensors));
  }
  CliResult Cli(const std::vector<std::string>& args,
                const std::map<std::string, std::string>& env = {}) {
    return RunCli(server_.address(), "alice", args, env);
  }
  CliResult Run(std::vector<std::string> extra = {},
                const std::map<std::string, std::string>& env = {}) {
    std::vector<std::string> args = {"run",          Path("mlp.ipx"), "--inputs",
                                     Path("in.npz"), "--outputs",     Path("out.npz")};
    args.insert(args.end(), extra.begin(), extra.end());
    return Cli(args, env);
  }
  tensor::Tensor Output() {
    auto out = tensor::ReadTensorFile(Path("out.npz"));
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok() || out->empty()) return tensor::Tensor();
    EXPECT_EQ((*out)[0].first, "y");
    return (*out)[0].second;
  }
  // The pod is idle again (the run released its session).
  bool PodIdle() {
    return Eventually(
        [&] {
          nlohmann::json info = Cli({"--json", "info"}).json();
          for (const auto& ipu : info["ipus"]) {
            if (ipu["state"] != "idle") return false;
          }
          return info["ipus"].size() == 16;
        },
        seconds(10));
  }

  ServerUnderTest server_;
  TempDir dir_;
  std::string model_;
  tensor::Tensor x_;
};

TEST_F(RunTest, OutputsMatchTheInterpreterAndTheSessionIsReleased) {
  CliResult r = Run();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectClose(Output(), Expected(MlpModel(0.5f), x_));
  EXPECT_NE(r.out.find("ran 3 steps x 8 samples = 24 samples"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("uploaded"), std::string::npos) << r.err;
  EXPECT_TRUE(PodIdle());
  // The second run finds the executable on the server.
  CliResult again = Run();
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("already on the server"), std::string::npos) << again.err;
}

TEST_F(RunTest, JsonPrintsOneLinePerStepAndASummary) {
  CliResult r = Run({"--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::vector<nlohmann::json> docs;
  for (std::string line; std::getline(lines, line);) docs.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(docs.size(), 4u) << r.out;
  double simulated = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(docs[i]["step"], i + 1);
    EXPECT_EQ(docs[i]["samples"], kStep);
    EXPECT_GT(docs[i]["wall_seconds"].get<double>(), 0);
    EXPECT_GT(docs[i]["simulated_seconds"].get<double>(), 0);
    EXPECT_TRUE(docs[i].contains("simulated_compute_seconds"));
    EXPECT_TRUE(docs[i].contains("simulated_host_seconds"));
    simulated += docs[i]["simulated_seconds"].get<double>();
  }
  const nlohmann::json& summary = docs[3]["summary"];
  EXPECT_EQ(summary["samples"], 3 * kStep);
  EXPECT_NEAR(summary["simulated_seconds"].get<double>(), simulated, 1e-9);
  EXPECT_EQ(summary["outputs"][0]["shape"], nlohmann::json({3 * kStep, 4}));
}

TEST_F(RunTest, WeightsFromEveryFormatChangeTheOutputs) {
  const std::string other = MlpModel(-0.25f);
  auto weights = tensor::ParseOnnxInitializers(other);
  ASSERT_TRUE(weights.ok()) << weights.status();
  const tensor::Tensor want = Expected(other, x_);
  WriteBytes(Path("w.npz"), tensor::SerializeNpz(*weights));
  WriteBytes(Path("w.safetensors"), tensor::SerializeSafetensors(*weights));
  WriteBytes(Path("w.onnx"), other);
  for (const char* file : {"w.npz", "w.safetensors", "w.onnx"}) {
    CliResult r = Run({"--weights", Path(file), "--save-weights", Path("saved.npz")});
    ASSERT_EQ(r.exit_code, 0) << file << ": " << r.err;
    ExpectClose(Output(), want);
    auto saved = tensor::ReadTensorFile(Path("saved.npz"));
    ASSERT_TRUE(saved.ok()) << saved.status();
    ASSERT_EQ(saved->size(), 2u);
    for (const auto& [name, tensor] : *saved) {
      bool found = false;
      for (const auto& [wname, wtensor] : *weights) {
        if (wname == name) {
          found = true;
          EXPECT_EQ(tensor, wtensor) << name;
        }
      }
      EXPECT_TRUE(found) << name;
    }
  }
  // Without --weights the compiled ones are used again.
  ASSERT_EQ(Run().exit_code, 0);
  ExpectClose(Output(), Expected(MlpModel(0.5f), x_));
}

TEST_F(RunTest, BadInputsExit9BeforeAttaching) {
  WriteInputs("in.npz", {{"x", Floats({kStep, 7}, Values(kStep * 7, 1, 0))}});
  CliResult shape = Run();
  EXPECT_EQ(shape.exit_code, 9) << shape.err;
  EXPECT_NE(shape.err.find("input 'x'"), std::string::npos) << shape.err;
  EXPECT_NE(shape.err.find("float32[N, 8]"), std::string::npos) << shape.err;

  WriteInputs("in.npz", {{"x", Floats({20, 8}, Values(20 * 8, 1, 0))}});
  CliResult partial = Run();
  EXPECT_EQ(partial.exit_code, 9) << partial.err;
  EXPECT_NE(partial.err.find("20 samples"), std::string::npos) << partial.err;
  EXPECT_NE(partial.err.find("the 8 samples of one step (micro-batch 2 x device_iterations 2 x "
                             "replication 2)"),
            std::string::npos)
      << partial.err;

  WriteInputs("in.npz", {{"z", Floats({kStep, 8}, Values(kStep * 8, 1, 0))}});
  CliResult name = Run();
  EXPECT_EQ(name.exit_code, 9) << name.err;
  EXPECT_NE(name.err.find("'z'"), std::string::npos) << name.err;
  EXPECT_TRUE(PodIdle());
}

TEST_F(RunTest, MissingFilesExit3AndBadOutputNamesExit2) {
  CliResult ipx =
      Cli({"run", Path("absent.ipx"), "--inputs", Path("in.npz"), "--outputs", Path("out.npz")});
  EXPECT_EQ(ipx.exit_code, 3) << ipx.err;
  EXPECT_NE(ipx.err.find("absent.ipx"), std::string::npos) << ipx.err;
  CliResult inputs =
      Cli({"run", Path("mlp.ipx"), "--inputs", Path("absent.npz"), "--outputs", Path("out.npz")});
  EXPECT_EQ(inputs.exit_code, 3) << inputs.err;
  EXPECT_NE(inputs.err.find("absent.npz"), std::string::npos) << inputs.err;
  CliResult weights = Run({"--weights", Path("absent.safetensors")});
  EXPECT_EQ(weights.exit_code, 3) << weights.err;
  EXPECT_NE(weights.err.find("absent.safetensors"), std::string::npos) << weights.err;
  CliResult out_name =
      Cli({"run", Path("mlp.ipx"), "--inputs", Path("in.npz"), "--outputs", Path("out.txt")});
  EXPECT_EQ(out_name.exit_code, 2) << out_name.err;
  CliResult not_ipx =
      Cli({"run", model_, "--inputs", Path("in.npz"), "--outputs", Path("out.npz")});
  EXPECT_EQ(not_ipx.exit_code, 9) << not_ipx.err;
  EXPECT_NE(not_ipx.err.find("ipupod compile"), std::string::npos) << not_ipx.err;
}

// Hostile --inputs: a zip64 member claiming 2^62 bytes aborted the CLI
// with std::bad_alloc (exit 134, no JSON); a 4 GB claim in under 200 bytes
// touched 4 GB. Both are exit 9 with the JSON error document now.
TEST_F(RunTest, HostileInputFilesEndInAJsonErrorNotAnAbort) {
  uint32_t crc = 0;
  test_support::ZipMember m;
  m.data = test_support::DeflateZeros(test_support::NpyHeader(4), 16, crc);
  m.crc = crc;
  m.zip64 = true;
  m.uncompressed = uint64_t{1} << 62;
  WriteBytes(Path("in.npz"), test_support::Zip(m));
  CliResult lying = Run({"--json"});
  EXPECT_EQ(lying.exit_code, 9) << lying.err;
  EXPECT_NE(
      lying.json()["error"]["message"].get<std::string>().find("more than deflate can produce"),
      std::string::npos)
      << lying.out;
  m.zip64 = false;
  m.uncompressed = 0xfffffff0u;
  WriteBytes(Path("in.npz"), test_support::Zip(m));
  CliResult tiny = Run({"--json"});
  EXPECT_EQ(tiny.exit_code, 9) << tiny.err;
  EXPECT_NE(tiny.out.find("in.npz"), std::string::npos) << tiny.out;
  EXPECT_TRUE(PodIdle());
}

// `run /dev/null` said "does not exist"; it says what the file is.
TEST_F(RunTest, RunOfWhatIsNotAnExecutableSaysWhatItIs) {
  const std::vector<std::string> rest = {"--inputs", Path("in.npz"), "--outputs", Path("out.npz")};
  std::vector<std::string> args = {"run", "/dev/null"};
  args.insert(args.end(), rest.begin(), rest.end());
  CliResult device = Cli(args);
  EXPECT_EQ(device.exit_code, 9) << device.err;
  EXPECT_NE(device.err.find("executable '/dev/null' is a character device, not a regular file"),
            std::string::npos)
      << device.err;
  WriteBytes(Path("empty.ipx"), "");
  args[1] = Path("empty.ipx");
  CliResult empty = Cli(args);
  EXPECT_EQ(empty.exit_code, 9) << empty.err;
  EXPECT_NE(empty.err.find("is empty (0 bytes)"), std::string::npos) << empty.err;
  args[1] = dir_.path();
  CliResult directory = Cli(args);
  EXPECT_EQ(directory.exit_code, 9) << directory.err;
  EXPECT_NE(directory.err.find("is a directory"), std::string::npos) << directory.err;
}

// An --outputs that cannot be written was found only after the whole run.
TEST_F(RunTest, UnwritableOutputsAreRefusedBeforeAttaching) {
  const auto run_to = [&](const std::string& outputs) {
    return Cli({"run", Path("mlp.ipx"), "--inputs", Path("in.npz"), "--outputs", outputs});
  };
  const std::string absent = Path("no/such/dir/out.npz");
  CliResult missing = run_to(absent);
  EXPECT_EQ(missing.exit_code, 3) << missing.err;
  EXPECT_NE(missing.err.find("cannot write --outputs '" + absent + "': directory"),
            std::string::npos)
      << missing.err;
  EXPECT_EQ(missing.err.find("attached session"), std::string::npos) << missing.err;
  std::filesystem::create_directories(Path("taken.npz"));
  CliResult directory = run_to(Path("taken.npz"));
  EXPECT_EQ(directory.exit_code, 9) << directory.err;
  EXPECT_NE(directory.err.find("it is a directory"), std::string::npos) << directory.err;
  EXPECT_EQ(directory.err.find("attached session"), std::string::npos) << directory.err;
  // A run that can write leaves no trace of the check.
  ASSERT_EQ(Run().exit_code, 0);
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".ipupod-write-check"), std::string::npos)
        << entry.path();
  }
}

TEST_F(RunTest, UnknownWeightIsRefusedByTheServer) {
  WriteBytes(Path("w.npz"), tensor::SerializeNpz({{"no_such_weight", Floats({2}, {1.0f, 2.0f})}}));
  CliResult r = Run({"--weights", Path("w.npz")});
  EXPECT_EQ(r.exit_code, 9) << r.err;
  EXPECT_NE(r.err.find("no_such_weight"), std::string::npos) << r.err;
  EXPECT_TRUE(PodIdle());
}

TEST_F(RunTest, UnderAttachTheSessionFromTheEnvironmentIsUsed) {
  CliResult r = Cli({"attach", "--ipus", "2", "--", CliBinary(), "run", Path("mlp.ipx"), "--inputs",
                     Path("in.npz"), "--outputs", Path("out.npz")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t at = r.out.find("attached session ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string session = r.out.substr(at + 17, r.out.find(':', at) - at - 17);
  EXPECT_NE(r.out.find("on session " + session + " "), std::string::npos) << r.out;
  ExpectClose(Output(), Expected(MlpModel(0.5f), x_));
  EXPECT_TRUE(PodIdle());
}

TEST_F(RunTest, DeviceErrorsExitWithTheRecoveryActionCode) {
  Process holder = StartCli(server_.address(), "alice", {"--json", "attach", "--ipus", "2"});
  auto grant = holder.ReadStdoutJson(seconds(15));
  ASSERT_TRUE(grant) << holder.stderr_text();
  const std::string session = (*grant)["session"];
  const int ipu = (*grant)["ipus"][0];
  CliResult fault =
      RunCli(server_.address(), "admin",
             {"fault", "inject", "--ipu", std::to_string(ipu), "--kind", "ipu-reset"});
  ASSERT_EQ(fault.exit_code, 0) << fault.err;
  CliResult r = Run({}, {{"IPUPOD_SESSION", session}});
  EXPECT_EQ(r.exit_code, 20) << r.err;
  EXPECT_NE(r.err.find("recovery action: IPU_RESET"), std::string::npos) << r.err;
  // After the reset the same session runs (it loads again).
  ASSERT_EQ(Cli({"ipu", "reset", std::to_string(ipu)}).exit_code, 0);
  ASSERT_TRUE(Eventually(
      [&] {
        return Run({}, {{"IPUPOD_SESSION", session}}).exit_code == 0;
      },
      seconds(10)));
  ExpectClose(Output(), Expected(MlpModel(0.5f), x_));
  // A session that does not exist.
  CliResult gone = Run({}, {{"IPUPOD_SESSION", "s999-1"}});
  EXPECT_EQ(gone.exit_code, 3) << gone.err;
}

}  // namespace
}  // namespace ipupod::testing
