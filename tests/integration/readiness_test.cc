// End to end: readiness through gRPC's standard health protocol
// (grpc.health.v1, as Kubernetes' gRPC probes and grpc_health_probe ask it).
// A real ipupodd restarted on a stored state, with the test-only restore
// delay (IPUPOD_TEST_RESTORE_DELAY_MS) so the restore is long enough to
// watch: NOT_SERVING and UNAVAILABLE "ipupodd is starting" to every other
// call while it restores, SERVING with the state back once its ready line is
// out, NOT_SERVING to a watcher the moment SIGTERM starts the shutdown.
#include <string>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/integration/harness.h"
#include <signal.h>

namespace ipupod::testing {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using std::chrono::seconds;
using ::testing::HasSubstr;

// The server's status, or UNKNOWN when the call failed (not listening yet).
HealthCheckResponse::ServingStatus Check(Health::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(2));
  HealthCheckResponse response;
  grpc::Status status = stub.Check(&context, HealthCheckRequest(), &response);
  return status.ok() ? response.status() : HealthCheckResponse::UNKNOWN;
}

TEST(ReadinessTest, NotServingWhileRestoringThenServingThenNotServingAtShutdown) {
  ServerUnderTest first({"--pod", "POD4"});
  ASSERT_EQ(
      RunCli(first.address(), "alice", {"partition", "create", "kept", "--size", "2"}).exit_code,
      0);
  const std::string address = first.address();
  first.Kill(SIGTERM);

  Process server =
      Process::Start({ServerBinary(), "--pod", "POD4", "--listen", address, "--state-dir",
                      first.state_dir() + "/state", "--metrics-listen", "off"},
                     {{"IPUPOD_TEST_RESTORE_DELAY_MS", "6000"}});
  ASSERT_TRUE(server.WaitForStderr("waiting before restoring the state", seconds(20)))
      << server.stderr_text();
  // Reconnect every 100 ms, not after gRPC's backoff of 1 s and more, while
  // the address is not bound yet.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
  std::unique_ptr<Health::Stub> health =
      Health::NewStub(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  ASSERT_TRUE(Eventually([&] { return Check(*health) == HealthCheckResponse::NOT_SERVING; },
                         std::chrono::milliseconds(4000)))
      << "NOT_SERVING while restoring; its stderr:\n"
      << server.stderr_text();
  CliResult info = RunCli(address, "alice", {"info"});
  EXPECT_EQ(info.exit_code, 8) << info.out << info.err;  // UNAVAILABLE: retry
  EXPECT_THAT(info.err, HasSubstr("ipupodd is starting: it is restoring its state"));
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + seconds(5));
    auto watch = health->Watch(&context, HealthCheckRequest());
    HealthCheckResponse response;
    ASSERT_TRUE(watch->Read(&response));
    EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
    EXPECT_EQ(watch->Finish().error_code(), grpc::StatusCode::UNAVAILABLE) << "watch again";
  }

  std::optional<std::string> ready = server.ReadStdoutLine(seconds(60));
  ASSERT_TRUE(ready) << server.stderr_text();
  EXPECT_THAT(*ready, HasSubstr("ipupodd listening on " + address));
  EXPECT_TRUE(Eventually([&] { return Check(*health) == HealthCheckResponse::SERVING; },
                         std::chrono::milliseconds(5000)));
  CliResult partitions = RunCli(address, "alice", {"--json", "partition", "list"});
  ASSERT_EQ(partitions.exit_code, 0) << partitions.err;
  EXPECT_THAT(partitions.out, HasSubstr("\"kept\"")) << "the state came back";

  // A watcher hears NOT_SERVING as soon as the shutdown begins.
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(20));
  auto watch = health->Watch(&context, HealthCheckRequest());
  HealthCheckResponse response;
  ASSERT_TRUE(watch->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  server.Signal(SIGTERM);
  ASSERT_TRUE(watch->Read(&response)) << "the watch ended without a last status";
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  context.TryCancel();
  EXPECT_EQ(server.Wait(seconds(20)), 0) << server.stderr_text();
}

}  // namespace
}  // namespace ipupod::testing
