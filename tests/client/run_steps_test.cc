// Client::RunSteps and RemoteSessionExecutable::RunSteps against a real
// in-process ipupodd: several steps on one Run stream give the results one
// call per step gives, in order; at most `ahead` steps are ever in flight;
// an error from the caller cancels the rest; a failed step ends the run
// after the steps before it; the session serves the next call after each.
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/client.h"
#include "client/session_executable.h"
#include "common/driver/inference_driver.h"
#include "device/compiler/compile.h"
#include "device/compiler/executable.h"
#include "tests/device/graph/onnx_builder.h"
#include "tests/support/test_server.h"

namespace ipupod::client {
namespace {

using graph::testing::kFloat;
using graph::testing::OnnxBuilder;
using ::testing::HasSubstr;

std::vector<float> Ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(int(i % 13) - 6);
  return v;
}

// x[4, 8] -> MatMul [8, 16] -> Relu -> MatMul [16, 4] -> y[4, 4].
std::string MlpBytes() {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {4, 8});
  b.Output("y", kFloat, {4, 4});
  b.Floats("fc1.w", {8, 16}, Ramp(8 * 16, 0.1f));
  b.Floats("fc2.w", {16, 4}, Ramp(16 * 4, 0.05f));
  b.Node("MatMul", {"x", "fc1.w"}, {"h"}, "/fc1/MatMul");
  b.Node("Relu", {"h"}, {"hr"}, "/act/Relu");
  b.Node("MatMul", {"hr", "fc2.w"}, {"y"}, "/fc2/MatMul");
  return b.Bytes();
}

// Step k's input: distinct values per step.
tensor::Tensor StepInput(int64_t k) {
  return *tensor::Tensor::FromValues<float>({4, 8}, Ramp(32, 0.1f * static_cast<float>(k % 7 + 1)));
}

class RunStepsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = test_support::TestServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ClientOptions options;
    options.server = server_->address();
    options.user = "alice";
    auto client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    auto exe = compiler::Compile(MlpBytes(), compiler::IpuConfig(), {});
    ASSERT_TRUE(exe.ok()) << exe.status();
    auto ipx = compiler::WriteExecutable(*exe);
    ASSERT_TRUE(ipx.ok()) << ipx.status();
    sha256_ = exe->content_hash;
    v1::AttachRequest request;
    request.set_num_ipus(1);
    call_ = client_->StartAttach(request);
    auto granted = call_->WaitForGrant(nullptr);
    ASSERT_TRUE(granted.ok()) << granted.status();
    session_ = granted->session();
    ASSERT_TRUE(client_->UploadExecutable(*ipx).ok());
    ASSERT_TRUE(client_->Load(session_, sha256_).ok());
  }

  // Step k's inputs as RunSteps takes them (views into `held`).
  std::function<std::vector<TensorSlice>(int64_t)> Inputs() {
    return [this](int64_t k) {
      const tensor::Tensor& t = held_[static_cast<size_t>(k % 7)];
      return std::vector<TensorSlice>{{"x", t.dtype(), t.shape(), t.bytes()}};
    };
  }
  uint64_t RunsOnTheServer() {
    auto loaded = client_->GetLoaded(session_);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? loaded->runs() : 0;
  }

  std::unique_ptr<test_support::TestServer> server_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<AttachCall> call_;
  std::string session_, sha256_;
  std::vector<tensor::Tensor> held_ = [] {
    std::vector<tensor::Tensor> v;
    for (int k = 0; k < 7; ++k) v.push_back(StepInput(k));
    return v;
  }();
};

TEST_F(RunStepsTest, ResultsComeInOrderBitForBitAsOneCallPerStep) {
  constexpr int64_t kSteps = 20;
  std::vector<tensor::Tensor> expected;
  for (int64_t k = 0; k < kSteps; ++k) {
    auto one = client_->Run(session_, {{"x", StepInput(k)}});
    ASSERT_TRUE(one.ok()) << one.status();
    expected.push_back(one->outputs[0].second);
  }
  std::vector<int64_t> order;
  std::vector<uint64_t> run_indices;
  absl::Status s = client_->RunSteps(session_, kSteps, Inputs(), [&](int64_t k, RunResult r) {
    order.push_back(k);
    run_indices.push_back(r.stats.run_index());
    EXPECT_EQ(r.outputs.size(), 1u);
    EXPECT_EQ(r.outputs[0].second, expected[static_cast<size_t>(k)]) << "step " << k;
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(order.size(), static_cast<size_t>(kSteps));
  for (int64_t k = 0; k < kSteps; ++k) {
    EXPECT_EQ(order[static_cast<size_t>(k)], k);
    EXPECT_EQ(run_indices[static_cast<size_t>(k)], static_cast<uint64_t>(kSteps + k + 1));
  }
  EXPECT_EQ(RunsOnTheServer(), static_cast<uint64_t>(2 * kSteps));
}

// Bounded memory: inputs(k) is asked for only once step k - ahead's result
// has arrived, however fast the caller asks. The writer learns of an
// arrival before on_result is called with it (so the next inputs go out
// while the caller handles the outputs): seen from on_result, at most
// ahead + 1 steps are in flight, the one being handed over included.
TEST_F(RunStepsTest, NeverMoreThanAheadStepsInFlight) {
  for (int ahead : {1, 3}) {
    std::atomic<int64_t> delivered{0};
    std::atomic<int64_t> most_ahead{0};
    auto inputs = [&](int64_t k) {
      const int64_t in_flight = k - delivered.load() + 1;  // this one included
      int64_t seen = most_ahead.load();
      while (in_flight > seen && !most_ahead.compare_exchange_weak(seen, in_flight)) {
      }
      return Inputs()(k);
    };
    absl::Status s = client_->RunSteps(
        session_, 30, inputs,
        [&](int64_t, RunResult) {
          ++delivered;
          return absl::OkStatus();
        },
        ahead);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(delivered.load(), 30);
    EXPECT_GE(most_ahead.load(), 1);
    EXPECT_LE(most_ahead.load(), ahead + 1) << "ahead " << ahead;
  }
}

TEST_F(RunStepsTest, AnErrorFromTheCallerCancelsTheRestAndIsReturned) {
  int64_t delivered = 0;
  absl::Status s = client_->RunSteps(session_, 1000, Inputs(), [&](int64_t k, RunResult) {
    ++delivered;
    return k == 2 ? absl::DataLossError("disk full") : absl::OkStatus();
  });
  EXPECT_EQ(s, absl::DataLossError("disk full"));
  EXPECT_EQ(delivered, 3);
  // The steps sent ahead may have run; none beyond them did.
  EXPECT_LE(RunsOnTheServer(), 3u + 2u);
  // The stream's end gave the session back: the next call is served.
  EXPECT_TRUE(client_->Run(session_, {{"x", StepInput(0)}}).ok());
}

TEST_F(RunStepsTest, AFailedStepEndsTheRunAfterTheStepsBeforeIt) {
  const tensor::Tensor wrong = *tensor::Tensor::FromValues<float>({3, 8}, Ramp(24, 1.0f));
  int64_t delivered = 0;
  absl::Status s = client_->RunSteps(
      session_, 10,
      [&](int64_t k) {
        if (k == 3)
          return std::vector<TensorSlice>{{"x", wrong.dtype(), wrong.shape(), wrong.bytes()}};
        return Inputs()(k);
      },
      [&](int64_t, RunResult) {
        ++delivered;
        return absl::OkStatus();
      });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("x"));
  EXPECT_EQ(delivered, 3);
  EXPECT_EQ(RunsOnTheServer(), 3u);
  EXPECT_TRUE(client_->Run(session_, {{"x", StepInput(0)}}).ok());
}

// The CLI's path: the inference driver over RemoteSessionExecutable sends
// rows of the plan's tensors; the outputs equal one call per step's.
TEST_F(RunStepsTest, TheInferenceDriverRunsThePlanOnOneStream) {
  constexpr int64_t kSteps = 9;
  std::string rows;
  std::string expected;
  for (int64_t k = 0; k < kSteps; ++k) {
    const tensor::Tensor x = StepInput(k);
    rows.append(x.bytes().data(), x.bytes().size());
    auto one = client_->Run(session_, {{"x", x}});
    ASSERT_TRUE(one.ok()) << one.status();
    expected.append(one->outputs[0].second.bytes().data(), one->outputs[0].second.bytes().size());
  }
  driver::StepPlan plan;
  plan.inputs = {{"x", *tensor::Tensor::FromBytes(tensor::DType::kFloat32, {kSteps * 4, 8}, rows)}};
  plan.samples = kSteps * 4;
  plan.samples_per_step = 4;
  plan.steps = kSteps;
  RemoteSessionExecutable executable(*client_, session_, sha256_);
  int64_t progress = 0;
  auto outputs = driver::RunInference(
      executable, plan, {.on_step = [&](const driver::RunProgress& p) { progress = p.run + 1; }},
      /*first_step=*/2);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_EQ(progress, kSteps);
  ASSERT_EQ(outputs->size(), 1u);
  EXPECT_EQ((*outputs)[0].second.shape(), (tensor::Shape{(kSteps - 2) * 4, 4}));
  EXPECT_EQ((*outputs)[0].second.bytes(), absl::string_view(expected).substr(2 * 4 * 4 * 4));
}

}  // namespace
}  // namespace ipupod::client
