// File: bench/echo_server.h
//
// A bare gRPC server (callback API, loopback, ephemeral port) serving
// ipupod.bench.Echo: the reference for ipupod's RPC figures.
#ifndef IPUPOD_BENCH_ECHO_SERVER_H_
#define IPUPOD_BENCH_ECHO_SERVER_H_

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "echo.grpc.pb.h"

namespace ipupod::bench {

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
  };
  Service service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace ipupod::bench

#endif  // IPUPOD_BENCH_ECHO_SERVER_H_
