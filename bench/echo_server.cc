#include "bench/echo_server.h"

namespace ipupod::bench {

grpc::ServerUnaryReactor* EchoServer::Service::Ping(grpc::CallbackServerContext* context,
                                                    const Blob* request, Blob* response) {
  response->set_data(request->data());
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

EchoServer::EchoServer() {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
}

EchoServer::~EchoServer() { server_->Shutdown(); }

}  // namespace ipupod::bench
