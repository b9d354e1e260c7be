#include "server/proto_convert.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace ipupod::server {
namespace {

// Longest attach wait the server accepts (0 = no limit is still allowed).
constexpr double kWaitTimeoutSecondsMax = 30.0 * 24 * 3600;
constexpr double kTimeLimitSecondsMax = 365.0 * 24 * 3600;
constexpr size_t kAssociationNameMax = 64;

void CopyAll(const std::vector<std::string>& values,
             google::protobuf::RepeatedPtrField<std::string>* out) {
  out->Reserve(static_cast<int>(values.size()));
  for (const std::string& v : values) *out->Add() = v;
}

void IpusOfBlock(const device::Block& block, google::protobuf::RepeatedField<uint32_t>* out) {
  for (int i = 0; i < block.size; ++i) out->Add(static_cast<uint32_t>(block.start + i));
}

}  // namespace

v1::IpuState ToProto(device::IpuState state) {
  switch (state) {
    case device::IpuState::kIdle:
      return v1::IPU_STATE_IDLE;
    case device::IpuState::kAttached:
      return v1::IPU_STATE_ATTACHED;
    case device::IpuState::kBusy:
      return v1::IPU_STATE_BUSY;
    case device::IpuState::kError:
      return v1::IPU_STATE_ERROR;
    case device::IpuState::kResetting:
      return v1::IPU_STATE_RESETTING;
    case device::IpuState::kFailed:
      return v1::IPU_STATE_FAILED;
  }
  return v1::IPU_STATE_UNSPECIFIED;
}

v1::RecoveryAction ToProto(RecoveryAction action) {
  switch (action) {
    case RecoveryAction::kNone:
      return v1::RECOVERY_ACTION_NONE;
    case RecoveryAction::kIpuReset:
      return v1::RECOVERY_ACTION_IPU_RESET;
    case RecoveryAction::kLinkReset:
      return v1::RECOVERY_ACTION_LINK_RESET;
    case RecoveryAction::kPartitionReset:
      return v1::RECOVERY_ACTION_PARTITION_RESET;
    case RecoveryAction::kFullReset:
      return v1::RECOVERY_ACTION_FULL_RESET;
  }
  return v1::RECOVERY_ACTION_NONE;
}

void ToProto(const device::IpuSpec& spec, v1::IpuSpec* out) {
  out->set_name(std::string(spec.name));
  out->set_arch(std::string(spec.arch));
  out->set_tiles(spec.tiles);
  out->set_threads_per_tile(spec.threads_per_tile);
  out->set_memory_bytes(spec.memory_bytes);
  out->set_fp16_tflops(spec.fp16_flops / 1e12);
  out->set_fp32_tflops(spec.fp32_flops / 1e12);
  out->set_clock_mhz(spec.clock_mhz);
  out->set_ipu_links(spec.ipu_links);
  out->set_ipu_link_bandwidth_gbps(spec.ipu_link_bytes_per_s / 1e9);
  out->set_host_link_bandwidth_gbps(spec.host_link_bytes_per_s / 1e9);
}

void ToProto(const scheduler::IpuView& view, v1::Ipu* out) {
  out->set_id(static_cast<uint32_t>(view.id));
  out->set_state(ToProto(view.state));
  out->set_recovery_action(ToProto(view.recovery_action));
  out->set_partition(view.partition);
  out->set_session(view.session);
  out->set_owner(view.owner);
  out->set_memory_used_bytes(view.memory_used_bytes);
  out->set_memory_total_bytes(view.memory_total_bytes);
  out->set_failure_reason(view.failure_reason);
}

void ToProto(const scheduler::PartitionView& view, v1::Partition* out) {
  out->set_name(view.name);
  out->set_size(static_cast<uint32_t>(view.block.size));
  IpusOfBlock(view.block, out->mutable_ipus());
  out->set_device_id(static_cast<uint32_t>(view.device_id));
  out->set_owner(view.owner);
  out->set_created_unix_ms(view.created_unix_ms);
  CopyAll(view.sessions, out->mutable_sessions());
}

void ToProto(const scheduler::SessionView& view, v1::SessionInfo* out) {
  out->set_session(view.id);
  out->set_user(view.user);
  for (int ipu : view.ipus) out->add_ipus(static_cast<uint32_t>(ipu));
  out->set_device_id(static_cast<uint32_t>(view.device_id));
  out->set_requested_ipus(static_cast<uint32_t>(view.requested_ipus));
  for (int ipu : view.idle_ipus) out->add_idle_ipus(static_cast<uint32_t>(ipu));
  out->set_partition(view.partition);
  out->set_attached_unix_ms(view.attached_unix_ms);
  out->set_client(view.client);
  out->set_needs_load(view.needs_load);
  out->set_account(view.account);
  out->set_qos(view.qos);
  out->set_job(view.job);
  out->set_expected_end_unix_ms(view.expected_end_unix_ms);
  out->set_waited_seconds(view.waited_seconds);
  out->set_fragmentation_delay_seconds(view.fragmentation_delay_seconds);
}

void ToProto(const scheduler::QueuePositionView& view, v1::QueuePosition* out) {
  out->set_ticket(view.ticket);
  out->set_position(static_cast<uint32_t>(view.position));
  out->set_queue_length(static_cast<uint32_t>(view.queue_length));
  CopyAll(view.blocking_sessions, out->mutable_blocking_sessions());
}

void ToProto(const scheduler::QueueEntryView& view, v1::QueueEntry* out) {
  out->set_ticket(view.ticket);
  out->set_position(static_cast<uint32_t>(view.position));
  out->set_user(view.user);
  out->set_num_ipus(static_cast<uint32_t>(view.num_ipus));
  out->set_partition(view.partition);
  out->set_waited_seconds(view.waited_seconds);
  out->set_timeout_seconds(view.timeout_seconds);
  out->set_client(view.client);
  out->set_account(view.account);
  out->set_qos(view.qos);
  out->set_job(view.job);
  out->set_priority(view.priority);
  out->set_age_factor(view.factors.age);
  out->set_fair_share_factor(view.factors.fair_share);
  out->set_size_factor(view.factors.size);
  out->set_qos_factor(view.factors.qos);
  out->set_reason(view.reason);
  out->set_fragmentation_delay_seconds(view.fragmentation_delay_seconds);
  out->set_expected_start_unix_ms(view.expected_start_unix_ms);
}

void ToProto(const scheduler::ShareView& view, v1::AccountShare* out) {
  out->set_account(view.account);
  CopyAll(view.users, out->mutable_users());
  out->set_shares(view.shares);
  out->set_shares_fraction(view.shares_fraction);
  out->set_usage_ipu_seconds(view.usage_ipu_seconds);
  out->set_usage_fraction(view.usage_fraction);
  out->set_fair_share_factor(view.fair_share_factor);
  out->set_ipus_held(static_cast<uint32_t>(view.ipus_held));
  out->set_window_ipu_hours(view.window_ipu_hours);
}

void ToProto(const scheduler::ResetResult& result, v1::ResetResponse* out) {
  for (int ipu : result.reset_ipus) out->add_reset_ipus(static_cast<uint32_t>(ipu));
  CopyAll(result.affected_sessions, out->mutable_affected_sessions());
  out->set_simulated_seconds(result.simulated_seconds);
}

void ToProto(const scheduler::FaultResult& result, v1::InjectFaultResponse* out) {
  for (int ipu : result.affected_ipus) out->add_affected_ipus(static_cast<uint32_t>(ipu));
  CopyAll(result.affected_sessions, out->mutable_affected_sessions());
}

void ToProto(const scheduler::PodView& view, const device::IpuSpec& ipu, bool open_mode,
             v1::GetPodInfoResponse* out) {
  v1::PodSummary* pod = out->mutable_pod();
  pod->set_name(view.name);
  pod->set_num_ipus(static_cast<uint32_t>(view.num_ipus));
  ToProto(ipu, pod->mutable_ipu());
  pod->set_free_ipus(static_cast<uint32_t>(view.free_ipus));
  pod->set_failed_ipus(static_cast<uint32_t>(view.failed_ipus));
  pod->set_sessions(static_cast<uint32_t>(view.sessions.size()));
  pod->set_waiting(static_cast<uint32_t>(view.waiting));
  pod->set_open_mode(open_mode);
  pod->set_server_version(IPUPOD_VERSION);
  for (const auto& v : view.ipus) ToProto(v, out->add_ipus());
  for (const auto& v : view.partitions) ToProto(v, out->add_partitions());
  for (const auto& v : view.sessions) ToProto(v, out->add_sessions());
}

absl::StatusOr<scheduler::FaultKind> FromProto(v1::FaultKind kind) {
  switch (kind) {
    case v1::FAULT_KIND_IPU_RESET:
      return scheduler::FaultKind::kIpuReset;
    case v1::FAULT_KIND_LINK_RESET:
      return scheduler::FaultKind::kLinkReset;
    case v1::FAULT_KIND_PARTITION_RESET:
      return scheduler::FaultKind::kPartitionReset;
    case v1::FAULT_KIND_FULL_RESET:
      return scheduler::FaultKind::kFullReset;
    case v1::FAULT_KIND_UNRECOVERABLE:
      return scheduler::FaultKind::kUnrecoverable;
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("fault kind ", static_cast<int>(kind),
                                                 " is not one of ipu-reset, link-reset, "
                                                 "partition-reset, full-reset, unrecoverable"));
}

absl::StatusOr<scheduler::AttachRequest> FromProto(const v1::AttachRequest& request) {
  double timeout = request.wait_timeout_seconds();
  if (!std::isfinite(timeout) || timeout < 0 || timeout > kWaitTimeoutSecondsMax) {
    return absl::InvalidArgumentError(absl::StrCat("wait timeout ", timeout,
                                                   " s is out of range; use 0 (no limit) up to ",
                                                   kWaitTimeoutSecondsMax, " s"));
  }
  if (request.client().size() > kClientLabelMax) {
    return absl::InvalidArgumentError(absl::StrCat("client label is ", request.client().size(),
                                                   " bytes; the limit is ", kClientLabelMax));
  }
  scheduler::AttachRequest out;
  out.num_ipus = request.num_ipus();
  out.partition = request.partition();
  out.wait = request.wait();
  out.wait_timeout = absl::Seconds(timeout);
  out.auto_round = request.auto_round();
  out.client = request.client();
  const double limit = request.time_limit_seconds();
  if (!std::isfinite(limit) || limit < 0 || limit > kTimeLimitSecondsMax) {
    return absl::InvalidArgumentError(absl::StrCat("time limit ", limit,
                                                   " s is out of range; use 0 (none) up to ",
                                                   kTimeLimitSecondsMax, " s"));
  }
  out.time_limit = absl::Seconds(limit);
  // Names longer than any valid one are refused here, before they are quoted.
  if (request.account().size() > kAssociationNameMax ||
      request.qos().size() > kAssociationNameMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("account and QoS names are at most ", kAssociationNameMax, " characters"));
  }
  out.account = request.account();
  out.qos = request.qos();
  return out;
}

}  // namespace ipupod::server
