// Training-mode Dropout and poptorch.ipu_print_tensor end to end: `ipupod
// compile` and `ipupod run` against a real ipupodd. One seed gives
// bit-identical losses and weights across runs and across a server killed
// and restarted mid-training; another seed differs; no seed makes compile
// choose one, report it, and that seed repeats the run. IpuPrint's lines
// reach the run's stderr (and --json lines) and the server's log.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/tensor/tensor_files.h"
#include "tests/device/graph/onnx_builder.h"
#include "tests/integration/harness.h"
#include "tests/support/tensors.h"

namespace ipupod::testing {
namespace {

using graph::testing::kFloat;
using graph::testing::OnnxBuilder;
using tensor::Tensor;

// y = Dropout(tanh(x W), p=0.5, training) [, printed], loss = mean((y - t)^2).
std::string DropoutModel(bool print) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {4, 3}).Input("t", kFloat, {4, 8});
  b.Floats("W", {3, 8}, test_support::Wave(24, 0.9f)).Floats("two", {}, {2.0f});
  b.Floats("ratio", {}, {0.5f});
  onnx::TensorProto* mode = b.model().mutable_graph()->add_initializer();
  mode->set_name("training");
  mode->set_data_type(onnx::TensorProto::BOOL);
  mode->add_int32_data(1);
  b.Node("MatMul", {"x", "W"}, {"xw"});
  b.Node("Tanh", {"xw"}, {"h"});
  b.Node("Dropout", {"h", "ratio", "training"}, {"dropped"}, "/drop/Dropout");
  std::string y = "dropped";
  if (print) {
    auto* o = b.model().add_opset_import();
    o->set_domain("ai.graphcore");
    o->set_version(1);
    onnx::NodeProto& p = b.Node("IpuPrint", {"dropped"}, {"y"}, "/print/IpuPrint");
    p.set_domain("ai.graphcore");
    OnnxBuilder::AttrString(p, "title", "after dropout");
    OnnxBuilder::AttrInt(p, "print_gradient", 1);
    y = "y";
  }
  b.Node("Sub", {y, "t"}, {"d"});
  b.Node("Pow", {"d", "two"}, {"sq"});
  OnnxBuilder::AttrInt(b.Node("ReduceMean", {"sq"}, {"loss"}), "keepdims", 0);
  b.Output(y, kFloat).Output("loss", kFloat);
  return b.Bytes();
}

class RandomOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tensor::WriteFileAtomically(Path("m.onnx"), DropoutModel(false)).ok());
    ASSERT_TRUE(tensor::WriteFileAtomically(Path("print.onnx"), DropoutModel(true)).ok());
    ASSERT_TRUE(tensor::WriteTensorFile(
                    Path("data.npz"),
                    {{"x", *Tensor::FromValues<float>({32, 3}, test_support::Wave(96, 0.3f))},
                     {"t", *Tensor::FromValues<float>({32, 8}, test_support::Wave(256, 1.7f))}})
                    .ok());
  }

  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }
  CliResult Cli(const std::vector<std::string>& args) {
    return RunCli(server_.address(), "alice", args);
  }
  // Compiles m.onnx for training with `set` (e.g. "seed=5") into `out`.
  CliResult Compile(const std::string& set, const std::string& out) {
    std::vector<std::string> args = {
        "compile", Path("m.onnx"),         "--train", "--opt",  "lr=0.1",
        "--set",   "replication_factor=2", "-o",      Path(out)};
    if (!set.empty()) args.insert(args.end(), {"--set", set});
    return Cli(args);
  }
  // Trains `ipx` for `steps` steps: the --json lines' losses and the weights.
  std::string Train(const std::string& ipx, const std::string& weights,
                    std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--json",         "run",        Path(ipx),
                                     "--train",        "--inputs",   Path("data.npz"),
                                     "--save-weights", Path(weights)};
    if (extra.empty()) extra = {"--steps", "4"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = Cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    std::string losses;
    for (size_t at = r.out.find("\"losses\""); at != std::string::npos;
         at = r.out.find("\"losses\"", at + 1)) {
      losses += r.out.substr(at, r.out.find(']', at) - at) + ";";
    }
    return losses;
  }
  std::string WeightBytes(const std::string& file) {
    auto t = tensor::ReadTensorFile(Path(file));
    EXPECT_TRUE(t.ok()) << t.status();
    std::string bytes;
    if (t.ok()) {
      for (const auto& [name, value] : *t) bytes += name + ":" + std::string(value.bytes()) + ";";
    }
    return bytes;
  }

  TempDir dir_;
  ServerUnderTest server_;
};

TEST_F(RandomOpsTest, OneSeedRepeatsBitForBitAndAnotherDiffers) {
  ASSERT_EQ(Compile("seed=5", "a.ipx").exit_code, 0);
  ASSERT_EQ(Compile("seed=6", "b.ipx").exit_code, 0);
  const std::string first = Train("a.ipx", "a1.npz");
  const std::string again = Train("a.ipx", "a2.npz");
  const std::string other = Train("b.ipx", "b.npz");
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first, again);
  EXPECT_EQ(WeightBytes("a1.npz"), WeightBytes("a2.npz"));
  EXPECT_NE(first, other);
  EXPECT_NE(WeightBytes("a1.npz"), WeightBytes("b.npz"));
}

TEST_F(RandomOpsTest, ResumingAfterARestartDrawsTheSameMasks) {
  ASSERT_EQ(Compile("seed=5", "a.ipx").exit_code, 0);
  Train("a.ipx", "whole.npz");
  Train("a.ipx", "half.npz", {"--steps", "2", "--checkpoint", Path("ck.npz")});
  server_.KillAndRestart();
  Train("a.ipx", "resumed.npz", {"--steps", "2", "--resume", Path("ck.npz")});
  EXPECT_EQ(WeightBytes("whole.npz"), WeightBytes("resumed.npz"));
}

TEST_F(RandomOpsTest, WithoutASeedCompileChoosesAndReportsOne) {
  CliResult compiled = Compile("", "chosen.ipx");
  ASSERT_EQ(compiled.exit_code, 0) << compiled.err;
  const size_t at = compiled.err.find("ipupod chose seed=");
  ASSERT_NE(at, std::string::npos) << compiled.err;
  const size_t begin = at + std::string("ipupod chose seed=").size();
  const std::string seed = compiled.err.substr(begin, compiled.err.find(' ', begin) - begin);
  ASSERT_EQ(Compile("seed=" + seed, "given.ipx").exit_code, 0);
  EXPECT_EQ(Train("chosen.ipx", "chosen.npz"), Train("given.ipx", "given.npz"));
  EXPECT_EQ(WeightBytes("chosen.npz"), WeightBytes("given.npz"));
  CliResult quiet = Compile("seed=1", "quiet.ipx");
  EXPECT_EQ(quiet.err.find("seed"), std::string::npos) << "a given seed needs no word";
}

TEST_F(RandomOpsTest, IpuPrintLinesReachTheRunAndTheServerLog) {
  CliResult compiled =
      Cli({"compile", Path("print.onnx"), "--train", "--set", "seed=3", "-o", Path("print.ipx")});
  ASSERT_EQ(compiled.exit_code, 0) << compiled.err;
  CliResult run =
      Cli({"run", Path("print.ipx"), "--train", "--inputs", Path("data.npz"), "--steps", "2"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  // Forward value and gradient, per micro-batch: 2 steps x 1 micro-batch.
  size_t values = 0;
  for (size_t at = run.err.find("print: after dropout: float32[4, 8] ["); at != std::string::npos;
       at = run.err.find("print: after dropout: float32[4, 8] [", at + 1)) {
    ++values;
  }
  EXPECT_EQ(values, 2u) << run.err;
  EXPECT_NE(run.err.find("print: after dropout_gradient: float32[4, 8] ["), std::string::npos);
  CliResult json = Cli({"--json", "run", Path("print.ipx"), "--train", "--inputs", Path("data.npz"),
                        "--steps", "1"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_NE(json.out.find("\"log\":[\"after dropout: float32[4, 8] ["), std::string::npos)
      << json.out;
  EXPECT_TRUE(server_.process().WaitForStderr("print user=alice", std::chrono::seconds(10)))
      << server_.process().stderr_text();
}

}  // namespace
}  // namespace ipupod::testing
