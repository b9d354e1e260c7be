#include "tests/support/test_server.h"

#include <utility>

namespace ipupod::test_support {

server::ServerConfig FastServerConfig(const std::string& state_dir) {
  server::ServerConfig config;
  config.listen = "127.0.0.1:0";
  config.state_dir = state_dir;
  config.ipu_reset_ms = 20;
  config.partition_reset_ms = 20;
  config.pod_reset_ms = 20;
  config.log_level = "warn";
  return config;
}

absl::StatusOr<std::unique_ptr<TestServer>> TestServer::Start(ConfigAdjust adjust) {
  std::unique_ptr<TestServer> test_server(new TestServer());
  test_server->config_ = FastServerConfig(test_server->dir_.sub("state"));
  if (adjust) adjust(test_server->config_);
  absl::StatusOr<std::unique_ptr<server::PodServer>> server =
      server::PodServer::Start(test_server->config_);
  if (!server.ok()) return server.status();
  test_server->server_ = *std::move(server);
  return test_server;
}

TestServer::~TestServer() {
  if (server_ != nullptr) server_->Shutdown();
}

absl::Status TestServer::Restart() {
  server_->Shutdown();
  server_.reset();
  absl::StatusOr<std::unique_ptr<server::PodServer>> server = server::PodServer::Start(config_);
  if (!server.ok()) return server.status();
  server_ = *std::move(server);
  return absl::OkStatus();
}

}  // namespace ipupod::test_support
