// File: server/starting_server.h
//
// StartingServer: ipupodd's gRPC address while it restores its state at
// start (the scheduler's partitions and failed IPUs, the ledger's open
// records, the batch jobs). It binds the address first, so a probe or a
// client learns at once that the server is there and not yet ready, rather
// than being refused:
//   - grpc.health.v1.Health answers NOT_SERVING (Check; Watch sends it once
//     and ends UNAVAILABLE, so a watcher watches again);
//   - every other method answers UNAVAILABLE kStartingMessage, which the
//     clients treat as retryable.
// PodServer::Init stops it and binds the real server on the same port the
// moment the state is restored (a few milliseconds in which a new connection
// is refused, also UNAVAILABLE to a client), and only then says it is ready
// (the ready line, systemd's READY=1).
//
// Thread safety: Start and Stop from one thread; the handlers run on gRPC's.
#ifndef IPUPOD_SERVER_STARTING_SERVER_H_
#define IPUPOD_SERVER_STARTING_SERVER_H_

#include <memory>
#include <string>

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace ipupod::server {

inline constexpr absl::string_view kStartingMessage =
    "ipupodd is starting: it is restoring its state (partitions, usage records, batch jobs); "
    "retry in a moment";

// Test-only: milliseconds ipupodd waits, serving as a StartingServer, before
// it restores its state, so a test can see what a slow restore looks like.
inline constexpr char kRestoreDelayEnv[] = "IPUPOD_TEST_RESTORE_DELAY_MS";

class StartingServer {
 public:
  // Binds `listen` ("host:port"; port 0 = any free) with `credentials`.
  // UNAVAILABLE naming the address when it cannot.
  static absl::StatusOr<std::unique_ptr<StartingServer>> Start(
      const std::string& listen, std::shared_ptr<grpc::ServerCredentials> credentials);
  ~StartingServer();
  StartingServer(const StartingServer&) = delete;
  StartingServer& operator=(const StartingServer&) = delete;

  int port() const { return port_; }
  // Closes the address and ends the calls in flight. Idempotent.
  void Stop();

 private:
  class Health;
  class Unavailable;
  StartingServer();

  std::unique_ptr<Health> health_;
  std::unique_ptr<Unavailable> unavailable_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_STARTING_SERVER_H_
