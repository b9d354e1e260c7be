// File: server/rpc_metrics_interceptor.h
//
// Counts every gRPC call the server ends, by method and status code, with
// its duration from start to status (server/metrics/rpc_metrics.h). Registered
// after RequestParseErrorsFactory, so it sees the status the client gets
// (gRPC runs the send hooks of interceptors in registration order). A call
// that ends without a status sent (the client went away first) counts as
// CANCELLED.
//
// KnownRpcMethods() is the list of method paths the metrics name: every
// method of the ipupod.v1 services, gRPC's health checking and server
// reflection. Any other path a client asks for is counted as "other".
//
// Thread safety: one interceptor per call; gRPC may run its hooks on
// different threads, one at a time. RpcMetrics is thread-safe.
#ifndef IPUPOD_SERVER_RPC_METRICS_INTERCEPTOR_H_
#define IPUPOD_SERVER_RPC_METRICS_INTERCEPTOR_H_

#include <string>
#include <vector>

#include <grpcpp/support/server_interceptor.h>

#include "server/metrics/rpc_metrics.h"

namespace ipupod::server {

std::vector<std::string> KnownRpcMethods();

class RpcMetricsFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `rpcs` must outlive the gRPC server.
  explicit RpcMetricsFactory(metrics::RpcMetrics* rpcs) : rpcs_(rpcs) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  metrics::RpcMetrics* const rpcs_;
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_RPC_METRICS_INTERCEPTOR_H_
