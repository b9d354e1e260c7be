// RemoteCompiler (server/execution/remote_compile.h): the server's compile of a
// user's model - the executable lands in the cache for that user only, the
// bounds (model size, host memory, time) refuse with what to do, a
// cancelled caller stops it, and a cache directory the client names is
// never written.
#include "server/execution/remote_compile.h"

#include <atomic>
#include <filesystem>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/device/compiler/test_models.h"
#include "tests/device/graph/onnx_builder.h"
#include "tests/support/eventually.h"

namespace ipupod::execution {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

class RemoteCompileTest : public ::testing::Test {
 protected:
  RemoteCompileResult CompileOk(const RemoteCompileRequest& request, absl::string_view onnx) {
    absl::StatusOr<RemoteCompileResult> result = compiler_.Compile(request, onnx, nullptr);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *std::move(result) : RemoteCompileResult{};
  }
  static RemoteCompileRequest Request(std::string user) {
    RemoteCompileRequest r;
    r.user = std::move(user);
    r.model_name = "model mlp";
    return r;
  }

  runtime::ExecutableCache cache_{kGiB};
  MemoryBudget memory_{4 * kGiB};
  RemoteCompiler compiler_{RemoteCompileLimits{}, &cache_, &memory_};
};

TEST_F(RemoteCompileTest, LeavesTheExecutableInTheCacheForTheCallerOnly) {
  RemoteCompileRequest request = Request("alice");
  request.want_ipx = true;
  request.want_report = true;
  const RemoteCompileResult result = CompileOk(request, compiler::testing::MlpBytes(4));
  ASSERT_NE(result.cached.executable, nullptr);
  const std::string& sha256 = result.cached.executable->content_hash;
  EXPECT_TRUE(cache_.Get(sha256, "alice").ok());
  EXPECT_EQ(cache_.Get(sha256, "bob").status().code(), absl::StatusCode::kNotFound);
  // The .ipx is the cached executable's file; the summary and report describe it.
  EXPECT_EQ(static_cast<int64_t>(result.ipx.size()), result.cached.size_bytes);
  absl::StatusOr<compiler::Executable> read = compiler::ReadExecutable(result.ipx);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->content_hash, sha256);
  EXPECT_THAT(result.summary_json, HasSubstr(sha256));
  EXPECT_THAT(result.report_json, HasSubstr("\"ipus\""));
  // Nothing is held once the compile is over.
  EXPECT_EQ(memory_.used_bytes(), 0);
}

TEST_F(RemoteCompileTest, TrainingOptionsReachTheCompiler) {
  RemoteCompileRequest request = Request("alice");
  request.inputs.train = true;
  request.inputs.training.optimizer = "adam";
  request.inputs.training.optimizer_attrs = {{"lr", 0.001}};
  request.inputs.training.frozen = {"fc1.w"};
  const RemoteCompileResult result = CompileOk(request, compiler::testing::MlpWithLossBytes(4));
  ASSERT_NE(result.cached.executable, nullptr);
  const compiler::TrainingSpec& t = result.cached.executable->training;
  EXPECT_EQ(t.optimizer, "adam");
  EXPECT_EQ(t.loss, "loss");
  EXPECT_EQ(t.weights, std::vector<std::string>({"fc2.w"}));
  EXPECT_EQ(t.variables.count("lr"), 1u);
}

TEST_F(RemoteCompileTest, TrainingOptionsWithoutTrainAreRefused) {
  RemoteCompileRequest request = Request("alice");
  request.inputs.training.optimizer = "adam";
  absl::StatusOr<RemoteCompileResult> result =
      compiler_.Compile(request, compiler::testing::MlpBytes(4), nullptr);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("need train"));
}

TEST_F(RemoteCompileTest, AClientsCacheDirectoryIsIgnoredWithAWarning) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "ipupod-not-written";
  std::filesystem::remove_all(dir);
  RemoteCompileRequest request = Request("alice");
  request.inputs.ipu_config_json = "{\"executable_cache_dir\": \"" + dir.string() + "\"}";
  const RemoteCompileResult result = CompileOk(request, compiler::testing::MlpBytes(4));
  EXPECT_FALSE(std::filesystem::exists(dir));
  ASSERT_FALSE(result.warnings.empty());
  EXPECT_THAT(result.warnings[0], HasSubstr("is not used by a compile on the server"));
}

TEST_F(RemoteCompileTest, ABadConfigNamesItsSource) {
  RemoteCompileRequest request = Request("alice");
  request.inputs.ipu_config_json = "{\"layers_per_ipu\": \"two\"}";
  absl::StatusOr<RemoteCompileResult> result =
      compiler_.Compile(request, compiler::testing::MlpBytes(4), nullptr);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("in ipu_config_json"));
}

TEST_F(RemoteCompileTest, AModelOverTheSizeBoundIsRefusedBeforeAnythingElse) {
  RemoteCompiler small(RemoteCompileLimits{.max_model_bytes = 100}, &cache_, &memory_);
  absl::StatusOr<RemoteCompileResult> result =
      small.Compile(Request("alice"), compiler::testing::MlpBytes(4), nullptr);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(result.status().message(), HasSubstr("compile_max_model_mb"));
  EXPECT_EQ(small.CheckModelSize(100).code(), absl::StatusCode::kOk);
  EXPECT_EQ(small.CheckModelSize(101).code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(RemoteCompileTest, ACompileReservesHostMemoryAndIsRefusedWhenItIsTaken) {
  MemoryBudget tight(64 << 20);  // below the fold budget every compile reserves
  RemoteCompiler c(RemoteCompileLimits{}, &cache_, &tight);
  absl::StatusOr<RemoteCompileResult> result =
      c.Compile(Request("alice"), compiler::testing::MlpBytes(4), nullptr);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(result.status().message(), HasSubstr("compiling model mlp for alice"));
}

TEST_F(RemoteCompileTest, AConstantBombIsRefusedWithoutMaterialisingIt) {
  // 30000 x 30000 floats = 3.6 GB if folded: the fold budget leaves it
  // unfolded, and the memory plan counts it - an IPU cannot hold it.
  absl::StatusOr<RemoteCompileResult> result =
      compiler_.Compile(Request("alice"), graph::testing::ConstantOfShapeBomb(30000), nullptr);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("'big' 3.60 GB"));
  EXPECT_EQ(memory_.used_bytes(), 0);
}

TEST_F(RemoteCompileTest, TheTimeLimitStopsFoldingWithDeadlineExceeded) {
  RemoteCompiler c(RemoteCompileLimits{.time_limit = absl::ZeroDuration()}, &cache_, &memory_);
  absl::StatusOr<RemoteCompileResult> result =
      c.Compile(Request("alice"), graph::testing::ConstantOfShapeBomb(100), nullptr);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("compile_time_limit_seconds"));
}

TEST_F(RemoteCompileTest, ACancelledCallerStopsTheCompile) {
  absl::StatusOr<RemoteCompileResult> result = compiler_.Compile(
      Request("alice"), graph::testing::ConstantOfShapeBomb(100), [] { return true; });
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled) << result.status();
}

// A constant that takes seconds to fold in one node: ConstantOfShape
// [4096, 8192] (128 MB, inside the fold budget) times its own transpose,
// 2^37 multiply-adds in one Gemm.
std::string OneLongNode() {
  using graph::testing::kFloat;
  using graph::testing::OnnxBuilder;
  OnnxBuilder b(13);
  b.Input("x", kFloat, {1}).Output("y", kFloat);
  b.Ints("shape", {2}, {4096, 8192});
  OnnxBuilder::AttrFloatTensor(b.Node("ConstantOfShape", {"shape"}, {"c"}), "value", {1}, {1.0f});
  OnnxBuilder::AttrInt(b.Node("Gemm", {"c", "c"}, {"g"}, "long_gemm"), "transB", 1);
  OnnxBuilder::AttrInt(b.Node("ReduceSum", {"g"}, {"s"}), "keepdims", 0);
  b.Node("Add", {"x", "s"}, {"y"});
  return b.Bytes();
}

// How long past its cause a stop may take: well under the node's seconds.
constexpr absl::Duration kStopBound = absl::Seconds(1);

TEST_F(RemoteCompileTest, TheTimeLimitStopsALongNodeWithinABound) {
  const absl::Duration limit = absl::Milliseconds(300);
  RemoteCompiler c(RemoteCompileLimits{.time_limit = limit}, &cache_, &memory_);
  const absl::Time start = absl::Now();
  absl::StatusOr<RemoteCompileResult> result = c.Compile(Request("alice"), OneLongNode(), nullptr);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("compile_time_limit_seconds"));
  EXPECT_LT(took, limit + kStopBound) << "the limit waited for the node to end";
  EXPECT_EQ(memory_.used_bytes(), 0);
}

TEST_F(RemoteCompileTest, ACancelStopsALongNodeWithinABound) {
  const absl::Time cancel_at = absl::Now() + absl::Milliseconds(300);
  absl::StatusOr<RemoteCompileResult> result =
      compiler_.Compile(Request("alice"), OneLongNode(), [&] { return absl::Now() > cancel_at; });
  const absl::Duration late = absl::Now() - cancel_at;
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled) << result.status();
  EXPECT_LT(late, kStopBound) << "the cancel waited for the node to end";
}

TEST_F(RemoteCompileTest, StopEndsACompileInFlightWithinABound) {
  absl::StatusOr<RemoteCompileResult> result;
  std::atomic<int> polls{0};
  std::thread compile([&] {
    result = compiler_.Compile(Request("alice"), OneLongNode(), [&] {
      ++polls;
      return false;
    });
  });
  // Inside the long node once its kernels have polled more times than the
  // model has nodes.
  const bool inside = test_support::Eventually([&] { return polls.load() > 10; });
  EXPECT_TRUE(inside) << "the compile is not polled inside its nodes";
  const absl::Time stopped = absl::Now();
  compiler_.Stop();
  compile.join();
  EXPECT_LT(absl::Now() - stopped, kStopBound) << "the stop waited for the node to end";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("shutting down"));
  // And every later compile, at once.
  EXPECT_EQ(
      compiler_.Compile(Request("alice"), compiler::testing::MlpBytes(4), nullptr).status().code(),
      absl::StatusCode::kUnavailable);
}

TEST_F(RemoteCompileTest, AHostileRankIsRefusedAtOnce) {
  using graph::testing::kFloat;
  using graph::testing::OnnxBuilder;
  OnnxBuilder b(13);
  b.Input("x", kFloat, {1}).Output("y", kFloat);
  b.Ints("shape", {300'000}, std::vector<int64_t>(300'000, 1));
  b.Node("Reshape", {"x", "shape"}, {"r"}, "hostile_reshape");
  OnnxBuilder::AttrInt(b.Node("ReduceSum", {"r"}, {"y"}), "keepdims", 0);
  const absl::Time start = absl::Now();
  absl::StatusOr<RemoteCompileResult> result =
      compiler_.Compile(Request("alice"), b.Bytes(), nullptr);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("hostile_reshape"));
  EXPECT_THAT(result.status().message(), HasSubstr("more than 64 dims"));
  EXPECT_LT(absl::Now() - start, kStopBound);
}

TEST_F(RemoteCompileTest, OutOfIpuMemoryKeepsThePlanForTheCaller) {
  compiler::Report failure;
  absl::StatusOr<RemoteCompileResult> result = compiler_.Compile(
      Request("alice"), compiler::testing::HugeActivationBytes({1 << 16, 1 << 12}), nullptr,
      &failure);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("out of memory"));
  EXPECT_FALSE(failure.ipus.empty());
}

}  // namespace
}  // namespace ipupod::execution
