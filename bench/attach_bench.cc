// Attach + detach round trip through ipupodd, beside a bare gRPC unary round
// trip measured in the same run, on the same machine and transport.
//
//   BM_BareUnaryRoundTrip      Echo.Ping on a bare callback-API gRPC server
//   BM_GetPodInfo              the cheapest ipupod unary call (whole pod view)
//   BM_AttachDetachStub        Attach stream -> grant -> Detach -> stream end
//                              (generated stub, no client-library thread)
//   BM_AttachDetachClient      the same through client::Client / AttachCall
//
// Both servers run in this process on loopback, so client and server share
// the machine's cores equally in every row. Run: build/bench/attach_bench
#include <filesystem>

#include <benchmark/benchmark.h>
#include <grpcpp/grpcpp.h>

#include "bench/echo_server.h"
#include "client/client.h"
#include "server/config.h"
#include "server/server.h"

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
    auto detached = F().client->Detach(grant->session());
    if (!detached.ok()) state.SkipWithError(std::string(detached.status().message()).c_str());
    (void)call->WaitForEnd(absl::Seconds(10));
  }
}
BENCHMARK(BM_AttachDetachClient)->UseRealTime();

}  // namespace
}  // namespace ipupod::bench

BENCHMARK_MAIN();
