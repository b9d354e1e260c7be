#include "server/status/status_json.h"

#include <algorithm>
#include <map>
#include <string>

#include "common/errors.h"
#include "device/ipu.h"
#include "server/jobs/job.h"

namespace ipupod::status {
namespace {

using nlohmann::json;

// Text that reaches the JSON from clients (names, labels, reasons) may be
// any bytes; nlohmann's dump would throw on invalid UTF-8, so the document
// is dumped with replacement (server/), and nothing here needs to check.

// `rows` (already in display order) cut to kMaxRows, with the full count.
json Capped(const json& rows, size_t total) {
  return json{{"total", total}, {"rows", rows}, {"truncated", total > rows.size()}};
}

json IpuJson(const scheduler::IpuView& ipu) {
  return json{{"id", ipu.id},
              {"state", std::string(device::IpuStateName(ipu.state))},
              {"recovery_action", ipu.recovery_action == RecoveryAction::kNone
                                      ? std::string()
                                      : std::string(RecoveryActionName(ipu.recovery_action))},
              {"partition", ipu.partition},
              {"session", ipu.session},
              {"owner", ipu.owner},
              {"memory_used_bytes", ipu.memory_used_bytes},
              {"memory_total_bytes", ipu.memory_total_bytes},
              {"failure_reason", ipu.failure_reason}};
}

json PartitionJson(const scheduler::PartitionView& p) {
  return json{{"name", p.name},        {"first_ipu", p.block.start},
              {"size", p.block.size},  {"device_id", p.device_id},
              {"owner", p.owner},      {"created_unix_ms", p.created_unix_ms},
              {"sessions", p.sessions}};
}

json SessionJson(const scheduler::SessionView& s) {
  return json{{"id", s.id},
              {"user", s.user},
              {"ipus", s.ipus},
              {"requested_ipus", s.requested_ipus},
              {"partition", s.partition},
              {"account", s.account},
              {"qos", s.qos},
              {"job", s.job},
              {"client", s.client},
              {"attached_unix_ms", s.attached_unix_ms},
              {"expected_end_unix_ms", s.expected_end_unix_ms},
              {"needs_load", s.needs_load}};
}

json WaiterJson(const scheduler::QueueEntryView& w) {
  return json{{"position", w.position},
              {"user", w.user},
              {"num_ipus", w.num_ipus},
              {"partition", w.partition},
              {"account", w.account},
              {"qos", w.qos},
              {"job", w.job},
              {"client", w.client},
              {"priority", w.priority},
              {"reason", w.reason},
              {"waited_seconds", w.waited_seconds},
              {"expected_start_unix_ms", w.expected_start_unix_ms}};
}

json JobJson(const batch::JobView& j) {
  const jobs::JobRecord& r = j.record;
  return json{{"id", r.id},
              {"name", r.spec.name},
              {"user", r.user},
              {"account", r.spec.account},
              {"qos", r.spec.qos},
              {"state", std::string(jobs::JobStateName(r.state))},
              {"reason", r.reason},
              {"held", r.held},
              {"ipus", j.ipus},
              {"queue_position", j.queue_position},
              {"runs_done", j.live_runs},
              {"runs_total", r.runs_total},
              {"submitted_unix_ms", r.submitted_unix_ms},
              {"started_unix_ms", r.started_unix_ms},
              {"ended_unix_ms", r.ended_unix_ms}};
}

json EventJson(const PodEvent& e) {
  return json{{"time_unix_ms", e.time_unix_ms},
              {"kind", e.kind},
              {"what", e.what},
              {"origin", e.origin},
              {"target", e.target},
              {"ipus", e.ipus},
              {"sessions", e.sessions}};
}

json UsageJson(const accounting::UsageRow& row) {
  return json{{"user", row.key},
              {"ipu_hours", row.ipu_seconds / 3600.0},
              {"job_ipu_hours", row.job_ipu_seconds / 3600.0},
              {"sessions", row.sessions},
              {"jobs", row.jobs}};
}

template <typename T, typename F>
json Rows(const std::vector<T>& items, F&& to_json) {
  json rows = json::array();
  for (size_t i = 0; i < items.size() && i < kMaxRows; ++i) rows.push_back(to_json(items[i]));
  return Capped(rows, items.size());
}

json Summary(const StatusInputs& in) {
  std::map<std::string, int> by_state;
  for (device::IpuState s :
       {device::IpuState::kIdle, device::IpuState::kAttached, device::IpuState::kBusy,
        device::IpuState::kError, device::IpuState::kResetting, device::IpuState::kFailed}) {
    by_state[std::string(device::IpuStateName(s))] = 0;
  }
  int allocated = 0;
  for (const scheduler::IpuView& ipu : in.pod.ipus) {
    ++by_state[std::string(device::IpuStateName(ipu.state))];
    if (!ipu.session.empty()) ++allocated;
  }
  return json{{"ipus", in.pod.num_ipus},
              {"ipus_by_state", by_state},
              {"ipus_allocated", allocated},
              {"ipus_free", in.pod.free_ipus},
              {"partitions", in.pod.partitions.size()},
              {"sessions", in.pod.sessions.size()},
              {"waiting", in.queue.size()},
              {"jobs_active", in.active_jobs.size()}};
}

json Header(const StatusInputs& in) {
  return json{{"version", in.server.version},
              {"pod", in.pod.name},
              {"address", in.server.address},
              {"mode", in.server.mode},
              {"tls", in.server.tls},
              {"started_unix_ms", in.server.started_unix_ms},
              {"now_unix_ms", in.now_unix_ms},
              {"viewer", json{{"user", in.viewer.user}, {"admin", in.viewer.admin}}}};
}

}  // namespace

json StatusJson(const StatusInputs& in) {
  json ipus = json::array();
  for (const scheduler::IpuView& ipu : in.pod.ipus) ipus.push_back(IpuJson(ipu));
  json partitions = json::array();
  for (const scheduler::PartitionView& p : in.pod.partitions)
    partitions.push_back(PartitionJson(p));
  return json{
      {"server", Header(in)},
      {"summary", Summary(in)},
      {"ipus", std::move(ipus)},
      {"partitions", std::move(partitions)},
      {"sessions", Rows(in.pod.sessions, SessionJson)},
      {"queue", Rows(in.queue, WaiterJson)},
      {"jobs",
       json{{"active", Rows(in.active_jobs, JobJson)}, {"recent", Rows(in.recent_jobs, JobJson)}}},
      {"events", Rows(in.events, EventJson)},
      {"usage", json{{"window_hours", in.usage_window_hours},
                     {"everyone", in.usage_everyone},
                     {"by_user", Rows(in.usage, UsageJson)}}},
  };
}

}  // namespace ipupod::status
