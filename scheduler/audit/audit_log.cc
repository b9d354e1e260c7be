#include "scheduler/audit/audit_log.h"

#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/text_match.h"
#include "common/utf8.h"

namespace ipupod::audit {
namespace {

constexpr std::array<absl::string_view, 12> kActions = {
    kFaultInject,    kIpuReset,     kPartitionReset,       kSessionReset,
    kPodReset,       kIpuRepair,    kPartitionRemoveForce, kSessionDetachOther,
    kJobCancelOther, kConfigReload, kServerStart,          kServerStop,
};

// What an error message quotes of a bad action.
constexpr size_t kShownMax = 64;

absl::Status TooLong(absl::string_view field, size_t bytes, size_t max) {
  return absl::InvalidArgumentError(absl::StrCat("audit record: ", field, " is ", bytes,
                                                 " bytes, more than ", max,
                                                 " (audit::Bounded cuts it)"));
}

}  // namespace

absl::Span<const absl::string_view> Actions() { return kActions; }

bool IsAction(absl::string_view action) {
  for (absl::string_view known : kActions) {
    if (action == known) return true;
  }
  return false;
}

absl::Status CheckAction(absl::string_view action) {
  if (IsAction(action)) return absl::OkStatus();
  const std::vector<std::string> names(kActions.begin(), kActions.end());
  const std::string shown = CutUtf8(action, kShownMax);
  const std::string hint = DidYouMean(CloseMatches(shown, names));
  return absl::InvalidArgumentError(absl::StrCat("'", shown, "' is not an audited action",
                                                 hint.empty() ? "" : absl::StrCat("; ", hint),
                                                 "; the actions are ", absl::StrJoin(names, ", ")));
}

AuditRecord Bounded(AuditRecord record) {
  record.user = CutUtf8(record.user, kNameBytesMax);
  record.peer = CutUtf8(record.peer, kNameBytesMax);
  record.action = CutUtf8(record.action, kNameBytesMax);
  record.target = CutUtf8(record.target, kTargetBytesMax);
  record.details = CutUtf8(record.details, kTextBytesMax);
  record.code = CutUtf8(record.code, kNameBytesMax);
  record.message = CutUtf8(record.message, kTextBytesMax);
  return record;
}

absl::Status CheckRecord(const AuditRecord& record) {
  if (!IsAction(record.action)) return CheckAction(record.action);
  if (record.time_unix_ms < 0) {
    return absl::InvalidArgumentError("audit record: its time must not be negative");
  }
  if (record.code.empty()) {
    return absl::InvalidArgumentError("audit record: it has no result code");
  }
  const std::pair<absl::string_view, std::pair<const std::string*, size_t>> fields[] = {
      {"user", {&record.user, kNameBytesMax}},       {"peer", {&record.peer, kNameBytesMax}},
      {"code", {&record.code, kNameBytesMax}},       {"target", {&record.target, kTargetBytesMax}},
      {"details", {&record.details, kTextBytesMax}}, {"message", {&record.message, kTextBytesMax}},
  };
  for (const auto& [name, field] : fields) {
    if (field.first->size() > field.second) return TooLong(name, field.first->size(), field.second);
  }
  return absl::OkStatus();
}

void SetResult(AuditRecord& record, const absl::Status& status) {
  record.code = absl::StatusCodeToString(status.code());
  record.message = status.ok() ? "" : std::string(status.message());
}

absl::Status CheckQuery(const AuditQuery& query) {
  if (query.since_unix_ms < 0 || query.until_unix_ms < 0) {
    return absl::InvalidArgumentError("audit query: times must not be negative (Unix ms)");
  }
  if (query.until_unix_ms > 0 && query.since_unix_ms >= query.until_unix_ms) {
    return absl::InvalidArgumentError(
        absl::StrCat("audit query: the window is empty: since (", query.since_unix_ms,
                     ") is not before until (", query.until_unix_ms, "); give an earlier since"));
  }
  if (!query.action.empty()) {
    absl::Status action = CheckAction(query.action);
    if (!action.ok()) return action;
  }
  if (query.after_seq < 0) {
    return absl::InvalidArgumentError("audit query: the page token must not be negative");
  }
  if (query.limit < 1 || query.limit > kMaxQueryLimit) {
    return absl::InvalidArgumentError(absl::StrCat("audit query: a page holds 1 to ",
                                                   kMaxQueryLimit, " records, not ", query.limit));
  }
  return absl::OkStatus();
}

}  // namespace ipupod::audit
