// File: tools/bench/echo_server.h
//
// A bare gRPC server (callback API, loopback, ephemeral port) serving
// ipupod.bench.Echo and ipupod.bench.Bulk: the references for ipupod's RPC
// and streaming-copy figures.
#ifndef IPUPOD_BENCH_ECHO_SERVER_H_
#define IPUPOD_BENCH_ECHO_SERVER_H_

#include <cstddef>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "echo.grpc.pb.h"

namespace ipupod::bench {

// Messages of a bulk copy: 1 MiB, as ipupod's tensor streams use.
inline constexpr size_t kBulkChunkBytes = size_t{1} << 20;

class EchoServer {
 public:
  EchoServer();
  ~EchoServer();
  EchoServer(const EchoServer&) = delete;
  EchoServer& operator=(const EchoServer&) = delete;
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  class Service : public Echo::CallbackService {
    grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* context, const Blob* request,
                                   Blob* response) override;
    grpc::ServerBidiReactor<Blob, Blob>* Converse(grpc::CallbackServerContext* context) override;
  };
  // Synchronous API, like ipupodd's ExecutionService (CPU-bound transfers).
  class BulkService : public Bulk::Service {
    grpc::Status Sink(grpc::ServerContext* context, grpc::ServerReader<Blob>* reader,
                      Size* response) override;
    grpc::Status Source(grpc::ServerContext* context, const Size* request,
                        grpc::ServerWriter<Blob>* writer) override;
  };
  Service service_;
  BulkService bulk_service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace ipupod::bench

#endif  // IPUPOD_BENCH_ECHO_SERVER_H_
