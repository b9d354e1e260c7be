#include "client/cli/output.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/errors.h"
#include "common/format.h"
#include "common/utf8.h"

namespace ipupod::cli {
namespace {

std::vector<int64_t> ToIds(const google::protobuf::RepeatedField<uint32_t>& ids) {
  return std::vector<int64_t>(ids.begin(), ids.end());
}

// "IPU 3" or "IPUs 0-3,8".
std::string IpusPhrase(const google::protobuf::RepeatedField<uint32_t>& ids) {
  return absl::StrCat(ids.size() == 1 ? "IPU " : "IPUs ", CompactIpus(ids));
}

std::string AgeText(int64_t since_unix_ms, absl::Time now) {
  if (since_unix_ms <= 0) return "-";
  return FormatClockDuration(absl::ToDoubleSeconds(now - absl::FromUnixMillis(since_unix_ms)));
}

}  // namespace

std::string OrDash(absl::string_view text) { return text.empty() ? "-" : std::string(text); }

// ---------------------------------------------------------------- pieces

std::string CompactIpus(std::vector<int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::vector<std::string> parts;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(ids[i]) : absl::StrCat(ids[i], "-", ids[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

std::string CompactIpus(const google::protobuf::RepeatedField<uint32_t>& ids) {
  return CompactIpus(ToIds(ids));
}

std::string CompactIpus(const std::vector<int>& ids) {
  return CompactIpus(std::vector<int64_t>(ids.begin(), ids.end()));
}

absl::string_view IpuStateName(v1::IpuState state) {
  switch (state) {
    case v1::IPU_STATE_IDLE:
      return "idle";
    case v1::IPU_STATE_ATTACHED:
      return "attached";
    case v1::IPU_STATE_BUSY:
      return "busy";
    case v1::IPU_STATE_ERROR:
      return "error";
    case v1::IPU_STATE_RESETTING:
      return "resetting";
    case v1::IPU_STATE_FAILED:
      return "failed";
    default:
      return "unknown";
  }
}

absl::string_view RecoveryActionText(v1::RecoveryAction action) {
  switch (action) {
    case v1::RECOVERY_ACTION_IPU_RESET:
      return "IPU_RESET";
    case v1::RECOVERY_ACTION_LINK_RESET:
      return "LINK_RESET";
    case v1::RECOVERY_ACTION_PARTITION_RESET:
      return "PARTITION_RESET";
    case v1::RECOVERY_ACTION_FULL_RESET:
      return "FULL_RESET";
    default:
      return "";
  }
}

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  // A cell is one line of what it shows: a name with "\n" or ESC in it
  // forges no row and moves no cursor.
  for (std::string& cell : cells) cell = EscapeControls(cell);
  rows_.push_back(std::move(cells));
}

std::string Table::Render() const {
  std::vector<size_t> widths;
  for (const Column& column : columns_) widths.push_back(column.header.size());
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string out;
  // Appended in place: a listing of thousands of rows makes no string per cell.
  auto render_row = [&](const std::vector<std::string>& cells) {
    const size_t start = out.size();
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) out.append(2, ' ');
      const size_t pad = widths[c] - cells[c].size();
      if (columns_[c].align == Align::kRight) out.append(pad, ' ');
      out += cells[c];
      if (columns_[c].align != Align::kRight) out.append(pad, ' ');
    }
    while (out.size() > start && out.back() == ' ') out.pop_back();
    out += '\n';
  };
  std::vector<std::string> headers;
  for (const Column& column : columns_) headers.push_back(column.header);
  render_row(headers);
  for (const auto& row : rows_) render_row(row);
  return out;
}

std::string JsonLine(const Json& doc) {
  return doc.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

// ---------------------------------------------------------------- JSON

Json IpuJson(const v1::Ipu& ipu) {
  Json doc = {{"id", ipu.id()},
              {"state", IpuStateName(ipu.state())},
              {"partition", ipu.partition()},
              {"session", ipu.session()},
              {"owner", ipu.owner()},
              {"memory_used_bytes", ipu.memory_used_bytes()},
              {"memory_total_bytes", ipu.memory_total_bytes()}};
  if (ipu.state() == v1::IPU_STATE_ERROR || ipu.recovery_action() != v1::RECOVERY_ACTION_NONE) {
    doc["recovery_action"] = RecoveryActionText(ipu.recovery_action());
  }
  if (ipu.state() == v1::IPU_STATE_FAILED || !ipu.failure_reason().empty()) {
    doc["failure_reason"] = ipu.failure_reason();
  }
  return doc;
}

Json PodJson(const v1::PodSummary& pod) {
  const v1::IpuSpec& spec = pod.ipu();
  Json ipu = {{"name", spec.name()},
              {"arch", spec.arch()},
              {"tiles", spec.tiles()},
              {"threads_per_tile", spec.threads_per_tile()},
              {"memory_bytes", spec.memory_bytes()},
              {"fp16_tflops", spec.fp16_tflops()},
              {"fp32_tflops", spec.fp32_tflops()},
              {"clock_mhz", spec.clock_mhz()},
              {"ipu_links", spec.ipu_links()},
              {"ipu_link_bandwidth_gbps", spec.ipu_link_bandwidth_gbps()},
              {"host_link_bandwidth_gbps", spec.host_link_bandwidth_gbps()}};
  return {{"name", pod.name()},           {"num_ipus", pod.num_ipus()},
          {"free_ipus", pod.free_ipus()}, {"failed_ipus", pod.failed_ipus()},
          {"sessions", pod.sessions()},   {"waiting", pod.waiting()},
          {"open_mode", pod.open_mode()}, {"server_version", pod.server_version()},
          {"ipu", std::move(ipu)}};
}

Json PartitionJson(const v1::Partition& partition) {
  return {{"name", partition.name()},
          {"size", partition.size()},
          {"ipus", JsonArray(partition.ipus())},
          {"device_id", partition.device_id()},
          {"owner", partition.owner()},
          {"sessions", JsonArray(partition.sessions())},
          {"created_unix_ms", partition.created_unix_ms()}};
}

Json SessionJson(const v1::SessionInfo& session) {
  return {{"session", session.session()},
          {"user", session.user()},
          {"ipus", JsonArray(session.ipus())},
          {"device_id", session.device_id()},
          {"requested_ipus", session.requested_ipus()},
          {"idle_ipus", JsonArray(session.idle_ipus())},
          {"partition", session.partition()},
          {"attached_unix_ms", session.attached_unix_ms()},
          {"client", session.client()},
          {"needs_load", session.needs_load()}};
}

Json PodInfoJson(const v1::GetPodInfoResponse& info) {
  Json ipus = Json::array(), partitions = Json::array(), sessions = Json::array();
  for (const v1::Ipu& ipu : info.ipus()) ipus.push_back(IpuJson(ipu));
  for (const v1::Partition& p : info.partitions()) partitions.push_back(PartitionJson(p));
  for (const v1::SessionInfo& s : info.sessions()) sessions.push_back(SessionJson(s));
  return {{"pod", PodJson(info.pod())},
          {"ipus", std::move(ipus)},
          {"partitions", std::move(partitions)},
          {"sessions", std::move(sessions)}};
}

Json PartitionListJson(const v1::ListPartitionsResponse& list) {
  Json partitions = Json::array();
  for (const v1::Partition& p : list.partitions()) partitions.push_back(PartitionJson(p));
  return {{"partitions", std::move(partitions)}};
}

Json QueuedJson(const v1::QueuePosition& position) {
  return {{"queued",
           {{"ticket", position.ticket()},
            {"position", position.position()},
            {"queue_length", position.queue_length()},
            {"blocking_sessions", JsonArray(position.blocking_sessions())}}}};
}

Json QueueJson(const v1::ListQueueResponse& queue) {
  Json entries = Json::array();
  for (const v1::QueueEntry& e : queue.entries()) {
    entries.push_back({{"position", e.position()},
                       {"ticket", e.ticket()},
                       {"user", e.user()},
                       {"num_ipus", e.num_ipus()},
                       {"partition", e.partition()},
                       {"waited_seconds", e.waited_seconds()},
                       {"timeout_seconds", e.timeout_seconds()},
                       {"client", e.client()},
                       {"account", e.account()},
                       {"qos", e.qos()},
                       {"job", e.job()},
                       {"priority", e.priority()},
                       {"reason", e.reason()},
                       {"fragmentation_delay_seconds", e.fragmentation_delay_seconds()},
                       {"expected_start_unix_ms", e.expected_start_unix_ms()}});
  }
  return {{"entries", std::move(entries)}, {"total", queue.total()}};
}

Json ResetJson(const v1::ResetResponse& reset) {
  return {{"reset_ipus", JsonArray(reset.reset_ipus())},
          {"affected_sessions", JsonArray(reset.affected_sessions())},
          {"simulated_seconds", reset.simulated_seconds()}};
}

Json InjectFaultJson(const v1::InjectFaultResponse& response) {
  return {{"affected_ipus", JsonArray(response.affected_ipus())},
          {"affected_sessions", JsonArray(response.affected_sessions())}};
}

Json DetachJson(absl::string_view session, const v1::DetachResponse& response) {
  return {{"session", session}, {"released_ipus", JsonArray(response.released_ipus())}};
}

Json RemovePartitionJson(absl::string_view name, const v1::RemovePartitionResponse& response) {
  return {{"name", name},
          {"removed", true},
          {"detached_sessions", JsonArray(response.detached_sessions())}};
}

Json RepairJson(const v1::RepairIpuResponse& response) {
  return {{"ipu", IpuJson(response.ipu())}};
}

Json ErrorJson(const absl::Status& status) {
  Json error = {{"code", absl::StatusCodeToString(status.code())}, {"message", status.message()}};
  if (status.GetPayload(kErrorKindPayload)) error["kind"] = ErrorKindName(GetErrorKind(status));
  if (GetRecoveryAction(status) != RecoveryAction::kNone) {
    error["recovery_action"] = ipupod::RecoveryActionName(GetRecoveryAction(status));
  }
  std::vector<int> ipus = GetErrorIpus(status);
  if (!ipus.empty()) error["ipus"] = ipus;
  return {{"error", std::move(error)}};
}

Json UsageErrorJson(absl::string_view message) {
  return {{"error", {{"code", "INVALID_ARGUMENT"}, {"message", message}, {"usage", true}}}};
}

// ---------------------------------------------------------------- text

namespace {

std::string PodSummaryText(const v1::PodSummary& pod) {
  std::string text = absl::StrFormat(
      "pod %s: %d IPUs (%s, %s, %s each); %d free, %d failed; %d session%s, %d waiting\n",
      OrDash(pod.name()), pod.num_ipus(), OrDash(pod.ipu().name()), OrDash(pod.ipu().arch()),
      FormatBytesTrimmed(pod.ipu().memory_bytes()), pod.free_ipus(), pod.failed_ipus(),
      pod.sessions(), pod.sessions() == 1 ? "" : "s", pod.waiting());
  absl::StrAppend(
      &text, "server ", OrDash(pod.server_version()), ", ",
      pod.open_mode() ? "open mode (identity from --user)" : "token mode (identity from --token)",
      "\n");
  return text;
}

std::string IpuTableText(const google::protobuf::RepeatedPtrField<v1::Ipu>& ipus) {
  Table table({{"IPU", Table::Align::kRight},
               {"STATE"},
               {"RECOVERY"},
               {"PARTITION"},
               {"SESSION"},
               {"OWNER"},
               {"MEMORY"}});
  std::string failures;
  for (const v1::Ipu& ipu : ipus) {
    std::string recovery = OrDash(RecoveryActionText(ipu.recovery_action()));
    if (ipu.state() == v1::IPU_STATE_FAILED) {
      recovery = "repair";
      absl::StrAppend(&failures, "IPU ", ipu.id(), " failed: ", OrDash(ipu.failure_reason()), "\n");
    }
    table.AddRow({absl::StrCat(ipu.id()), std::string(IpuStateName(ipu.state())), recovery,
                  OrDash(ipu.partition()), OrDash(ipu.session()), OrDash(ipu.owner()),
                  absl::StrCat(FormatBytesTrimmed(ipu.memory_used_bytes()), " / ",
                               FormatBytesTrimmed(ipu.memory_total_bytes()))});
  }
  return table.Render() + failures;
}

}  // namespace

std::string PodInfoText(const v1::GetPodInfoResponse& info, absl::Time now) {
  return absl::StrCat(PodSummaryText(info.pod()), "\n", IpuTableText(info.ipus()), "\n",
                      PartitionsText(info.partitions()), "\n", SessionsText(info.sessions(), now));
}

std::string PartitionsText(const google::protobuf::RepeatedPtrField<v1::Partition>& partitions) {
  if (partitions.empty()) return "no partitions\n";
  Table table({{"PARTITION"},
               {"SIZE", Table::Align::kRight},
               {"IPUS"},
               {"DEVICE", Table::Align::kRight},
               {"OWNER"},
               {"SESSIONS"}});
  for (const v1::Partition& p : partitions) {
    table.AddRow({p.name(), absl::StrCat(p.size()), CompactIpus(p.ipus()),
                  absl::StrCat(p.device_id()), OrDash(p.owner()),
                  OrDash(absl::StrJoin(p.sessions(), ","))});
  }
  return table.Render();
}

std::string PartitionText(const v1::Partition& p) {
  std::string created =
      p.created_unix_ms() > 0
          ? absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMillis(p.created_unix_ms()),
                             absl::UTCTimeZone())
          : "-";
  return absl::StrCat("partition: ", p.name(), "\nsize:      ", p.size(),
                      "\nipus:      ", OrDash(CompactIpus(p.ipus())),
                      "\ndevice:    ", p.device_id(), "\nowner:     ", OrDash(p.owner()),
                      "\nsessions:  ", OrDash(absl::StrJoin(p.sessions(), ", ")),
                      "\ncreated:   ", created, "\n");
}

std::string PartitionCreatedText(const v1::Partition& p) {
  return absl::StrCat("created partition ", p.name(), ": ", IpusPhrase(p.ipus()), " (device ",
                      p.device_id(), ")\n");
}

std::string RemovePartitionText(absl::string_view name, const v1::RemovePartitionResponse& r) {
  std::string text = absl::StrCat("removed partition ", name, "\n");
  if (!r.detached_sessions().empty()) {
    absl::StrAppend(&text, "detached sessions: ", absl::StrJoin(r.detached_sessions(), ", "), "\n");
  }
  return text;
}

std::string SessionsText(const google::protobuf::RepeatedPtrField<v1::SessionInfo>& sessions,
                         absl::Time now) {
  if (sessions.empty()) return "no sessions\n";
  Table table({{"SESSION"},
               {"USER"},
               {"IPUS"},
               {"DEVICE", Table::Align::kRight},
               {"PARTITION"},
               {"AGE", Table::Align::kRight},
               {"CLIENT"}});
  for (const v1::SessionInfo& s : sessions) {
    table.AddRow({s.session(), OrDash(s.user()), CompactIpus(s.ipus()), absl::StrCat(s.device_id()),
                  OrDash(s.partition()), AgeText(s.attached_unix_ms(), now), OrDash(s.client())});
  }
  return table.Render();
}

std::string SessionText(const v1::SessionInfo& s, absl::Time now) {
  return absl::StrCat(
      "session:   ", s.session(), "\nuser:      ", OrDash(s.user()),
      "\nipus:      ", OrDash(CompactIpus(s.ipus())), "\ndevice:    ", s.device_id(),
      "\nrequested: ", s.requested_ipus(), "\nidle:      ", OrDash(CompactIpus(s.idle_ipus())),
      "\npartition: ", OrDash(EscapeControls(s.partition())),
      "\nage:       ", AgeText(s.attached_unix_ms(), now),
      "\nclient:    ", OrDash(EscapeControls(s.client())),
      "\nneeds load: ", s.needs_load() ? "yes (a reset cleared device memory)" : "no", "\n");
}

std::string GrantText(const v1::SessionInfo& s) {
  std::string text = absl::StrCat("attached session ", s.session(), ": ", IpusPhrase(s.ipus()),
                                  " (device ", s.device_id(), ")");
  if (!s.partition().empty()) absl::StrAppend(&text, " in partition ", s.partition());
  if (!s.idle_ipus().empty()) {
    absl::StrAppend(&text, "; requested ", s.requested_ipus(), ", --auto-round reserved ",
                    IpusPhrase(s.idle_ipus()), " extra (left idle)");
  }
  return text + "\n";
}

std::string QueuedText(const v1::QueuePosition& q) {
  std::string text = absl::StrCat("waiting in the queue: position ", q.position(), " of ",
                                  q.queue_length(), " (ticket ", q.ticket(), ")");
  if (!q.blocking_sessions().empty()) {
    absl::StrAppend(&text, "; IPUs held by ", absl::StrJoin(q.blocking_sessions(), ", "));
  }
  return text + "\n";
}

std::string QueueText(const v1::ListQueueResponse& queue) {
  if (queue.entries().empty()) return "the queue is empty\n";
  Table table({{"POS", Table::Align::kRight},
               {"TICKET"},
               {"USER"},
               {"ACCOUNT"},
               {"QOS"},
               {"IPUS", Table::Align::kRight},
               {"PARTITION"},
               {"PRIORITY", Table::Align::kRight},
               {"REASON"},
               {"WAITED", Table::Align::kRight},
               {"TIMEOUT", Table::Align::kRight},
               {"CLIENT"}});
  for (const v1::QueueEntry& e : queue.entries()) {
    table.AddRow({absl::StrCat(e.position()), e.ticket(), OrDash(e.user()), OrDash(e.account()),
                  OrDash(e.qos()), absl::StrCat(e.num_ipus()), OrDash(e.partition()),
                  absl::StrFormat("%.0f", e.priority()), OrDash(e.reason()),
                  FormatClockDuration(e.waited_seconds()),
                  e.timeout_seconds() > 0 ? FormatClockDuration(e.timeout_seconds()) : "none",
                  OrDash(e.client())});
  }
  std::string text = table.Render();
  const int more = static_cast<int>(queue.total()) - queue.entries_size();
  if (more > 0) {
    absl::StrAppend(&text, "... and ", more, " more waiting (", queue.total(),
                    " in all); `ipupod queue --all` lists every one\n");
  }
  return text;
}

std::string ResetText(absl::string_view what, const v1::ResetResponse& reset) {
  std::string text = absl::StrCat(
      "reset ", what, ": ",
      reset.reset_ipus().empty() ? "no IPUs needed it" : IpusPhrase(reset.reset_ipus()),
      " (simulated ", FormatClockDuration(reset.simulated_seconds()), ")\n");
  if (!reset.affected_sessions().empty()) {
    absl::StrAppend(&text, "sessions that must load again: ",
                    absl::StrJoin(reset.affected_sessions(), ", "), "\n");
  }
  return text;
}

std::string InjectFaultText(uint32_t ipu, absl::string_view kind,
                            const v1::InjectFaultResponse& response) {
  std::string text =
      absl::StrCat("injected ", kind, " fault on IPU ", ipu, "; affected ",
                   response.affected_ipus().empty() ? std::string("no IPUs")
                                                    : IpusPhrase(response.affected_ipus()),
                   "\n");
  if (!response.affected_sessions().empty()) {
    absl::StrAppend(&text, "affected sessions: ", absl::StrJoin(response.affected_sessions(), ", "),
                    "\n");
  }
  return text;
}

std::string DetachText(absl::string_view session, const v1::DetachResponse& response) {
  return absl::StrCat("detached session ", session, "; released ",
                      response.released_ipus().empty() ? std::string("no IPUs")
                                                       : IpusPhrase(response.released_ipus()),
                      "\n");
}

std::string RepairText(const v1::RepairIpuResponse& response) {
  return absl::StrCat("repaired IPU ", response.ipu().id(), "; it is ",
                      IpuStateName(response.ipu().state()), " and back in service\n");
}

// ---------------------------------------------------------------- errors

namespace {

std::string IpuResetHint(const std::vector<int>& ipus, const HintContext& context) {
  if (!context.session.empty()) {
    return absl::StrCat("run `ipupod session reset ", context.session, "`, then load again");
  }
  if (ipus.empty()) return "reset the IPU with `ipupod ipu reset ID`, then load again";
  std::vector<std::string> commands;
  for (int ipu : ipus) commands.push_back(absl::StrCat("`ipupod ipu reset ", ipu, "`"));
  return absl::StrCat("run ", absl::StrJoin(commands, " and "), ", then load again");
}

std::string PartitionResetHint(const std::vector<int>& ipus, const HintContext& context) {
  if (!context.partition.empty()) {
    return absl::StrCat("run `ipupod partition reset ", context.partition, "`, then load again");
  }
  if (!context.session.empty()) {
    return absl::StrCat("run `ipupod session reset ", context.session, "`, then load again");
  }
  return absl::StrCat(
      "reset the partition (`ipupod partition reset NAME`) or the session "
      "(`ipupod session reset SESSION`) holding ",
      ipus.empty() ? std::string("the IPUs") : absl::StrCat("IPUs ", CompactIpus(ipus)),
      ", then load again");
}

std::vector<std::string> DeviceHints(const absl::Status& status, const HintContext& context) {
  std::vector<int> ipus = GetErrorIpus(status);
  switch (GetErrorKind(status)) {
    case ErrorKind::kRecoverable:
      switch (GetRecoveryAction(status)) {
        case RecoveryAction::kIpuReset:
          return {IpuResetHint(ipus, context)};
        case RecoveryAction::kLinkReset:
        case RecoveryAction::kPartitionReset:
          return {PartitionResetHint(ipus, context)};
        case RecoveryAction::kFullReset:
          return {"an admin must run `ipupod pod reset` (it resets every IPU in the pod)"};
        case RecoveryAction::kNone:
          return {};
      }
      return {};
    case ErrorKind::kUnrecoverable:
      return {absl::StrCat(
          ipus.empty() ? std::string("the IPU") : absl::StrCat("IPU ", CompactIpus(ipus)),
          " left service; after analysis an admin returns it with `ipupod ipu repair ",
          ipus.empty() ? std::string("ID") : absl::StrCat(ipus.front()), "`")};
    default:
      return {};
  }
}

std::vector<std::string> Hints(const absl::Status& status, const HintContext& context) {
  if (status.GetPayload(kErrorKindPayload)) {
    std::vector<std::string> hints = DeviceHints(status, context);
    if (!hints.empty()) return hints;
  }
  switch (status.code()) {
    case absl::StatusCode::kUnauthenticated:
      // A failed TLS handshake (client/grpc_status.h) says its own fix.
      if (absl::StartsWith(status.message(), "TLS handshake")) return {};
      return {"pass --token TOKEN or set IPUPOD_TOKEN (this server requires a token)"};
    case absl::StatusCode::kPermissionDenied:
      // Account and QoS refusals say what to do themselves (`ipupod shares`).
      if (absl::StrContains(status.message(), "account") ||
          absl::StrContains(status.message(), "QoS")) {
        return {"`ipupod shares` lists the accounts; check --token / IPUPOD_TOKEN (or --user)"};
      }
      return {
          "only the owner or an admin may do this; check --token / IPUPOD_TOKEN "
          "(or --user in open mode)"};
    case absl::StatusCode::kResourceExhausted:
      if (context.attach_without_wait && !absl::StrContains(status.message(), "--wait")) {
        return {"add --wait to queue until IPUs are free (see `ipupod info` and `ipupod queue`)"};
      }
      return {};
    default:
      return {};
  }
}

}  // namespace

std::string ErrorText(const absl::Status& status, const HintContext& hint) {
  std::string text = absl::StrCat("error: ", status.message(), "\n");
  // "application" is the default reading of any error: only device errors
  // get a kind line.
  ErrorKind kind = GetErrorKind(status);
  if (status.GetPayload(kErrorKindPayload) &&
      (kind == ErrorKind::kRecoverable || kind == ErrorKind::kUnrecoverable)) {
    absl::StrAppend(&text, "kind: ", ErrorKindName(kind));
    if (GetRecoveryAction(status) != RecoveryAction::kNone) {
      absl::StrAppend(&text,
                      ", recovery action: ", ipupod::RecoveryActionName(GetRecoveryAction(status)));
    }
    absl::StrAppend(&text, "\n");
  }
  std::vector<int> ipus = GetErrorIpus(status);
  if (!ipus.empty()) {
    absl::StrAppend(&text, "ipus: ", CompactIpus(ipus), "\n");
  }
  for (const std::string& line : Hints(status, hint)) absl::StrAppend(&text, "hint: ", line, "\n");
  return text;
}

}  // namespace ipupod::cli
