// File: tests/support/test_server.h
//
// test_support::TestServer: a real ipupodd (server::PodServer) in the test's
// own process, on an ephemeral loopback port, with its state in a temporary
// directory it owns. Tests that drive the server through gRPC start one
// instead of writing their own config and start-up.
//
//   auto server = TestServer::Start();                 // POD16, fast resets
//   ASSERT_TRUE(server.ok()) << server.status();
//   Channel to (*server)->address() ...
//   ASSERT_TRUE((*server)->Restart().ok());           // same state dir, new port
//
// Thread safety: address() and state_dir() may be read from any thread;
// Restart() and destruction must not race with each other.
#ifndef IPUPOD_TESTS_SUPPORT_TEST_SERVER_H_
#define IPUPOD_TESTS_SUPPORT_TEST_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/config.h"
#include "server/server.h"
#include "tests/support/temp_dir.h"

namespace ipupod::test_support {

// Changes the defaults of a TestServer's config before it starts.
using ConfigAdjust = std::function<void(server::ServerConfig&)>;

// The config every TestServer starts from: loopback ephemeral port, state
// under `state_dir`, resets of 20 ms (not the GC200's seconds), warnings only.
server::ServerConfig FastServerConfig(const std::string& state_dir);

class TestServer {
 public:
  // Starts a server on FastServerConfig, changed by `adjust` if given.
  static absl::StatusOr<std::unique_ptr<TestServer>> Start(ConfigAdjust adjust = nullptr);
  ~TestServer();
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  // "127.0.0.1:PORT" of the running server.
  const std::string& address() const { return server_->address(); }
  const std::string& state_dir() const { return config_.state_dir; }
  const server::ServerConfig& config() const { return config_; }
  server::PodServer& server() { return *server_; }

  // Shuts the server down (as SIGTERM would) and starts a new one on the
  // same config and state dir: what survives is what the store kept. The
  // new server listens on a new ephemeral port; read address() again.
  absl::Status Restart();

 private:
  TestServer() = default;

  TempDir dir_;
  server::ServerConfig config_;
  std::unique_ptr<server::PodServer> server_;
};

}  // namespace ipupod::test_support

#endif  // IPUPOD_TESTS_SUPPORT_TEST_SERVER_H_
