// File: client/unary_call.h
//
// Internal to the client library: the definition of Client::Call, the
// wrapper every unary RPC goes through (a fresh context with the rpc
// deadline and the caller's identity, then ConvertCallStatus), and AddIdentity. It is a
// member template, so each .cc that wraps unary RPCs (client.cc, jobs.cc)
// includes its definition from here. Not for applications.
//
// Thread safety: as Client (each call has its own context).
#ifndef IPUPOD_CLIENT_UNARY_CALL_H_
#define IPUPOD_CLIENT_UNARY_CALL_H_

#include "client/client.h"
#include "client/grpc_status.h"

namespace ipupod::client {

// The caller's identity on a fresh context: `authorization: Bearer TOKEN`,
// or `x-ipupod-user: USER` without a token (client.cc).
void AddIdentity(const ClientOptions& options, grpc::ClientContext& context);

template <typename Response, typename Invoke>
absl::StatusOr<Response> Client::Call(absl::string_view method, Invoke invoke) {
  grpc::ClientContext context;
  PrepareContext(context, options_.rpc_timeout);
  Response response;
  grpc::Status status = invoke(&context, &response);
  if (status.ok()) return response;
  return ConvertCallStatus(status, context.GetServerTrailingMetadata(),
                           SiteOf(options_, method, options_.rpc_timeout));
}

}  // namespace ipupod::client

#endif  // IPUPOD_CLIENT_UNARY_CALL_H_
