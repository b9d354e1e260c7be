// End to end: `ipupod compile` (offline, no server): the .ipx it writes, the
// --report table and JSON, --ipu-config and --set, the executable cache, and
// every error path with its exit code (3 missing file, 9 bad config value,
// 12 does not compile, 2 usage). Then `compile --remote` through a real
// ipupodd (CompileService): the same executable, runnable at once, and the
// server's bounds with their exit codes.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/tensor/tensor_files.h"
#include "device/compiler/executable.h"
#include "tests/device/compiler/test_models.h"
#include "tests/device/graph/onnx_builder.h"
#include "tests/integration/harness.h"

namespace ipupod::testing {
namespace {

// compile never contacts the server: nothing listens on this address.
constexpr const char* kNoServer = "127.0.0.1:1";

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  ASSERT_TRUE(out.good()) << path;
}

class CompileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_.path() + "/mlp.onnx";
    WriteFile(model_, compiler::testing::MlpBytes(4));
  }
  CliResult Compile(std::vector<std::string> args) {
    args.insert(args.begin(), "compile");
    return RunCli(kNoServer, "alice", args);
  }
  TempDir dir_;
  std::string model_;
};

TEST_F(CompileTest, WritesAnExecutableNextToTheModelAndPrintsTheReport) {
  CliResult r = Compile({model_, "--report"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string ipx = dir_.path() + "/mlp.ipx";
  ASSERT_TRUE(std::filesystem::exists(ipx)) << r.out;
  absl::StatusOr<compiler::Executable> e = compiler::ReadExecutableFile(ipx);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->inputs.size(), 1u);
  EXPECT_NE(r.out.find("compiled " + model_ + " -> " + ipx), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(e->content_hash.substr(0, 16)), std::string::npos) << r.out;
  // The report table: its header and summary lines.
  EXPECT_NE(r.out.find("activations"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("samples per step"), std::string::npos) << r.out;
  // Without --report, no table.
  CliResult plain = Compile({model_, "-o", dir_.path() + "/plain.ipx"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("activations"), std::string::npos) << plain.out;
}

TEST_F(CompileTest, JsonCarriesTheRunShapeAndTheReport) {
  const std::string ipx = dir_.path() + "/out.ipx";
  CliResult r =
      Compile({model_, "-o", ipx, "--report", "--json", "--set", "inference_device_iterations=4",
               "--set", "inference_replication_factor=2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json doc = r.json();
  ASSERT_TRUE(doc.is_object()) << r.out;
  EXPECT_EQ(doc["output"], ipx);
  EXPECT_EQ(doc["sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(doc["samples_per_step"], 4 * 4 * 2);
  EXPECT_EQ(doc["ipus"]["needed"], 2);
  EXPECT_EQ(doc["inputs"][0]["name"], "x");
  EXPECT_EQ(doc["inputs"][0]["shape"], nlohmann::json({32, 8}));
  EXPECT_EQ(doc["report"]["ipus"].size(), 1u);
  EXPECT_EQ(doc["report"]["samples_per_step"], 32);
  absl::StatusOr<compiler::Executable> e = compiler::ReadExecutableFile(ipx);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->content_hash, doc["sha256"]);
  EXPECT_EQ(e->replication_factor, 2);
}

TEST_F(CompileTest, ConfigFileIsReadAndUnknownKeysWarn) {
  const std::string config = dir_.path() + "/ipu_config.json";
  WriteFile(config, R"({"inference_device_iterations": 3, "not_a_key": 1})");
  CliResult r = Compile({model_, "--ipu-config", config, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.json()["device_iterations"], 3);
  EXPECT_NE(r.err.find("not_a_key"), std::string::npos) << r.err;
  CliResult text = Compile({model_, "--ipu-config", config});
  EXPECT_NE(text.err.find("warning: "), std::string::npos) << text.err;
  // --set overrides the file.
  CliResult set =
      Compile({model_, "--ipu-config", config, "--set", "inference_device_iterations=5", "--json"});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  EXPECT_EQ(set.json()["device_iterations"], 5);
}

TEST_F(CompileTest, IgnoredKeysWarnOnStderrAndInTheReport) {
  // The one key that can change nothing: sharding optimizer state over a single replica.
  const std::string model = dir_.path() + "/mlp_loss.onnx";
  WriteFile(model, compiler::testing::MlpWithLossBytes(4));
  const std::string set = "replicated_tensor_sharding=true";
  const std::string warning = "ipu config key 'replicated_tensor_sharding' is ignored";
  CliResult text = Compile({model, "--train", "--set", set, "--report"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.err.find("warning: " + warning), std::string::npos) << text.err;
  EXPECT_NE(text.out.find("note: " + warning), std::string::npos) << text.out;
  CliResult json = Compile({model, "--train", "--set", set, "--report", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  nlohmann::json doc = json.json();
  EXPECT_NE(doc["report"]["notes"].dump().find(warning), std::string::npos) << json.out;
  EXPECT_NE(doc["warnings"].dump().find(warning), std::string::npos) << json.out;
  CliResult sharded = Compile({model_, "--set", "sharded_execution_for_inference=true", "--json"});
  ASSERT_EQ(sharded.exit_code, 0) << sharded.err;
  EXPECT_EQ(sharded.json()["execution"], "sharded") << "sharded_execution_for_inference selects it";
  EXPECT_EQ(sharded.json()["warnings"].dump().find("is ignored"), std::string::npos);
}

TEST_F(CompileTest, TrainWritesATrainingExecutableAndReportsGradientsAndState) {
  const std::string model = dir_.path() + "/mlp_loss.onnx";
  WriteFile(model, compiler::testing::MlpWithLossBytes(4));
  const std::string ipx = dir_.path() + "/train.ipx";
  CliResult r = Compile({model, "--train", "--optimizer", "adam", "--opt", "lr=0.001,amsgrad=true",
                         "--freeze", "fc1.w", "--set",
                         "gradient_accumulation_steps=3,optimizer_state_offchip=false", "-o", ipx,
                         "--report"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("micro-batch 4 x 3 accumulated x 1 device iterations"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("training: loss 'loss', 1 trainable weight, adam (variables lr=0.001; "
                       "constants accum_type=32 amsgrad=1 "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("opt state"), std::string::npos) << "no training columns:\n" << r.out;
  EXPECT_NE(r.out.find("3x its forward FLOPs"), std::string::npos) << r.out;
  absl::StatusOr<compiler::Executable> e = compiler::ReadExecutableFile(ipx);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->mode, compiler::ExecutableMode::kTraining);
  EXPECT_EQ(e->training.weights, std::vector<std::string>{"fc2.w"});
  EXPECT_EQ(e->training.optimizer, "adam");
  EXPECT_EQ(e->batch_size_factor, 3);

  CliResult json = Compile({model, "--train", "--loss", "loss", "--opt", "momentum=0.9", "--set",
                            "gradient_accumulation_steps=2,device_iterations=2", "-o", ipx,
                            "--report", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  nlohmann::json doc = json.json();
  EXPECT_EQ(doc["mode"], "training");
  EXPECT_EQ(doc["samples_per_step"], 4 * 2 * 2);
  EXPECT_EQ(doc["training"]["loss"], "loss");
  EXPECT_EQ(doc["training"]["optimizer"], "sgd");
  EXPECT_EQ(doc["training"]["variables"]["momentum"], 0.9);
  EXPECT_EQ(doc["training"]["weights"].size(), 2u);
  EXPECT_EQ(doc["report"]["mode"], "training");
  EXPECT_EQ(doc["report"]["gradient_accumulation_steps"], 2);
  EXPECT_EQ(doc["report"]["ipus"][0]["gradient_bytes"], (8 * 16 + 16 * 4) * 4);
  // optimizer_state_offchip defaults to true: the momentum buffer is off-chip.
  EXPECT_EQ(doc["report"]["ipus"][0]["optimizer_state_bytes"], 0);
  EXPECT_EQ(doc["report"]["ipus"][0]["optimizer_state_offchip_bytes"], (8 * 16 + 16 * 4) * 4);
}

TEST_F(CompileTest, TrainErrors) {
  // The plain MLP has no loss output: the model does not compile for training.
  CliResult no_loss = Compile({model_, "--train"});
  EXPECT_EQ(no_loss.exit_code, 12) << no_loss.err;
  EXPECT_NE(no_loss.err.find("no scalar float output to train on"), std::string::npos)
      << no_loss.err;
  const std::string model = dir_.path() + "/mlp_loss.onnx";
  WriteFile(model, compiler::testing::MlpWithLossBytes(4));
  CliResult frozen = Compile({model, "--train", "--freeze", "nope"});
  EXPECT_EQ(frozen.exit_code, 12) << frozen.err;
  EXPECT_NE(frozen.err.find("--freeze 'nope'"), std::string::npos) << frozen.err;
  CliResult loss = Compile({model, "--train", "--loss", "y"});
  EXPECT_EQ(loss.exit_code, 12) << loss.err;
  CliResult without_train = Compile({model, "--optimizer", "adam"});
  EXPECT_EQ(without_train.exit_code, 2) << without_train.err;
  EXPECT_NE(without_train.err.find("need --train"), std::string::npos) << without_train.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/mlp_loss.ipx"));
}

TEST_F(CompileTest, UsageErrorsExit2) {
  EXPECT_EQ(Compile({}).exit_code, 2);
  CliResult same = Compile({model_, "-o", model_});
  EXPECT_EQ(same.exit_code, 2) << same.err;
  EXPECT_NE(same.err.find("overwrite"), std::string::npos) << same.err;
}

// `ipupod inspect` (offline): what a user needs to write the .npz files of
// `ipupod run` - inputs and outputs with their host shapes, the weights a
// session takes - plus placement, config, training spec and format version.
TEST_F(CompileTest, InspectShowsWhatAnExecutableTakesAndMakes) {
  const std::string ipx = dir_.path() + "/mlp.ipx";
  ASSERT_EQ(Compile({model_, "-o", ipx, "--set", "inference_device_iterations=2"}).exit_code, 0);
  CliResult text = RunCli(kNoServer, "alice", {"inspect", ipx});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const char* line :
       {"inference executable, format 1", "x float32[8,8]", "fc1.w float32[8,16]",
        "fc2.w float32[16,4]", "stages on IPUs [0]", "step: 8 samples", "ipu_config: {"}) {
    EXPECT_NE(text.out.find(line), std::string::npos) << line << " in\n" << text.out;
  }
  CliResult json = RunCli(kNoServer, "alice", {"--json", "inspect", ipx});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  nlohmann::json doc = json.json();
  ASSERT_TRUE(doc.is_object()) << json.out;
  EXPECT_EQ(doc["format_version"], 1);
  EXPECT_EQ(doc["mode"], "inference");
  EXPECT_EQ(doc["inputs"][0]["name"], "x");
  EXPECT_EQ(doc["inputs"][0]["shape"], nlohmann::json({8, 8}));
  EXPECT_EQ(doc["outputs"].size(), 1u);
  ASSERT_EQ(doc["weights"].size(), 2u);
  EXPECT_EQ(doc["weights"][0]["name"], "fc1.w");
  EXPECT_EQ(doc["weights"][0]["dtype"], "float32");
  EXPECT_EQ(doc["weights"][0]["shape"], nlohmann::json({8, 16}));
  EXPECT_EQ(doc["placement"]["stage_ipus"], nlohmann::json::array({0}));
  EXPECT_EQ(doc["ipu_config"]["inference_device_iterations"], 2);
  EXPECT_FALSE(doc.contains("training"));
  EXPECT_EQ(doc["sha256"].get<std::string>().size(), 64u);
}

// GPT with layer l on IPU ipus[l] in phase l / 2, as PopART annotates it.
std::string PhasedGpt(const std::vector<int64_t>& ipus) {
  compiler::testing::GptBuilder gpt(compiler::testing::GptSpec{.layers = 4});
  for (int l = 0; l < 4; ++l) {
    onnx::NodeProto& n = gpt.NodeNamed(absl::StrCat("/h.", l, "/attn/MatMul"));
    compiler::testing::OnnxBuilder::AttrInt(n, "__ipu_number", ipus[l]);
    compiler::testing::OnnxBuilder::AttrInt(n, "__execution_phase", l / 2);
  }
  return gpt.Bytes();
}

TEST_F(CompileTest, PhasedExecutionCompilesFromPopartPhaseAttributes) {
  const std::string model = dir_.path() + "/phased.onnx";
  const std::string ipx = dir_.path() + "/phased.ipx";
  WriteFile(model, PhasedGpt({0, 2, 1, 3}));
  CliResult r = Compile({model, "-o", ipx, "--report", "--set",
                         "execution_strategy=parallel_phased,tensors_liveness=off_chip_after_fwd"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* line :
       {"parallel_phased over 4 stages", "in 2 phases (liveness off_chip_after_fwd)",
        "phase 0 on IPU 0,2: ", "phase 1 on IPU 1,3: "}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << " in\n" << r.out;
  }
  CliResult text = RunCli(kNoServer, "alice", {"inspect", ipx});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("stages on IPUs [0,2,1,3] in phases [0,0,1,1]"), std::string::npos)
      << text.out;
  CliResult json = RunCli(kNoServer, "alice", {"--json", "inspect", ipx});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(json.json()["placement"]["stage_phases"], nlohmann::json({0, 0, 1, 1}));
  EXPECT_EQ(json.json()["execution"], "parallel_phased");
  // Phase 1 on an even IPU: a compile error in parallel, fine serially.
  const std::string even = dir_.path() + "/even.onnx";
  WriteFile(even, PhasedGpt({0, 2, 2, 3}));
  CliResult wrong = Compile({even, "--set", "execution_strategy=parallel_phased"});
  EXPECT_EQ(wrong.exit_code, 12) << wrong.err;
  EXPECT_NE(wrong.err.find("even phases must run on even IPUs"), std::string::npos) << wrong.err;
  EXPECT_EQ(Compile({even, "--set", "execution_strategy=serial_phased"}).exit_code, 0);
}

TEST_F(CompileTest, InspectShowsTheTrainingSpec) {
  WriteFile(dir_.path() + "/loss.onnx", compiler::testing::MlpWithLossBytes(4));
  const std::string ipx = dir_.path() + "/train.ipx";
  CliResult compiled = Compile({dir_.path() + "/loss.onnx", "--train", "--optimizer", "adam",
                                "--freeze", "fc1.w", "-o", ipx});
  ASSERT_EQ(compiled.exit_code, 0) << compiled.err;
  CliResult text = RunCli(kNoServer, "alice", {"inspect", ipx});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("training executable"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("1 trainable weight, adam"), std::string::npos) << text.out;
  nlohmann::json doc = RunCli(kNoServer, "alice", {"--json", "inspect", ipx}).json();
  EXPECT_EQ(doc["training"]["optimizer"], "adam");
  EXPECT_EQ(doc["training"]["weights"], nlohmann::json::array({"fc2.w"}));
}

TEST_F(CompileTest, InspectErrors) {
  CliResult missing = RunCli(kNoServer, "alice", {"inspect", dir_.path() + "/none.ipx"});
  EXPECT_EQ(missing.exit_code, 3) << missing.err;
  EXPECT_NE(missing.err.find("none.ipx"), std::string::npos) << missing.err;
  CliResult onnx = RunCli(kNoServer, "alice", {"--json", "inspect", model_});
  EXPECT_EQ(onnx.exit_code, 9) << onnx.out << onnx.err;
  EXPECT_EQ(onnx.json()["error"]["code"], "INVALID_ARGUMENT");
  EXPECT_NE(onnx.out.find("not an ipupod executable"), std::string::npos) << onnx.out;
  EXPECT_EQ(RunCli(kNoServer, "alice", {"inspect"}).exit_code, 2);
}

// ---------------------------------------------------------------- --remote

class RemoteCompileTest : public CompileTest {
 protected:
  CliResult Remote(std::vector<std::string> args, ServerUnderTest* server = nullptr) {
    args.insert(args.begin(), {"compile", "--remote"});
    return RunCli((server != nullptr ? server : &server_)->address(), "alice", args);
  }
  ServerUnderTest server_;
};

TEST_F(RemoteCompileTest, TheServerCompilesTheSameExecutableAndItRunsAtOnce) {
  const std::string local_ipx = dir_.path() + "/local.ipx";
  ASSERT_EQ(Compile({model_, "-o", local_ipx, "--set", "inference_device_iterations=2"}).exit_code,
            0);
  const std::string ipx = dir_.path() + "/remote.ipx";
  CliResult r = Remote({model_, "-o", ipx, "--set", "inference_device_iterations=2", "--report"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("compiled " + model_ + " on the server -> " + ipx), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("activations"), std::string::npos) << r.out;  // the report table
  absl::StatusOr<compiler::Executable> local = compiler::ReadExecutableFile(local_ipx);
  absl::StatusOr<compiler::Executable> remote = compiler::ReadExecutableFile(ipx);
  ASSERT_TRUE(local.ok() && remote.ok());
  EXPECT_EQ(remote->content_hash, local->content_hash);
  // Compiling again sends no model (the blob is stored) and finds it cached.
  CliResult again = Remote({model_, "-o", ipx, "--set", "inference_device_iterations=2", "--json"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.json()["cache_hit"], true);
  EXPECT_EQ(again.json()["compiled_on"], "server");
  // The executable runs as it is (two steps of 8 samples).
  const std::string inputs = dir_.path() + "/in.npz";
  absl::StatusOr<tensor::Tensor> x =
      tensor::Tensor::FromValues<float>({16, 8}, std::vector<float>(16 * 8, 0.25f));
  ASSERT_TRUE(x.ok());
  WriteFile(inputs, tensor::SerializeNpz({{"x", *x}}));
  CliResult run = RunCli(server_.address(), "alice",
                         {"run", ipx, "--inputs", inputs, "--outputs", dir_.path() + "/out.npz"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
}

TEST_F(RemoteCompileTest, TrainingOptionsTravelWithTheRequest) {
  const std::string model = dir_.path() + "/mlp_loss.onnx";
  WriteFile(model, compiler::testing::MlpWithLossBytes(4));
  CliResult r = Remote({model, "--train", "--optimizer", "adam", "--opt", "lr=0.001", "--freeze",
                        "fc1.w", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json doc = r.json();
  EXPECT_EQ(doc["mode"], "training");
  EXPECT_EQ(doc["training"]["optimizer"], "adam");
  EXPECT_EQ(doc["training"]["weights"], nlohmann::json({"fc2.w"}));
}

TEST_F(RemoteCompileTest, ErrorsKeepTheirExitCodes) {
  // A bad config value is found here, before anything is sent (exit 9).
  EXPECT_EQ(
      RunCli(kNoServer, "alice", {"compile", "--remote", model_, "--set", "nonsense"}).exit_code,
      9);
  // The model does not compile with this config: the server's message (12).
  CliResult placed = Remote({model_, "--set", "layers_per_ipu=[1 1]"});
  EXPECT_EQ(placed.exit_code, 12) << placed.err;
  EXPECT_NE(placed.err.find("layers_per_ipu"), std::string::npos) << placed.err;
  // Out of IPU memory: the plan that did not fit comes back as the table (12).
  const std::string huge = dir_.path() + "/huge.onnx";
  WriteFile(huge, compiler::testing::HugeActivationBytes({1 << 16, 1 << 12}));
  CliResult oom = Remote({huge});
  EXPECT_EQ(oom.exit_code, 12) << oom.err;
  EXPECT_NE(oom.err.find("out of memory"), std::string::npos) << oom.err;
  EXPECT_NE(oom.err.find("activations"), std::string::npos) << oom.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/huge.ipx"));
  // No server: exit 8.
  EXPECT_EQ(RunCli(kNoServer, "alice", {"compile", "--remote", model_}).exit_code, 8);
}

TEST_F(RemoteCompileTest, AModelOverTheServersBoundIsRefused) {
  ServerUnderTest small({}, R"({"compile_max_model_mb": 1})");
  graph::testing::OnnxBuilder b(14);
  b.Input("x", graph::testing::kFloat, {4, 512});
  b.Output("y", graph::testing::kFloat, {4, 512});
  b.Floats("w", {512, 512}, std::vector<float>(512 * 512, 0.5f));  // 1 MiB
  b.Node("MatMul", {"x", "w"}, {"y"}, "/fc/MatMul");
  const std::string big = dir_.path() + "/big.onnx";
  WriteFile(big, b.Bytes());
  CliResult r = Remote({big}, &small);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_NE(r.err.find("compile_max_model_mb"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ipupod::testing
