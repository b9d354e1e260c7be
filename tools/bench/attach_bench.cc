// The service path's round trips through ipupodd - an attach + detach, one
// step of a tiny model - beside a bare gRPC unary round trip measured in the
// same run, on the same machine and transport.
//
//   BM_BareUnaryRoundTrip      Echo.Ping on a bare callback-API gRPC server
//   BM_BareHoldShape           Echo.Converse: message -> answer -> half-close ->
//                              answer, OK; Hold's exchanges on bare gRPC
//   BM_GetPodInfo              the cheapest ipupod unary call (whole pod view)
//   BM_AttachDetachStub        Attach stream -> grant -> Detach -> stream end
//                              (generated stub: the three legs of Attach)
//   BM_HoldReleaseStub         Hold stream -> grant -> half-close -> released,
//                              OK (generated stub: Hold's two legs)
//   BM_AttachDetachClient      StartAttach, WaitForGrant, AttachCall::Release through
//                              client::Client / AttachCall (Hold)
//   BM_StepClient              one step of a 10x10 Linear at batch 1 through
//                              client::Client::Run (RunInline: one round trip)
//   BM_StepStreamClient        the same step with inline_steps off (the Run
//                              stream: session, header, data; outputs, stats)
//   BM_StepInlineStub          RunInline through the generated stub alone
//
// Both servers run in this process on loopback, so client and server share
// the machine's cores equally in every row. Run: build/tools/bench/attach_bench
// (docs/benchmarks.md: --benchmark_repetitions=5 for medians).
#include <filesystem>

#include <benchmark/benchmark.h>
#include <grpcpp/grpcpp.h>

#include "client/client.h"
#include "common/wire/inline_tensors.h"
#include "device/compiler/compile.h"
#include "device/compiler/executable.h"
#include "server/config.h"
#include "server/server.h"
#include "tests/device/graph/onnx_builder.h"
#include "tools/bench/echo_server.h"

namespace ipupod::bench {
namespace {

namespace v1 = ::ipupod::v1;

struct Fixture {
  Fixture() {
    state_dir = std::filesystem::temp_directory_path() / "ipupod-attach-bench";
    std::filesystem::remove_all(state_dir);
    server::ServerConfig config;
    config.listen = "127.0.0.1:0";
    config.state_dir = state_dir.string();
    config.log_level = "warn";
    pod = std::move(server::PodServer::Start(config)).value();
    client::ClientOptions options;
    options.server = pod->address();
    options.user = "bench";
    client = std::move(client::Client::Connect(options)).value();
    channel = grpc::CreateChannel(pod->address(), grpc::InsecureChannelCredentials());
    sessions = v1::SessionService::NewStub(channel);
    echo_stub =
        Echo::NewStub(grpc::CreateChannel(echo.address(), grpc::InsecureChannelCredentials()));
  }
  ~Fixture() { std::filesystem::remove_all(state_dir); }

  std::filesystem::path state_dir;
  EchoServer echo;
  std::unique_ptr<Echo::Stub> echo_stub;
  std::unique_ptr<server::PodServer> pod;
  std::unique_ptr<client::Client> client;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::SessionService::Stub> sessions;
};

Fixture& F() {
  static Fixture* fixture = new Fixture();
  return *fixture;
}

void BM_BareUnaryRoundTrip(benchmark::State& state) {
  Blob request, response;
  for (auto _ : state) {
    grpc::ClientContext context;
    grpc::Status status = F().echo_stub->Ping(&context, request, &response);
    if (!status.ok()) state.SkipWithError(status.error_message().c_str());
  }
}
BENCHMARK(BM_BareUnaryRoundTrip)->UseRealTime();

void BM_BareHoldShape(benchmark::State& state) {
  Blob message;
  for (auto _ : state) {
    grpc::ClientContext context;
    auto stream = F().echo_stub->Converse(&context);
    if (!stream->Write(message) || !stream->Read(&message) || !stream->WritesDone() ||
        !stream->Read(&message) || stream->Read(&message)) {
      state.SkipWithError("the conversation ended early");
      break;
    }
    grpc::Status status = stream->Finish();
    if (!status.ok()) state.SkipWithError(status.error_message().c_str());
  }
}
BENCHMARK(BM_BareHoldShape)->UseRealTime();

void BM_GetPodInfo(benchmark::State& state) {
  for (auto _ : state) {
    auto info = F().client->GetPodInfo();
    if (!info.ok()) state.SkipWithError(std::string(info.status().message()).c_str());
  }
}
BENCHMARK(BM_GetPodInfo)->UseRealTime();

void BM_AttachDetachStub(benchmark::State& state) {
  v1::AttachRequest request;
  request.set_num_ipus(1);
  for (auto _ : state) {
    grpc::ClientContext context;
    context.AddMetadata("x-ipupod-user", "bench");
    auto reader = F().sessions->Attach(&context, request);
    v1::AttachEvent event;
    if (!reader->Read(&event) || !event.has_granted()) {
      state.SkipWithError("no grant");
      break;
    }
    grpc::ClientContext detach_context;
    detach_context.AddMetadata("x-ipupod-user", "bench");
    v1::DetachRequest detach;
    detach.set_session(event.granted().session());
    v1::DetachResponse detached;
    grpc::Status status = F().sessions->Detach(&detach_context, detach, &detached);
    if (!status.ok()) state.SkipWithError(status.error_message().c_str());
    while (reader->Read(&event)) {
    }
    reader->Finish();
  }
}
BENCHMARK(BM_AttachDetachStub)->UseRealTime();

void BM_AttachDetachClient(benchmark::State& state) {
  v1::AttachRequest request;
  request.set_num_ipus(1);
  for (auto _ : state) {
    auto call = F().client->StartAttach(request);
    auto grant = call->WaitForGrant(nullptr);
    if (!grant.ok()) {
      state.SkipWithError(std::string(grant.status().message()).c_str());
      break;
    }
    const absl::Status released = call->Release();  // half-close: the server detaches
    if (!released.ok()) state.SkipWithError(std::string(released.message()).c_str());
  }
}
BENCHMARK(BM_AttachDetachClient)->UseRealTime();

void BM_HoldReleaseStub(benchmark::State& state) {
  v1::AttachRequest request;
  request.set_num_ipus(1);
  for (auto _ : state) {
    grpc::ClientContext context;
    context.AddMetadata("x-ipupod-user", "bench");
    auto stream = F().sessions->Hold(&context);
    v1::AttachEvent event;
    if (!stream->Write(request) || !stream->Read(&event) || !event.has_granted()) {
      state.SkipWithError("no grant");
      break;
    }
    stream->WritesDone();
    bool released = false;
    while (stream->Read(&event)) released = released || event.has_released();
    grpc::Status status = stream->Finish();
    if (!status.ok() || !released) state.SkipWithError("not released");
  }
}
BENCHMARK(BM_HoldReleaseStub)->UseRealTime();

// A 10x10 Linear (MatMul + Add) at batch 1, loaded on a session of its own,
// and a second client whose steps take the Run stream.
struct StepFixture {
  StepFixture() {
    graph::testing::OnnxBuilder b(14);
    b.Input("x", graph::testing::kFloat, {1, 10});
    b.Floats("W", {10, 10}, std::vector<float>(100, 0.01f));
    b.Floats("b", {10}, std::vector<float>(10, 0.5f));
    b.Node("MatMul", {"x", "W"}, {"xw"});
    b.Node("Add", {"xw", "b"}, {"y"});
    b.Output("y", graph::testing::kFloat);
    auto executable = compiler::Compile(b.Bytes(), compiler::IpuConfig(), {});
    auto ipx = compiler::WriteExecutable(executable.value());
    v1::AttachRequest request;
    request.set_num_ipus(1);
    call = F().client->StartAttach(request);
    session = call->WaitForGrant(nullptr).value().session();
    const std::string sha256 = F().client->UploadExecutable(ipx.value()).value().sha256();
    (void)F().client->Load(session, sha256).value();
    client::ClientOptions options = F().client->options();
    options.inline_steps = false;
    stream_client = std::move(client::Client::Connect(options)).value();
    execution = v1::ExecutionService::NewStub(F().channel);
    inputs = {
        {"x", tensor::Tensor::FromValues<float>({1, 10}, std::vector<float>(10, 1.0f)).value()}};
  }
  std::unique_ptr<client::AttachCall> call;
  std::string session;
  std::unique_ptr<client::Client> stream_client;
  std::unique_ptr<v1::ExecutionService::Stub> execution;
  tensor::NamedTensors inputs;
};

StepFixture& S() {
  static StepFixture* fixture = new StepFixture();
  return *fixture;
}

void StepThrough(benchmark::State& state, client::Client& c) {
  for (auto _ : state) {
    auto result = c.Run(S().session, S().inputs);
    if (!result.ok()) state.SkipWithError(std::string(result.status().message()).c_str());
  }
}

void BM_StepClient(benchmark::State& state) { StepThrough(state, *F().client); }
BENCHMARK(BM_StepClient)->UseRealTime();

void BM_StepStreamClient(benchmark::State& state) { StepThrough(state, *S().stream_client); }
BENCHMARK(BM_StepStreamClient)->UseRealTime();

void BM_StepInlineStub(benchmark::State& state) {
  v1::RunInlineRequest request;
  request.set_session(S().session);
  wire::AddInline(S().inputs, request.mutable_inputs());
  for (auto _ : state) {
    grpc::ClientContext context;
    context.AddMetadata("x-ipupod-user", "bench");
    v1::RunInlineResponse response;
    grpc::Status status = S().execution->RunInline(&context, request, &response);
    if (!status.ok()) state.SkipWithError(status.error_message().c_str());
  }
}
BENCHMARK(BM_StepInlineStub)->UseRealTime();

}  // namespace
}  // namespace ipupod::bench

BENCHMARK_MAIN();
