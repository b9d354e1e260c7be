// `ipupod run --train` end to end on a real ipupodd: a checkpoint taken
// halfway resumes exactly - same weights, optimizer state and data position
// as an uninterrupted run - across a server killed and restarted, and the
// CLI's training errors.
#include <cmath>

#include <gtest/gtest.h>

#include "common/tensor/tensor_files.h"
#include "tests/integration/harness.h"
#include "tests/support/models.h"
#include "tests/support/tensors.h"

namespace ipupod::testing {
namespace {

using tensor::Tensor;

// y = tanh(x W + b), loss = mean((y - t)^2); micro-batch 2.
std::string Regressor() {
  return test_support::RegressorModel(2, {0.5f, -0.3f, 0.2f, 0.1f, -0.4f, 0.6f});
}

// The seed's CounterModel (PopTorch 4.8) with a loss: count <- count + 1
// on every forward pass (a buffer), y = (x W) * count.
std::string Counter() { return test_support::CounterModel({0.5f, -0.3f, 0.2f, 0.1f, -0.4f, 0.6f}); }

using test_support::Wave;

class TrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tensor::WriteFileAtomically(Path("m.onnx"), Regressor()).ok());
    // 4 runs of 2 x 2 samples (micro-batch 2 x accumulation 2 x 1 iteration).
    ASSERT_TRUE(tensor::WriteTensorFile(
                    Path("data.npz"), {{"x", *Tensor::FromValues<float>({16, 3}, Wave(48, 0.3f))},
                                       {"t", *Tensor::FromValues<float>({16, 2}, Wave(32, 1.7f))}})
                    .ok());
    CliResult compiled =
        Cli({"compile", Path("m.onnx"), "--train", "--optimizer", "adam", "--opt", "lr=0.05",
             "--set", "gradient_accumulation_steps=2", "-o", Path("m.ipx")});
    ASSERT_EQ(compiled.exit_code, 0) << compiled.out << compiled.err;
  }

  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }
  CliResult Cli(const std::vector<std::string>& args) {
    return RunCli(server_.address(), "alice", args);
  }
  tensor::NamedTensors Read(const std::string& name) {
    auto t = tensor::ReadTensorFile(Path(name));
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : tensor::NamedTensors{};
  }

  TempDir dir_;
  ServerUnderTest server_;
};

TEST_F(TrainTest, CheckpointResumesExactlyAfterServerRestart) {
  CliResult whole = Cli({"run", Path("m.ipx"), "--train", "--inputs", Path("data.npz"), "--steps",
                         "6", "--save-weights", Path("whole.npz")});
  ASSERT_EQ(whole.exit_code, 0) << whole.out << whole.err;
  CliResult first = Cli({"run", Path("m.ipx"), "--train", "--inputs", Path("data.npz"), "--steps",
                         "3", "--checkpoint", Path("ck.npz")});
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  server_.KillAndRestart();
  CliResult second =
      Cli({"--json", "run", Path("m.ipx"), "--train", "--inputs", Path("data.npz"), "--steps", "3",
           "--resume", Path("ck.npz"), "--save-weights", Path("resumed.npz")});
  ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
  const tensor::NamedTensors a = Read("whole.npz"), b = Read("resumed.npz");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.bytes(), b[i].second.bytes()) << a[i].first << " differs";
  }
  const tensor::NamedTensors checkpoint = Read("ck.npz");
  bool has_state = false;
  for (const auto& [name, t] : checkpoint) has_state |= name == "optimizer/W/exp_avg";
  EXPECT_TRUE(has_state) << "the checkpoint lacks Adam's state";
}

TEST_F(TrainTest, TrainingUsageErrors) {
  CliResult no_length = Cli({"run", Path("m.ipx"), "--train", "--inputs", Path("data.npz")});
  EXPECT_EQ(no_length.exit_code, 2);
  EXPECT_NE(no_length.err.find("--epochs E"), std::string::npos) << no_length.err;
  CliResult no_train =
      Cli({"run", Path("m.ipx"), "--inputs", Path("data.npz"), "--outputs", Path("o.npz")});
  EXPECT_NE(no_train.exit_code, 0);
  EXPECT_NE(no_train.err.find("is a training executable; pass --train"), std::string::npos)
      << no_train.err;
  CliResult epochs = Cli({"--json", "run", Path("m.ipx"), "--train", "--inputs", Path("data.npz"),
                          "--epochs", "2", "--lr", "0.01"});
  ASSERT_EQ(epochs.exit_code, 0) << epochs.out << epochs.err;
  EXPECT_NE(epochs.out.find("\"weight_updates\":8"), std::string::npos) << epochs.out;
}

// A buffer keeps its value from run to run (each micro-batch adds one) and
// travels with checkpoints, as PopTorch's buffers do.
TEST_F(TrainTest, BuffersPersistAcrossRunsAndCheckpoints) {
  ASSERT_TRUE(tensor::WriteFileAtomically(Path("counter.onnx"), Counter()).ok());
  const std::vector<std::string> compile = {"compile",
                                            Path("counter.onnx"),
                                            "--train",
                                            "--freeze",
                                            "one",
                                            "--opt",
                                            "lr=0.001",
                                            "--set",
                                            "gradient_accumulation_steps=2",
                                            "-o",
                                            Path("counter.ipx")};
  std::vector<std::string> with_buffer = compile;
  with_buffer.insert(with_buffer.end(), {"--buffer", "count=count_next"});
  CliResult compiled = Cli(with_buffer);
  ASSERT_EQ(compiled.exit_code, 0) << compiled.out << compiled.err;
  EXPECT_NE(compiled.out.find("1 buffer"), std::string::npos) << compiled.out;
  CliResult first =
      Cli({"run", Path("counter.ipx"), "--train", "--inputs", Path("data.npz"), "--steps", "3",
           "--checkpoint", Path("ck.npz"), "--save-weights", Path("w3.npz")});
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  auto count = [&](const std::string& file) {
    for (const auto& [name, t] : Read(file)) {
      if (name == "count") return t.data<float>()[0];
    }
    ADD_FAILURE() << file << " has no buffer 'count'";
    return -1.0f;
  };
  EXPECT_EQ(count("w3.npz"), 6.0f) << "3 runs x 2 micro-batches";
  CliResult resumed =
      Cli({"run", Path("counter.ipx"), "--train", "--inputs", Path("data.npz"), "--steps", "1",
           "--resume", Path("ck.npz"), "--save-weights", Path("w4.npz")});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_EQ(count("w4.npz"), 8.0f);

  std::vector<std::string> unknown = compile;
  unknown.insert(unknown.end(), {"--buffer", "count=nowhere"});
  CliResult bad_value = Cli(unknown);
  EXPECT_EQ(bad_value.exit_code, 12) << bad_value.err;
  EXPECT_NE(bad_value.err.find("'nowhere'"), std::string::npos) << bad_value.err;
  std::vector<std::string> malformed = compile;
  malformed.insert(malformed.end(), {"--buffer", "count"});
  EXPECT_EQ(Cli(malformed).exit_code, 2);
  // --buffer alone compiles for inference (InferenceBuffersCountFromRunToRun); the
  // training flags still need --train.
  CliResult inference = Cli({"compile", Path("counter.onnx"), "--buffer", "count=count_next",
                             "--freeze", "one", "-o", Path("i.ipx")});
  EXPECT_EQ(inference.exit_code, 2);
  EXPECT_NE(inference.err.find("need --train"), std::string::npos) << inference.err;
}

// A server that faults at random (seeded, so the run is repeatable):
// `--recover` resets, reloads the last host copy and repeats the runs since
// it, and the result is the same as training without faults.
// PopTorch 4.8 in inference: a buffer the model updates in place keeps its
// value from micro-batch to micro-batch and run to run, and reads back with
// the weights.
TEST_F(TrainTest, InferenceBuffersCountFromRunToRun) {
  ASSERT_TRUE(tensor::WriteFileAtomically(
                  Path("counter.onnx"),
                  test_support::CounterModel({0.5f, -0.3f, 0.2f, 0.1f, -0.4f, 0.6f}, "count_next"))
                  .ok());
  CliResult compiled = Cli({"compile", Path("counter.onnx"), "--buffer", "count=count_next",
                            "--set", "inference_device_iterations=2", "-o", Path("i.ipx")});
  ASSERT_EQ(compiled.exit_code, 0) << compiled.out << compiled.err;
  // 16 rows = 4 steps of 2 micro-batches of 2.
  CliResult run = Cli({"run", Path("i.ipx"), "--inputs", Path("data.npz"), "--outputs",
                       Path("o.npz"), "--save-weights", Path("w.npz")});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  for (const auto& [name, t] : Read("o.npz")) {
    if (name != "count_next") continue;
    ASSERT_EQ(t.num_elements(), 8);
    for (int64_t k = 0; k < 8; ++k) EXPECT_EQ(t.data<float>()[k], k + 1.0f) << k;
  }
  bool saved = false;
  for (const auto& [name, t] : Read("w.npz")) {
    if (name != "count") continue;
    saved = true;
    EXPECT_EQ(t.data<float>()[0], 8.0f);
  }
  EXPECT_TRUE(saved) << "the buffer reads back with the weights";
  CliResult again =
      Cli({"run", Path("i.ipx"), "--inputs", Path("data.npz"), "--outputs", Path("o2.npz")});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  for (const auto& [name, t] : Read("o2.npz")) {
    if (name == "count_next") {
      EXPECT_EQ(t.data<float>()[0], 1.0f) << "a new load starts anew";
    }
  }
  CliResult bad =
      Cli({"compile", Path("counter.onnx"), "--buffer", "count=nowhere", "-o", Path("bad.ipx")});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("'nowhere' is not a value the model computes"), std::string::npos)
      << bad.err;
}

TEST_F(TrainTest, RecoverGoesOnAfterFaultsWithTheSameResult) {
  CliResult clean = Cli({"run", Path("m.ipx"), "--train", "--inputs", Path("data.npz"), "--steps",
                         "24", "--save-weights", Path("clean.npz")});
  ASSERT_EQ(clean.exit_code, 0) << clean.out << clean.err;
  ServerUnderTest faulty({}, R"({"reset_ms": {"ipu": 20, "partition": 20, "pod": 20},
      "random_faults": {"seed": 7, "probability_per_operation": 0.04, "kinds": ["ipu-reset"]}})");
  CliResult run = RunCli(faulty.address(), "alice",
                         {"--json", "run", Path("m.ipx"), "--train", "--inputs", Path("data.npz"),
                          "--steps", "24", "--recover", "--save-weights", Path("recovered.npz")});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.err.find("\"recovering\""), std::string::npos) << "no fault was hit:\n" << run.err;
  EXPECT_EQ(run.out.find("\"recoveries\":0"), std::string::npos) << run.out;
  const tensor::NamedTensors a = Read("clean.npz"), b = Read("recovered.npz");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].second.bytes(), b[i].second.bytes()) << a[i].first << " differs";
  }
}

// A FULL_RESET fault needs an admin: `--recover` waits for `ipupod pod
// reset`, then loads again, writes the last host copy back and repeats the
// runs since it; the result is the same as training without the fault.
TEST_F(TrainTest, RecoverWaitsForAnAdminsPodResetAfterAFullResetFault) {
  const std::vector<std::string> train = {
      "run", Path("m.ipx"), "--train", "--inputs", Path("data.npz"), "--steps", "400"};
  std::vector<std::string> clean = train;
  clean.insert(clean.end(), {"--save-weights", Path("clean.npz")});
  CliResult clean_run = Cli(clean);
  ASSERT_EQ(clean_run.exit_code, 0) << clean_run.out << clean_run.err;
  std::vector<std::string> recover = {"--json"};
  recover.insert(recover.end(), train.begin(), train.end());
  recover.insert(recover.end(), {"--recover", "--save-weights", Path("recovered.npz")});
  Process run = StartCli(server_.address(), "alice", recover);
  ASSERT_TRUE(run.ReadStdoutLine(std::chrono::seconds(30))) << "no run made: " << run.stderr_text();
  CliResult fault =
      RunCli(server_.address(), "admin", {"fault", "inject", "--ipu", "0", "--kind", "full-reset"});
  ASSERT_EQ(fault.exit_code, 0) << fault.err;
  ASSERT_TRUE(run.WaitForStderr("\"recovery_action\":\"FULL_RESET\"", std::chrono::seconds(30)))
      << "training ended before the fault hit it:\n"
      << run.stderr_text();
  EXPECT_TRUE(run.Running()) << "it must wait for the pod reset";
  CliResult reset = RunCli(server_.address(), "admin", {"pod", "reset"});
  ASSERT_EQ(reset.exit_code, 0) << reset.out << reset.err;
  ASSERT_EQ(run.Wait(std::chrono::seconds(60)), 0) << run.stdout_text() << run.stderr_text();
  EXPECT_NE(run.stdout_text().find("\"recoveries\":1"), std::string::npos) << run.stdout_text();
  const tensor::NamedTensors a = Read("clean.npz"), b = Read("recovered.npz");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].second.bytes(), b[i].second.bytes()) << a[i].first << " differs";
  }
}

}  // namespace
}  // namespace ipupod::testing
