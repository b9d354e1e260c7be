// File: server/proto_convert.h
//
// Scheduler views -> ipupod.v1 messages, and the few request fields that
// need checking on the way in (fault kinds, attach options). Pure functions;
// INVALID_ARGUMENT for request values the proto allows but ipupod does not.
#ifndef IPUPOD_SERVER_PROTO_CONVERT_H_
#define IPUPOD_SERVER_PROTO_CONVERT_H_

#include "absl/status/statusor.h"
#include "ipupod/v1/pod.pb.h"
#include "scheduler/scheduler.h"

namespace ipupod::server {

// Bound on the free-form client label of an attach request.
inline constexpr size_t kClientLabelMax = 256;

v1::IpuState ToProto(device::IpuState state);
v1::RecoveryAction ToProto(RecoveryAction action);
void ToProto(const device::IpuSpec& spec, v1::IpuSpec* out);
void ToProto(const scheduler::IpuView& view, v1::Ipu* out);
void ToProto(const scheduler::PartitionView& view, v1::Partition* out);
void ToProto(const scheduler::SessionView& view, v1::SessionInfo* out);
void ToProto(const scheduler::QueuePositionView& view, v1::QueuePosition* out);
void ToProto(const scheduler::QueueEntryView& view, v1::QueueEntry* out);
void ToProto(const scheduler::ShareView& view, v1::AccountShare* out);
void ToProto(const scheduler::ResetResult& result, v1::ResetResponse* out);
void ToProto(const scheduler::FaultResult& result, v1::InjectFaultResponse* out);
// The whole pod. `ipu` describes every IPU; open_mode/version are the server's.
void ToProto(const scheduler::PodView& view, const device::IpuSpec& ipu, bool open_mode,
             v1::GetPodInfoResponse* out);

absl::StatusOr<scheduler::FaultKind> FromProto(v1::FaultKind kind);
absl::StatusOr<scheduler::AttachRequest> FromProto(const v1::AttachRequest& request);

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_PROTO_CONVERT_H_
