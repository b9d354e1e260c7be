#include "tools/bench/echo_server.h"

namespace ipupod::bench {

grpc::ServerUnaryReactor* EchoServer::Service::Ping(grpc::CallbackServerContext* context,
                                                    const Blob* request, Blob* response) {
  response->set_data(request->data());
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

namespace {

// Answers each message with its echo; at the half-close, one last message and OK.
class Conversation : public grpc::ServerBidiReactor<Blob, Blob> {
 public:
  Conversation() { StartRead(&in_); }
  void OnReadDone(bool ok) override {
    out_ = in_;
    if (ok) {
      StartWrite(&out_);
    } else {
      StartWriteAndFinish(&out_, grpc::WriteOptions(), grpc::Status::OK);
    }
  }
  void OnWriteDone(bool ok) override {
    if (ok) {
      StartRead(&in_);
    } else {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
    }
  }
  void OnDone() override { delete this; }

 private:
  Blob in_;
  Blob out_;
};

}  // namespace

grpc::ServerBidiReactor<Blob, Blob>* EchoServer::Service::Converse(
    grpc::CallbackServerContext* context) {
  return new Conversation();
}

grpc::Status EchoServer::BulkService::Sink(grpc::ServerContext* context,
                                           grpc::ServerReader<Blob>* reader, Size* response) {
  std::string stored;
  Blob blob;
  while (reader->Read(&blob)) stored.append(blob.data());
  response->set_bytes(stored.size());
  return grpc::Status::OK;
}

grpc::Status EchoServer::BulkService::Source(grpc::ServerContext* context, const Size* request,
                                             grpc::ServerWriter<Blob>* writer) {
  const std::string held(request->bytes(), '\x5a');
  Blob blob;
  for (size_t offset = 0; offset < held.size(); offset += kBulkChunkBytes) {
    blob.set_data(held.substr(offset, kBulkChunkBytes));
    if (!writer->Write(blob)) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  }
  return grpc::Status::OK;
}

EchoServer::EchoServer() {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(&service_);
  builder.RegisterService(&bulk_service_);
  server_ = builder.BuildAndStart();
}

EchoServer::~EchoServer() { server_->Shutdown(); }

}  // namespace ipupod::bench
