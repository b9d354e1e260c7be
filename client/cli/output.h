// File: client/cli/output.h
//
// Everything `ipupod` prints: human tables and lines, and JSON documents.
// Pure functions from protos (and a clock value, for ages) to text, so the
// output is deterministic and unit-tested.
//
// JSON conventions (documented to scripts):
//   * every document is one compact line followed by "\n" (JsonLine);
//   * IPU states are lower-case words: idle, attached, busy, error,
//     resetting, failed; recovery actions are their wire names (IPU_RESET...);
//   * "no partition" / "no session" / "no owner" are "" (as on the wire);
//   * an error is {"error": {"code": "NOT_FOUND", "message": ..., "kind": ...,
//     "recovery_action": ..., "ipus": [...]}}, the last three when present.
// Human conventions: tables have aligned columns separated by two spaces, "-"
// marks an empty cell, IPU sets are compacted into ranges ("0-3,8").
//
// Thread safety: pure functions; Table is a plain value.
#ifndef IPUPOD_CLIENT_CLI_OUTPUT_H_
#define IPUPOD_CLIENT_CLI_OUTPUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include <google/protobuf/repeated_field.h>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "ipupod/v1/pod.pb.h"

namespace ipupod::cli {

namespace v1 = ::ipupod::v1;
using Json = nlohmann::ordered_json;

// ---------------------------------------------------------------- pieces

// `text`, or "-" for an empty table cell.
std::string OrDash(absl::string_view text);

// A container's items (a protobuf repeated field, a vector) as a JSON array.
template <typename Container>
Json JsonArray(const Container& items) {
  Json array = Json::array();
  for (const auto& item : items) array.push_back(item);
  return array;
}

// "0-3,8,10-11": sorted, duplicates dropped, runs of 2+ as "a-b". "" if empty.
std::string CompactIpus(std::vector<int64_t> ids);
std::string CompactIpus(const google::protobuf::RepeatedField<uint32_t>& ids);
std::string CompactIpus(const std::vector<int>& ids);

absl::string_view IpuStateName(v1::IpuState state);               // "idle", ... "unknown"
absl::string_view RecoveryActionText(v1::RecoveryAction action);  // "IPU_RESET"; "" for NONE

// A text table: one header row, then rows; columns padded to the widest
// cell, two spaces apart, numeric-looking columns right-aligned when so
// declared. No trailing spaces.
class Table {
 public:
  enum class Align { kLeft, kRight };
  struct Column {
    std::string header;
    Align align = Align::kLeft;
  };
  explicit Table(std::vector<Column> columns);
  // REQUIRES: cells.size() == number of columns.
  void AddRow(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }
  std::string Render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// The compact one-line text of `doc` plus "\n"; invalid UTF-8 is replaced,
// never thrown.
std::string JsonLine(const Json& doc);

// ---------------------------------------------------------------- JSON

Json IpuJson(const v1::Ipu& ipu);
Json PodJson(const v1::PodSummary& pod);
Json PartitionJson(const v1::Partition& partition);
Json SessionJson(const v1::SessionInfo& session);
Json PodInfoJson(const v1::GetPodInfoResponse& info);
Json PartitionListJson(const v1::ListPartitionsResponse& list);  // {"partitions": [...]}
Json QueuedJson(const v1::QueuePosition& position);              // {"queued": {...}}
Json QueueJson(const v1::ListQueueResponse& queue);              // {"entries": [...]}
Json ResetJson(const v1::ResetResponse& reset);
Json InjectFaultJson(const v1::InjectFaultResponse& response);
Json DetachJson(absl::string_view session, const v1::DetachResponse& response);
Json RemovePartitionJson(absl::string_view name, const v1::RemovePartitionResponse& response);
Json RepairJson(const v1::RepairIpuResponse& response);  // {"ipu": {...}}
Json ErrorJson(const absl::Status& status);
// {"error": {"code": "INVALID_ARGUMENT", "message": ..., "usage": true}}
Json UsageErrorJson(absl::string_view message);

// ---------------------------------------------------------------- text

// `now` dates the ages of sessions.
std::string PodInfoText(const v1::GetPodInfoResponse& info, absl::Time now);
std::string PartitionsText(const google::protobuf::RepeatedPtrField<v1::Partition>& partitions);
std::string PartitionText(const v1::Partition& partition);  // key: value lines
std::string PartitionCreatedText(const v1::Partition& partition);
std::string RemovePartitionText(absl::string_view name, const v1::RemovePartitionResponse& r);
std::string SessionsText(const google::protobuf::RepeatedPtrField<v1::SessionInfo>& sessions,
                         absl::Time now);
std::string SessionText(const v1::SessionInfo& session, absl::Time now);  // key: value lines
// "attached session s1-2: IPUs 4-7 (device 25)" (+ partition, auto-round extras).
std::string GrantText(const v1::SessionInfo& session);
// "waiting in the queue: position 2 of 3 (ticket t-7); IPUs held by s1-1"
std::string QueuedText(const v1::QueuePosition& position);
std::string QueueText(const v1::ListQueueResponse& queue);
// `what` names what was reset: "IPU 3", "partition p1", "the pod".
std::string ResetText(absl::string_view what, const v1::ResetResponse& reset);
std::string InjectFaultText(uint32_t ipu, absl::string_view kind,
                            const v1::InjectFaultResponse& response);
std::string DetachText(absl::string_view session, const v1::DetachResponse& response);
std::string RepairText(const v1::RepairIpuResponse& response);

// What the command was about, to make error hints concrete.
struct HintContext {
  std::string session = "";    // the session the command used, if any
  std::string partition = "";  // the partition the command used, if any
  bool attach_without_wait = false;
};

// "error: MESSAGE\n", then for device errors (recoverable, unrecoverable)
// "kind: recoverable, recovery action: IPU_RESET\n", "ipus: 4-7\n" when the
// error names IPUs, then "hint: ...\n" lines.
std::string ErrorText(const absl::Status& status, const HintContext& hint);

}  // namespace ipupod::cli

#endif  // IPUPOD_CLIENT_CLI_OUTPUT_H_
