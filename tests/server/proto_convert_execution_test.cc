// ExecutionService's conversions that need no loaded program: run
// statistics, optimizer state, tensor specs and executable references.
#include "server/proto_convert_execution.h"

#include "gtest/gtest.h"

namespace ipupod::server {
namespace {

TEST(ProtoConvertExecutionTest, RunStatsCarryTimesLossesAndCounts) {
  runtime::StepResult step;
  step.samples = 32;
  step.wall_s = 0.5;
  step.simulated = {.compute_s = 1, .pipeline_ramp_s = 0.25, .ipu_link_s = 0.5, .host_s = 2};
  step.flops = 1000;
  step.losses = {0.5f, 0.25f};
  step.step = 7;
  v1::RunStats out;
  ToProto(step, 3, &out);
  EXPECT_EQ(out.samples(), 32u);
  EXPECT_DOUBLE_EQ(out.wall_seconds(), 0.5);
  EXPECT_DOUBLE_EQ(out.simulated_seconds(), 3.75);
  EXPECT_DOUBLE_EQ(out.simulated_compute_seconds(), 1);
  EXPECT_DOUBLE_EQ(out.simulated_pipeline_ramp_seconds(), 0.25);
  EXPECT_DOUBLE_EQ(out.simulated_ipu_link_seconds(), 0.5);
  EXPECT_DOUBLE_EQ(out.simulated_host_seconds(), 2);
  EXPECT_EQ(out.flops(), 1000u);
  EXPECT_EQ(out.run_index(), 3u);
  ASSERT_EQ(out.losses_size(), 2);
  EXPECT_FLOAT_EQ(out.losses(1), 0.25f);
  EXPECT_EQ(out.step(), 7u);
}

TEST(ProtoConvertExecutionTest, OptimizerKeepsVariablesApartFromConstants) {
  runtime::OptimizerState state;
  state.optimizer = "adam";
  state.variables = {{"lr", 0.001}};
  state.constants = {{"beta1", 0.9}};
  state.step = 12;
  v1::OptimizerInfo out;
  ToProto(state, &out);
  EXPECT_EQ(out.name(), "adam");
  EXPECT_DOUBLE_EQ(out.variables().at("lr"), 0.001);
  EXPECT_DOUBLE_EQ(out.constants().at("beta1"), 0.9);
  EXPECT_EQ(out.variables().count("beta1"), 0u);
  EXPECT_EQ(out.step(), 12u);
}

TEST(ProtoConvertExecutionTest, TensorSpecAndExecutableRef) {
  v1::TensorSpec spec;
  ToProto(compiler::TensorSpec{"x", tensor::DType::kFloat32, {4, 8}}, &spec);
  EXPECT_EQ(spec.name(), "x");
  EXPECT_EQ(spec.dtype(), "float32");
  ASSERT_EQ(spec.shape_size(), 2);
  EXPECT_EQ(spec.shape(1), 8);
  compiler::Executable exe;
  exe.content_hash = std::string(64, 'a');
  exe.ipus.needed = 3;
  exe.ipus.reserved = 4;
  v1::ExecutableRef ref;
  ToProto(exe, 1234, true, &ref);
  EXPECT_EQ(ref.sha256(), exe.content_hash);
  EXPECT_EQ(ref.size_bytes(), 1234u);
  EXPECT_TRUE(ref.cache_hit());
  EXPECT_EQ(ref.ipus_needed(), 3u);
  EXPECT_EQ(ref.ipus_reserved(), 4u);
}

}  // namespace
}  // namespace ipupod::server
