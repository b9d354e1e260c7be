// ExecutionService.RunInline on an in-process PodServer, through the client
// library and the generated stub: Client::Run takes it for small steps (the
// server's RPC metrics say which method ran), its outputs, stats and run
// count are the Run stream's, its errors are Run's, and what it cannot carry
// (inputs or a program's outputs over 1 MiB) is OUT_OF_RANGE with nothing
// run, while Client::Run takes the stream for those.
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "common/wire/inline_tensors.h"
#include "device/compiler/compile.h"
#include "device/compiler/executable.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/exposition.h"
#include "tests/support/http_client.h"
#include "tests/support/models.h"
#include "tests/support/test_server.h"

namespace ipupod::server {
namespace {

using ::testing::HasSubstr;

// test_support::LinearModel compiled: outputs of rows x cols floats.
std::string LinearIpx(int64_t rows, int64_t cols) {
  absl::StatusOr<compiler::Executable> exe =
      compiler::Compile(test_support::LinearModel(rows, cols), compiler::IpuConfig(), {});
  EXPECT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::string> ipx = compiler::WriteExecutable(*exe);
  EXPECT_TRUE(ipx.ok()) << ipx.status();
  return *ipx;
}

tensor::NamedTensors Inputs(int64_t rows) {
  std::vector<float> x(static_cast<size_t>(rows * 8));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i % 11);
  return {{"x", *tensor::Tensor::FromValues<float>({rows, 8}, x)}};
}

class RunInlineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = test_support::TestServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = Connect(true);
    stream_client_ = Connect(false);
    v1::AttachRequest request;
    request.set_num_ipus(1);
    call_ = client_->StartAttach(request);
    auto granted = call_->WaitForGrant(nullptr);
    ASSERT_TRUE(granted.ok()) << granted.status();
    session_ = granted->session();
  }
  std::unique_ptr<client::Client> Connect(bool inline_steps, const std::string& user = "alice") {
    client::ClientOptions options;
    options.server = server_->address();
    options.user = user;
    options.inline_steps = inline_steps;
    auto c = client::Client::Connect(options);
    EXPECT_TRUE(c.ok()) << c.status();
    return *std::move(c);
  }
  void Load(const std::string& ipx) {
    auto ref = client_->UploadExecutable(ipx);
    ASSERT_TRUE(ref.ok()) << ref.status();
    auto loaded = client_->Load(session_, ref->sha256());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
  }
  // ExecutionService calls of `method` that ended with `code`, from the metrics.
  double Calls(const std::string& method, const std::string& code = "OK") {
    const std::string text =
        test_support::HttpGet(server_->server().metrics_url() + "/metrics").body;
    return test_support::SampleValue(
               text, absl::StrCat(R"(ipupod_rpcs_total{code=")", code, R"(",method=")", method,
                                  R"(",service="ipupod.v1.ExecutionService"})"))
        .value_or(0);
  }
  uint64_t Runs() {
    auto loaded = client_->GetLoaded(session_);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? loaded->runs() : 0;
  }
  v1::RunInlineRequest RawRequest(const tensor::NamedTensors& inputs) {
    v1::RunInlineRequest request;
    request.set_session(session_);
    wire::AddInline(inputs, request.mutable_inputs());
    return request;
  }
  grpc::Status RawRunInline(const v1::RunInlineRequest& request) {
    auto stub = v1::ExecutionService::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.AddMetadata("x-ipupod-user", "alice");
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::RunInlineResponse response;
    return stub->RunInline(&context, request, &response);
  }

  std::unique_ptr<test_support::TestServer> server_;
  std::unique_ptr<client::Client> client_, stream_client_;
  std::unique_ptr<client::AttachCall> call_;
  std::string session_;
};

TEST_F(RunInlineTest, RunTakesRunInlineForASmallStepAndEqualsTheStream) {
  Load(LinearIpx(1, 10));
  auto small = client_->Run(session_, Inputs(1));
  ASSERT_TRUE(small.ok()) << small.status();
  auto streamed = stream_client_->Run(session_, Inputs(1));
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  EXPECT_EQ(Calls("RunInline"), 1);
  EXPECT_EQ(Calls("Run"), 1);
  ASSERT_EQ(small->outputs.size(), 1u);
  EXPECT_EQ(small->outputs[0].first, "y");
  EXPECT_EQ(small->outputs[0].second.shape(), streamed->outputs[0].second.shape());
  EXPECT_EQ(small->outputs[0].second.bytes(), streamed->outputs[0].second.bytes())
      << "bit-identical outputs";
  // One run count, one accounting: the steps are the program's 1st and 2nd.
  EXPECT_EQ(small->stats.run_index(), 1u);
  EXPECT_EQ(streamed->stats.run_index(), 2u);
  EXPECT_EQ(small->stats.samples(), streamed->stats.samples());
  EXPECT_EQ(small->stats.flops(), streamed->stats.flops());
  EXPECT_EQ(small->stats.simulated_seconds(), streamed->stats.simulated_seconds());
  EXPECT_EQ(Runs(), 2u);
}

TEST_F(RunInlineTest, BadInputsFailAsTheyDoOnTheStreamAndRunNothing) {
  Load(LinearIpx(1, 10));
  const std::vector<tensor::NamedTensors> bad = {
      {{"x", *tensor::Tensor::FromValues<float>({2, 8}, std::vector<float>(16, 1))}},     // shape
      {{"x", *tensor::Tensor::FromValues<int32_t>({1, 8}, std::vector<int32_t>(8, 1))}},  // dtype
      {{"z", *tensor::Tensor::FromValues<float>({1, 8}, std::vector<float>(8, 1))}},      // name
      {},                                                                                 // none
  };
  for (const tensor::NamedTensors& inputs : bad) {
    auto inline_step = client_->RunInline(session_, inputs);
    auto streamed = stream_client_->Run(session_, inputs);
    ASSERT_FALSE(inline_step.ok());
    EXPECT_EQ(inline_step.status().code(), streamed.status().code());
    EXPECT_EQ(inline_step.status().message(), streamed.status().message());
    EXPECT_EQ(inline_step.status().code(), absl::StatusCode::kInvalidArgument)
        << inline_step.status();
  }
  EXPECT_EQ(Runs(), 0u);
  EXPECT_EQ(Calls("RunInline", "INVALID_ARGUMENT"), 4);
}

TEST_F(RunInlineTest, MalformedInlineTensorsAreRefused) {
  Load(LinearIpx(1, 10));
  v1::RunInlineRequest request = RawRequest(Inputs(1));
  request.mutable_inputs(0)->mutable_data()->pop_back();  // 39 of the declared 40 bytes
  grpc::Status short_data = RawRunInline(request);
  EXPECT_EQ(short_data.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(short_data.error_message(), HasSubstr("x"));
  request = RawRequest(Inputs(1));
  request.mutable_inputs(0)->mutable_header()->set_dtype("complex64");
  EXPECT_EQ(RawRunInline(request).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  request = RawRequest(Inputs(1));
  request.set_session("s-nobody");
  EXPECT_EQ(RawRunInline(request).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Runs(), 0u);
}

TEST_F(RunInlineTest, InputsOverTheBoundAreOutOfRangeBeforeAnythingRuns) {
  Load(LinearIpx(1, 10));
  // 1 MiB + 4 bytes of data: refused on its size, whatever the program takes.
  tensor::NamedTensors huge = {
      {"x", *tensor::Tensor::FromValues<float>({(int64_t{1} << 18) + 1},
                                               std::vector<float>((size_t{1} << 18) + 1, 1))}};
  grpc::Status refused = RawRunInline(RawRequest(huge));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("RunInline carries at most 1048576 bytes of inputs"));
  EXPECT_THAT(refused.error_message(), HasSubstr("send it through Run"));
  EXPECT_EQ(Runs(), 0u);
  EXPECT_EQ(Calls("RunInline", "OUT_OF_RANGE"), 1);
}

TEST_F(RunInlineTest, AProgramWithLargeOutputsTakesTheStreamAndIsRememberedSo) {
  Load(LinearIpx(64, 4200));  // y: 64 x 4200 floats = 1,075,200 bytes
  auto refused = client_->RunInline(session_, Inputs(64));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(refused.status().message(), HasSubstr("bytes of outputs"));
  EXPECT_EQ(Runs(), 0u) << "refused before it ran";
  auto first = client_->Run(session_, Inputs(64));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = client_->Run(session_, Inputs(64));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(first->outputs[0].second.bytes(), second->outputs[0].second.bytes());
  EXPECT_EQ(Calls("RunInline", "OUT_OF_RANGE"), 2) << "the explicit one, then Run's first try";
  EXPECT_EQ(Calls("Run"), 2);
  EXPECT_EQ(Runs(), 2u);
}

TEST_F(RunInlineTest, AnotherUsersSessionIsRefusedAsOnTheStream) {
  Load(LinearIpx(1, 10));
  std::unique_ptr<client::Client> bob = Connect(true, "bob");
  std::unique_ptr<client::Client> bob_stream = Connect(false, "bob");
  auto inline_step = bob->Run(session_, Inputs(1));
  auto streamed = bob_stream->Run(session_, Inputs(1));
  ASSERT_FALSE(inline_step.ok());
  EXPECT_EQ(inline_step.status().code(), streamed.status().code());
  EXPECT_EQ(inline_step.status().message(), streamed.status().message());
  EXPECT_EQ(Runs(), 0u);
}

}  // namespace
}  // namespace ipupod::server
