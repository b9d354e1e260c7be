// File: server/request_parse_errors.h
//
// Answers a request whose bytes do not parse as its method's protobuf
// message with INVALID_ARGUMENT and a message, instead of what gRPC's C++
// library sends on its own: UNIMPLEMENTED with an empty message on the
// callback API (its unary handler fails the call as if the method did not
// exist) and INTERNAL with an empty message on the sync API (protobuf's
// InitializationErrorString, empty for proto3). Neither reaches a handler,
// so only an interceptor can see it.
//
// Which calls: unary and server-streaming methods of ipupod.v1, whose one
// request is parsed before the handler runs; gRPC reports that parse to the
// interceptor as a received message of nullptr. A client-streaming message
// that does not parse ends the handler's reads as if the client had closed
// its side; the handler then answers INVALID_ARGUMENT for the stream it got
// (docs/design.md).
//
// Thread safety: one interceptor per call, used by gRPC one hook at a time.
// Errors: the status it sets - INVALID_ARGUMENT naming the method.
#ifndef IPUPOD_SERVER_REQUEST_PARSE_ERRORS_H_
#define IPUPOD_SERVER_REQUEST_PARSE_ERRORS_H_

#include <grpcpp/support/server_interceptor.h>
#include <grpcpp/support/status.h>

namespace ipupod::server {

// Whether `outgoing`, the status gRPC is about to send for a call whose
// request it could not read, is the parse failure: everything but
// RESOURCE_EXHAUSTED. A call the sync pool refused in a burst ("Server
// Threadpool Exhausted") never read its request either, and must reach the
// client as the refusal it is, not as a malformed request.
bool IsParseFailureStatus(const grpc::Status& outgoing);

// Register with ServerBuilder::experimental().SetInterceptorCreators.
class RequestParseErrorsFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_REQUEST_PARSE_ERRORS_H_
