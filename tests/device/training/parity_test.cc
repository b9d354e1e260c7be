// Parity with PyTorch training: tests/parity/make_training_cases.py exports
// each model untrained, trains it in eager PyTorch and saves torch's results;
// here the same ONNX model is trained with training::Trainer and compared.
//   linear_mse      the seed's example: 800 SGD steps, weights and output to
//                   rtol = atol = 1e-4 (the seed's own assert)
//   gelu_adam       200 Adam steps: every step's loss and the final weights
//   accum_replicas  gradient_accumulation_steps 8 x replicas 2 (mean
//                   reduction) against torch's large-batch steps
//   bn1d_grads, bn2d_grads  one training-mode step through Autodiff with
//                   BatchNormalization at opsets 15 and 13: output, loss,
//                   every parameter's gradient and the running statistics
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/tensor/npy.h"
#include "device/graph/onnx_import.h"
#include "device/training/autodiff.h"
#include "device/training/trainer.h"
#include "tests/support/python_cases.h"
#include <sys/wait.h>

namespace ipupod::training {
namespace {

using test_support::ReadTextFile;

namespace fs = std::filesystem;
using tensor::Tensor;

// Worst |got - want| / (atol + rtol |want|) over all elements; > 1 fails.
double WorstError(const Tensor& got, const Tensor& want, double rtol, double atol) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return INFINITY;
  double worst = 0;
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    const double g = got.data<float>()[i], w = want.data<float>()[i];
    worst = std::max(worst, std::fabs(g - w) / (atol + rtol * std::fabs(w)));
  }
  return worst;
}

// Row `i` of a [n, ...] tensor, rows [begin, end) of its dim 1 (all if end < 0).
Tensor Rows(const Tensor& t, int64_t i, int64_t begin = 0, int64_t end = -1) {
  tensor::Shape shape(t.shape().begin() + 1, t.shape().end());
  int64_t row = 1;
  for (int64_t d : shape) row *= d;
  if (end < 0) end = shape[0];
  const int64_t inner = row / shape[0];
  shape[0] = end - begin;
  const size_t size = tensor::DTypeSize(t.dtype());
  const char* base = static_cast<const char*>(t.raw_data()) + (i * row + begin * inner) * size;
  return *Tensor::FromBytes(t.dtype(), shape,
                            absl::string_view(base, (end - begin) * inner * size));
}

class TrainingParityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cases_ = std::make_unique<test_support::PythonCases>("make_training_cases.py");
    dir_ = cases_->dir();
    skip_reason_ = cases_->skip_reason();
    setup_error_ = cases_->error();
  }

  static void TearDownTestSuite() { cases_.reset(); }

  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
  }

  static Tensor Npy(const std::string& file) {
    auto t = tensor::ReadNpyFile(dir_ + "/" + file);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : Tensor();
  }

  static std::unique_ptr<Trainer> MakeTrainer(const std::string& name, TrainerOptions options) {
    auto graph = graph::ImportOnnxFile(dir_ + "/" + name + ".onnx");
    EXPECT_TRUE(graph.ok()) << graph.status();
    if (!graph.ok()) return nullptr;
    options.loss = "loss";
    auto trainer = Trainer::Create(*std::move(graph), std::move(options));
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    return trainer.ok() ? *std::move(trainer) : nullptr;
  }

  // Compares every trained weight with torch's; returns the worst error.
  static double CheckWeights(const std::string& name, const Trainer& trainer, double rtol,
                             double atol) {
    std::istringstream lines(ReadTextFile(dir_ + "/" + name + ".weights.txt"));
    std::string weight, file;
    double worst = 0;
    int count = 0;
    while (lines >> weight >> file) {
      ++count;
      auto it = trainer.weights().find(weight);
      EXPECT_NE(it, trainer.weights().end()) << weight;
      if (it == trainer.weights().end()) continue;
      const double err = WorstError(it->second, Npy(file), rtol, atol);
      EXPECT_LE(err, 1.0) << name << " weight " << weight;
      worst = std::max(worst, err);
    }
    EXPECT_EQ(count, static_cast<int>(trainer.weights().size()));
    std::printf("%s: worst weight error %.4f of tolerance (rtol %g, atol %g)\n", name.c_str(),
                worst, rtol, atol);
    return worst;
  }

  // "<name> <file>" lines of NAME.<list>.txt.
  static std::map<std::string, std::string> ReadPairs(const std::string& file) {
    std::istringstream lines(ReadTextFile(dir_ + "/" + file));
    std::map<std::string, std::string> pairs;
    std::string name, npy;
    while (lines >> name >> npy) pairs[name] = npy;
    return pairs;
  }

  // One forward/backward of NAME.onnx on torch's batch, compared with
  // torch's output, loss, gradients and updated running statistics. torch's
  // export keeps BatchNormalization's running_mean/running_var (node outputs
  // 1, 2) internal; they become extra graph outputs here.
  static void CheckGradientCase(const std::string& name, double rtol, double atol) {
    auto graph = graph::ImportOnnxFile(dir_ + "/" + name + ".onnx");
    ASSERT_TRUE(graph.ok()) << graph.status();
    std::map<std::string, size_t> buffer_output;
    for (const graph::Node& node : graph->nodes) {
      if (node.op_type != "BatchNormalization") continue;
      ASSERT_GE(node.outputs.size(), 3u) << node.name << " is not in training mode";
      for (size_t k : {1, 2}) {
        buffer_output[node.inputs[k + 2]] = graph->outputs.size();
        graph->outputs.push_back({node.outputs[k], graph->value_types.at(node.outputs[k])});
      }
    }
    const auto grads = ReadPairs(name + ".grads.txt");
    const auto buffers = ReadPairs(name + ".buffers.txt");
    ASSERT_EQ(buffers.size(), buffer_output.size());
    std::vector<std::string> weights;
    for (const auto& [weight, file] : grads) weights.push_back(weight);
    auto ad = Autodiff::Create(*std::move(graph), "loss", weights);
    ASSERT_TRUE(ad.ok()) << ad.status();
    auto result =
        (*ad)->Run({Npy(name + ".x.npy"), Npy(name + ".target.npy")}, (*ad)->InitialWeights());
    ASSERT_TRUE(result.ok()) << result.status();
    double worst = WorstError(result->outputs[0], Npy(name + ".out.npy"), rtol, atol);
    const double want_loss = Npy(name + ".loss.npy").data<float>()[0];
    worst = std::max(worst, std::fabs(result->loss - want_loss) / (atol + rtol * want_loss));
    EXPECT_LE(worst, 1.0) << name << " output or loss";
    for (const auto& [weight, file] : grads) {
      ASSERT_TRUE(result->gradients.contains(weight)) << weight << " got no gradient";
      const double err = WorstError(result->gradients.at(weight), Npy(file), rtol, atol);
      EXPECT_LE(err, 1.0) << name << " gradient of " << weight;
      worst = std::max(worst, err);
    }
    for (const auto& [buffer, file] : buffers) {
      ASSERT_TRUE(buffer_output.contains(buffer)) << buffer;
      const double err =
          WorstError(result->outputs[buffer_output.at(buffer)], Npy(file), rtol, atol);
      EXPECT_LE(err, 1.0) << name << " updated " << buffer;
      worst = std::max(worst, err);
    }
    std::printf("%s: worst error %.4f of tolerance (rtol %g, atol %g)\n", name.c_str(), worst, rtol,
                atol);
  }

  static inline std::unique_ptr<test_support::PythonCases> cases_;
  static inline std::string dir_;
  static inline std::string skip_reason_;
  static inline std::string setup_error_;
};

TEST_F(TrainingParityTest, SeedExampleLinearMseSgd800Steps) {
  auto trainer = MakeTrainer("linear_mse", TrainerOptions{});  // SGD, lr 0.01
  ASSERT_NE(trainer, nullptr);
  const std::vector<Tensor> batch = {Npy("linear_mse.x.npy"), Npy("linear_mse.target.npy")};
  float first_loss = 0, last_loss = 0;
  for (int i = 0; i < 800; ++i) {
    auto step = trainer->Step({batch});
    ASSERT_TRUE(step.ok()) << step.status();
    if (i == 0) first_loss = step->losses[0];
    last_loss = step->losses[0];
  }
  EXPECT_EQ(trainer->step(), 800);
  EXPECT_LT(last_loss, first_loss * 0.01f);
  CheckWeights("linear_mse", *trainer, 1e-4, 1e-4);
  auto out = trainer->Forward(batch);
  ASSERT_TRUE(out.ok()) << out.status();
  const double err = WorstError((*out)[0], Npy("linear_mse.out.npy"), 1e-4, 1e-4);
  EXPECT_LE(err, 1.0);
  std::printf("linear_mse: worst output error %.4f of tolerance (rtol = atol = 1e-4)\n", err);
}

TEST_F(TrainingParityTest, GeluClassifierCrossEntropyAdam200Steps) {
  auto spec = OptimizerSpec::Create(OptimizerKind::kAdam, {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  TrainerOptions options;
  options.optimizer = *spec;
  auto trainer = MakeTrainer("gelu_adam", options);
  ASSERT_NE(trainer, nullptr);
  const Tensor x = Npy("gelu_adam.x.npy"), labels = Npy("gelu_adam.labels.npy");
  const Tensor losses = Npy("gelu_adam.losses.npy");
  double worst_loss = 0;
  for (int64_t s = 0; s < 200; ++s) {
    auto step = trainer->Step({std::vector<Tensor>{Rows(x, s), Rows(labels, s)}});
    ASSERT_TRUE(step.ok()) << step.status();
    const double want = losses.data<float>()[s];
    const double err = std::fabs(step->losses[0] - want) / (1e-5 + 1e-4 * std::fabs(want));
    EXPECT_LE(err, 1.0) << "step " << s << ": loss " << step->losses[0] << ", torch " << want;
    worst_loss = std::max(worst_loss, err);
  }
  std::printf("gelu_adam: worst loss error %.4f of tolerance (rtol 1e-4, atol 1e-5)\n", worst_loss);
  CheckWeights("gelu_adam", *trainer, 1e-4, 1e-5);
}

TEST_F(TrainingParityTest, AccumulationTimesReplicasEqualsLargeBatch) {
  auto spec = OptimizerSpec::Create(OptimizerKind::kSgd, {{"lr", 0.05}, {"momentum", 0.9}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  TrainerOptions options;
  options.optimizer = *spec;
  options.gradient_accumulation_steps = 8;
  options.replicas = 2;
  auto trainer = MakeTrainer("accum_replicas", options);
  ASSERT_NE(trainer, nullptr);
  const Tensor x = Npy("accum_replicas.x.npy"), target = Npy("accum_replicas.target.npy");
  for (int64_t s = 0; s < 4; ++s) {
    std::vector<std::vector<Tensor>> micro;
    for (int64_t k = 0; k < 16; ++k) {  // replica k / 8, micro-batch k % 8
      micro.push_back({Rows(x, s, 2 * k, 2 * k + 2), Rows(target, s, 2 * k, 2 * k + 2)});
    }
    auto step = trainer->Step(micro);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(step->losses.size(), 16u);
  }
  CheckWeights("accum_replicas", *trainer, 1e-5, 1e-6);
}

TEST_F(TrainingParityTest, BatchNorm1dTrainingModeOpset15Gradients) {
  CheckGradientCase("bn1d_grads", 1e-5, 1e-6);
}

TEST_F(TrainingParityTest, BatchNorm2dTrainingModeOpset13Gradients) {
  CheckGradientCase("bn2d_grads", 1e-5, 1e-6);
}

TEST_F(TrainingParityTest, HardswishAndHardsigmoidGradients) {
  CheckGradientCase("hard_grads", 1e-5, 1e-6);
}

TEST_F(TrainingParityTest, ConvolutionsAndPoolingGradients) {
  CheckGradientCase("cnn_grads", 1e-5, 1e-6);
}

}  // namespace
}  // namespace ipupod::training
