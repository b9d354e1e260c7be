// Trainer: mean over gradient_accumulation_steps x replicas equals one
// large-batch step, per-micro-batch losses, checkpoints, and error paths.
#include "device/training/trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/graph/onnx_import.h"
#include "tests/device/graph/onnx_builder.h"
#include "tests/device/training/grad_check.h"
#include "tests/support/models.h"

namespace ipupod::training {
namespace {

using tensor::Tensor;
using ::testing::HasSubstr;

// loss = mean((tanh(x W + b) - t)^2) for a batch of `rows`.
graph::Graph Regressor(int64_t rows) {
  return *graph::ImportOnnx(test_support::RegressorModel(rows, testing::RandomValues(6, -1, 1, 3)));
}

Tensor Rows(const std::vector<float>& v, int64_t begin, int64_t end, int64_t cols) {
  return *Tensor::FromValues<float>(
      {end - begin, cols}, absl::MakeConstSpan(v.data() + begin * cols, (end - begin) * cols));
}

TrainerOptions Options(int64_t gas, int64_t replicas) {
  TrainerOptions o;
  o.loss = "loss";
  o.gradient_accumulation_steps = gas;
  o.replicas = replicas;
  o.optimizer = *OptimizerSpec::Create(OptimizerKind::kSgd, {{"lr", 0.1}, {"momentum", 0.9}});
  return o;
}

TEST(TrainerTest, AccumulationAndReplicasAverageLikeOneLargeBatch) {
  const std::vector<float> x = testing::RandomValues(8 * 3, -1, 1, 11);
  const std::vector<float> t = testing::RandomValues(8 * 2, -1, 1, 12);
  auto small = Trainer::Create(Regressor(2), Options(2, 2));
  auto large = Trainer::Create(Regressor(8), Options(1, 1));
  ASSERT_TRUE(small.ok()) << small.status();
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_EQ((*small)->micro_batches_per_step(), 4);
  for (int s = 0; s < 3; ++s) {
    std::vector<std::vector<Tensor>> micro;
    for (int64_t k = 0; k < 4; ++k) {
      micro.push_back({Rows(x, 2 * k, 2 * k + 2, 3), Rows(t, 2 * k, 2 * k + 2, 2)});
    }
    auto a = (*small)->Step(micro);
    ASSERT_TRUE(a.ok()) << a.status();
    auto b = (*large)->Step({std::vector<Tensor>{Rows(x, 0, 8, 3), Rows(t, 0, 8, 2)}});
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(a->losses.size(), 4u);
    double mean = 0;
    for (float l : a->losses) mean += l / 4.0;
    EXPECT_NEAR(mean, b->losses[0], 1e-6);
    EXPECT_EQ(a->step, s + 1);
    EXPECT_GT(a->backward_flops, 0);
  }
  for (const auto& [name, w] : (*large)->weights()) {
    const Tensor& v = (*small)->weights().at(name);
    for (int64_t i = 0; i < w.num_elements(); ++i) {
      EXPECT_NEAR(v.data<float>()[i], w.data<float>()[i], 1e-6) << name << "[" << i << "]";
    }
  }
  EXPECT_NE((*large)->weights().at("W"), Regressor(8).initializers.at("W"));  // it trained
}

TEST(TrainerTest, PlainSgdFusedStepMatchesTheUnfusedUpdate) {
  // One micro-batch per update with plain SGD takes the fused path; two
  // identical micro-batches average to the same gradient through the
  // materialised one.
  TrainerOptions o = Options(1, 1);
  o.optimizer = *OptimizerSpec::Create(OptimizerKind::kSgd, {{"lr", 0.3}});
  auto fused = Trainer::Create(Regressor(4), o);
  o.gradient_accumulation_steps = 2;
  auto unfused = Trainer::Create(Regressor(4), o);
  ASSERT_TRUE(fused.ok() && unfused.ok());
  const std::vector<Tensor> batch = {Rows(testing::RandomValues(12, -1, 1, 21), 0, 4, 3),
                                     Rows(testing::RandomValues(8, -1, 1, 22), 0, 4, 2)};
  for (int s = 1; s <= 3; ++s) {
    auto a = (*fused)->Step({batch});
    auto b = (*unfused)->Step({batch, batch});
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->step, s);
    EXPECT_NEAR(a->losses[0], b->losses[0], 1e-6);
    EXPECT_EQ(a->outputs.size(), 1u);
  }
  for (const auto& [name, w] : (*unfused)->weights()) {
    const Tensor& v = (*fused)->weights().at(name);
    for (int64_t i = 0; i < w.num_elements(); ++i) {
      EXPECT_NEAR(v.data<float>()[i], w.data<float>()[i], 1e-6) << name << "[" << i << "]";
    }
  }
  EXPECT_EQ((*fused)->ExportState().at("optimizer/step").IntAt(0), 3);
  // A bad batch changes nothing on the fused path either.
  const Tensor before = (*fused)->weights().at("W");
  auto bad = (*fused)->Step({std::vector<Tensor>{batch[0]}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("micro-batch 0"));
  EXPECT_EQ((*fused)->weights().at("W"), before);
  EXPECT_EQ((*fused)->step(), 3);
}

// A param group with lr 0 keeps its weight while the rest trains (and the
// fused plain-SGD path, one lr for all, is not taken); a group naming a
// weight the trainer does not train is refused.
TEST(TrainerTest, ParamGroupsTrainTheirWeightsWithTheirValues) {
  TrainerOptions o = Options(1, 1);
  o.optimizer =
      *OptimizerSpec::Create(OptimizerKind::kSgd, {{"lr", 0.3}}, {{{"bias"}, {{"lr", 0}}}});
  auto tr = Trainer::Create(Regressor(4), o);
  ASSERT_TRUE(tr.ok()) << tr.status();
  const std::vector<Tensor> batch = {Rows(testing::RandomValues(12, -1, 1, 21), 0, 4, 3),
                                     Rows(testing::RandomValues(8, -1, 1, 22), 0, 4, 2)};
  const TensorMap before = (*tr)->weights();
  ASSERT_TRUE((*tr)->Step({batch}).ok());
  EXPECT_EQ((*tr)->weights().at("bias"), before.at("bias"));
  EXPECT_NE((*tr)->weights().at("W"), before.at("W"));
  o.optimizer = *OptimizerSpec::Create(OptimizerKind::kSgd, {}, {{{"W", "nope"}, {{"lr", 1}}}});
  auto unknown = Trainer::Create(Regressor(4), o);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("'nope', which is not a trainable weight"));
}

TEST(TrainerTest, CheckpointResumesExactly) {
  TrainerOptions o = Options(1, 1);
  o.optimizer = *OptimizerSpec::Create(OptimizerKind::kAdam, {{"lr", 0.01}});
  auto a = Trainer::Create(Regressor(2), o);
  auto b = Trainer::Create(Regressor(2), o);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<Tensor> batch = {Rows(testing::RandomValues(6, -1, 1, 5), 0, 2, 3),
                                     Rows(testing::RandomValues(4, -1, 1, 6), 0, 2, 2)};
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*a)->Step({batch}).ok());
  const TensorMap state = (*a)->ExportState();
  EXPECT_TRUE(state.contains("W"));
  EXPECT_TRUE(state.contains("optimizer/W/exp_avg"));
  EXPECT_EQ(state.at("optimizer/step").IntAt(0), 3);
  ASSERT_TRUE((*b)->ImportState(state).ok());
  EXPECT_EQ((*b)->step(), 3);
  ASSERT_TRUE((*a)->Step({batch}).ok());
  ASSERT_TRUE((*b)->Step({batch}).ok());
  EXPECT_EQ((*a)->weights().at("W"), (*b)->weights().at("W"));
  auto out_a = (*a)->Forward(batch);
  auto out_b = (*b)->Forward(batch);
  ASSERT_TRUE(out_a.ok() && out_b.ok());
  EXPECT_EQ((*out_a)[1], (*out_b)[1]);
}

TEST(TrainerTest, ImportStateRejectsIncompleteOrMisshapedCheckpoints) {
  auto tr = Trainer::Create(Regressor(2), Options(1, 1));
  ASSERT_TRUE(tr.ok());
  TensorMap state = (*tr)->ExportState();
  TensorMap missing = state;
  missing.erase("W");
  EXPECT_EQ((*tr)->ImportState(missing).code(), absl::StatusCode::kInvalidArgument);
  TensorMap extra = state;
  extra.emplace("V", state.at("W"));
  EXPECT_EQ((*tr)->ImportState(extra).code(), absl::StatusCode::kInvalidArgument);
  TensorMap misshaped = state;
  misshaped.emplace("optimizer/W/momentum_buffer", state.at("bias"));
  EXPECT_THAT((*tr)->ImportState(misshaped).message(), HasSubstr("optimizer/W/momentum_buffer"));
}

TEST(TrainerTest, RejectsBadConfigurationAndMicroBatches) {
  EXPECT_EQ(Trainer::Create(Regressor(2), Options(0, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Trainer::Create(Regressor(2), Options(1, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  TrainerOptions no_loss = Options(1, 1);
  no_loss.loss = "y";
  EXPECT_EQ(Trainer::Create(Regressor(2), no_loss).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto tr = Trainer::Create(Regressor(2), Options(2, 1));
  ASSERT_TRUE(tr.ok());
  const TensorMap before = (*tr)->weights();
  const std::vector<Tensor> good = {*Tensor::Create(tensor::DType::kFloat32, {2, 3}),
                                    *Tensor::Create(tensor::DType::kFloat32, {2, 2})};
  const std::vector<Tensor> bad = {*Tensor::Create(tensor::DType::kFloat32, {3, 3}), good[1]};
  EXPECT_EQ((*tr)->Step({good}).status().code(), absl::StatusCode::kInvalidArgument);
  auto step = (*tr)->Step({good, bad});
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(step.status().message(), HasSubstr("micro-batch 1"));
  EXPECT_EQ((*tr)->step(), 0);
  EXPECT_EQ((*tr)->weights().at("W"), before.at("W"));
}

// The seed's CounterModel as a buffer: count <- count + 1 on every forward
// pass, y = (x W) * count, loss = mean((y - t)^2). Outputs count's new value.
graph::Graph Counter() {
  return *graph::ImportOnnx(
      test_support::CounterModel(testing::RandomValues(6, -1, 1, 3), "count_next"),
      graph::FoldOptions{.keep_weights = true});
}

TrainerOptions CounterOptions(int64_t gas, int64_t replicas) {
  TrainerOptions o = Options(gas, replicas);
  o.weights = {"W"};
  o.buffers = {{"count", "count_next"}};
  return o;
}

std::vector<std::vector<Tensor>> CounterBatches(int64_t n) {
  std::vector<std::vector<Tensor>> micro;
  for (int64_t k = 0; k < n; ++k) {
    micro.push_back({Rows(testing::RandomValues(6, -1, 1, 20 + k), 0, 2, 3),
                     Rows(testing::RandomValues(4, -1, 1, 40 + k), 0, 2, 2)});
  }
  return micro;
}

float Count(const Trainer& t) { return t.buffers().at("count").data<float>()[0]; }

TEST(TrainerTest, BuffersAdvanceOncePerMicroBatchInDataOrder) {
  auto tr = Trainer::Create(Counter(), CounterOptions(2, 2));
  ASSERT_TRUE(tr.ok()) << tr.status();
  EXPECT_FALSE((*tr)->weights().contains("count"));
  for (int step = 0; step < 2; ++step) {
    auto result = (*tr)->Step(CounterBatches(4));
    ASSERT_TRUE(result.ok()) << result.status();
    // micro_batches[r * 2 + m] runs as number m * 2 + r of the update.
    for (int r = 0; r < 2; ++r) {
      for (int m = 0; m < 2; ++m) {
        EXPECT_EQ(result->outputs[r * 2 + m][0].data<float>()[0], 4 * step + m * 2 + r + 1)
            << "replica " << r << ", micro-batch " << m;
      }
    }
    EXPECT_EQ(Count(**tr), 4 * (step + 1));
  }
}

TEST(TrainerTest, BuffersTravelWithCheckpointsAndWeightsAndSurviveFailedSteps) {
  auto a = Trainer::Create(Counter(), CounterOptions(1, 1));
  auto b = Trainer::Create(Counter(), CounterOptions(2, 1));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->Step(CounterBatches(1)).ok());
  ASSERT_TRUE((*a)->Step(CounterBatches(1)).ok());
  TensorMap state = (*a)->ExportState();
  ASSERT_TRUE(state.contains("count"));
  ASSERT_TRUE((*b)->ImportState(state).ok());
  EXPECT_EQ(Count(**b), 2.0f);
  TensorMap lacking = state;
  lacking.erase("count");
  EXPECT_THAT((*b)->ImportState(lacking).message(), HasSubstr("lacks buffer 'count'"));

  ASSERT_TRUE((*b)->SetWeights({{"count", Tensor::Scalar(0.0f)}}).code() ==
              absl::StatusCode::kInvalidArgument);  // [1], not a scalar
  auto ten = Tensor::FromValues<float>({1}, std::vector<float>{10.0f});
  ASSERT_TRUE((*b)->SetWeights({{"count", *ten}}).ok());
  EXPECT_EQ(Count(**b), 10.0f);
  EXPECT_EQ((*b)->FindState("count"), &(*b)->buffers().at("count"));

  std::vector<std::vector<Tensor>> bad = CounterBatches(2);
  bad[1][0] = *Tensor::Create(tensor::DType::kFloat32, {5, 3});  // after the first ran
  EXPECT_FALSE((*b)->Step(bad).ok());
  EXPECT_EQ(Count(**b), 10.0f) << "a failed step changes no buffer";
  ASSERT_TRUE((*b)->Step(CounterBatches(2)).ok());
  EXPECT_EQ(Count(**b), 12.0f);
}

TEST(TrainerTest, ReplicaBuffersAdvanceOnlyWithTheirOwnReplicasMicroBatches) {
  TrainerOptions options = CounterOptions(2, 2);
  options.replica_buffers = true;  // PopTorch's broadcastBuffers(False)
  auto tr = Trainer::Create(Counter(), options);
  ASSERT_TRUE(tr.ok()) << tr.status();
  for (int step = 0; step < 2; ++step) {
    auto result = (*tr)->Step(CounterBatches(4));
    ASSERT_TRUE(result.ok()) << result.status();
    for (int r = 0; r < 2; ++r) {  // each replica counts its own 2 micro-batches per update
      for (int m = 0; m < 2; ++m) {
        EXPECT_EQ(result->outputs[r * 2 + m][0].data<float>()[0], 2 * step + m + 1)
            << "replica " << r << ", micro-batch " << m;
      }
    }
  }
  EXPECT_EQ(Count(**tr), 4.0f);  // replica 0's
  TensorMap state = (*tr)->ExportState();
  ASSERT_TRUE(state.contains("replica/1/count"));
  auto ten = Tensor::FromValues<float>({1}, std::vector<float>{10.0f});
  ASSERT_TRUE((*tr)->SetWeights({{"count", *ten}}).ok());  // every replica's copy
  EXPECT_EQ((*tr)->ExportState().at("replica/1/count").data<float>()[0], 10.0f);

  state.at("replica/1/count").mutable_data<float>()[0] = 7.0f;
  ASSERT_TRUE((*tr)->ImportState(state).ok());
  auto result = (*tr)->Step(CounterBatches(4));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->outputs[0][0].data<float>()[0], 5.0f);  // replica 0: 4 + 1
  EXPECT_EQ(result->outputs[2][0].data<float>()[0], 8.0f);  // replica 1: 7 + 1
  auto shared = Trainer::Create(Counter(), CounterOptions(2, 2));
  ASSERT_TRUE(shared.ok());
  EXPECT_THAT((*shared)->ImportState(state).message(),
              HasSubstr("'replica/1/count' is a replica's own buffer"));
}

}  // namespace
}  // namespace ipupod::training
