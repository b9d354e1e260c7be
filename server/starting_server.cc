#include "server/starting_server.h"

#include <chrono>
#include <utility>

#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"

namespace ipupod::server {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

grpc::Status Starting() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string(kStartingMessage));
}

// Watch: NOT_SERVING once, then the stream ends UNAVAILABLE (watch again).
class NotServingOnce final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  NotServingOnce() {
    response_.set_status(HealthCheckResponse::NOT_SERVING);
    StartWrite(&response_);
  }
  void OnWriteDone(bool ok) override { Finish(Starting()); }
  void OnDone() override { delete this; }

 private:
  HealthCheckResponse response_;
};

// Any other method: UNAVAILABLE before reading anything.
class UnavailableReactor final : public grpc::ServerGenericBidiReactor {
 public:
  UnavailableReactor() { Finish(Starting()); }
  void OnDone() override { delete this; }
};

}  // namespace

class StartingServer::Health final : public grpc::health::v1::Health::CallbackService {
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const HealthCheckRequest* request,
                                  HealthCheckResponse* response) override {
    response->set_status(HealthCheckResponse::NOT_SERVING);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerWriteReactor<HealthCheckResponse>* Watch(grpc::CallbackServerContext* context,
                                                       const HealthCheckRequest* request) override {
    return new NotServingOnce();
  }
};

class StartingServer::Unavailable final : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    return new UnavailableReactor();
  }
};

StartingServer::StartingServer()
    : health_(std::make_unique<Health>()), unavailable_(std::make_unique<Unavailable>()) {}

StartingServer::~StartingServer() { Stop(); }

absl::StatusOr<std::unique_ptr<StartingServer>> StartingServer::Start(
    const std::string& listen, std::shared_ptr<grpc::ServerCredentials> credentials) {
  std::unique_ptr<StartingServer> starting(new StartingServer());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, std::move(credentials), &starting->port_);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port in use is an error
  builder.RegisterService(starting->health_.get());
  builder.RegisterCallbackGenericService(starting->unavailable_.get());
  starting->server_ = builder.BuildAndStart();
  if (starting->server_ == nullptr || starting->port_ == 0) {
    if (starting->server_ != nullptr) starting->server_->Shutdown();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen,
                     ": the address is in use or not available here; pick another --listen"));
  }
  return starting;
}

void StartingServer::Stop() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now());  // its calls answer at once anyway
  server_->Wait();
  server_.reset();
}

}  // namespace ipupod::server
