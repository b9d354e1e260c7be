// File: server/services.h
//
// The three ipupod.v1 services on gRPC's callback API. Each handler
// authenticates the caller (server/auth.h), translates the request into one
// scheduler call, converts the result (server/proto_convert.h) and the
// absl::Status (server/status_convert.h), and logs one line. No handler
// waits: resets finish from the scheduler's completion callback and attach
// streams from scheduler events (server/attach_stream.h). Privileged and
// destructive actions write their audit record (one SQLite commit, like the
// scheduler's own durable writes) before they answer (server/audit_trail.h).
//
// Thread safety: stateless besides the shared, immutable ServiceEnv, which
// must outlive the services.
#ifndef IPUPOD_SERVER_SERVICES_H_
#define IPUPOD_SERVER_SERVICES_H_

#include "ipupod/v1/pod.grpc.pb.h"
#include "server/service_env.h"

namespace ipupod::server {

class PodServiceImpl final : public v1::PodService::CallbackService {
 public:
  explicit PodServiceImpl(const ServiceEnv& env) : env_(env) {}
  grpc::ServerUnaryReactor* GetPodInfo(grpc::CallbackServerContext* context,
                                       const v1::GetPodInfoRequest* request,
                                       v1::GetPodInfoResponse* response) override;
  grpc::ServerUnaryReactor* InjectFault(grpc::CallbackServerContext* context,
                                        const v1::InjectFaultRequest* request,
                                        v1::InjectFaultResponse* response) override;
  grpc::ServerUnaryReactor* ResetIpu(grpc::CallbackServerContext* context,
                                     const v1::ResetIpuRequest* request,
                                     v1::ResetResponse* response) override;
  grpc::ServerUnaryReactor* ResetPod(grpc::CallbackServerContext* context,
                                     const v1::ResetPodRequest* request,
                                     v1::ResetResponse* response) override;
  grpc::ServerUnaryReactor* RepairIpu(grpc::CallbackServerContext* context,
                                      const v1::RepairIpuRequest* request,
                                      v1::RepairIpuResponse* response) override;

 private:
  const ServiceEnv& env_;
};

class PartitionServiceImpl final : public v1::PartitionService::CallbackService {
 public:
  explicit PartitionServiceImpl(const ServiceEnv& env) : env_(env) {}
  grpc::ServerUnaryReactor* CreatePartition(grpc::CallbackServerContext* context,
                                            const v1::CreatePartitionRequest* request,
                                            v1::Partition* response) override;
  grpc::ServerUnaryReactor* GetPartition(grpc::CallbackServerContext* context,
                                         const v1::GetPartitionRequest* request,
                                         v1::Partition* response) override;
  grpc::ServerUnaryReactor* ListPartitions(grpc::CallbackServerContext* context,
                                           const v1::ListPartitionsRequest* request,
                                           v1::ListPartitionsResponse* response) override;
  grpc::ServerUnaryReactor* RemovePartition(grpc::CallbackServerContext* context,
                                            const v1::RemovePartitionRequest* request,
                                            v1::RemovePartitionResponse* response) override;
  grpc::ServerUnaryReactor* ResetPartition(grpc::CallbackServerContext* context,
                                           const v1::ResetPartitionRequest* request,
                                           v1::ResetResponse* response) override;

 private:
  const ServiceEnv& env_;
};

class SessionServiceImpl final : public v1::SessionService::CallbackService {
 public:
  explicit SessionServiceImpl(const ServiceEnv& env) : env_(env) {}
  grpc::ServerWriteReactor<v1::AttachEvent>* Attach(grpc::CallbackServerContext* context,
                                                    const v1::AttachRequest* request) override;
  grpc::ServerBidiReactor<v1::AttachRequest, v1::AttachEvent>* Hold(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* Detach(grpc::CallbackServerContext* context,
                                   const v1::DetachRequest* request,
                                   v1::DetachResponse* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context,
                                       const v1::GetSessionRequest* request,
                                       v1::SessionInfo* response) override;
  grpc::ServerUnaryReactor* ListQueue(grpc::CallbackServerContext* context,
                                      const v1::ListQueueRequest* request,
                                      v1::ListQueueResponse* response) override;
  grpc::ServerUnaryReactor* GetShares(grpc::CallbackServerContext* context,
                                      const v1::GetSharesRequest* request,
                                      v1::GetSharesResponse* response) override;
  grpc::ServerUnaryReactor* ResetSession(grpc::CallbackServerContext* context,
                                         const v1::ResetSessionRequest* request,
                                         v1::ResetResponse* response) override;

 private:
  const ServiceEnv& env_;
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_SERVICES_H_
