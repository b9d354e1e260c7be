#include "scheduler/accounting/ledger.h"

namespace ipupod::accounting {

absl::string_view RecordKindName(RecordKind kind) {
  return kind == RecordKind::kJob ? "job" : "session";
}

std::vector<absl::Status> Ledger::OpenAll(const std::vector<UsageRecord>& records) {
  std::vector<absl::Status> written;
  for (const UsageRecord& r : records) written.push_back(Open(r));
  return written;
}

std::vector<absl::Status> Ledger::CloseAll(const std::vector<RecordEnd>& ends) {
  std::vector<absl::Status> written;
  for (const RecordEnd& e : ends) {
    written.push_back(Close(e.id, e.end_unix_ms, e.ipu_seconds, e.state));
  }
  return written;
}

absl::Status Ledger::Scan(const LedgerQuery& query,
                          const std::function<bool(const UsageRecord&)>& visit) {
  absl::StatusOr<std::vector<UsageRecord>> records = Query(query);
  if (!records.ok()) return records.status();
  for (const UsageRecord& r : *records) {
    if (!visit(r)) break;
  }
  return absl::OkStatus();
}

}  // namespace ipupod::accounting
