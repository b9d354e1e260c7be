#include "accounting/ledger.h"

namespace ipupod::accounting {

absl::string_view RecordKindName(RecordKind kind) {
  return kind == RecordKind::kJob ? "job" : "session";
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
