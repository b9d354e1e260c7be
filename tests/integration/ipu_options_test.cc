// The IPUConfig options that change the memory plan, simulated time or
// neither numerics, end to end: each compiled on a real ipupodd
// (`ipupod compile --remote`), its report read from the CLI's JSON, and run
// through `ipupod run`: matmul_proportion (per IPU), a vocabulary that
// cannot take embedding_serialization_factor, replicated_tensor_sharding
// (equal losses and weights, less memory per IPU) and
// recompute_checkpoint_every_layer (a model that only fits with it).
#include <sstream>

#include <gtest/gtest.h>

#include "common/tensor/tensor_files.h"
#include "tests/device/compiler/test_models.h"
#include "tests/integration/harness.h"
#include "tests/support/models.h"
#include "tests/support/tensors.h"

namespace ipupod::testing {
namespace {

using compiler::testing::GptBuilder;
using compiler::testing::GptSpec;
using tensor::Tensor;

class IpuOptionsTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }
  void Write(const std::string& name, const std::string& bytes) {
    ASSERT_TRUE(tensor::WriteFileAtomically(Path(name), bytes).ok());
  }
  CliResult Cli(const std::vector<std::string>& args) {
    return RunLongCli(server_.address(), "alice", args, std::chrono::seconds(120));
  }
  // `compile --remote MODEL --set SET -o OUT --report --json` -> the report.
  nlohmann::json Compile(const std::string& model, const std::string& set, const std::string& out,
                         const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--json", "compile", "--remote", Path(model), "--set",
                                     set,      "-o",      Path(out),  "--report"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = Cli(args);
    EXPECT_EQ(r.exit_code, 0) << set << "\n" << r.out << r.err;
    nlohmann::json doc = r.json();
    EXPECT_TRUE(doc.contains("report")) << r.out;
    return doc.contains("report") ? doc["report"] : nlohmann::json::object();
  }
  // The JSON lines of `--json run ...`.
  std::vector<nlohmann::json> Run(const std::vector<std::string>& args) {
    std::vector<std::string> full = {"--json", "run"};
    full.insert(full.end(), args.begin(), args.end());
    CliResult r = Cli(full);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    std::vector<nlohmann::json> lines;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      nlohmann::json doc = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (doc.is_object()) lines.push_back(doc);
    }
    return lines;
  }
  tensor::NamedTensors Read(const std::string& name) {
    auto t = tensor::ReadTensorFile(Path(name));
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : tensor::NamedTensors{};
  }

  TempDir dir_;
  ServerUnderTest server_;
};

bool Mentions(const nlohmann::json& report, const std::string& text) {
  return report.dump().find(text) != std::string::npos;
}

TEST_F(IpuOptionsTest, MatmulProportionChangesTemporariesAndSimulatedTime) {
  // d 64, micro-batch 8 x 128 tokens: the mlp products need 1.4 MB of
  // temporary, more than one tile's 611 kB a proportion of 0 leaves.
  Write("gpt.onnx", GptBuilder(GptSpec{.layers = 2, .d = 64, .batch = 8, .seq = 128}).Bytes());
  const std::string pipeline = "layers_per_ipu=[1 1],inference_device_iterations=2";
  const nlohmann::json roomy = Compile("gpt.onnx", pipeline, "roomy.ipx");
  const nlohmann::json tight =
      Compile("gpt.onnx", pipeline + ",matmul_proportion=[0 0.6]", "tight.ipx");
  EXPECT_FALSE(Mentions(tight, "is ignored")) << tight.dump(1);
  EXPECT_EQ(roomy["ipus"][0]["serial_passes_per_micro_batch"], 0);
  EXPECT_GT(tight["ipus"][0]["serial_passes_per_micro_batch"].get<int64_t>(), 0);
  EXPECT_EQ(tight["ipus"][1]["serial_passes_per_micro_batch"], 0);  // its own 0.6
  EXPECT_LE(tight["ipus"][0]["temporary_bytes"].get<int64_t>(), 900'000'000 / 1472);
  EXPECT_GT(roomy["ipus"][0]["temporary_bytes"].get<int64_t>(), 1'000'000);
  EXPECT_GT(tight["step_s"].get<double>(), roomy["step_s"].get<double>());
  // A run's simulated time follows; the outputs are the same.
  const std::vector<int64_t> ids(16 * 128, 3);  // one step: 2 micro-batches
  ASSERT_TRUE(tensor::WriteTensorFile(Path("ids.npz"),
                                      {{"ids", *Tensor::FromValues<int64_t>({16, 128}, ids)}})
                  .ok());
  auto fast = Run({Path("roomy.ipx"), "--inputs", Path("ids.npz"), "--outputs", Path("a.npz")});
  auto slow = Run({Path("tight.ipx"), "--inputs", Path("ids.npz"), "--outputs", Path("b.npz")});
  ASSERT_FALSE(fast.empty() || slow.empty());
  ASSERT_TRUE(fast[0].contains("simulated_compute_seconds")) << fast[0].dump();  // step 1
  ASSERT_TRUE(slow[0].contains("simulated_compute_seconds")) << slow[0].dump();
  EXPECT_GT(slow[0]["simulated_compute_seconds"].get<double>(),
            fast[0]["simulated_compute_seconds"].get<double>())
      << slow[0].dump() << fast[0].dump();
  EXPECT_EQ(Read("a.npz")[0].second.bytes(), Read("b.npz")[0].second.bytes());
}

TEST_F(IpuOptionsTest, EmbeddingSerializationSlicesTheVocabularyOrRefusesIt) {
  Write("gpt.onnx", GptBuilder(GptSpec{.layers = 1}).Bytes());  // vocabulary 16
  const nlohmann::json plain = Compile("gpt.onnx", "embedding_serialization_factor=1", "a.ipx");
  const nlohmann::json sliced = Compile("gpt.onnx", "embedding_serialization_factor=3", "b.ipx");
  EXPECT_FALSE(Mentions(sliced, "is ignored")) << sliced.dump(1);
  EXPECT_TRUE(Mentions(sliced, "(vocabulary 16, padded to 18) is looked up in 3 slices of 6 rows"))
      << sliced.dump(1);
  // Two padding rows of 8 floats; two more passes.
  EXPECT_EQ(sliced["ipus"][0]["weight_bytes"].get<int64_t>(),
            plain["ipus"][0]["weight_bytes"].get<int64_t>() + 2 * 8 * 4);
  EXPECT_EQ(sliced["ipus"][0]["serial_passes_per_micro_batch"], 2);
  EXPECT_GT(sliced["step_s"].get<double>(), plain["step_s"].get<double>());
  // The same numbers come out.
  ASSERT_TRUE(tensor::WriteTensorFile(
                  Path("ids.npz"),
                  {{"ids", *Tensor::FromValues<int64_t>({2, 4}, {0, 5, 15, 2, 7, 7, 1, 9})}})
                  .ok());
  Run({Path("a.ipx"), "--inputs", Path("ids.npz"), "--outputs", Path("a.npz")});
  Run({Path("b.ipx"), "--inputs", Path("ids.npz"), "--outputs", Path("b.npz")});
  EXPECT_EQ(Read("a.npz")[0].second.bytes(), Read("b.npz")[0].second.bytes());
  // A factor the vocabulary cannot take: the server says why (exit 12).
  CliResult bad = Cli({"compile", "--remote", Path("gpt.onnx"), "--set",
                       "embedding_serialization_factor=17", "-o", Path("c.ipx")});
  EXPECT_EQ(bad.exit_code, 12) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("embedding_serialization_factor is 17 but the embedding 'wte.weight' "
                         "has a vocabulary of 16 rows"),
            std::string::npos)
      << bad.err;
}

TEST_F(IpuOptionsTest, ReplicatedTensorShardingTrainsTheSameInLessMemory) {
  Write("m.onnx", test_support::RegressorModel(2, {0.5f, -0.3f, 0.2f, 0.1f, -0.4f, 0.6f}));
  ASSERT_TRUE(tensor::WriteTensorFile(
                  Path("data.npz"),
                  {{"x", *Tensor::FromValues<float>({16, 3}, test_support::Wave(48, 0.3f))},
                   {"t", *Tensor::FromValues<float>({16, 2}, test_support::Wave(32, 1.7f))}})
                  .ok());
  const std::vector<std::string> adam = {"--train", "--optimizer", "adam", "--opt", "lr=0.05"};
  const std::string base =
      "replication_factor=2,gradient_accumulation_steps=2,"
      "optimizer_state_offchip=false";
  const nlohmann::json whole = Compile("m.onnx", base, "whole.ipx", adam);
  const nlohmann::json sharded =
      Compile("m.onnx", base + ",replicated_tensor_sharding=true", "sharded.ipx", adam);
  EXPECT_FALSE(Mentions(sharded, "is ignored")) << sharded.dump(1);
  EXPECT_EQ(sharded["replicated_tensor_sharding"], true);
  // Adam's two slots of (W 24 B + bias 8 B), halved.
  EXPECT_EQ(whole["ipus"][0]["optimizer_state_bytes"], 2 * 32);
  EXPECT_EQ(sharded["ipus"][0]["optimizer_state_bytes"], 32);
  EXPECT_EQ(sharded["ipus"][0]["total_bytes"].get<int64_t>(),
            whole["ipus"][0]["total_bytes"].get<int64_t>() - 32);
  auto a = Run({Path("whole.ipx"), "--train", "--inputs", Path("data.npz"), "--steps", "2",
                "--save-weights", Path("whole.npz")});
  auto b = Run({Path("sharded.ipx"), "--train", "--inputs", Path("data.npz"), "--steps", "2",
                "--save-weights", Path("sharded.npz")});
  ASSERT_EQ(a.size(), b.size());
  size_t steps = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].contains("losses")) continue;
    ++steps;
    EXPECT_EQ(a[i]["losses"], b[i]["losses"]) << i;
  }
  EXPECT_EQ(steps, 2u);
  const tensor::NamedTensors wa = Read("whole.npz"), wb = Read("sharded.npz");
  ASSERT_EQ(wa.size(), 2u);
  ASSERT_EQ(wb.size(), wa.size());
  for (size_t i = 0; i < wa.size(); ++i) {
    EXPECT_EQ(wa[i].first, wb[i].first);
    EXPECT_EQ(wa[i].second.bytes(), wb[i].second.bytes()) << wa[i].first;
  }
}

TEST_F(IpuOptionsTest, PerLayerRecomputeFitsAModelThatOtherwiseDoesNot) {
  // Nine layers of 101 MB of values per micro-batch on one IPU.
  Write("gpt.onnx",
        GptBuilder(GptSpec{.layers = 9, .d = 64, .batch = 64, .seq = 512, .with_loss = true})
            .Bytes());
  CliResult keep = Cli({"compile", "--remote", Path("gpt.onnx"), "--train", "-o", Path("a.ipx")});
  EXPECT_EQ(keep.exit_code, 12) << keep.out << keep.err;
  EXPECT_NE(keep.err.find("out of memory on IPU 0"), std::string::npos) << keep.err;
  EXPECT_NE(keep.err.find("recompute_checkpoint_every_layer=true"), std::string::npos) << keep.err;
  const nlohmann::json layer =
      Compile("gpt.onnx", "recompute_checkpoint_every_layer=true", "b.ipx", {"--train"});
  EXPECT_EQ(layer["recompute"], true);
  EXPECT_EQ(layer["recompute_checkpoints"], "layer");
  EXPECT_LT(layer["ipus"][0]["total_bytes"].get<int64_t>(), 900'000'000);
  // One layer's values to recompute in: x, a, r, o, y and the 4x wider m and g.
  const int64_t x = 64 * 512 * 64 * 4;
  EXPECT_EQ(layer["ipus"][0]["recompute_bytes"], 5 * x + 2 * 4 * x);
}

}  // namespace
}  // namespace ipupod::testing
